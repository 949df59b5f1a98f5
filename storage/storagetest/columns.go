package storagetest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/schemaplan"
)

// Column versions, tombstones, lookups by column and the declared indexes
// of wire version 3 (SPEC.md §2.2, §6.2, §6.11).
var columnTests = []test{
	{"ColumnVersionsStored", testColumnVersionsStored},
	{"LegacyTableNeedsVersionBump", testColumnVersionsLegacyTable},
	{"TombstoneLifecycle", testTombstoneLifecycle},
	{"TombstonesPrunedWithLog", testTombstonesPruned},
	{"TombstonesWiped", testTombstonesWiped},
	{"ScanByColumn", testScanByColumn},
	{"DeclaredIndexes", testDeclaredIndexes},
}

// schemaRefs has a parent table with a unique declared index and a child
// table referencing it, without a declared index on the reference column.
const schemaRefs = `{"version": 1, "tables": [
 {"name": "lists", "primaryKey": "id",
  "columns": [
   {"name": "id", "type": "string"},
   {"name": "project_id", "type": "string"},
   {"name": "code", "type": "integer", "nullable": true}],
  "scopes": [{"pattern": "project:{project}", "column": "project_id"}],
  "indexes": [{"name": "lists_code", "columns": ["code"], "unique": true}]},
 {"name": "items", "primaryKey": "id",
  "columns": [
   {"name": "id", "type": "string"},
   {"name": "project_id", "type": "string"},
   {"name": "list_id", "type": "string", "nullable": true},
   {"name": "rank", "type": "integer", "nullable": true}],
  "scopes": [{"pattern": "project:{project}", "column": "project_id"}],
  "references": [{"column": "list_id", "parentTable": "lists", "onDelete": "CASCADE"}]}]}`

// refsStore returns a store with schemaRefs installed.
func (e *env) refsStore() (storage.Store, *schema.Schema) {
	e.t.Helper()
	s := e.fresh()
	sc := mustParse(e.t, schemaRefs)
	check(e.t, s.EnsureSchema(e.t.Context(), sc))
	return s, sc
}

func testColumnVersionsStored(t *testing.T, e *env) {
	ctx := t.Context()
	s, sc := e.store()
	p := partition(t, s)
	plain := task(t, sc, "t1", "p1", 1, "one")
	versioned := task(t, sc, "t2", "p1", 1, "two")
	blob := storage.AppendColumnVersions(nil, []int64{1, 1, 1, 3, 1, 1, 1, 1}, 3, 0)
	versioned.ColumnVersions = blob
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		for _, rw := range []storage.RowWrite{plain, versioned} {
			if _, err := tx.RowUpsert(ctx, "tasks", rw); err != nil {
				return err
			}
		}
		return nil
	})
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
		got, _, err := tx.RowGet(ctx, p.ID, "tasks", "t1")
		if err != nil || got.ColumnVersions != nil {
			t.Fatalf("t1 column versions = %x, %v; want NULL", got.ColumnVersions, err)
		}
		got, _, err = tx.RowGet(ctx, p.ID, "tasks", "t2")
		if err != nil || !bytes.Equal(got.ColumnVersions, blob) {
			t.Fatalf("t2 column versions = %x, %v; want %x", got.ColumnVersions, err, blob)
		}
		return nil
	}))
	// An update replaces them, NULL included.
	versioned.ColumnVersions = nil
	low := storage.AppendColumnVersions(nil, []int64{1, 1, 1, 1, 1, 1, 1, 1}, 2, 0)
	plain.ColumnVersions = low
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		for _, rw := range []storage.RowWrite{plain, versioned} {
			if _, err := tx.RowUpsert(ctx, "tasks", rw); err != nil {
				return err
			}
		}
		got, _, err := tx.RowGet(ctx, p.ID, "tasks", "t2")
		if err != nil || got.ColumnVersions != nil {
			t.Fatalf("t2 after a NULL write = %x, %v; want NULL", got.ColumnVersions, err)
		}
		got, _, err = tx.RowGet(ctx, p.ID, "tasks", "t1")
		if err != nil || !bytes.Equal(got.ColumnVersions, low) {
			t.Fatalf("t1 with every column at version 1 = %x, %v; want %x", got.ColumnVersions, err, low)
		}
		return nil
	})
	// A rescoped update (another owner) keeps them too.
	moved := task(t, sc, "t2", "p1", 9, "two")
	moved.ColumnVersions = blob
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		if _, err := tx.RowUpsert(ctx, "tasks", moved); err != nil {
			return err
		}
		got, _, err := tx.RowGet(ctx, p.ID, "tasks", "t2")
		if err != nil || !bytes.Equal(got.ColumnVersions, blob) || got.Scopes["owner"] != "9" {
			t.Fatalf("t2 after a rescope = %+v, %v", got, err)
		}
		return nil
	})
}

