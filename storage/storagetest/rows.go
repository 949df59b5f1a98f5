package storagetest

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

var rowTests = []test{
	{"UpsertGetDelete", testRowCRUD},
	{"UpsertChangesScope", testRowRescope},
	{"UnknownTable", testRowUnknownTable},
	{"ScanKeysetOrder", testRowScanOrder},
	{"ScanScopeFilters", testRowScanFilters},
	{"ScanRefusals", testRowScanRefusals},
	{"FloatNaN", testFloatNaN},
}

func testRowCRUD(t *testing.T, e *env) {
	s, sc := e.store()
	p, q := partition(t, s), partition(t, s)
	ctx := t.Context()
	full := rowWrite(t, table(t, sc, "tasks"), values{"id": "t1", "project_id": "p1", "owner_id": -42, "title": "héllo \"q\"",
		"done": true, "score": 2.25, "meta": `{"k":[1,2]}`, "data": []byte{0, 1, 255}})
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		if _, ok, err := tx.RowGet(ctx, p.ID, "tasks", "t1"); err != nil || ok {
			t.Fatalf("RowGet before insert: ok %v err %v", ok, err)
		}
		v, err := tx.RowUpsert(ctx, "tasks", full)
		if err != nil || v != 1 {
			t.Fatalf("insert = %d, %v; want version 1", v, err)
		}
		// Reads its own writes.
		got, ok, err := tx.RowGet(ctx, p.ID, "tasks", "t1")
		if err != nil || !ok || got.ServerVersion != 1 || !bytes.Equal(got.Payload, full.Payload) || !maps.Equal(got.Scopes, full.Scopes) {
			t.Fatalf("RowGet in tx = %+v %v %v", got, ok, err)
		}
		for want := int64(2); want <= 3; want++ {
			if v, err := tx.RowUpsert(ctx, "tasks", full); err != nil || v != want {
				t.Fatalf("update = %d, %v; want version %d", v, err, want)
			}
		}
		return nil
	})
	// Same row id in another partition is another row.
	writeTx(t, s, q.ID, func(tx storage.Tx) error {
		if v, err := tx.RowUpsert(ctx, "tasks", full); err != nil || v != 1 {
			t.Fatalf("insert in another partition = %d, %v; want version 1", v, err)
		}
		return nil
	})
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
		got, ok, err := tx.RowGet(ctx, p.ID, "tasks", "t1")
		if err != nil || !ok {
			t.Fatalf("RowGet = %v %v", ok, err)
		}
		want := storage.Row{RowID: "t1", ServerVersion: 3, Scopes: map[string]string{"project": "p1", "owner": "-42"}, Payload: full.Payload}
		if got.RowID != want.RowID || got.ServerVersion != want.ServerVersion || !maps.Equal(got.Scopes, want.Scopes) || !bytes.Equal(got.Payload, want.Payload) {
			t.Fatalf("RowGet = %+v, want %+v", got, want)
		}
		return nil
	}))
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		if ok, err := tx.RowDelete(ctx, "tasks", "t1"); err != nil || !ok {
			t.Fatalf("delete existing = %v, %v", ok, err)
		}
		if ok, err := tx.RowDelete(ctx, "tasks", "t1"); err != nil || ok {
			t.Fatalf("delete absent = %v, %v", ok, err)
		}
		// A re-insert starts again at version 1.
		if v, err := tx.RowUpsert(ctx, "tasks", full); err != nil || v != 1 {
			t.Fatalf("re-insert = %d, %v; want 1", v, err)
		}
		return nil
	})
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
		if r, ok, err := tx.RowGet(ctx, q.ID, "tasks", "t1"); err != nil || !ok || r.ServerVersion != 1 {
			t.Fatalf("other partition's row = %+v %v %v", r, ok, err)
		}
		return nil
	}))
}

