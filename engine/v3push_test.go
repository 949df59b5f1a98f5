package engine

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// notesSchema has free columns to patch and a crdt column.
const notesSchema = `{"version":1,"tables":[{"name":"notes","columns":[
	{"name":"id","type":"string"},
	{"name":"project_id","type":"string"},
	{"name":"title","type":"string","nullable":true},
	{"name":"body","type":"string","nullable":true},
	{"name":"n","type":"integer","nullable":true},
	{"name":"doc","type":"crdt","crdtType":"set","nullable":true}],
	"primaryKey":"id","scopes":["project:{project_id}"]}]}`

// setMerger is a crdt merger: the union of the bytes, sorted.
func setMerger(stored, incoming []byte) ([]byte, error) {
	out := append(slices.Clone(stored), incoming...)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// forStores runs f on SQLite and on PostgreSQL (skipped without
// SYNCNODE_TEST_POSTGRES_URL unless CI requires it).
func forStores(t *testing.T, f func(t *testing.T, open func(testing.TB) storage.Store)) {
	t.Run("sqlite", func(t *testing.T) { f(t, openSQLite) })
	t.Run("postgres", func(t *testing.T) { f(t, openPostgres) })
}

func openPostgres(t testing.TB) storage.Store {
	t.Helper()
	url, sch := pgtest.Schema(t)
	st, err := pgstore.Open(context.Background(), pgstore.Config{URL: url, Schema: sch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// v3 is a harness speaking wire version 3 for one table.
type v3 struct {
	*harness
	table *schema.Table
	ep    string
	n     int // commit ids
}

func newV3(t testing.TB, open func(testing.TB) storage.Store, doc, table string, mod func(*Config)) *v3 {
	t.Helper()
	h := newHarnessOn(t, open(t), doc, func(c *Config) {
		c.Mergers = map[string]CrdtMerger{"set": setMerger}
		if mod != nil {
			mod(c)
		}
	})
	tb, ok := h.schema.Table(table)
	if !ok {
		t.Fatalf("no table %s", table)
	}
	return &v3{harness: h, table: tb, ep: h.epoch(id("alice", "p1"))}
}

// value converts a test value: string, int, []byte, nil (NULL).
func value(t testing.TB, v any) ssp2.Value {
	switch x := v.(type) {
	case nil:
		return ssp2.Value{Null: true}
	case string:
		return ssp2.Value{Bytes: []byte(x)}
	case int:
		return ssp2.Value{Int: int64(x)}
	case []byte:
		return ssp2.Value{Bytes: x}
	}
	t.Fatalf("unsupported test value %T", v)
	return ssp2.Value{}
}

// sparse encodes a sparse row of tb presenting exactly the given columns.
func sparse(t testing.TB, tb *schema.Table, cols map[string]any) []byte {
	t.Helper()
	row := ssp2.SparseRow{Present: ssp2.NewColumnBitmap(len(tb.Columns)), Values: make([]ssp2.Value, len(tb.Columns))}
	for name, v := range cols {
		i, ok := tb.ColumnIndex(name)
		if !ok {
			t.Fatalf("no column %s.%s", tb.Name, name)
		}
		row.Present.Set(i)
		row.Values[i] = value(t, v)
	}
	b, err := tb.Sparse.AppendSparseRow(nil, row)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// full encodes a full row of tb (absent columns NULL).
func full(t testing.TB, tb *schema.Table, cols map[string]any) []byte {
	t.Helper()
	vals := make([]ssp2.Value, len(tb.Columns))
	for i, c := range tb.Columns {
		vals[i] = value(t, cols[c.Name])
	}
	b, err := tb.Codec.AppendRow(nil, vals)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func op(tb *schema.Table, rowID string, payload []byte, base ...int64) ssp2.Operation {
	o := ssp2.Operation{Table: tb.Name, RowID: rowID, Op: ssp2.OpUpsert, Payload: payload}
	if len(base) > 0 {
		o.BaseVersion = &base[0]
	}
	return o
}

func delOp(tb *schema.Table, rowID string) ssp2.Operation {
	return ssp2.Operation{Table: tb.Name, RowID: rowID, Op: ssp2.OpDelete}
}

// push sends one commit at wire version wire as who and returns its
// result, and its details when there are any.
func (h *v3) push(wire uint16, who Identity, client string, ops ...ssp2.Operation) (*ssp2.PushResult, *ssp2.PushResultDetails) {
	h.t.Helper()
	h.n++
	m := h.sync(who, wire, hdr(client, h.ep), commit(fmt.Sprintf("%s-%d", client, h.n), ops...))
	res := frames[*ssp2.PushResult](m)
	if len(res) != 1 {
		h.t.Fatalf("push answered %d results", len(res))
	}
	var d *ssp2.PushResultDetails
	if ds := frames[*ssp2.PushResultDetails](m); len(ds) > 0 {
		d = ds[0]
	}
	return res[0], d
}

func (h *v3) applied(wire uint16, who Identity, client string, ops ...ssp2.Operation) int64 {
	h.t.Helper()
	res, _ := h.push(wire, who, client, ops...)
	if res.Status != ssp2.PushApplied {
		h.t.Fatalf("push = %+v, want applied", res)
	}
	return *res.CommitSeq
}

// refused asserts a rejected commit with code, and returns its result
// record.
func (h *v3) refused(code ssp2.Code, wire uint16, who Identity, client string, ops ...ssp2.Operation) ssp2.OpResult {
	h.t.Helper()
	res, _ := h.push(wire, who, client, ops...)
	if res.Status != ssp2.PushRejected || len(res.Results) != 1 || res.Results[0].Code != string(code) {
		h.t.Fatalf("push = %+v, want rejected with %s", res, code)
	}
	return res.Results[0]
}

// row reads a stored row of tb by column name, with its version.
func (h *v3) row(tb *schema.Table, rowID string) (map[string]any, int64, bool) {
	h.t.Helper()
	var out map[string]any
	var version int64
	var found bool
	err := h.store.ReadTx(context.Background(), func(tx storage.ReadTx) error {
		r, ok, err := tx.RowGet(context.Background(), "p", tb.Name, rowID)
		if err != nil || !ok {
			return err
		}
		vals, err := tb.Codec.DecodeRow(r.Payload, nil)
		if err != nil {
			return err
		}
		found, version, out = true, r.ServerVersion, map[string]any{}
		for i, c := range tb.Columns {
			v := vals[i]
			switch {
			case v.Null:
				out[c.Name] = nil
			case c.Type == ssp2.TypeInteger:
				out[c.Name] = int(v.Int)
			case c.Type == ssp2.TypeCrdt:
				out[c.Name] = string(v.Bytes)
			default:
				out[c.Name] = string(v.Bytes)
			}
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out, version, found
}

func (h *v3) wantRow(tb *schema.Table, rowID string, version int64, want map[string]any) {
	h.t.Helper()
	got, v, ok := h.row(tb, rowID)
	if !ok {
		h.t.Fatalf("%s/%s is absent, want version %d %v", tb.Name, rowID, version, want)
	}
	if v != version {
		h.t.Fatalf("%s/%s at version %d, want %d (%v)", tb.Name, rowID, v, version, got)
	}
	for k, w := range want {
		if got[k] != w {
			h.t.Fatalf("%s/%s.%s = %v, want %v (row %v)", tb.Name, rowID, k, got[k], w, got)
		}
	}
}

// columns names the columns of a conflictColumns bitmap.
func columns(tb *schema.Table, b []byte) []string {
	var out []string
	for i, c := range tb.Columns {
		if ssp2.ColumnBitmap(b).Has(i) {
			out = append(out, c.Name)
		}
	}
	return out
}

var alice = id("alice", "p1")

func seed(h *v3) {
	h.t.Helper()
	h.applied(3, alice, "seed", op(h.table, "n1", sparse(h.t, h.table, map[string]any{
		"id": "n1", "project_id": "p1", "title": "t0", "body": "b0", "n": 0, "doc": nil})))
}

func TestV3DisjointAndOverlappingPatches(t *testing.T) {
	forStores(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		h := newV3(t, open, notesSchema, "notes", nil)
		seed(h)
		tb := h.table
		// Two clients patch disjoint columns from the same base: both apply.
		h.applied(3, alice, "a", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "title": "A"}), 1))
		h.applied(3, alice, "b", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "body": "B"}), 1))
		h.wantRow(tb, "n1", 3, map[string]any{"title": "A", "body": "B", "n": 0})
		// Overlapping: exactly the moved columns are marked.
		c := h.refused(ssp2.CodeVersionConflict, 3, alice, "c",
			op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "title": "C", "body": "C", "n": 7}), 1))
		if c.Status != ssp2.OpConflict || c.ServerVersion != 3 || !slices.Equal(columns(tb, c.ConflictColumns), []string{"title", "body"}) {
			t.Fatalf("conflict = %+v (columns %v), want version 3, columns [title body]", c, columns(tb, c.ConflictColumns))
		}
		if vals, err := tb.Codec.DecodeRow(c.ServerRow, nil); err != nil || string(vals[2].Bytes) != "A" || string(vals[3].Bytes) != "B" {
			t.Fatalf("serverRow is not the current full row: %v %v", vals, err)
		}
		c = h.refused(ssp2.CodeVersionConflict, 3, alice, "c", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "n": 7, "body": "C"}), 2))
		if got := columns(tb, c.ConflictColumns); !slices.Equal(got, []string{"body"}) {
			t.Fatalf("conflict columns from base 2 = %v, want [body]", got)
		}
		// The rolled back commit changed nothing; from base 3 it applies.
		h.wantRow(tb, "n1", 3, map[string]any{"n": 0})
		h.applied(3, alice, "c", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "n": 7, "body": "C"}), 3))
		h.wantRow(tb, "n1", 4, map[string]any{"title": "A", "body": "C", "n": 7})
		// Without baseVersion: last writer wins per column.
		h.applied(3, alice, "d", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "title": nil})))
		h.wantRow(tb, "n1", 5, map[string]any{"title": nil, "body": "C", "n": 7})
	})
}

