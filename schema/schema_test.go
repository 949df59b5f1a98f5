package schema

import (
	"errors"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

func TestLoadNotes(t *testing.T) {
	s, err := Load("testdata/notes.json")
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != 1 {
		t.Fatalf("version = %d, want 1", s.Version)
	}
	tbl, ok := s.Table("notes")
	if !ok {
		t.Fatal("table notes missing")
	}
	if got, want := len(tbl.WireColumns()), 9; got != want {
		t.Fatalf("columns = %d, want %d", got, want)
	}
	sc, ok := tbl.Scope("project_id")
	if !ok || sc.Prefix != "project" || sc.Column != "project_id" || sc.ColumnIndex != 8 {
		t.Fatalf("scope = %+v, %v", sc, ok)
	}
	if !s.HasVariable("project_id") || s.HasVariable("project") {
		t.Fatal("HasVariable disagrees with the declared patterns")
	}
	if tbl.Codec == nil {
		t.Fatal("table has no row codec")
	}
}

func TestRowIDAndScopes(t *testing.T) {
	s, err := Parse([]byte(`{"version":2,"tables":[{"name":"t","columns":[
		{"name":"n","type":"integer"},{"name":"org","type":"boolean"},{"name":"p","type":"string","nullable":true}],
		"primaryKey":"n","scopes":["org:{org}",{"pattern":"proj:{project}","column":"p"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tbl, _ := s.Table("t")
	row := []ssp2.Value{{Int: -42}, {Bool: true}, {Bytes: []byte("p1")}}
	id, err := tbl.RowID(row)
	if err != nil || id != "-42" {
		t.Fatalf("RowID = %q, %v; want -42", id, err)
	}
	scopes, missing, ok := tbl.StoredScopes(row)
	if !ok || scopes["org"] != "true" || scopes["project"] != "p1" || len(scopes) != 2 {
		t.Fatalf("StoredScopes = %v, %q, %v", scopes, missing, ok)
	}
	row[2] = ssp2.Value{Null: true}
	if _, missing, ok := tbl.StoredScopes(row); ok || missing != "project" {
		t.Fatalf("null scope value: missing=%q ok=%v, want project/false", missing, ok)
	}
	row[2] = ssp2.Value{Bytes: []byte{}}
	if _, _, ok := tbl.StoredScopes(row); ok {
		t.Fatal("empty scope value accepted")
	}
}

func TestParseErrors(t *testing.T) {
	cols := `[{"name":"id","type":"string"},{"name":"p","type":"string"}]`
	table := func(body string) string { return `{"version":1,"tables":[` + body + `]}` }
	cases := []struct {
		name, doc, table, column, reason string
	}{
		{"bad json", `{`, "", "", "invalid JSON"},
		{"no version", `{"tables":[]}`, "", "", "version"},
		{"version zero", `{"version":0,"tables":[]}`, "", "", "out of range"},
		{"no tables", `{"version":1,"tables":[]}`, "", "", "no tables"},
		{"bad table name", table(`{"name":"a-b","columns":` + cols + `,"primaryKey":"id","scopes":["p:{p}"]}`), "a-b", "", "must match"},
		{"reserved table", table(`{"name":"sync_x","columns":` + cols + `,"primaryKey":"id","scopes":["p:{p}"]}`), "sync_x", "", "reserved"},
		{"dup table", table(`{"name":"a","columns":` + cols + `,"primaryKey":"id","scopes":["p:{p}"]},{"name":"a","columns":` + cols + `,"primaryKey":"id","scopes":["p:{p}"]}`), "a", "", "duplicate table"},
		{"unknown type", table(`{"name":"a","columns":[{"name":"id","type":"text"}],"primaryKey":"id","scopes":["p:{id}"]}`), "a", "id", "unknown column type"},
		{"dup column", table(`{"name":"a","columns":[{"name":"id","type":"string"},{"name":"id","type":"string"}],"primaryKey":"id","scopes":["p:{id}"]}`), "a", "id", "duplicate column"},
		{"reserved column", table(`{"name":"a","columns":[{"name":"id","type":"string"},{"name":"_sync_x","type":"string"}],"primaryKey":"id","scopes":["p:{id}"]}`), "a", "_sync_x", "reserved"},
		{"pk missing", table(`{"name":"a","columns":` + cols + `,"primaryKey":"nope","scopes":["p:{p}"]}`), "a", "nope", "undeclared"},
		{"pk nullable", table(`{"name":"a","columns":[{"name":"id","type":"string","nullable":true},{"name":"p","type":"string"}],"primaryKey":"id","scopes":["p:{p}"]}`), "a", "id", "nullable"},
		{"pk float", table(`{"name":"a","columns":[{"name":"id","type":"float"},{"name":"p","type":"string"}],"primaryKey":"id","scopes":["p:{p}"]}`), "a", "id", "primary key type"},
		{"pk bytes", table(`{"name":"a","columns":[{"name":"id","type":"bytes"},{"name":"p","type":"string"}],"primaryKey":"id","scopes":["p:{p}"]}`), "a", "id", "primary key type"},
		{"pk blob_ref", table(`{"name":"a","columns":[{"name":"id","type":"blob_ref"},{"name":"p","type":"string"}],"primaryKey":"id","scopes":["p:{p}"]}`), "a", "id", "primary key type"},
		{"pk crdt", table(`{"name":"a","columns":[{"name":"id","type":"crdt","crdtType":"yjs-doc"},{"name":"p","type":"string"}],"primaryKey":"id","scopes":["p:{p}"]}`), "a", "id", "primary key type"},
		{"composite pk", table(`{"name":"a","columns":` + cols + `,"primaryKey":["id","p"],"scopes":["p:{p}"]}`), "a", "", "composite"},
		{"no scopes", table(`{"name":"a","columns":` + cols + `,"primaryKey":"id","scopes":[]}`), "a", "", "at least one scope"},
		{"two variables", table(`{"name":"a","columns":` + cols + `,"primaryKey":"id","scopes":["p:{p}:{id}"]}`), "a", "", "exactly one variable"},
		{"no prefix", table(`{"name":"a","columns":` + cols + `,"primaryKey":"id","scopes":["{p}"]}`), "a", "", "prefix:{variable}"},
		{"scope column missing", table(`{"name":"a","columns":` + cols + `,"primaryKey":"id","scopes":["p:{q}"]}`), "a", "q", "undeclared column"},
		{"variable two columns", table(`{"name":"a","columns":` + cols + `,"primaryKey":"id","scopes":["p:{p}",{"pattern":"x:{p}","column":"id"}]}`), "a", "id", "two columns"},
		{"scope on bytes", table(`{"name":"a","columns":[{"name":"id","type":"string"},{"name":"p","type":"bytes"}],"primaryKey":"id","scopes":["p:{p}"]}`), "a", "p", "scope column must be"},
		{"crdt without type", table(`{"name":"a","columns":[{"name":"id","type":"string"},{"name":"p","type":"string"},{"name":"d","type":"crdt"}],"primaryKey":"id","scopes":["p:{p}"]}`), "a", "d", "crdtType"},
		{"encrypted not bytes", table(`{"name":"a","columns":[{"name":"id","type":"string"},{"name":"p","type":"string"},{"name":"s","type":"string","encrypted":true,"declaredType":"string"}],"primaryKey":"id","scopes":["p:{p}"]}`), "a", "s", "must be bytes"},
		{"encrypted scope", table(`{"name":"a","columns":[{"name":"id","type":"string"},{"name":"p","type":"bytes","encrypted":true,"declaredType":"string"}],"primaryKey":"id","scopes":["p:{p}"]}`), "a", "p", "must not be encrypted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want *schema.Error", err)
			}
			if se.Table != c.table || se.Column != c.column || !strings.Contains(se.Reason, c.reason) {
				t.Fatalf("err = %+v, want table %q column %q reason containing %q", se, c.table, c.column, c.reason)
			}
		})
	}
}

func TestCompareLayouts(t *testing.T) {
	a, err := Load("testdata/notes.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, same := CompareLayouts(a.Layouts(), a.Layouts()); !same {
		t.Fatal("a layout differs from itself")
	}
	b, err := MarshalLayouts(a.Layouts())
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalLayouts(b)
	if err != nil {
		t.Fatal(err)
	}
	if d, same := CompareLayouts(back, a.Layouts()); !same {
		t.Fatalf("round-tripped layout differs: %v", d)
	}
	changed := a.Layouts()
	changed[0].Columns = append([]ColumnLayout(nil), changed[0].Columns...)
	changed[0].Columns[3].Nullable = false
	d, same := CompareLayouts(changed, a.Layouts())
	if same || d.Table != "notes" || d.Column != "count" {
		t.Fatalf("diff = %v (same=%v), want notes/count", d, same)
	}
	if d, same := CompareLayouts(nil, a.Layouts()); same || d.Table != "notes" {
		t.Fatalf("missing table diff = %v (same=%v)", d, same)
	}
}

// TestMaterializeDefault: a table is materialized unless it says
// otherwise or its every payload column (not the key, not a scope
// column) is encrypted; an explicit value wins.
func TestMaterializeDefault(t *testing.T) {
	s, err := Parse([]byte(`{"version":1,"tables":[
	 {"name":"plain","primaryKey":"id","scopes":["p:{p}"],"columns":[{"name":"id","type":"string"},{"name":"p","type":"string"},{"name":"v","type":"string"}]},
	 {"name":"keys","primaryKey":"id","scopes":["p:{p}"],"columns":[{"name":"id","type":"string"},{"name":"p","type":"string"}]},
	 {"name":"off","primaryKey":"id","scopes":["p:{p}"],"materialize":false,"columns":[{"name":"id","type":"string"},{"name":"p","type":"string"},{"name":"v","type":"string"}]},
	 {"name":"mixed","primaryKey":"id","scopes":["p:{p}"],"columns":[{"name":"id","type":"string"},{"name":"p","type":"string"},
	  {"name":"v","type":"bytes","encrypted":true,"declaredType":"string"},{"name":"w","type":"string"}]},
	 {"name":"sealed","primaryKey":"id","scopes":["p:{p}"],"columns":[{"name":"id","type":"string"},{"name":"p","type":"string"},
	  {"name":"v","type":"bytes","encrypted":true,"declaredType":"string"}]},
	 {"name":"opened","primaryKey":"id","scopes":["p:{p}"],"materialize":true,"columns":[{"name":"id","type":"string"},{"name":"p","type":"string"},
	  {"name":"v","type":"bytes","encrypted":true,"declaredType":"json"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"plain": true, "keys": true, "off": false, "mixed": true, "sealed": false, "opened": true} {
		if tb, _ := s.Table(name); tb.Materialize != want {
			t.Errorf("table %s: materialize %v, want %v", name, tb.Materialize, want)
		}
	}
}