// testColumnVersionsLegacyTable: a table created before column versions
// is refused at the same schema version and gains the column with a
// version bump, its rows reading NULL (SPEC.md §2.4).
func testColumnVersionsLegacyTable(t *testing.T, e *env) {
	ctx := t.Context()
	s, sc := e.store()
	p := partition(t, s)
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		_, err := tx.RowUpsert(ctx, "tasks", task(t, sc, "t1", "p1", 1, "one"))
		return err
	})
	check(t, hooks(t, s).HookTamper(ctx, "tasks", schemaplan.ColColumnVersions, ReasonMissingColumn))
	err := refused(t, s, mustParse(t, schemaV1), ssp2.CodeStoragePhysicalLayoutMismatch)
	if d := details(t, err); d["table"] != "tasks" || d["column"] != schemaplan.ColColumnVersions || d["reason"] != ReasonMissingColumn {
		t.Fatalf("details = %v, want tasks %s missing", d, schemaplan.ColColumnVersions)
	}
	v2 := mustParse(t, withVersion(schemaV1, 2))
	check(t, s.EnsureSchema(ctx, v2))
	check(t, s.EnsureSchema(ctx, v2)) // and verifies cleanly from then on
	rw := task(t, v2, "t1", "p1", 1, "again")
	rw.ColumnVersions = storage.AppendColumnVersions(nil, []int64{1, 1, 1, 2, 1, 1, 1, 1}, 2, 0)
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		got, _, err := tx.RowGet(ctx, p.ID, "tasks", "t1")
		if err != nil || got.ColumnVersions != nil || got.ServerVersion != 1 {
			t.Fatalf("migrated row = %+v, %v; want version 1, NULL column versions", got, err)
		}
		if _, err := tx.RowUpsert(ctx, "tasks", rw); err != nil {
			return err
		}
		got, _, err = tx.RowGet(ctx, p.ID, "tasks", "t1")
		if err != nil || !bytes.Equal(got.ColumnVersions, rw.ColumnVersions) {
			t.Fatalf("written after migration = %x, %v", got.ColumnVersions, err)
		}
		return nil
	})
}

func tombstone(t *testing.T, s storage.Store, partition, table, rowID string) (int64, bool) {
	t.Helper()
	var seq int64
	var ok bool
	writeTx(t, s, partition, func(tx storage.Tx) error {
		var err error
		seq, ok, err = tx.TombstoneGet(t.Context(), table, rowID)
		return err
	})
	return seq, ok
}

func deleteChange(rw storage.RowWrite, table string) storage.Change {
	return storage.Change{Table: table, RowID: rw.RowID, Op: storage.OpDelete, Scopes: rw.Scopes}
}

// commitChanges appends one commit of changes and returns its seq.
func commitChanges(t *testing.T, tx storage.Tx, id string, changes ...storage.Change) (int64, error) {
	return tx.CommitAppend(t.Context(), storage.CommitParams{CreatedAtMs: 1_000_000, ActorID: "a", ClientID: "c",
		ClientCommitID: id, SchemaVersion: 1, Changes: changes})
}