func TestV3ExistingRowRules(t *testing.T) {
	forStores(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		h := newV3(t, open, notesSchema, "notes", nil)
		seed(h)
		tb := h.table
		// A present scope column may not change; present and equal applies.
		h.refused(ssp2.CodeInvalidRequest, 3, alice, "a", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "project_id": "p2"})))
		h.applied(3, alice, "a", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "project_id": "p1", "title": "x"})))
		// baseVersion ahead of the row.
		h.refused(ssp2.CodeInvalidRequest, 3, alice, "a", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "title": "y"}), 9))
		// baseVersion 0 on an existing row: a lost insert, every present
		// non-crdt column but the key marked; forbidden for another scope.
		c := h.refused(ssp2.CodeVersionConflict, 3, alice, "a",
			op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "project_id": "p1", "title": "z", "doc": []byte{1}}), 0))
		if got := columns(tb, c.ConflictColumns); !slices.Equal(got, []string{"project_id", "title"}) {
			t.Fatalf("lost-insert conflict columns = %v, want [project_id title]", got)
		}
		h.refused(ssp2.CodeForbidden, 3, id("mallory", "p9"), "m", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "title": "z"}), 0))
		// A crdt-only patch never conflicts, however stale its base: it merges.
		h.applied(3, alice, "a", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "doc": []byte{3, 1}}), 1))
		h.applied(3, alice, "b", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "doc": []byte{2, 1}}), 1))
		h.wantRow(tb, "n1", 4, map[string]any{"title": "x", "doc": string([]byte{1, 2, 3})})
		// A payload that is not a sparse row of the table: commit-level.
		h.refused(ssp2.CodeInvalidRequest, 3, alice, "a", op(tb, "n1", full(t, tb, map[string]any{"id": "n1", "project_id": "p1"})))
	})
}

