package storagetest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

var schemaTests = []test{
	{"InstallAndVerify", testSchemaInstall},
	{"NewerVersionRefused", testSchemaNewer},
	{"StoredLayoutMismatch", testSchemaStoredMismatch},
	{"PhysicalMismatch", testSchemaPhysicalMismatch},
	{"ForwardMigration", testSchemaForwardMigration},
	{"MigrationRefusals", testSchemaMigrationRefusals},
}

// withVersion rewrites the fixture's version.
func withVersion(doc string, v int) string {
	return strings.Replace(doc, `"version": 1`, `"version": `+strconv.Itoa(v), 1)
}

func testSchemaInstall(t *testing.T, e *env) {
	ctx := t.Context()
	s := e.fresh()
	if _, ok, err := s.SchemaMarker(ctx); err != nil || ok {
		t.Fatalf("SchemaMarker on a fresh store = ok %v, err %v; want none", ok, err)
	}
	sc := mustParse(t, schemaV1)
	check(t, s.EnsureSchema(ctx, sc))
	m, ok, err := s.SchemaMarker(ctx)
	check(t, err)
	if !ok || m.Version != 1 {
		t.Fatalf("marker = %+v, %v; want version 1", m, ok)
	}
	if d, same := schema.CompareLayouts(m.Layouts, sc.Layouts()); !same {
		t.Fatalf("stored layouts differ: %v", d)
	}
	before, err := hooks(t, s).HookCatalog(ctx)
	check(t, err)
	// Verifying an installed schema is idempotent and changes nothing.
	check(t, s.EnsureSchema(ctx, mustParse(t, schemaV1)))
	after, err := hooks(t, s).HookCatalog(ctx)
	check(t, err)
	if before != after {
		t.Fatalf("second EnsureSchema changed the catalog:\n%s\n---\n%s", before, after)
	}
}

// refused asserts that ensure fails with code and leaves catalog and
// marker as they were.
func refused(t *testing.T, s storage.Store, sc *schema.Schema, code ssp2.Code) *ssp2.Error {
	t.Helper()
	ctx := t.Context()
	h := hooks(t, s)
	before, err := h.HookCatalog(ctx)
	check(t, err)
	m0, ok0, err := s.SchemaMarker(ctx)
	check(t, err)
	e := wantCode(t, s.EnsureSchema(ctx, sc), code)
	after, err := h.HookCatalog(ctx)
	check(t, err)
	if before != after {
		t.Fatalf("refused EnsureSchema changed the catalog:\n%s\n---\n%s", before, after)
	}
	m1, ok1, err := s.SchemaMarker(ctx)
	check(t, err)
	if ok0 != ok1 || m0.Version != m1.Version {
		t.Fatalf("refused EnsureSchema changed the marker: %v/%v → %v/%v", m0.Version, ok0, m1.Version, ok1)
	}
	if e.Unwrap() != nil {
		t.Fatalf("refusal wraps an engine error: %v", e.Unwrap())
	}
	return e
}

func testSchemaNewer(t *testing.T, e *env) {
	s := e.fresh()
	check(t, s.EnsureSchema(t.Context(), mustParse(t, withVersion(schemaV1, 2))))
	refused(t, s, mustParse(t, schemaV1), ssp2.CodeStorageSchemaVersionNewer)
}

func testSchemaStoredMismatch(t *testing.T, e *env) {
	s, _ := e.store()
	// Same version, score changed from float to integer.
	changed := strings.Replace(schemaV1, `{"name": "score", "type": "float", "nullable": true}`,
		`{"name": "score", "type": "integer", "nullable": true}`, 1)
	err := refused(t, s, mustParse(t, changed), ssp2.CodeStorageStoredLayoutMismatch)
	if d := details(t, err); d["table"] != "tasks" || d["column"] != "score" {
		t.Fatalf("details = %v, want table tasks column score", d)
	}
}