func testTombstoneLifecycle(t *testing.T, e *env) {
	ctx := t.Context()
	s, sc := e.store()
	p := partition(t, s)
	a, b := task(t, sc, "a", "p1", 1, nil), task(t, sc, "b", "p1", 1, nil)
	if _, ok := tombstone(t, s, p.ID, "tasks", "a"); ok {
		t.Fatal("a tombstone before any delete")
	}
	var seq1 int64
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		var err error
		// a deleted; b deleted and written again in the same commit.
		seq1, err = commitChanges(t, tx, "1", deleteChange(a, "tasks"), deleteChange(b, "tasks"), change(b, "tasks", 1))
		return err
	})
	if seq, ok := tombstone(t, s, p.ID, "tasks", "a"); !ok || seq != seq1 {
		t.Fatalf("tombstone of a = %d, %v; want %d", seq, ok, seq1)
	}
	if _, ok := tombstone(t, s, p.ID, "tasks", "b"); ok {
		t.Fatal("b was written after its delete in one commit, yet has a tombstone")
	}
	if _, ok := tombstone(t, s, p.ID, "notes", "a"); ok {
		t.Fatal("a tombstone of tasks/a answers for notes/a")
	}
	// A second delete moves the tombstone to its commit.
	var seq2 int64
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		var err error
		seq2, err = commitChanges(t, tx, "2", deleteChange(a, "tasks"))
		return err
	})
	if seq, ok := tombstone(t, s, p.ID, "tasks", "a"); !ok || seq != seq2 {
		t.Fatalf("tombstone of a after a second delete = %d, %v; want %d", seq, ok, seq2)
	}
	// A rolled-back commit leaves no tombstone.
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		sp, err := tx.Savepoint(ctx)
		if err != nil {
			return err
		}
		if _, err := commitChanges(t, tx, "3", deleteChange(b, "tasks")); err != nil {
			return err
		}
		return sp.Rollback(ctx)
	})
	if _, ok := tombstone(t, s, p.ID, "tasks", "b"); ok {
		t.Fatal("a rolled-back delete left a tombstone")
	}
	// An update leaves a tombstone alone; an insert clears it.
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		if _, err := tx.RowUpsert(ctx, "tasks", b); err != nil {
			return err
		}
		if _, err := commitChanges(t, tx, "4", deleteChange(b, "tasks")); err != nil {
			return err
		}
		_, err := tx.RowUpsert(ctx, "tasks", b) // b still exists: an update
		return err
	})
	if _, ok := tombstone(t, s, p.ID, "tasks", "b"); !ok {
		t.Fatal("an update of an existing row cleared a tombstone")
	}
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		if _, err := tx.RowUpsert(ctx, "tasks", a); err != nil { // a never existed as a row here: an insert
			return err
		}
		if _, ok, err := tx.TombstoneGet(ctx, "tasks", "a"); err != nil || ok {
			t.Fatalf("after the insert of a, its tombstone = %v, %v; want none (read in the same transaction)", ok, err)
		}
		return nil
	})
	// Unknown tables are argument errors that do not abort.
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		if _, _, err := tx.TombstoneGet(ctx, "nope", "a"); ssp2.CodeOf(err) != ssp2.CodeUnknownTable {
			t.Fatalf("TombstoneGet(unknown table) = %v, want %s", err, ssp2.CodeUnknownTable)
		}
		_, _, err := tx.TombstoneGet(ctx, "tasks", "a")
		return err
	})
}

func testTombstonesPruned(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	for i := range 4 {
		writeTx(t, s, p.ID, func(tx storage.Tx) error {
			_, err := commitChanges(t, tx, fmt.Sprint(i), deleteChange(task(t, sc, fmt.Sprint("r", i), "p1", 1, nil), "tasks"))
			return err
		})
	}
	p, err := s.PartitionGet(t.Context(), p.ID)
	check(t, err)
	prune(t, s, storage.PruneParams{Partition: p.ID, LogEpoch: p.LogEpoch, ThroughSeq: 2, Literal: true, ActiveWindowMs: 1, AgeForceMs: 1})
	for i := range 4 {
		_, ok := tombstone(t, s, p.ID, "tasks", fmt.Sprint("r", i))
		if want := i >= 2; ok != want { // r0, r1 deleted by commits 1, 2
			t.Fatalf("tombstone of r%d after pruning through 2 = %v, want %v", i, ok, want)
		}
	}
}

func testTombstonesWiped(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		_, err := commitChanges(t, tx, "1", deleteChange(task(t, sc, "a", "p1", 1, nil), "tasks"))
		return err
	})
	check(t, s.PartitionWipe(t.Context(), p.ID))
	if _, err := s.PartitionTouch(t.Context(), p.ID, 2_000_000); err != nil {
		t.Fatal(err)
	}
	if _, ok := tombstone(t, s, p.ID, "tasks", "a"); ok {
		t.Fatal("a tombstone survived PartitionWipe")
	}
}

