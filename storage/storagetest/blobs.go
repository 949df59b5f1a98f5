package storagetest

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
)

var blobTests = []test{
	{"PutTouchGet", testBlobPut},
	{"ReferenceIndex", testBlobReferences},
	{"ReferenceNeedsBlob", testBlobReferenceNeedsBlob},
	{"OrphansAndDelete", testBlobOrphans},
	{"WipeDropsReferences", testBlobWipe},
	{"Refusals", testBlobRefusals},
	{"SweepRacesReference", testBlobSweepRace},
	{"SeedWritesReferences", testBlobSeed},
	{"ObjectHeld", testBlobObjectHeld},
}

// blobSchema has a table with two blob_ref columns.
const blobSchema = `{"version": 1, "tables": [
 {"name": "files", "primaryKey": "id",
  "columns": [
   {"name": "id", "type": "string"},
   {"name": "project_id", "type": "string"},
   {"name": "main", "type": "blob_ref", "nullable": true},
   {"name": "thumb", "type": "blob_ref", "nullable": true}],
  "scopes": [{"pattern": "project:{project}", "column": "project_id"}]}]}`

func (e *env) blobStore() (storage.Store, *schema.Schema) {
	e.t.Helper()
	s := e.fresh()
	sc := mustParse(e.t, blobSchema)
	if err := s.EnsureSchema(e.t.Context(), sc); err != nil {
		e.t.Fatalf("EnsureSchema(blobs): %v", err)
	}
	return s, sc
}

func blobID(n int) string { return fmt.Sprintf("sha256:%064x", n) }

// blobRef is the canonical BlobRef of blob n.
func blobRef(n int) string { return fmt.Sprintf(`{"blobId":"%s","byteLength":%d}`, blobID(n), n) }

func blobRow(n int, part string, at int64) storage.Blob {
	return storage.Blob{Partition: part, ID: blobID(n), ByteLength: int64(n), MediaType: "image/png",
		Object: fmt.Sprintf("obj-%d-%d", n, at), UploadedAtMs: at}
}

func putBlob(t *testing.T, s storage.Store, b storage.Blob) storage.Blob {
	t.Helper()
	got, _, err := s.BlobPut(t.Context(), b)
	check(t, err)
	return got
}

func file(t *testing.T, sc *schema.Schema, id, project string, main, thumb any) storage.RowWrite {
	return rowWrite(t, table(t, sc, "files"), values{"id": id, "project_id": project, "main": main, "thumb": thumb})
}

func refsOf(t *testing.T, s storage.Store, part, id string) []storage.BlobRef {
	t.Helper()
	var out []storage.BlobRef
	p := storage.BlobRefParams{Partition: part, BlobID: id, Limit: 1}
	for {
		page, err := s.BlobReferences(t.Context(), p)
		check(t, err)
		if len(page) == 0 {
			return out
		}
		out = append(out, page...)
		last := page[len(page)-1]
		p.AfterTable, p.AfterRowID = last.Table, last.RowID
	}
}

func testBlobPut(t *testing.T, e *env) {
	s, _ := e.blobStore()
	p := partition(t, s).ID
	first := blobRow(1, p, 100)
	got, created, err := s.BlobPut(t.Context(), first)
	check(t, err)
	if !created || got != first {
		t.Fatalf("first BlobPut = %+v, %v; want %+v, created", got, created, first)
	}
	// A second upload keeps the first object and raises the upload time.
	again := first
	again.Object, again.UploadedAtMs = "other", 200
	got, created, err = s.BlobPut(t.Context(), again)
	check(t, err)
	want := first
	want.UploadedAtMs = 200
	if created || got != want {
		t.Fatalf("second BlobPut = %+v, %v; want %+v, not created", got, created, want)
	}
	// Touch never lowers the upload time.
	got, ok, err := s.BlobTouch(t.Context(), p, first.ID, 150)
	check(t, err)
	if !ok || got != want {
		t.Fatalf("BlobTouch(150) = %+v, %v; want %+v", got, ok, want)
	}
	got, ok, err = s.BlobTouch(t.Context(), p, first.ID, 300)
	check(t, err)
	want.UploadedAtMs = 300
	if !ok || got != want {
		t.Fatalf("BlobTouch(300) = %+v, %v; want %+v", got, ok, want)
	}
	if _, ok, err := s.BlobTouch(t.Context(), p, blobID(2), 300); err != nil || ok {
		t.Fatalf("BlobTouch(absent) = %v, %v; want not found", ok, err)
	}
	if got, ok, err := s.BlobGet(t.Context(), p, first.ID); err != nil || !ok || got != want {
		t.Fatalf("BlobGet = %+v, %v, %v; want %+v", got, ok, err, want)
	}
	// Blobs are per partition.
	other := partition(t, s).ID
	if _, ok, err := s.BlobGet(t.Context(), other, first.ID); err != nil || ok {
		t.Fatalf("BlobGet(other partition) = %v, %v; want not found", ok, err)
	}
	st, err := s.BlobStats(t.Context())
	check(t, err)
	if st != (storage.BlobStats{Blobs: 1, Bytes: 1}) {
		t.Fatalf("BlobStats = %+v", st)
	}
}