func testSchemaPhysicalMismatch(t *testing.T, e *env) {
	cases := []struct {
		reason, column string
	}{
		{ReasonMissingTable, ""},
		{ReasonMissingColumn, "score"},
		{ReasonType, "title"},
		{ReasonNullability, "done"},
		{ReasonPrimaryKey, "title"},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			s, sc := (&env{t: t, open: e.open}).store()
			check(t, hooks(t, s).HookTamper(t.Context(), "tasks", tc.column, tc.reason))
			err := refused(t, s, sc, ssp2.CodeStoragePhysicalLayoutMismatch)
			d := details(t, err)
			if d["table"] != "tasks" || d["reason"] != tc.reason {
				t.Fatalf("details = %v, want table tasks reason %s", d, tc.reason)
			}
			if tc.reason != ReasonMissingTable && tc.reason != ReasonPrimaryKey && d["column"] != tc.column {
				t.Fatalf("details = %v, want column %s", d, tc.column)
			}
			if !strings.Contains(err.Message, "tasks") || !strings.Contains(err.Message, tc.reason) {
				t.Fatalf("message %q does not name the table and reason", err.Message)
			}
		})
	}
}

// schemaV2 appends a nullable column with a new scope to tasks and adds
// a table.
const schemaV2 = `{"version": 2, "tables": [
 {"name": "tasks", "primaryKey": "id",
  "columns": [
   {"name": "id", "type": "string"},
   {"name": "project_id", "type": "string"},
   {"name": "owner_id", "type": "integer"},
   {"name": "title", "type": "string", "nullable": true},
   {"name": "done", "type": "boolean"},
   {"name": "score", "type": "float", "nullable": true},
   {"name": "meta", "type": "json", "nullable": true},
   {"name": "data", "type": "bytes", "nullable": true},
   {"name": "label", "type": "string", "nullable": true}],
  "scopes": [{"pattern": "project:{project}", "column": "project_id"}, {"pattern": "owner:{owner}", "column": "owner_id"}, "label:{label}"]},
 {"name": "notes", "primaryKey": "id",
  "columns": [
   {"name": "id", "type": "integer"},
   {"name": "project_id", "type": "string"},
   {"name": "archived", "type": "boolean"},
   {"name": "body", "type": "string", "nullable": true}],
  "scopes": [{"pattern": "project:{project}", "column": "project_id"}, "archived:{archived}"]},
 {"name": "comments", "primaryKey": "id",
  "columns": [
   {"name": "id", "type": "string"},
   {"name": "project_id", "type": "string"},
   {"name": "body", "type": "string"}],
  "scopes": [{"pattern": "project:{project}", "column": "project_id"}]}]}`