func TestV3AbsentRowAndTombstones(t *testing.T) {
	forStores(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		h := newV3(t, open, notesSchema, "notes", nil)
		tb := h.table
		whole := func(id, title string) []byte {
			return sparse(t, tb, map[string]any{"id": id, "project_id": "p1", "title": title, "body": nil, "n": nil, "doc": nil})
		}
		patch := sparse(t, tb, map[string]any{"id": "n1", "title": "p"})
		// Absent, never deleted: a partial payload is row_missing, a whole one inserts.
		h.refused(ssp2.CodeRowMissing, 3, alice, "a", op(tb, "n1", patch))
		h.refused(ssp2.CodeRowMissing, 3, alice, "a", op(tb, "n1", whole("n1", "x"), 4))
		h.refused(ssp2.CodeForbidden, 3, alice, "a", op(tb, "n1", patch, 4)) // no scope column to authorize
		h.refused(ssp2.CodeRowMissing, 3, alice, "a", op(tb, "n1", patch, 0))
		h.refused(ssp2.CodeForbidden, 3, id("mallory", "p9"), "m", op(tb, "n1", whole("n1", "x")))
		h.applied(3, alice, "a", op(tb, "n1", whole("n1", "x")))
		h.wantRow(tb, "n1", 1, map[string]any{"title": "x"})

		// Delete vs a concurrent unversioned upsert: the delete wins.
		h.applied(3, alice, "a", delOp(tb, "n1"))
		h.refused(ssp2.CodeRowDeleted, 3, alice, "b", op(tb, "n1", whole("n1", "late")))
		h.refused(ssp2.CodeRowDeleted, 3, alice, "b", op(tb, "n1", patch))
		if _, _, ok := h.row(tb, "n1"); ok {
			t.Fatal("the row came back")
		}
		// Explicit intent (baseVersion 0) recreates and clears the tombstone.
		h.applied(3, alice, "b", op(tb, "n1", whole("n1", "again"), 0))
		h.wantRow(tb, "n1", 1, map[string]any{"title": "again"})
		h.applied(3, alice, "b", delOp(tb, "n1"), op(tb, "n1", whole("n1", "same commit"), 0))
		h.wantRow(tb, "n1", 1, map[string]any{"title": "same commit"})
		// Within one commit a delete beats the commit's own later
		// unversioned upsert too, as if its tombstone were already written.
		h.refused(ssp2.CodeRowDeleted, 3, alice, "b", delOp(tb, "n1"), op(tb, "n1", whole("n1", "no")))

		// n2 deleted, then pruned past: the normal insert rule applies.
		h.applied(3, alice, "a", op(tb, "n2", whole("n2", "x")))
		del := h.applied(3, alice, "a", delOp(tb, "n2"))
		h.refused(ssp2.CodeRowDeleted, 3, alice, "b", op(tb, "n2", whole("n2", "late")))
		h.applied(3, alice, "a", op(tb, "n3", whole("n3", "x"))) // pruning keeps the newest commit
		part, err := h.store.PartitionGet(context.Background(), "p")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.store.Prune(context.Background(), storage.PruneParams{Partition: "p", LogEpoch: part.LogEpoch, ThroughSeq: del,
			NowMs: h.now, Literal: true}); err != nil {
			t.Fatal(err)
		}
		h.refused(ssp2.CodeRowMissing, 3, alice, "b", op(tb, "n2", sparse(t, tb, map[string]any{"id": "n2", "title": "p"})))
		h.applied(3, alice, "b", op(tb, "n2", whole("n2", "back")))
		h.wantRow(tb, "n2", 1, map[string]any{"title": "back"})
	})
}