// testRowRescope moves a row to other scope values (a server-emitted
// scope migration): the version still counts up and scans follow.
func testRowRescope(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		for i, rw := range []storage.RowWrite{task(t, sc, "t1", "p1", 1, "a"), task(t, sc, "t1", "p1", 1, "b"),
			task(t, sc, "t1", "p2", 1, "c"), task(t, sc, "t1", "p2", 5, "d")} {
			if v, err := tx.RowUpsert(ctx, "tasks", rw); err != nil || v != int64(i+1) {
				t.Fatalf("upsert %d = %d, %v; want version %d", i, v, err, i+1)
			}
		}
		return nil
	})
	for _, tc := range []struct {
		scopes map[string][]string
		want   []string
	}{
		{map[string][]string{"project": {"p1"}}, nil},
		{map[string][]string{"owner": {"1"}}, nil},
		{map[string][]string{"project": {"p2"}, "owner": {"5"}}, []string{"t1"}},
	} {
		if got := scanAll(t, s, storage.ScanParams{Partition: p.ID, Table: "tasks", Scopes: tc.scopes, Limit: 10}); !slices.Equal(got, tc.want) {
			t.Fatalf("scan %v after the scope change = %v, want %v", tc.scopes, got, tc.want)
		}
	}
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
		r, _, err := tx.RowGet(ctx, p.ID, "tasks", "t1")
		if err != nil || !maps.Equal(r.Scopes, map[string]string{"project": "p2", "owner": "5"}) {
			t.Fatalf("row after the scope change = %+v, %v", r, err)
		}
		return nil
	}))
}

func testRowUnknownTable(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		_, err := tx.RowUpsert(ctx, "nope", task(t, sc, "t1", "p1", 1, nil))
		wantCode(t, err, ssp2.CodeUnknownTable)
		_, _, err = tx.RowGet(ctx, p.ID, "nope", "x")
		wantCode(t, err, ssp2.CodeUnknownTable)
		// Argument errors do not abort the transaction.
		_, err = tx.RowUpsert(ctx, "tasks", task(t, sc, "t1", "p1", 1, nil))
		return err
	})
}

// scanAll pages through a scan with the given page size.
func scanAll(t *testing.T, s storage.Store, p storage.ScanParams) []string {
	t.Helper()
	var ids []string
	check(t, s.ReadTx(t.Context(), func(tx storage.ReadTx) error {
		for {
			rows, err := tx.RowScan(t.Context(), p)
			if err != nil {
				return err
			}
			for _, r := range rows {
				ids = append(ids, r.RowID)
			}
			if len(rows) < p.Limit {
				return nil
			}
			p.AfterRowID = rows[len(rows)-1].RowID
		}
	}))
	return ids
}

