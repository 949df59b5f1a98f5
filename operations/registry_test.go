package operations

import (
	"context"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
)

// scopedTasks is a valid scoped query over tasks.
func scopedTasks(id, sql string) Query {
	return Query{ID: id, SQL: sql, Tables: []string{"tasks"}, MaxRows: 100, Mode: Scoped,
		Columns:  []Column{{Name: "id", Type: "string"}, {Name: "title", Type: "string", Nullable: true}},
		Coverage: []Coverage{{Table: "tasks", Scopes: map[string][]int{"project_id": {0}}}}}
}

// TestRegistrationRefusesEscapes registers one query per escape (and per
// malformed declaration) and checks each is refused at load, naming the
// query and the field.
func TestRegistrationRefusesEscapes(t *testing.T) {
	sc := parseSchema(t)
	q := scopedTasks
	cases := []struct {
		name  string
		q     Query
		field string // the field the refusal names
		want  string // part of the reason
	}{
		{"schema-qualified main table", q("main", "SELECT id, title FROM main.tasks WHERE project_id = ?"), "sql", "no such table"},
		{"internal commit log", q("log", "SELECT id, title FROM tasks WHERE project_id = ? AND id IN (SELECT client_id FROM sync_commits)"), "sql", "sync_commits"},
		{"internal table alone", q("log2", "SELECT partition AS id, client_id AS title FROM sync_commits WHERE partition = ?"), "sql", "sync_commits"},
		{"attach", q("attach", "ATTACH DATABASE 'x.db' AS x"), "sql", "only SELECT"},
		{"cte naming an internal table", q("cte", "WITH c AS (SELECT * FROM sync_client_records) SELECT id, title FROM tasks WHERE project_id = ?"), "sql", "sync_client_records"},
		{"used cte naming an internal table", q("cte2", "WITH c AS (SELECT seq FROM sync_commits) SELECT id, title FROM tasks WHERE project_id = ? AND prio IN (SELECT seq FROM c)"), "sql", "sync_commits"},
		{"quoted internal name", q("quoted", `SELECT id, title FROM "sync_commits" WHERE project_id = ?`), "sql", "sync_commits"},
		{"writing statement", q("delete", "DELETE FROM tasks WHERE project_id = ?"), "sql", "only SELECT"},
		{"writing cte", q("wcte", "WITH x AS (SELECT 1) DELETE FROM tasks WHERE project_id = ?"), "sql", "writes"},
		{"second statement", q("second", "SELECT id, title FROM tasks WHERE project_id = ?; DELETE FROM tasks"), "sql", "second statement"},
		{"pragma", q("pragma", "PRAGMA table_info(tasks)"), "sql", "only SELECT"},
		{"pragma function", q("pragmafn", "SELECT name AS id, type AS title FROM pragma_table_info('sync_commits') WHERE ? IS NOT NULL"), "sql", "pragma_table_info"},
		{"sqlite schema", q("master", "SELECT name AS id, sql AS title FROM sqlite_master WHERE ? IS NOT NULL"), "sql", "sqlite_master"},
		{"internal column", q("intcol", "SELECT id, _sync_partition AS title FROM tasks WHERE project_id = ?"), "sql", "_sync_partition"},
		{"load_extension", q("ext", "SELECT id, load_extension('x') AS title FROM tasks WHERE project_id = ?"), "sql", "load_extension"},
		{"numbered placeholder", q("numbered", "SELECT id, title FROM tasks WHERE project_id = ?1"), "sql", "plain ?"},
		{"unknown table", q("unknown", "SELECT id, title FROM nope WHERE x = ?"), "sql", "no such table"},
		{"unknown column", q("unkcol", "SELECT id, nope AS title FROM tasks WHERE project_id = ?"), "sql", "no such column"},
		{"missing result column", q("missing", "SELECT id FROM tasks WHERE project_id = ?"), "columns", `"title" is not a column`},
		{"duplicate result column", q("dupres", "SELECT id, title, title FROM tasks WHERE project_id = ?"), "columns", "appears 2 times"},
		{"undeclared table", q("undeclared", "SELECT t.id, n.body AS title FROM tasks t JOIN notes n ON n.id = t.id WHERE t.project_id = ?"), "tables", `"notes"`},
	}
	dupCol := q("dupdecl", "SELECT id, title FROM tasks WHERE project_id = ?")
	dupCol.Columns = append(dupCol.Columns, Column{Name: "id", Type: "string"})
	noCols := q("nocols", "SELECT id, title FROM tasks WHERE project_id = ?")
	noCols.Columns = nil
	rows0 := q("rows0", "SELECT id, title FROM tasks WHERE project_id = ?")
	rows0.MaxRows = 0
	rowsBig := q("rowsbig", "SELECT id, title FROM tasks WHERE project_id = ?")
	rowsBig.MaxRows = 10001
	noCover := q("nocover", "SELECT id, title FROM tasks WHERE project_id = ?")
	noCover.Coverage = nil
	twice := q("twice", "SELECT id, title FROM tasks WHERE project_id = ?")
	twice.Coverage = append(twice.Coverage, twice.Coverage[0])
	extra := q("extra", "SELECT id, title FROM tasks WHERE project_id = ?")
	extra.Coverage = append(extra.Coverage, Coverage{Table: "notes", Scopes: map[string][]int{"user_id": {0}}})
	incomplete := q("incomplete", "SELECT id, title FROM tasks WHERE project_id = ?")
	incomplete.Coverage = []Coverage{{Table: "tasks", Scopes: map[string][]int{}}}
	badParam := q("badparam", "SELECT id, title FROM tasks WHERE project_id = ?")
	badParam.Coverage = []Coverage{{Table: "tasks", Scopes: map[string][]int{"project_id": {1}}}}
	privNoAuth := q("privnoauth", "SELECT id, title FROM tasks WHERE project_id = ?")
	privNoAuth.Mode, privNoAuth.Coverage = Privileged, nil
	type tc = struct {
		name  string
		q     Query
		field string
		want  string
	}
	for _, c := range []struct {
		name, field, want string
		q                 Query
	}{
		{"declared column twice", "columns[2].name", "declared twice", dupCol},
		{"no result columns", "columns", "missing", noCols},
		{"maxRows zero", "maxRows", "outside 1..10000", rows0},
		{"maxRows too large", "maxRows", "outside 1..10000", rowsBig},
		{"no coverage", "coverage", "no coverage record", noCover},
		{"coverage twice", "coverage[1].table", "covered twice", twice},
		{"coverage of an unread table", "coverage[1].table", "not read", extra},
		{"incomplete coverage", "coverage[0].scopes", "not covered", incomplete},
		{"coverage outside the params", "coverage[0].scopes.project_id", "outside", badParam},
		{"privileged without authorize", "authorize", "needs Authorize", privNoAuth},
	} {
		cases = append(cases, tc{c.name, c.q, c.field, c.want})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewRegistry(context.Background(), sc, File{Queries: []Query{c.q}})
			if err == nil {
				t.Fatalf("registered %q", c.q.SQL)
			}
			prefix := `queries[0] ("` + c.q.ID + `").` + c.field + ":"
			if !strings.Contains(err.Error(), prefix) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("refusal %q does not name %s with %q", err, prefix, c.want)
			}
		})
	}
}