func TestV2AndV3OnOneRow(t *testing.T) {
	forStores(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		h := newV3(t, open, notesSchema, "notes", nil)
		seed(h)
		tb := h.table
		row := func(title, body string) []byte {
			return full(t, tb, map[string]any{"id": "n1", "project_id": "p1", "title": title, "body": body, "n": 0})
		}
		// A v3 patch of body, then a v2 full write from base 1 conflicts
		// row-level, though it would not touch body under v3 rules.
		h.applied(3, alice, "v3", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "body": "B"}), 1))
		c := h.refused(ssp2.CodeVersionConflict, 2, alice, "v2", op(tb, "n1", row("T", "b0"), 1))
		if c.ConflictColumns != nil || c.ServerVersion != 2 {
			t.Fatalf("v2 conflict = %+v, want version 2 and no conflictColumns", c)
		}
		// A v2 write is a write of every column: afterwards a v3 patch of
		// any column from an older base conflicts.
		h.applied(2, alice, "v2", op(tb, "n1", row("T", "B"), 2))
		c = h.refused(ssp2.CodeVersionConflict, 3, alice, "v3", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "n": 5}), 2))
		if got := columns(tb, c.ConflictColumns); !slices.Equal(got, []string{"n"}) {
			t.Fatalf("conflict columns after a v2 write = %v, want [n]", got)
		}
		h.applied(3, alice, "v3", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "n": 5}), 3))
		h.wantRow(tb, "n1", 4, map[string]any{"title": "T", "body": "B", "n": 5})
		// v2 keeps its own rules: a changed scope column is stripped, not
		// refused, and an unversioned upsert recreates a deleted row.
		h.applied(2, alice, "v2", op(tb, "n1", full(t, tb, map[string]any{"id": "n1", "project_id": "p9", "title": "S"})))
		h.wantRow(tb, "n1", 5, map[string]any{"project_id": "p1", "title": "S"})
		h.applied(3, alice, "v3", delOp(tb, "n1"))
		h.applied(2, alice, "v2", op(tb, "n1", row("R", "R")))
		h.wantRow(tb, "n1", 1, map[string]any{"title": "R"})
		h.applied(3, alice, "v3", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "title": "y"}), 1))
		h.wantRow(tb, "n1", 2, map[string]any{"title": "y", "body": "R"})
	})
}