func testScanByColumn(t *testing.T, e *env) {
	ctx := t.Context()
	s, sc := e.refsStore()
	p, other := partition(t, s), partition(t, s)
	items := table(t, sc, "items")
	item := func(id, list string, rank int) storage.RowWrite {
		v := values{"id": id, "project_id": "p1", "rank": rank}
		if list != "" {
			v["list_id"] = list
		}
		return rowWrite(t, items, v)
	}
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		for _, rw := range []storage.RowWrite{item("i3", "L1", 1), item("i1", "L1", 2), item("i2", "L2", 1), item("i4", "", 1), item("i5", "L1", 3)} {
			if _, err := tx.RowUpsert(ctx, "items", rw); err != nil {
				return err
			}
		}
		return nil
	})
	writeTx(t, s, other.ID, func(tx storage.Tx) error {
		_, err := tx.RowUpsert(ctx, "items", item("i9", "L1", 1))
		return err
	})
	ids := func(rows []storage.Row) string {
		var out []string
		for _, r := range rows {
			out = append(out, r.RowID)
		}
		return strings.Join(out, ",")
	}
	scan := func(tx storage.ReadTx, col string, v ssp2.Value, after string, limit int) ([]storage.Row, error) {
		return tx.RowScanByColumn(ctx, storage.ColumnScanParams{Partition: p.ID, Table: "items", Column: col, Value: v, AfterRowID: after, Limit: limit})
	}
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
		rows, err := scan(tx, "list_id", ssp2.Value{Bytes: []byte("L1")}, "", 10)
		if err != nil || ids(rows) != "i1,i3,i5" {
			t.Fatalf("children of L1 = %s, %v; want i1,i3,i5 (row id order, this partition only)", ids(rows), err)
		}
		if rows[0].Scopes["project"] != "p1" || rows[0].ServerVersion != 1 || rows[0].Payload == nil {
			t.Fatalf("scanned row = %+v, want scopes, version and payload", rows[0])
		}
		if rows, err = scan(tx, "list_id", ssp2.Value{Bytes: []byte("L1")}, "i1", 1); err != nil || ids(rows) != "i3" {
			t.Fatalf("keyset page after i1 = %s, %v; want i3", ids(rows), err)
		}
		if rows, err = scan(tx, "rank", ssp2.Value{Int: 1}, "", 10); err != nil || ids(rows) != "i2,i3,i4" {
			t.Fatalf("rank = 1 = %s, %v; want i2,i3,i4", ids(rows), err)
		}
		if rows, err = scan(tx, "list_id", ssp2.Value{Bytes: []byte("L9")}, "", 10); err != nil || len(rows) != 0 {
			t.Fatalf("children of L9 = %s, %v; want none", ids(rows), err)
		}
		if _, err := scan(tx, "list_id", ssp2.Value{Bytes: []byte("L1")}, "", 0); ssp2.CodeOf(err) != ssp2.CodeStorageInvalidLimit {
			t.Fatalf("limit 0 = %v, want %s", err, ssp2.CodeStorageInvalidLimit)
		}
		if _, err := scan(tx, "nope", ssp2.Value{Bytes: []byte("L1")}, "", 1); err == nil {
			t.Fatal("a scan by an undeclared column succeeded")
		}
		if _, err := scan(tx, "list_id", ssp2.Value{Null: true}, "", 1); err == nil {
			t.Fatal("a scan by NULL succeeded")
		}
		return nil
	}))
	// Inside a write transaction it sees the transaction's own writes.
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		if _, err := tx.RowDelete(ctx, "items", "i3"); err != nil {
			return err
		}
		if _, err := tx.RowUpsert(ctx, "items", item("i0", "L1", 5)); err != nil {
			return err
		}
		rows, err := scan(tx, "list_id", ssp2.Value{Bytes: []byte("L1")}, "", 10)
		if err != nil || ids(rows) != "i0,i1,i5" {
			t.Fatalf("children of L1 in the candidate state = %s, %v; want i0,i1,i5", ids(rows), err)
		}
		return nil
	})
}

func testDeclaredIndexes(t *testing.T, e *env) {
	ctx := t.Context()
	s, sc := e.refsStore()
	cat, err := hooks(t, s).HookCatalog(ctx)
	check(t, err)
	if want := schemaplan.ReferenceIndexName("items", "list_id"); !strings.Contains(cat, want) {
		t.Fatalf("catalog lacks the reference index %s:\n%s", want, cat)
	}
	// The unique declared index is unique per partition.
	p, other := partition(t, s), partition(t, s)
	lists := table(t, sc, "lists")
	list := func(id string, code int) storage.RowWrite {
		return rowWrite(t, lists, values{"id": id, "project_id": "p1", "code": code})
	}
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		_, err := tx.RowUpsert(ctx, "lists", list("L1", 7))
		return err
	})
	writeTx(t, s, other.ID, func(tx storage.Tx) error {
		_, err := tx.RowUpsert(ctx, "lists", list("L1", 7))
		return err
	})
	err = s.WriteTx(ctx, p.ID, func(tx storage.Tx) error {
		_, err := tx.RowUpsert(ctx, "lists", list("L2", 7))
		return err
	})
	var ce *storage.ConstraintError
	if !errors.As(err, &ce) || ce.Kind != storage.ConstraintUnique {
		t.Fatalf("a second code 7 in one partition = %v, want a unique ConstraintError", err)
	}
	// Dropping the declaration drops the index.
	noIndex := strings.Replace(schemaRefs, `,
  "indexes": [{"name": "lists_code", "columns": ["code"], "unique": true}]`, "", 1)
	check(t, s.EnsureSchema(ctx, mustParse(t, noIndex)))
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		_, err := tx.RowUpsert(ctx, "lists", list("L2", 7))
		return err
	})
	after, err := hooks(t, s).HookCatalog(ctx)
	check(t, err)
	if strings.Contains(after, "lists_code") {
		t.Fatalf("the undeclared index is still there:\n%s", after)
	}
}