func testBlobReferences(t *testing.T, e *env) {
	s, sc := e.blobStore()
	p := partition(t, s).ID
	for n := 1; n <= 3; n++ {
		putBlob(t, s, blobRow(n, p, 100))
	}
	held := func(tx storage.Tx, n int) {
		ok, err := tx.BlobHeld(t.Context(), blobID(n))
		check(t, err)
		if !ok {
			t.Fatalf("BlobHeld(%d) = false", n)
		}
	}
	writeTx(t, s, p, func(tx storage.Tx) error {
		held(tx, 1)
		held(tx, 2)
		if ok, err := tx.BlobHeld(t.Context(), blobID(9)); err != nil || ok {
			t.Fatalf("BlobHeld(absent) = %v, %v", ok, err)
		}
		// a and b reference blob 1 (b twice: one reference); b also 2.
		for _, rw := range []storage.RowWrite{
			file(t, sc, "a", "p1", blobRef(1), nil),
			file(t, sc, "b", "p2", blobRef(1), blobRef(1)),
			file(t, sc, "c", "p2", blobRef(2), nil),
		} {
			if _, err := tx.RowUpsert(t.Context(), "files", rw); err != nil {
				return err
			}
		}
		return nil
	})
	want1 := []storage.BlobRef{
		{Table: "files", RowID: "a", Scopes: map[string]string{"project": "p1"}},
		{Table: "files", RowID: "b", Scopes: map[string]string{"project": "p2"}},
	}
	if got := refsOf(t, s, p, blobID(1)); !reflect.DeepEqual(got, want1) {
		t.Fatalf("references of 1 = %+v, want %+v", got, want1)
	}
	// Moving a's reference from 1 to 3 and deleting c drops their old
	// entries; setting b's main to NULL keeps its thumb's.
	writeTx(t, s, p, func(tx storage.Tx) error {
		if _, err := tx.RowUpsert(t.Context(), "files", file(t, sc, "a", "p1", blobRef(3), nil)); err != nil {
			return err
		}
		if _, err := tx.RowUpsert(t.Context(), "files", file(t, sc, "b", "p2", nil, blobRef(1))); err != nil {
			return err
		}
		_, err := tx.RowDelete(t.Context(), "files", "c")
		return err
	})
	for n, want := range map[int][]storage.BlobRef{
		1: {{Table: "files", RowID: "b", Scopes: map[string]string{"project": "p2"}}},
		2: nil,
		3: {{Table: "files", RowID: "a", Scopes: map[string]string{"project": "p1"}}},
	} {
		if got := refsOf(t, s, p, blobID(n)); !reflect.DeepEqual(got, want) {
			t.Fatalf("references of %d = %+v, want %+v", n, got, want)
		}
	}
	st, err := s.BlobStats(t.Context())
	check(t, err)
	if st.References != 2 {
		t.Fatalf("BlobStats.References = %d, want 2", st.References)
	}
	// A rolled-back savepoint takes its references with it.
	writeTx(t, s, p, func(tx storage.Tx) error {
		sp, err := tx.Savepoint(t.Context())
		check(t, err)
		if _, err := tx.RowUpsert(t.Context(), "files", file(t, sc, "d", "p1", blobRef(2), nil)); err != nil {
			return err
		}
		return sp.Rollback(t.Context())
	})
	if got := refsOf(t, s, p, blobID(2)); got != nil {
		t.Fatalf("references of 2 after rollback = %+v", got)
	}
}

func testBlobReferenceNeedsBlob(t *testing.T, e *env) {
	s, sc := e.blobStore()
	p := partition(t, s).ID
	err := s.WriteTx(t.Context(), p, func(tx storage.Tx) error {
		_, err := tx.RowUpsert(t.Context(), "files", file(t, sc, "a", "p1", blobRef(7), nil))
		return err
	})
	var ce *storage.ConstraintError
	if !errors.As(err, &ce) && !errors.Is(err, storage.ErrTxAborted) {
		t.Fatalf("a reference to an absent blob: %v, want a constraint error", err)
	}
	if _, ok := getRow(t, s, p, "files", "a"); ok {
		t.Fatal("the row referencing an absent blob was written")
	}
}