// TestRegistrationAcceptsAndPrepares registers valid queries (a join, a
// recursive CTE, json_each, aggregates) and prepares them on both stores.
func TestRegistrationAcceptsAndPrepares(t *testing.T) {
	f := validFile()
	forEachStore(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		e := newEnv(t, open, f, nil)
		qs, _ := e.svc.Registry().IDs()
		if len(qs) != len(f.Queries) {
			t.Fatalf("registered %v", qs)
		}
	})
}

func validFile() File {
	return File{Queries: []Query{
		scopedTasks("byProject", "SELECT id, title FROM tasks WHERE project_id = ? ORDER BY id"),
		{ID: "join", SQL: `SELECT t.id AS id, n.body AS body FROM tasks AS t JOIN notes AS n ON n.id = t.id
			WHERE t.project_id = ? AND n.user_id = ? ORDER BY t.id`,
			Tables: []string{"notes", "tasks"}, MaxRows: 10, Mode: Scoped,
			Columns: []Column{{Name: "id", Type: "string"}, {Name: "body", Type: "string"}},
			Coverage: []Coverage{{Table: "tasks", Scopes: map[string][]int{"project_id": {0}}},
				{Table: "notes", Scopes: map[string][]int{"user_id": {1}}}}},
		{ID: "count", SQL: `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3)
			SELECT (SELECT count(*) FROM tasks) AS total, (SELECT max(i) FROM n) AS three, sum(prio) AS prio FROM tasks WHERE project_id = ?`,
			Tables: []string{"tasks"}, MaxRows: 1, Mode: Privileged, AllowActors: []string{"admin"},
			Columns: []Column{{Name: "total", Type: "integer"}, {Name: "three", Type: "integer"}, {Name: "prio", Type: "integer", Nullable: true}}},
		{ID: "typed", SQL: "SELECT id, prio, done, meta FROM tasks WHERE project_id = ? ORDER BY id",
			Tables: []string{"tasks"}, MaxRows: 100, Mode: Scoped,
			Columns: []Column{{Name: "id", Type: "string"}, {Name: "prio", Type: "integer"}, {Name: "done", Type: "boolean"},
				{Name: "meta", Type: "json", Nullable: true}},
			Coverage: []Coverage{{Table: "tasks", Scopes: map[string][]int{"project_id": {0}}}}},
		{ID: "sloppy", SQL: "SELECT id, title FROM tasks WHERE project_id = ? OR 1 = 1 ORDER BY id",
			Tables: []string{"tasks"}, MaxRows: 1000, Mode: Scoped,
			Columns:  []Column{{Name: "id", Type: "string"}, {Name: "title", Type: "string", Nullable: true}},
			Coverage: []Coverage{{Table: "tasks", Scopes: map[string][]int{"project_id": {0}}}}},
		// A query's own WITH, and a table read twice.
		{ID: "selfJoin", SQL: `WITH mine AS (SELECT id FROM tasks WHERE project_id = ?)
			SELECT m.id AS id, t.title AS title FROM mine AS m JOIN tasks AS t ON t.id = m.id ORDER BY m.id`,
			Tables: []string{"tasks"}, MaxRows: 1000, Mode: Scoped,
			Columns:  []Column{{Name: "id", Type: "string"}, {Name: "title", Type: "string", Nullable: true}},
			Coverage: []Coverage{{Table: "tasks", Scopes: map[string][]int{"project_id": {0}}}}},
		// Two values covering one scope variable.
		{ID: "twoProjects", SQL: "SELECT id, title FROM tasks WHERE project_id IN (?, ?) ORDER BY id",
			Tables: []string{"tasks"}, MaxRows: 100, Mode: Scoped,
			Columns:  []Column{{Name: "id", Type: "string"}, {Name: "title", Type: "string", Nullable: true}},
			Coverage: []Coverage{{Table: "tasks", Scopes: map[string][]int{"project_id": {0, 1}}}}},
		{ID: "five", SQL: "SELECT id, title FROM tasks WHERE project_id = ? ORDER BY id",
			Tables: []string{"tasks"}, MaxRows: 5, Mode: Scoped,
			Columns:  []Column{{Name: "id", Type: "string"}, {Name: "title", Type: "string", Nullable: true}},
			Coverage: []Coverage{{Table: "tasks", Scopes: map[string][]int{"project_id": {0}}}}},
		// Their own outermost LIMIT: run under the store's maxRows + 1.
		{ID: "fiveOwnLimit", SQL: "SELECT id, title FROM tasks WHERE project_id = ? ORDER BY id DESC LIMIT 6",
			Tables: []string{"tasks"}, MaxRows: 5, Mode: Scoped,
			Columns:  []Column{{Name: "id", Type: "string"}, {Name: "title", Type: "string", Nullable: true}},
			Coverage: []Coverage{{Table: "tasks", Scopes: map[string][]int{"project_id": {0}}}}},
		{ID: "threeOwnLimit", SQL: "SELECT id, title FROM tasks WHERE project_id = ? ORDER BY id DESC LIMIT 3",
			Tables: []string{"tasks"}, MaxRows: 5, Mode: Scoped,
			Columns:  []Column{{Name: "id", Type: "string"}, {Name: "title", Type: "string", Nullable: true}},
			Coverage: []Coverage{{Table: "tasks", Scopes: map[string][]int{"project_id": {0}}}}},
		{ID: "nullTitle", SQL: "SELECT id, title FROM tasks WHERE project_id = ? ORDER BY id",
			Tables: []string{"tasks"}, MaxRows: 100, Mode: Scoped,
			Columns:  []Column{{Name: "id", Type: "string"}, {Name: "title", Type: "string"}},
			Coverage: []Coverage{{Table: "tasks", Scopes: map[string][]int{"project_id": {0}}}}},
	}}
}

