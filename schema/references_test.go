package schema

import (
	"errors"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

// refDoc is a projects/tasks/comments schema; extra is spliced into the
// tasks table (its references, indexes).
func refDoc(tasksExtra string) string {
	return `{"version":1,"tables":[
	{"name":"projects","columns":[{"name":"id","type":"string"},{"name":"org","type":"string"}],
	 "primaryKey":"id","scopes":[{"pattern":"org:{org_id}","column":"org"}]},
	{"name":"tasks","columns":[{"name":"id","type":"string"},{"name":"org_id","type":"string"},
	  {"name":"project_id","type":"string","nullable":true},{"name":"owner","type":"string"},
	  {"name":"n","type":"integer","nullable":true},{"name":"parent_id","type":"string","nullable":true}],
	 "primaryKey":"id","scopes":["org:{org_id}"]` + tasksExtra + `},
	{"name":"users","columns":[{"name":"id","type":"string"},{"name":"team","type":"string"}],
	 "primaryKey":"id","scopes":["team:{team}"]}]}`
}

func TestReferences(t *testing.T) {
	s, err := Parse([]byte(refDoc(`,"references":[
		{"column":"project_id","parentTable":"projects","onDelete":"SET NULL"},
		{"column":"parent_id","parentTable":"tasks","onDelete":"CASCADE"},
		{"column":"owner","parentTable":"projects","parentColumn":"id"}],
	  "indexes":[{"name":"tasks_project","columns":["project_id"],"unique":false},{"name":"tasks_owner_n","columns":["owner","n"],"unique":true}]`)))
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := s.Table("tasks")
	want := []Reference{
		{Child: "tasks", Column: "project_id", ColumnIndex: 2, ParentTable: "projects", OnDelete: SetNull},
		{Child: "tasks", Column: "parent_id", ColumnIndex: 5, ParentTable: "tasks", OnDelete: Cascade},
		{Child: "tasks", Column: "owner", ColumnIndex: 3, ParentTable: "projects", OnDelete: Restrict},
	}
	if len(tasks.References) != len(want) {
		t.Fatalf("references %+v", tasks.References)
	}
	for i := range want {
		if tasks.References[i] != want[i] {
			t.Fatalf("reference %d = %+v, want %+v", i, tasks.References[i], want[i])
		}
	}
	if got := s.Referencing("projects"); len(got) != 2 || got[0].Column != "project_id" || got[1].Column != "owner" {
		t.Fatalf("Referencing(projects) = %+v", got)
	}
	if got := s.Referencing("tasks"); len(got) != 1 || got[0].OnDelete != Cascade {
		t.Fatalf("Referencing(tasks) = %+v", got)
	}
	if got := s.Referencing("users"); len(got) != 0 {
		t.Fatalf("Referencing(users) = %+v", got)
	}
	if len(tasks.Indexes) != 2 || tasks.Indexes[1].Name != "tasks_owner_n" || !tasks.Indexes[1].Unique ||
		tasks.Indexes[1].ColumnIndexes[0] != 3 || tasks.Indexes[1].ColumnIndexes[1] != 4 {
		t.Fatalf("indexes %+v", tasks.Indexes)
	}
	for _, o := range []OnDelete{Restrict, Cascade, SetNull} {
		if o.String() == "" || strings.HasPrefix(o.String(), "OnDelete(") {
			t.Fatalf("OnDelete %d has no name", o)
		}
	}

	// A table without references or indexes has none, and the layout that
	// storage verifies does not change with them.
	plain, err := Parse([]byte(refDoc("")))
	if err != nil {
		t.Fatal(err)
	}
	if pt, _ := plain.Table("tasks"); pt.References != nil || pt.Indexes != nil {
		t.Fatalf("plain tasks: %+v %+v", pt.References, pt.Indexes)
	}
	if d, same := CompareLayouts(plain.Layouts(), s.Layouts()); !same {
		t.Fatalf("references changed the stored layout: %v", d)
	}
}

// TestReferenceRefusals: each §6.11 refusal (and the index rules) is a
// *schema.Error naming the table, column and IR member.
func TestReferenceRefusals(t *testing.T) {
	refs := func(r string) string { return refDoc(`,"references":[` + r + `]`) }
	cases := []struct {
		name, doc, table, column, field, reason string
	}{
		{"unknown column", refs(`{"column":"nope","parentTable":"projects"}`), "tasks", "nope", "references.column", "undeclared column"},
		{"unknown parent", refs(`{"column":"project_id","parentTable":"nope"}`), "tasks", "project_id", "references.parentTable", "undeclared parent table"},
		{"non-primary-key target", refs(`{"column":"project_id","parentTable":"projects","parentColumn":"org"}`), "tasks", "project_id", "references.parentColumn", "must target the primary key"},
		{"type mismatch", refs(`{"column":"n","parentTable":"projects"}`), "tasks", "n", "references.column", "type integer differs from the type string"},
		{"scope patterns differ", refs(`{"column":"project_id","parentTable":"users"}`), "tasks", "project_id", "references.parentTable", "scope patterns"},
		{"ON UPDATE", refs(`{"column":"project_id","parentTable":"projects","onUpdate":"CASCADE"}`), "tasks", "project_id", "references.onUpdate", "ON UPDATE"},
		{"NO ACTION", refs(`{"column":"project_id","parentTable":"projects","onDelete":"NO ACTION"}`), "tasks", "project_id", "references.onDelete", "NO ACTION is not supported"},
		{"SET DEFAULT", refs(`{"column":"project_id","parentTable":"projects","onDelete":"SET DEFAULT"}`), "tasks", "project_id", "references.onDelete", "SET DEFAULT is not supported"},
		{"unknown action", refs(`{"column":"project_id","parentTable":"projects","onDelete":"cascade"}`), "tasks", "project_id", "references.onDelete", "unknown ON DELETE action"},
		{"SET NULL not nullable", refs(`{"column":"owner","parentTable":"projects","onDelete":"SET NULL"}`), "tasks", "owner", "references.onDelete", "not nullable"},
		{"two references on a column", refs(`{"column":"project_id","parentTable":"projects"},{"column":"project_id","parentTable":"tasks"}`), "tasks", "project_id", "references.column", "at most one reference"},
		{"not an array", refDoc(`,"references":{"column":"project_id"}`), "", "", "", "invalid JSON"},

		{"index without columns", refDoc(`,"indexes":[{"name":"ix","columns":[]}]`), "tasks", "", "indexes.columns", "names no columns"},
		{"index unknown column", refDoc(`,"indexes":[{"name":"ix","columns":["nope"]}]`), "tasks", "nope", "indexes.columns", "undeclared column"},
		{"index column twice", refDoc(`,"indexes":[{"name":"ix","columns":["n","n"]}]`), "tasks", "n", "indexes.columns", "twice"},
		{"index name reserved", refDoc(`,"indexes":[{"name":"_sync_ix","columns":["n"]}]`), "tasks", "", "indexes.name", "reserved prefix"},
		{"index name repeated", refDoc(`,"indexes":[{"name":"ix","columns":["n"]},{"name":"ix","columns":["owner"]}]`), "tasks", "", "indexes.name", "already used"},
		{"index named like a table", refDoc(`,"indexes":[{"name":"users","columns":["n"]}]`), "tasks", "", "indexes.name", "name of a table"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want *schema.Error", err)
			}
			if se.Table != c.table || se.Column != c.column || se.Field != c.field || !strings.Contains(se.Reason, c.reason) {
				t.Fatalf("err = %+v, want table %q column %q field %q reason containing %q", se, c.table, c.column, c.field, c.reason)
			}
			if c.field != "" && !strings.Contains(err.Error(), c.field) {
				t.Fatalf("message %q does not name %s", err, c.field)
			}
		})
	}
}