func getRow(t *testing.T, s storage.Store, part, tbl, id string) (storage.Row, bool) {
	t.Helper()
	var (
		r  storage.Row
		ok bool
	)
	check(t, s.ReadTx(t.Context(), func(tx storage.ReadTx) (err error) {
		r, ok, err = tx.RowGet(t.Context(), part, tbl, id)
		return err
	}))
	return r, ok
}

func testBlobOrphans(t *testing.T, e *env) {
	s, sc := e.blobStore()
	p := partition(t, s).ID
	putBlob(t, s, blobRow(1, p, 100)) // old, referenced
	putBlob(t, s, blobRow(2, p, 100)) // old, unreferenced
	putBlob(t, s, blobRow(3, p, 500)) // new, unreferenced
	writeTx(t, s, p, func(tx storage.Tx) error {
		_, err := tx.RowUpsert(t.Context(), "files", file(t, sc, "a", "p1", blobRef(1), nil))
		return err
	})
	orphans, err := s.BlobOrphans(t.Context(), 400, 10)
	check(t, err)
	if len(orphans) != 1 || orphans[0] != blobRow(2, p, 100) {
		t.Fatalf("BlobOrphans(400) = %+v, want blob 2", orphans)
	}
	for _, c := range []struct {
		n    int
		want bool
	}{{1, false}, {3, false}, {2, true}, {2, false}} {
		got, err := s.BlobDelete(t.Context(), p, blobID(c.n), 400)
		check(t, err)
		if got != c.want {
			t.Fatalf("BlobDelete(%d) = %v, want %v", c.n, got, c.want)
		}
	}
	if _, ok, _ := s.BlobGet(t.Context(), p, blobID(1)); !ok {
		t.Fatal("the referenced blob was deleted")
	}
	// Once its last reference goes, an old blob is an orphan.
	writeTx(t, s, p, func(tx storage.Tx) error {
		_, err := tx.RowDelete(t.Context(), "files", "a")
		return err
	})
	orphans, err = s.BlobOrphans(t.Context(), 1000, 10)
	check(t, err)
	if len(orphans) != 2 || orphans[0].ID != blobID(1) || orphans[1].ID != blobID(3) {
		t.Fatalf("BlobOrphans(1000) = %+v, want blobs 1 and 3", orphans)
	}
}

func testBlobWipe(t *testing.T, e *env) {
	s, sc := e.blobStore()
	p := partition(t, s).ID
	putBlob(t, s, blobRow(1, p, 100))
	writeTx(t, s, p, func(tx storage.Tx) error {
		_, err := tx.RowUpsert(t.Context(), "files", file(t, sc, "a", "p1", blobRef(1), nil))
		return err
	})
	check(t, s.PartitionWipe(t.Context(), p))
	if got := refsOf(t, s, p, blobID(1)); got != nil {
		t.Fatalf("references after wipe = %+v", got)
	}
	orphans, err := s.BlobOrphans(t.Context(), 1000, 10)
	check(t, err)
	if len(orphans) != 1 {
		t.Fatalf("orphans after wipe = %+v, want the blob", orphans)
	}
}

func testBlobRefusals(t *testing.T, e *env) {
	s, _ := e.blobStore()
	p := partition(t, s).ID
	for _, b := range []storage.Blob{
		{Partition: p, ID: "sha256:xyz", Object: "o"},
		{Partition: p, ID: blobID(1), ByteLength: -1, Object: "o"},
		{Partition: p, ID: blobID(1)},
		{ID: blobID(1), Object: "o"},
	} {
		if _, _, err := s.BlobPut(t.Context(), b); err == nil {
			t.Fatalf("BlobPut(%+v) accepted", b)
		}
	}
	for _, limit := range []int{0, storage.MaxBlobListLimit + 1} {
		_, err := s.BlobReferences(t.Context(), storage.BlobRefParams{Partition: p, BlobID: blobID(1), Limit: limit})
		wantCode(t, err, "sync.storage.invalid_limit")
		_, err = s.BlobOrphans(t.Context(), 1, limit)
		wantCode(t, err, "sync.storage.invalid_limit")
	}
	st, err := s.BlobStats(t.Context())
	check(t, err)
	if st != (storage.BlobStats{}) {
		t.Fatalf("refused puts changed the index: %+v", st)
	}
}