// TestRegistrationRefusesUnmaterialized: a query over a table with
// materialize: false, or over a table whose payload columns are all
// encrypted (false by default), is refused at load naming the table; an
// explicit materialize: true on such a table is queryable.
func TestRegistrationRefusesUnmaterialized(t *testing.T) {
	sc, err := schema.Parse([]byte(`{"version":1,"tables":[
	 {"name":"plain","primaryKey":"id","scopes":["p:{p}"],"materialize":false,"columns":[
	  {"name":"id","type":"string"},{"name":"p","type":"string"},{"name":"v","type":"string"}]},
	 {"name":"sealed","primaryKey":"id","scopes":["p:{p}"],"columns":[
	  {"name":"id","type":"string"},{"name":"p","type":"string"},{"name":"v","type":"bytes","encrypted":true,"declaredType":"string"}]},
	 {"name":"opened","primaryKey":"id","scopes":["p:{p}"],"materialize":true,"columns":[
	  {"name":"id","type":"string"},{"name":"p","type":"string"},{"name":"v","type":"bytes","encrypted":true,"declaredType":"string"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	query := func(table string) Query {
		return Query{ID: table, SQL: "SELECT id FROM " + table + " WHERE p = ?", Tables: []string{table}, MaxRows: 10, Mode: Scoped,
			Columns: []Column{{Name: "id", Type: "string"}}, Coverage: []Coverage{{Table: table, Scopes: map[string][]int{"p": {0}}}}}
	}
	for _, table := range []string{"plain", "sealed"} {
		_, err := NewRegistry(context.Background(), sc, File{Queries: []Query{query(table)}})
		want := `queries[0] ("` + table + `").tables[0]: table "` + table + `" has materialize: false`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("query over %s: %v, want %q", table, err, want)
		}
	}
	if _, err := NewRegistry(context.Background(), sc, File{Queries: []Query{query("opened")}}); err != nil {
		t.Fatalf("query over a table with materialize: true: %v", err)
	}
}