func TestV3ConflictReplay(t *testing.T) {
	h := newV3(t, openSQLite, notesSchema, "notes", nil)
	seed(h)
	tb := h.table
	h.applied(3, alice, "a", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "title": "A"})))
	c := commit("k", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "title": "B"}), 1))
	first := frames[*ssp2.PushResult](h.sync(alice, 3, hdr("r", h.ep), c))[0]
	again := frames[*ssp2.PushResult](h.sync(alice, 3, hdr("r", h.ep), c))[0]
	if first.Status != ssp2.PushRejected || !bytes.Equal(first.Results[0].ConflictColumns, again.Results[0].ConflictColumns) ||
		again.Status != ssp2.PushRejected || columns(tb, again.Results[0].ConflictColumns)[0] != "title" {
		t.Fatalf("first %+v, replay %+v: want the same rejection with conflictColumns [title]", first, again)
	}
	// The same key replayed by a v2 client carries no conflictColumns.
	v2 := frames[*ssp2.PushResult](h.sync(alice, 2, hdr("r", h.ep), c))[0]
	if v2.Status != ssp2.PushRejected || v2.Results[0].ConflictColumns != nil || v2.Results[0].ServerVersion != 2 {
		t.Fatalf("v2 replay = %+v", v2)
	}
}

func TestV3ValidatorsSeeTheMergedRow(t *testing.T) {
	var rows, stored []Row
	var evidence []OperationEvidence
	h := newV3(t, openSQLite, notesSchema, "notes", func(c *Config) {
		c.Validators = map[string]RowValidator{"notes": func(_ context.Context, v RowValidation) error {
			rows, stored = append(rows, v.Row), append(stored, v.Stored)
			return nil
		}}
		c.CommitValidator = func(_ context.Context, v CommitValidation) error {
			evidence = append(evidence, v.Operations...)
			return nil
		}
	})
	seed(h)
	rows, stored, evidence = nil, nil, nil
	tb := h.table
	h.applied(3, alice, "a", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "body": "B", "doc": []byte{5}}), 1))
	if len(rows) != 1 || rows[0]["title"] != "t0" || rows[0]["body"] != "B" || !bytes.Equal(rows[0]["doc"].([]byte), []byte{5}) || stored[0]["body"] != "b0" {
		t.Fatalf("validator saw row %v, stored %v; want the merged full row", rows, stored)
	}
	if len(evidence) != 1 || evidence[0].Row["title"] != "t0" || *evidence[0].StoredServerVersion != 1 || *evidence[0].NextServerVersion != 2 || evidence[0].Appended {
		t.Fatalf("commit evidence = %+v", evidence)
	}
}

func TestWireWindow(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.WireWindow = ssp2.WireWindow{Min: 2, Max: 3} })
	_, err := h.try(alice, 1, &ssp2.ReqHeader{ClientID: "old", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 3})
	wantCode(t, err, ssp2.CodeInvalidRequest)
	if _, err := h.try(alice, 3, &ssp2.ReqHeader{ClientID: "new", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 3}); err != nil {
		t.Fatalf("v3 request: %v", err)
	}
	for _, w := range []ssp2.WireWindow{{Min: 3, Max: 2}, {Min: 0, Max: 3}, {Min: 2, Max: 4}} {
		if _, err := New(Config{Schema: h.schema, Store: h.store, WireWindow: w}); err == nil {
			t.Fatalf("New accepted the window %v", w)
		}
	}
	if _, err := New(Config{Schema: h.schema, Store: h.store, CascadeLimit: -1}); err == nil {
		t.Fatal("New accepted a negative CascadeLimit")
	}
}