func testRowScanOrder(t *testing.T, e *env) {
	s, sc := e.store()
	p, q := partition(t, s), partition(t, s)
	ctx := t.Context()
	ids := []string{"b", "a", "B", "é", "aa", "a-1", "a_1", "Z", "10", "9", "~", "ab"}
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		for _, id := range ids {
			if _, err := tx.RowUpsert(ctx, "tasks", task(t, sc, id, "p1", 1, nil)); err != nil {
				return err
			}
		}
		return nil
	})
	writeTx(t, s, q.ID, func(tx storage.Tx) error {
		_, err := tx.RowUpsert(ctx, "tasks", task(t, sc, "zz-other-partition", "p1", 1, nil))
		return err
	})
	want := slices.Clone(ids)
	slices.Sort(want) // Go string order is bytewise
	for _, limit := range []int{1, 2, 5, 100} {
		got := scanAll(t, s, storage.ScanParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1"}}, Limit: limit})
		if !slices.Equal(got, want) {
			t.Fatalf("scan with page %d = %v, want %v", limit, got, want)
		}
	}
	// Several values for one variable keep the order.
	got := scanAll(t, s, storage.ScanParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1", "p2"}}, Limit: 3})
	if !slices.Equal(got, want) {
		t.Fatalf("scan with two values = %v, want %v", got, want)
	}
}

func testRowScanFilters(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	notes := table(t, sc, "notes")
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		for i, spec := range []struct {
			project string
			owner   int64
		}{{"p1", 1}, {"p1", 2}, {"p2", 1}, {"p2", 2}, {"p3", 1}, {"p1", 7}, {"p1", -7}} {
			if _, err := tx.RowUpsert(ctx, "tasks", task(t, sc, fmt.Sprintf("t%d", i), spec.project, spec.owner, nil)); err != nil {
				return err
			}
		}
		for i, spec := range []struct {
			project  string
			archived bool
		}{{"p1", true}, {"p1", false}, {"p2", true}} {
			if _, err := tx.RowUpsert(ctx, "notes", rowWrite(t, notes, values{"id": i + 1, "project_id": spec.project, "archived": spec.archived})); err != nil {
				return err
			}
		}
		return nil
	})
	cases := []struct {
		table  string
		scopes map[string][]string
		want   []string
	}{
		{"tasks", map[string][]string{"project": {"p1"}}, []string{"t0", "t1", "t5", "t6"}},
		{"tasks", map[string][]string{"project": {"p1", "p2"}, "owner": {"1"}}, []string{"t0", "t2"}},
		{"tasks", map[string][]string{"project": {"p1"}, "owner": {"2", "7"}}, []string{"t1", "t5"}},
		{"tasks", map[string][]string{"owner": {"-7"}}, []string{"t6"}},
		// Integer scopes match their decimal rendering only.
		{"tasks", map[string][]string{"owner": {"07", "x", "1.0"}}, nil},
		{"tasks", map[string][]string{"project": {"p1"}, "owner": {}}, nil},
		{"tasks", map[string][]string{"project": {"p1"}, "undeclared": {"x"}}, nil},
		{"notes", map[string][]string{"archived": {"true"}}, []string{"1", "3"}},
		{"notes", map[string][]string{"archived": {"false"}, "project": {"p1"}}, []string{"2"}},
		{"notes", map[string][]string{"archived": {"TRUE", "1"}}, nil},
		{"notes", map[string][]string{"archived": {"true", "false"}, "project": {"p2"}}, []string{"3"}},
	}
	for _, tc := range cases {
		got := scanAll(t, s, storage.ScanParams{Partition: p.ID, Table: tc.table, Scopes: tc.scopes, Limit: 2})
		if !slices.Equal(got, tc.want) {
			t.Errorf("scan %s %v = %v, want %v", tc.table, tc.scopes, got, tc.want)
		}
	}
	// Rows carry their version and payload.
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
		rows, err := tx.RowScan(ctx, storage.ScanParams{Partition: p.ID, Table: "notes", Scopes: map[string][]string{"project": {"p2"}}, Limit: 10})
		if err != nil {
			return err
		}
		want := rowWrite(t, notes, values{"id": 3, "project_id": "p2", "archived": true})
		if len(rows) != 1 || rows[0].RowID != "3" || rows[0].ServerVersion != 1 || !bytes.Equal(rows[0].Payload, want.Payload) {
			t.Fatalf("scan rows = %+v", rows)
		}
		return nil
	}))
}

func testRowScanRefusals(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s)
	ctx := t.Context()
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
		_, err := tx.RowScan(ctx, storage.ScanParams{Partition: p.ID, Table: "tasks", Limit: 10})
		wantCode(t, err, ssp2.CodeStorageScanRequiresScope)
		for _, limit := range []int{0, -1, storage.MaxScanLimit + 1} {
			_, err = tx.RowScan(ctx, storage.ScanParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p"}}, Limit: limit})
			wantCode(t, err, ssp2.CodeStorageInvalidLimit)
		}
		_, err = tx.RowScan(ctx, storage.ScanParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p"}}, Limit: storage.MaxScanLimit})
		return err
	}))
}