// TestSetNullOnScopeColumn: SET NULL on a column that binds a scope would
// store a child without its scope, so it is refused at load.
func TestSetNullOnScopeColumn(t *testing.T) {
	doc := `{"version":1,"tables":[
	{"name":"orgs","columns":[{"name":"id","type":"string"}],"primaryKey":"id","scopes":[{"pattern":"org:{org_id}","column":"id"}]},
	{"name":"teams","columns":[{"name":"id","type":"string"},{"name":"org_id","type":"string","nullable":true}],
	 "primaryKey":"id","scopes":["org:{org_id}"],
	 "references":[{"column":"org_id","parentTable":"orgs","onDelete":"SET NULL"}]}]}`
	_, err := Parse([]byte(doc))
	var se *Error
	if !errors.As(err, &se) || se.Column != "org_id" || se.Field != "references.onDelete" || !strings.Contains(se.Reason, "scope column") {
		t.Fatalf("err = %v", err)
	}
	if _, err := Parse([]byte(strings.Replace(doc, `"SET NULL"`, `"CASCADE"`, 1))); err != nil {
		t.Fatalf("CASCADE on a scope column refused: %v", err)
	}
}

// TestTableSparseCodec: each table carries the v3 push codec, keyed on its
// primary key.
func TestTableSparseCodec(t *testing.T) {
	s, err := Load("testdata/notes.json")
	if err != nil {
		t.Fatal(err)
	}
	tbl, _ := s.Table("notes")
	if tbl.Sparse == nil || tbl.Sparse.PrimaryKey() != tbl.PKIndex || len(tbl.Sparse.Columns()) != len(tbl.Columns) {
		t.Fatalf("sparse codec %+v", tbl.Sparse)
	}
	row := ssp2.SparseRow{Present: ssp2.NewColumnBitmap(len(tbl.Columns)), Values: make([]ssp2.Value, len(tbl.Columns))}
	row.Present.Set(tbl.PKIndex)
	row.Values[tbl.PKIndex] = ssp2.Value{Bytes: []byte("n1")}
	b, err := tbl.Sparse.AppendSparseRow(nil, row)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tbl.Sparse.DecodeSparseRow(b, nil); err != nil || got.Present.Count() != 1 {
		t.Fatalf("decode: %+v, %v", got, err)
	}
}
