package pgstore

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/schemaplan"
)

// tasksStore is a store with one application table, tasks (id,
// project_id, scoped by project).
func tasksStore(t *testing.T) *Store {
	s := openTB(t, 2)
	sc, err := schema.Parse([]byte(`{"version":1,"tables":[{"name":"tasks","primaryKey":"id","scopes":["project:{project_id}"],"columns":[
 {"name":"id","type":"string"},{"name":"project_id","type":"string"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureSchema(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestQueryStatementLimit: a registered query's statement reads at most
// Limit (maxRows + 1) rows in SQL — the server stops there, it does not
// send the rest for the client to drop — LIMIT appended or, under the
// query's own outermost LIMIT, wrapped; it prepares and runs either way
// (an unknown partition: no rows, no partition row), and a limit below
// one is refused.
func TestQueryStatementLimit(t *testing.T) {
	ctx := context.Background()
	s := tasksStore(t)
	cols := []storage.QueryColumn{{Name: "id", Type: ssp2.TypeString}}
	for _, c := range []struct{ sql, tail string }{
		{"SELECT id FROM tasks WHERE project_id = ? ORDER BY id", "ORDER BY id\nLIMIT 6"},
		{"SELECT id FROM tasks WHERE project_id = ? ORDER BY id LIMIT 3", "LIMIT 3\n) AS _syncnode_result\nLIMIT 6"},
	} {
		p := storage.QueryParams{QuerySpec: storage.QuerySpec{SQL: c.sql, Tables: []string{"tasks"}, Columns: cols, Limit: 6},
			Partition: "p", Args: []any{"a"}, Scopes: map[string]map[string][]string{"tasks": {"project_id": {"a"}}}}
		text, _, err := s.opStatement(&p)
		if err != nil || !strings.HasSuffix(text, c.tail) {
			t.Fatalf("%s: statement %q (%v), want it to end %q", c.sql, text, err, c.tail)
		}
		if err := s.PrepareQuery(ctx, p.QuerySpec); err != nil {
			t.Fatalf("%s: prepare: %v", c.sql, err)
		}
		if res, err := s.Query(ctx, p); err != nil || len(res.Rows) != 0 || res.HasPartition {
			t.Fatalf("%s: %+v, %v", c.sql, res, err)
		}
		p.Limit = 0
		if _, err := s.Query(ctx, p); err == nil {
			t.Fatalf("%s: limit 0 ran", c.sql)
		}
	}
}

// TestQuerySearchPathFence: the second fence behind registration (which
// refuses such SQL with SQLite's parser): a statement runs with
// search_path holding pg_catalog alone, so an unqualified internal table
// is no table at all, while the application tables it names are its
// relations.
func TestQuerySearchPathFence(t *testing.T) {
	ctx := context.Background()
	s := tasksStore(t)
	run := func(sql string) (storage.QueryResult, error) {
		return s.Query(ctx, storage.QueryParams{QuerySpec: storage.QuerySpec{SQL: sql, Tables: []string{"tasks"},
			Columns: []storage.QueryColumn{{Name: "id", Type: ssp2.TypeString}}, Limit: 2}, Partition: "p", ClientID: "c"})
	}
	res, err := run("SELECT current_setting('search_path') AS id")
	if err != nil || len(res.Rows) != 1 || res.Rows[0][0] != "pg_catalog" {
		t.Fatalf("search_path in the query: %v, %v", res.Rows, err)
	}
	for _, sql := range []string{"SELECT id FROM sync_partitions", "SELECT partition AS id FROM sync_commits"} {
		if _, err := run(sql); err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if res, err := run("SELECT id FROM tasks"); err != nil || len(res.Rows) != 0 {
		t.Fatalf("the relation: %v, %v", res.Rows, err)
	}
}

// TestTxQuerySearchPathFence: a registered query inside a write
// transaction runs under the same fence as Query (pg_catalog alone, no
// internal table by an unqualified name), and the transaction's own
// search_path is back after it, whether the statement succeeded or
// failed.
func TestTxQuerySearchPathFence(t *testing.T) {
	ctx := context.Background()
	s := tasksStore(t)
	if _, err := s.PartitionTouch(ctx, "p", 1_000_000); err != nil {
		t.Fatal(err)
	}
	err := s.WriteTx(ctx, "p", func(stx storage.Tx) error {
		tx := stx.(*tx)
		searchPath := func() string {
			var sp string
			if _, err := tx.queryRow(ctx, "SELECT current_setting('search_path')", nil, &sp); err != nil {
				t.Fatalf("search_path of the transaction: %v", err)
			}
			return sp
		}
		before := searchPath()
		run := func(sql string) (storage.QueryResult, error) {
			return tx.TxQuery(ctx, storage.QueryParams{QuerySpec: storage.QuerySpec{SQL: sql, Tables: []string{"tasks"},
				Columns: []storage.QueryColumn{{Name: "id", Type: ssp2.TypeString}}, Limit: 2}, Partition: "p"})
		}
		res, err := run("SELECT current_setting('search_path') AS id")
		if err != nil || len(res.Rows) != 1 || res.Rows[0][0] != "pg_catalog" {
			t.Fatalf("search_path in the query: %v, %v", res.Rows, err)
		}
		if sp := searchPath(); sp != before {
			t.Fatalf("search_path after the query %q, want %q", sp, before)
		}
		for _, sql := range []string{"SELECT id FROM sync_partitions", "SELECT partition AS id FROM sync_commits"} {
			var qe *storage.QueryError
			if _, err := run(sql); !errors.As(err, &qe) || !strings.Contains(err.Error(), "does not exist") {
				t.Fatalf("%s: %v, want a *storage.QueryError naming a missing relation", sql, err)
			}
			if sp := searchPath(); sp != before {
				t.Fatalf("search_path after a failed query %q, want %q", sp, before)
			}
		}
		if res, err := run("SELECT id FROM tasks"); err != nil || len(res.Rows) != 0 {
			t.Fatalf("the relation: %v, %v", res.Rows, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestQueryOneStatement: Query is one statement in one round trip — no
// transaction and no fence statement around it — whose start row is the
// partition row and the caller's client record as the store holds them,
// with the rows and maxCommitSeq of the same snapshot; an unknown client
// or partition reads as absent.
func TestQueryOneStatement(t *testing.T) {
	c := &tripCounter{}
	s, sc := roundTripStore(t, 4, c.dial, true)
	ctx := t.Context()
	pushPullRound(ctx, t, s, &c.n, sc, 0, "r0", false)
	// The round's cursor advance is written now, not ClientAdvanceDelay
	// later at any point of the test: in the query's count, or between
	// the query and the reads it is compared with.
	s.flushAdvances()
	p := storage.QueryParams{QuerySpec: storage.QuerySpec{SQL: "SELECT id, title FROM tasks WHERE project_id = ? ORDER BY id", Tables: []string{"tasks"},
		Columns: []storage.QueryColumn{{Name: "id", Type: ssp2.TypeString}, {Name: "title", Type: ssp2.TypeString}}, Limit: 5},
		Partition: "p", ClientID: "c1", Args: []any{"p1"}, Scopes: map[string]map[string][]string{"tasks": {"project": {"p1"}}}}
	if err := s.PrepareQuery(ctx, p.QuerySpec); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Query(ctx, p); err != nil { // prepares the statement on the query connection
		t.Fatal(err)
	}
	// The query connection's writes alone, free of anything the store
	// runs in the background on its other connections.
	writes := connWrites(t, s.queries)
	n0 := writes.Load()
	res, err := s.Query(ctx, p)
	if trips := writes.Load() - n0; err != nil || trips != 1 {
		t.Fatalf("query: %v, %d round trips, want 1", err, trips)
	}
	part, err := s.PartitionGet(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	cl, ok, err := s.ClientGet(ctx, "p", "c1")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if !res.HasPartition || res.Start.Partition != part || !res.Start.HasClient || !reflect.DeepEqual(res.Start.Client, cl) ||
		res.MaxCommitSeq != part.MaxCommitSeq || part.MaxCommitSeq == 0 {
		t.Fatalf("start %+v (partition %v), want %+v and %+v", res.Start, res.HasPartition, part, cl)
	}
	if len(res.Rows) != 1 || res.Rows[0][0] != "r0" {
		t.Fatalf("rows %v", res.Rows)
	}
	p.ClientID = "other"
	if res, err := s.Query(ctx, p); err != nil || !res.HasPartition || res.Start.HasClient || !reflect.DeepEqual(res.Start.Client, storage.Client{}) {
		t.Fatalf("unknown client: %+v, %v", res.Start, err)
	}
	p.Partition = "none"
	if res, err := s.Query(ctx, p); err != nil || res.HasPartition || res.Start.HasClient || res.MaxCommitSeq != 0 || len(res.Rows) != 0 {
		t.Fatalf("unknown partition: %+v, %v", res, err)
	}
}

// TestQueryRawValues: a result of text, bigint, boolean and double
// precision columns is read from the wire values directly, one with
// another type (integer here) through pgx's codecs; both give the
// declared Go forms, NULL included, and a value of another type than the
// declared one is still refused.
func TestQueryRawValues(t *testing.T) {
	ctx := t.Context()
	s := tasksStore(t)
	cols := []storage.QueryColumn{{Name: "s", Type: ssp2.TypeString}, {Name: "i", Type: ssp2.TypeInteger}, {Name: "b", Type: ssp2.TypeBoolean},
		{Name: "f", Type: ssp2.TypeFloat}, {Name: "z", Type: ssp2.TypeInteger, Nullable: true}}
	run := func(sql string, cols []storage.QueryColumn) ([][]any, error) {
		res, err := s.Query(ctx, storage.QueryParams{QuerySpec: storage.QuerySpec{SQL: sql, Tables: []string{"tasks"}, Columns: cols, Limit: 3},
			Partition: "p", ClientID: "c", Args: []any{"x"}})
		return res.Rows, err
	}
	want := [][]any{{"x", int64(-7), true, 1.5, nil}}
	for _, sql := range []string{
		"SELECT CAST(? AS text) AS s, CAST(-7 AS bigint) AS i, true AS b, CAST(1.5 AS float8) AS f, CAST(NULL AS bigint) AS z",
		"SELECT CAST(? AS text) AS s, CAST(-7 AS integer) AS i, true AS b, CAST(1.5 AS float8) AS f, CAST(NULL AS bigint) AS z",
	} {
		if rows, err := run(sql, cols); err != nil || !reflect.DeepEqual(rows, want) {
			t.Fatalf("%s: %v, %v", sql, rows, err)
		}
	}
	var qe *storage.QueryError
	if _, err := run("SELECT CAST(? AS text) AS s, true AS i", cols[:2]); !errors.As(err, &qe) || qe.Column != "i" {
		t.Fatalf("a boolean for an integer column: %v", err)
	}
}

// TestQueryStatementCache: a registered query's statement text is kept
// by everything that writes it — SQL, tables, declared column names,
// limit, folded or not, privileged or scoped and the number of scope
// values — so each run gets the text written for its own shape (the same
// as written afresh, and different where the shape differs), and a newly
// installed schema gets texts of its own.
func TestQueryStatementCache(t *testing.T) {
	s := tasksStore(t)
	cols := func(names ...string) []storage.QueryColumn {
		out := make([]storage.QueryColumn, len(names))
		for i, n := range names {
			out[i] = storage.QueryColumn{Name: n, Type: ssp2.TypeString}
		}
		return out
	}
	base := storage.QueryParams{QuerySpec: storage.QuerySpec{SQL: "SELECT id FROM tasks WHERE project_id = ?", Tables: []string{"tasks"},
		Columns: cols("id"), Limit: 6}, Partition: "p", ClientID: "c", Args: []any{"p1"}}
	scoped := func(vals ...string) map[string]map[string][]string {
		return map[string]map[string][]string{"tasks": {"project_id": vals}}
	}
	variants := []func(p *storage.QueryParams){
		func(p *storage.QueryParams) {},
		func(p *storage.QueryParams) { p.SQL = "SELECT id FROM tasks WHERE project_id = ? ORDER BY id" },
		func(p *storage.QueryParams) {
			p.Columns = cols("x")
			p.SQL = "SELECT id AS x FROM tasks WHERE project_id = ?"
		},
		func(p *storage.QueryParams) { p.Limit = 7 },
		func(p *storage.QueryParams) { p.Scopes = scoped() },
		func(p *storage.QueryParams) { p.Scopes = scoped("p1") },
		func(p *storage.QueryParams) { p.Scopes = scoped("p1", "p2") },
		func(p *storage.QueryParams) { p.Scopes = scoped("p2", "p3") }, // the shape of the one before
	}
	texts := map[string]int{}
	for i, v := range variants {
		for _, folded := range []bool{false, true} {
			p := base
			v(&p)
			var first string
			for run := range 2 { // written, then kept
				text, args, err := s.statement(&p, folded)
				if err != nil {
					t.Fatalf("variant %d: %v", i, err)
				}
				_, counts, _ := schemaplan.QueryRelationArgs(s.schema.Load().schema, &p)
				fresh, err := s.writeStatement(s.schema.Load().schema, &p, folded, counts)
				if err != nil || text != fresh {
					t.Fatalf("variant %d folded %v run %d: text\n%s\nwant\n%s (%v)", i, folded, run, text, fresh, err)
				}
				if want := 1 + len(p.Scopes["tasks"]["project_id"]) + len(p.Args); folded && len(args) != want+1 || !folded && len(args) != want {
					t.Fatalf("variant %d folded %v: args %v", i, folded, args)
				}
				first = text
			}
			if j, dup := texts[first]; dup && !(i == 7 && j == 6) {
				t.Fatalf("variant %d folded %v has the text of variant %d", i, folded, j)
			}
			texts[first] = i
		}
	}
	sc, err := schema.Parse([]byte(`{"version":2,"tables":[{"name":"tasks","primaryKey":"id","scopes":["project:{project_id}"],"columns":[
 {"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"title","type":"string","nullable":true}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureSchema(t.Context(), sc); err != nil {
		t.Fatal(err)
	}
	p := base
	text, _, err := s.statement(&p, true)
	if err != nil || !strings.Contains(text, `"title"`) {
		t.Fatalf("after a new schema: %v\n%s", err, text)
	}
}

// TestTextArena: strings made over the arena keep their values while
// later ones fill the block, start new blocks, or are long enough to
// have their own; the empty value takes nothing.
func TestTextArena(t *testing.T) {
	var a textArena
	var want, got []string
	for i := range 2000 {
		v := strings.Repeat(string(rune('a'+i%26)), i%37)
		if i%500 == 0 {
			v = strings.Repeat("L", textBlock) // longer than a block's share
		}
		b := []byte(v)
		got = append(got, a.str(b))
		for j := range b {
			b[j] = '!' // the wire buffer is reused: the string must not see it
		}
		want = append(want, v)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("value %d: %q, want %q", i, got[i], want[i])
		}
	}
}