// A sweep's delete racing a push that references the blob never removes
// it: the push holds the blob row from BlobHeld on, and a reference
// committed before the delete's check makes the store refuse it.
func testBlobSweepRace(t *testing.T, e *env) {
	s, sc := e.blobStore()
	p := partition(t, s).ID
	for n := 1; n <= 20; n++ {
		putBlob(t, s, blobRow(n, p, 100))
		done := make(chan error, 1)
		var deleted bool
		writeTx(t, s, p, func(tx storage.Tx) error {
			ok, err := tx.BlobHeld(t.Context(), blobID(n))
			if err != nil || !ok {
				t.Fatalf("BlobHeld = %v, %v", ok, err)
			}
			go func() {
				var err error
				deleted, err = s.BlobDelete(t.Context(), p, blobID(n), 1000)
				done <- err
			}()
			_, err = tx.RowUpsert(t.Context(), "files", file(t, sc, fmt.Sprintf("r%d", n), "p1", blobRef(n), nil))
			return err
		})
		check(t, <-done)
		if _, ok, _ := s.BlobGet(t.Context(), p, blobID(n)); deleted || !ok {
			t.Fatalf("round %d: the sweep deleted (%v) a blob a commit references; held afterwards: %v", n, deleted, ok)
		}
	}
}

// RowSeed writes the seeded rows' references like RowUpsert, so the
// blobs of seeded rows are downloadable; a seeded reference to a blob the
// partition does not hold fails the whole seed.
func testBlobSeed(t *testing.T, e *env) {
	s, sc := e.blobStore()
	ctx := t.Context()
	p := partition(t, s).ID
	putBlob(t, s, blobRow(1, p, 100))
	putBlob(t, s, blobRow(2, p, 100))
	const n = 5
	err := s.RowSeed(ctx, storage.SeedParams{Partition: p, Table: "files", Count: n, Row: func(i int, w *storage.RowWrite) error {
		var thumb any // rows 0, 2, 4 also reference blob 2; row 1 twice the same blob
		switch i % 2 {
		case 0:
			thumb = blobRef(2)
		default:
			thumb = blobRef(1)
		}
		main := any(blobRef(1))
		if i == 3 {
			main = nil
		}
		*w = file(t, sc, fmt.Sprintf("f%d", i), fmt.Sprintf("p%d", i%2), main, thumb)
		return nil
	}})
	check(t, err)
	want1, want2 := []storage.BlobRef{}, []storage.BlobRef{}
	for i := range n {
		r := storage.BlobRef{Table: "files", RowID: fmt.Sprintf("f%d", i), Scopes: map[string]string{"project": fmt.Sprintf("p%d", i%2)}}
		if i%2 == 1 || i != 3 {
			want1 = append(want1, r)
		}
		if i%2 == 0 {
			want2 = append(want2, r)
		}
	}
	if got := refsOf(t, s, p, blobID(1)); !reflect.DeepEqual(got, want1) {
		t.Fatalf("references of seeded blob 1 = %+v, want %+v", got, want1)
	}
	if got := refsOf(t, s, p, blobID(2)); !reflect.DeepEqual(got, want2) {
		t.Fatalf("references of seeded blob 2 = %+v, want %+v", got, want2)
	}
	// A referenced blob is no orphan.
	orphans, err := s.BlobOrphans(ctx, 1000, 10)
	check(t, err)
	if len(orphans) != 0 {
		t.Fatalf("seeded references left orphans %+v", orphans)
	}
	// A seed referencing a blob the partition does not hold seeds nothing.
	err = s.RowSeed(ctx, storage.SeedParams{Partition: p, Table: "files", Count: 2, Row: func(i int, w *storage.RowWrite) error {
		ref := blobRef(1)
		if i == 1 {
			ref = blobRef(9)
		}
		*w = file(t, sc, fmt.Sprintf("g%d", i), "p1", ref, nil)
		return nil
	}})
	var ce *storage.ConstraintError
	if !errors.As(err, &ce) && !errors.Is(err, storage.ErrTxAborted) {
		t.Fatalf("a seed referencing an absent blob: %v, want a constraint error", err)
	}
	if _, ok := getRow(t, s, p, "files", "g0"); ok {
		t.Fatal("a failed seed wrote a row")
	}
	if got := refsOf(t, s, p, blobID(1)); !reflect.DeepEqual(got, want1) {
		t.Fatalf("a failed seed changed the references: %+v", got)
	}
}

func testBlobObjectHeld(t *testing.T, e *env) {
	s, _ := e.blobStore()
	p := partition(t, s).ID
	b := putBlob(t, s, blobRow(1, p, 100))
	for obj, want := range map[string]bool{b.Object: true, "obj-unknown": false} {
		held, err := s.BlobObjectHeld(t.Context(), obj)
		if err != nil || held != want {
			t.Fatalf("BlobObjectHeld(%s) = %v, %v; want %v", obj, held, err, want)
		}
	}
	ok, err := s.BlobDelete(t.Context(), p, b.ID, 200)
	check(t, err)
	if held, err := s.BlobObjectHeld(t.Context(), b.Object); !ok || err != nil || held {
		t.Fatalf("after its row's delete (%v), BlobObjectHeld = %v, %v", ok, held, err)
	}
}
