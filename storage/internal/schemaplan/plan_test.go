package schemaplan

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

const v1 = `{"version": 1, "tables": [{"name": "t", "primaryKey": "id",
	"columns": [{"name": "id", "type": "string"}, {"name": "p", "type": "string"}],
	"scopes": ["p:{p}"]}]}`

func parse(t *testing.T, doc string) *schema.Schema {
	t.Helper()
	s, err := schema.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDecide(t *testing.T) {
	stored := &Marker{Version: 1, Layouts: parse(t, v1).Layouts()}
	appended := strings.Replace(strings.Replace(v1, `"version": 1`, `"version": 2`, 1),
		`{"name": "p", "type": "string"}]`, `{"name": "p", "type": "string"}, {"name": "x", "type": "integer", "nullable": true}]`, 1)
	cases := []struct {
		name   string
		stored *Marker
		doc    string
		action Action
		code   ssp2.Code
		column string
	}{
		{"fresh", nil, v1, Install, "", ""},
		{"same", stored, v1, Verify, "", ""},
		{"newer stored", &Marker{Version: 3, Layouts: stored.Layouts}, v1, 0, ssp2.CodeStorageSchemaVersionNewer, ""},
		{"same version, other layout", stored, strings.Replace(v1, `{"name": "p", "type": "string"}`, `{"name": "p", "type": "integer"}`, 1),
			0, ssp2.CodeStorageStoredLayoutMismatch, "p"},
		{"append nullable", stored, appended, Migrate, "", ""},
		{"append not null", stored, strings.Replace(appended, `"nullable": true`, `"nullable": false`, 1), 0, ssp2.CodeStorageStoredLayoutMismatch, "x"},
	}
	for _, tc := range cases {
		p, err := Decide(tc.stored, parse(t, tc.doc))
		if ssp2.CodeOf(err) != tc.code {
			t.Errorf("%s: Decide = %v, want code %q", tc.name, err, tc.code)
			continue
		}
		if err != nil {
			var d Details
			_ = json.Unmarshal(err.(*ssp2.Error).Details, &d)
			if d.Column != tc.column {
				t.Errorf("%s: details %+v, want column %q", tc.name, d, tc.column)
			}
			continue
		}
		if p.Action != tc.action {
			t.Errorf("%s: action %v, want %v", tc.name, p.Action, tc.action)
		}
	}
	p, _ := Decide(stored, parse(t, appended))
	if len(p.Keep) != 1 || len(p.Keep[0].Added) != 1 || p.Keep[0].Added[0].Name != "x" || !p.Keep[0].NeedsRewrite() {
		t.Fatalf("migrate plan = %+v", p)
	}
}

func TestCheckPhysical(t *testing.T) {
	l := parse(t, v1).Tables[0].Layout()
	typeOf := func(c ssp2.ColumnType) string {
		if c == ssp2.TypeInteger {
			return "INTEGER"
		}
		if c == ssp2.TypeBytes {
			return "BLOB"
		}
		return "TEXT"
	}
	good := []PhysicalColumn{
		{ColPartition, "TEXT", true, 1}, {ColRowID, "text", true, 2}, {ColServerVersion, "INTEGER", true, 0},
		{ColScopes, "TEXT", true, 0}, {ColPayload, "BLOB", true, 0}, {"id", "TEXT", true, 0}, {"p", "TEXT", true, 0},
		{"extra", "REAL", false, 0}, {ColColumnVersions, "BLOB", false, 0},
	}
	if err := CheckPhysical(l, true, good, typeOf); err != nil {
		t.Fatalf("CheckPhysical(good) = %v", err)
	}
	edit := func(f func(cols []PhysicalColumn) []PhysicalColumn) []PhysicalColumn {
		return f(append([]PhysicalColumn(nil), good...))
	}
	cases := []struct {
		name   string
		exists bool
		cols   []PhysicalColumn
		reason string
	}{
		{"missing table", false, nil, ReasonMissingTable},
		{"missing column", true, edit(func(c []PhysicalColumn) []PhysicalColumn { return append(c[:6], c[7:]...) }), ReasonMissingColumn},
		{"type", true, edit(func(c []PhysicalColumn) []PhysicalColumn { c[6].Type = "BLOB"; return c }), ReasonType},
		{"nullability", true, edit(func(c []PhysicalColumn) []PhysicalColumn { c[2].NotNull = false; return c }), ReasonNullability},
		{"primary key order", true, edit(func(c []PhysicalColumn) []PhysicalColumn { c[0].PKPos, c[1].PKPos = 2, 1; return c }), ReasonPrimaryKey},
		{"primary key extra", true, edit(func(c []PhysicalColumn) []PhysicalColumn { c[5].PKPos = 3; return c }), ReasonPrimaryKey},
	}
	for _, tc := range cases {
		err := CheckPhysical(l, tc.exists, tc.cols, typeOf)
		var d Details
		if e, ok := err.(*ssp2.Error); ok {
			_ = json.Unmarshal(e.Details, &d)
		}
		if ssp2.CodeOf(err) != ssp2.CodeStoragePhysicalLayoutMismatch || d.Reason != tc.reason || d.Table != "t" {
			t.Errorf("%s: CheckPhysical = %v (%+v), want reason %s", tc.name, err, d, tc.reason)
		}
	}
}

func TestUpgradable(t *testing.T) {
	if got := Upgradable([]PhysicalColumn{{Name: ColPartition}, {Name: ColColumnVersions}}); len(got) != 0 {
		t.Fatalf("Upgradable(with column versions) = %v, want none", got)
	}
	got := Upgradable([]PhysicalColumn{{Name: ColPartition}, {Name: ColRowID}})
	if len(got) != 1 || got[0].Name != ColColumnVersions || !got[0].Nullable {
		t.Fatalf("Upgradable(legacy) = %v, want the nullable column versions", got)
	}
}

func TestIndexes(t *testing.T) {
	s := parse(t, `{"version": 1, "tables": [
	 {"name": "a", "primaryKey": "id", "columns": [{"name": "id", "type": "string"}, {"name": "p", "type": "string"}],
	  "scopes": ["p:{p}"]},
	 {"name": "b", "primaryKey": "id",
	  "columns": [{"name": "id", "type": "string"}, {"name": "p", "type": "string"},
	   {"name": "x", "type": "string", "nullable": true}, {"name": "y", "type": "string", "nullable": true},
	   {"name": "z", "type": "string", "nullable": true}],
	  "scopes": ["p:{p}"],
	  "references": [{"column": "x", "parentTable": "a"}, {"column": "y", "parentTable": "a"}, {"column": "p", "parentTable": "a"}],
	  "indexes": [{"name": "b_x", "columns": ["x"]}, {"name": "b_zy", "columns": ["z", "y"], "unique": true}]}]}`)
	b, _ := s.Table("b")
	got := map[string]IndexDef{}
	for _, ix := range Indexes(b) {
		got[ix.Name] = ix
	}
	want := map[string]string{
		ScopeIndexName("b", "p"):     "_sync_partition,p,_sync_row_id",
		ReferenceIndexName("b", "y"): "_sync_partition,y,_sync_row_id", // x is served by b_x, p by its scope index
		Indexes(b)[1].Name:           "_sync_partition,x,_sync_row_id",
		Indexes(b)[2].Name:           "_sync_partition,z,y",
	}
	if len(got) != len(want) {
		t.Fatalf("Indexes(b) = %v, want %v", got, want)
	}
	for name, cols := range want {
		if ix, ok := got[name]; !ok || strings.Join(ix.Columns, ",") != cols {
			t.Fatalf("index %s = %+v, want columns %s", name, ix, cols)
		}
	}
	if !got[Indexes(b)[2].Name].Unique || !strings.HasPrefix(Indexes(b)[2].Name, "sync_index_") || !strings.HasSuffix(Indexes(b)[2].Name, "_b_zy") {
		t.Fatalf("declared unique index = %+v", Indexes(b)[2])
	}
	if sql := Indexes(b)[2].CreateSQL("b", func(s string) string { return "'" + s + "'" }); sql != "CREATE UNIQUE INDEX '"+Indexes(b)[2].Name+"' ON 'b' ('_sync_partition', 'z', 'y')" {
		t.Fatalf("CreateSQL = %s", sql)
	}
	// A changed declaration is another index.
	changed := parse(t, strings.Replace(`{"version": 1, "tables": [{"name": "c", "primaryKey": "id",
	  "columns": [{"name": "id", "type": "string"}, {"name": "p", "type": "string"}, {"name": "q", "type": "string"}],
	  "scopes": ["p:{p}"], "indexes": [{"name": "c_q", "columns": ["q"]}]}]}`, `"columns": ["q"]`, `"columns": ["q", "p"]`, 1))
	orig := parse(t, `{"version": 1, "tables": [{"name": "c", "primaryKey": "id",
	  "columns": [{"name": "id", "type": "string"}, {"name": "p", "type": "string"}, {"name": "q", "type": "string"}],
	  "scopes": ["p:{p}"], "indexes": [{"name": "c_q", "columns": ["q"]}]}]}`)
	if Indexes(changed.Tables[0])[1].Name == Indexes(orig.Tables[0])[1].Name {
		t.Fatal("a changed index definition kept its name")
	}
}

func TestScopeIndexName(t *testing.T) {
	a, b := ScopeIndexName("a_b", "c"), ScopeIndexName("a", "b_c")
	if a == b {
		t.Fatalf("index names collide: %s", a)
	}
	long := ScopeIndexName(strings.Repeat("t", 63), strings.Repeat("c", 63))
	if len(long) > schema.MaxIdentifierLength {
		t.Fatalf("index name %q longer than %d", long, schema.MaxIdentifierLength)
	}
}