func testSchemaForwardMigration(t *testing.T, e *env) {
	ctx := t.Context()
	s, v1 := e.store()
	p := partition(t, s)
	rows := []storage.RowWrite{
		rowWrite(t, table(t, v1, "tasks"), values{"id": "t1", "project_id": "p1", "owner_id": 7, "title": "one", "done": true,
			"score": 1.5, "meta": `{"a":1}`, "data": []byte{1, 2}}),
		rowWrite(t, table(t, v1, "tasks"), values{"id": "t2", "project_id": "p2", "owner_id": 8, "done": false}),
	}
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		for _, r := range rows {
			if _, err := tx.RowUpsert(ctx, "tasks", r); err != nil {
				return err
			}
		}
		_, err := tx.RowUpsert(ctx, "tasks", rows[0]) // version 2
		return err
	})
	// A second partition holds more rows than one keyset page of the
	// rewrite (schemaplan.RewritePageRows), so the rewrite crosses pages.
	seeded := partition(t, s)
	const nSeeded = 1201
	check(t, s.RowSeed(ctx, storage.SeedParams{Partition: seeded.ID, Table: "tasks", Count: nSeeded, Row: func(i int, w *storage.RowWrite) error {
		*w = task(t, v1, fmt.Sprintf("s%05d", i), "p1", int64(i), "seeded")
		return nil
	}}))

	v2 := mustParse(t, schemaV2)
	check(t, s.EnsureSchema(ctx, v2))
	m, _, err := s.SchemaMarker(ctx)
	check(t, err)
	if m.Version != 2 {
		t.Fatalf("marker version = %d, want 2", m.Version)
	}
	tasks := table(t, v2, "tasks")
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
		for i, want := range rows {
			got, ok, err := tx.RowGet(ctx, p.ID, "tasks", want.RowID)
			if err != nil || !ok {
				t.Fatalf("RowGet(%s) = %v, %v", want.RowID, ok, err)
			}
			if wantV := int64(2 - i); got.ServerVersion != wantV {
				t.Fatalf("%s version = %d, want %d (kept through migration)", want.RowID, got.ServerVersion, wantV)
			}
			vals, err := tasks.Codec.DecodeRow(got.Payload, nil)
			if err != nil {
				t.Fatalf("%s payload does not decode with the v2 codec: %v", want.RowID, err)
			}
			for j, v := range want.Values {
				if vals[j].Null != v.Null || string(vals[j].Bytes) != string(v.Bytes) || vals[j].Int != v.Int || vals[j].Bool != v.Bool || vals[j].Float != v.Float {
					t.Fatalf("%s column %d = %+v, want %+v", want.RowID, j, vals[j], v)
				}
			}
			if !vals[len(vals)-1].Null {
				t.Fatalf("%s appended column = %+v, want NULL", want.RowID, vals[len(vals)-1])
			}
			if len(got.Scopes) != 2 || got.Scopes["project"] != want.Scopes["project"] || got.Scopes["owner"] != want.Scopes["owner"] {
				t.Fatalf("%s scopes = %v, want %v", want.RowID, got.Scopes, want.Scopes)
			}
		}
		return nil
	}))

	all := listAll(t, s, seeded.ID, "tasks", 1000)
	if len(all) != nSeeded {
		t.Fatalf("after migration %d seeded rows, want %d", len(all), nSeeded)
	}
	for _, r := range all {
		vals, err := tasks.Codec.DecodeRow(r.Payload, nil)
		if err != nil || !vals[len(vals)-1].Null || string(vals[3].Bytes) != "seeded" {
			t.Fatalf("seeded %s after migration = %+v, %v; want rewritten for v2", r.RowID, vals, err)
		}
	}

	// The new column, scope and table are usable.
	labelled := rowWrite(t, tasks, values{"id": "t3", "project_id": "p1", "owner_id": 7, "done": false, "label": "red"})
	comment := rowWrite(t, table(t, v2, "comments"), values{"id": "c1", "project_id": "p1", "body": "hi"})
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		if _, err := tx.RowUpsert(ctx, "tasks", labelled); err != nil {
			return err
		}
		_, err := tx.RowUpsert(ctx, "comments", comment)
		return err
	})
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
		got, err := tx.RowScan(ctx, storage.ScanParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"label": {"red"}}, Limit: 10})
		if err != nil {
			return err
		}
		if len(got) != 1 || got[0].RowID != "t3" {
			t.Fatalf("scan by the new scope = %v, want t3", got)
		}
		return nil
	}))
	// Installing v2 again verifies cleanly.
	check(t, s.EnsureSchema(ctx, mustParse(t, schemaV2)))
}

func testSchemaMigrationRefusals(t *testing.T, e *env) {
	v2 := withVersion(schemaV1, 2)
	cases := []struct {
		name, doc, table, column string
	}{
		{"TypeChange", strings.Replace(v2, `{"name": "score", "type": "float", "nullable": true}`,
			`{"name": "score", "type": "string", "nullable": true}`, 1), "tasks", "score"},
		{"DroppedColumn", strings.Replace(v2, `{"name": "score", "type": "float", "nullable": true},`, ``, 1), "tasks", "score"},
		{"Reordered", strings.Replace(strings.Replace(v2, `{"name": "score", "type": "float", "nullable": true},`, ``, 1),
			`{"name": "data", "type": "bytes", "nullable": true}]`,
			`{"name": "data", "type": "bytes", "nullable": true}, {"name": "score", "type": "float", "nullable": true}]`, 1), "tasks", "score"},
		{"NonNullableAppend", strings.Replace(v2, `{"name": "data", "type": "bytes", "nullable": true}]`,
			`{"name": "data", "type": "bytes", "nullable": true}, {"name": "rank", "type": "integer"}]`, 1), "tasks", "rank"},
		{"NullabilityChange", strings.Replace(v2, `{"name": "title", "type": "string", "nullable": true}`,
			`{"name": "title", "type": "string"}`, 1), "tasks", "title"},
		{"PrimaryKeyChange", strings.Replace(v2, `{"name": "tasks", "primaryKey": "id"`, `{"name": "tasks", "primaryKey": "project_id"`, 1), "tasks", "project_id"},
		{"DroppedTable", v2[:strings.Index(v2, `,
 {"name": "notes"`)] + "]}", "notes", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := (&env{t: t, open: e.open}).store()
			err := refused(t, s, mustParse(t, tc.doc), ssp2.CodeStorageStoredLayoutMismatch)
			if d := details(t, err); d["table"] != tc.table || d["column"] != tc.column {
				t.Fatalf("details = %v, want table %q column %q", d, tc.table, tc.column)
			}
		})
	}
}
