package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

func TestRowValidator(t *testing.T) {
	var seen []RowValidation
	h := newHarness(t, func(c *Config) {
		c.Validators = map[string]RowValidator{"tasks": func(_ context.Context, v RowValidation) error {
			seen = append(seen, v)
			if v.Row != nil && v.Row["title"] == "forbidden word" {
				r := Reject("app.title_rejected", "title not allowed")
				r.Details = &RejectionDetails{FieldPaths: []string{"title"}, Reason: "blocked_word"}
				return r
			}
			if v.Row != nil && v.Row["title"] == "boom" {
				return errors.New("database of words unavailable")
			}
			if v.Row != nil && v.Row["title"] == "panic" {
				panic("validator bug")
			}
			return nil
		}}
	})
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	m := h.sync(alice, 2, hdr("c", ep), commit("ok", upsert("t1", h.row("t1", "p1", "fine"))))
	if r := frames[*ssp2.PushResult](m)[0]; r.Status != ssp2.PushApplied {
		t.Fatalf("accepted = %+v", r)
	}
	if len(seen) != 1 || seen[0].Stored != nil || seen[0].Row["id"] != "t1" || seen[0].ActorID != "alice" || seen[0].Partition != "p" {
		t.Fatalf("validator saw %+v", seen)
	}

	m = h.sync(alice, 2, hdr("c", ep), commit("bad", upsert("t1", h.row("t1", "p1", "forbidden word"))))
	r := frames[*ssp2.PushResult](m)[0]
	if r.Status != ssp2.PushRejected || r.Results[0].Code != "app.title_rejected" || r.Results[0].Message != "title not allowed" {
		t.Fatalf("host rejection = %+v", r)
	}
	if seen[len(seen)-1].Stored["title"] != "fine" {
		t.Fatalf("validator did not see the stored row: %+v", seen[len(seen)-1])
	}
	d := frames[*ssp2.PushResultDetails](m)
	if len(d) != 1 || d[0].Entries[0].OpIndex != 0 {
		t.Fatalf("details = %+v", d)
	}
	var details map[string]any
	if err := json.Unmarshal(d[0].Entries[0].DetailsJSON, &details); err != nil || details["reason"] != "blocked_word" {
		t.Fatalf("details json = %s", d[0].Entries[0].DetailsJSON)
	}
	// The replay carries the same details.
	m = h.sync(alice, 2, hdr("c", ep), commit("bad", upsert("t1", h.row("t1", "p1", "forbidden word"))))
	if d := frames[*ssp2.PushResultDetails](m); len(d) != 1 {
		t.Fatal("replayed rejection lost its details")
	}
	for _, title := range []string{"boom", "panic"} {
		m = h.sync(alice, 2, hdr("c", ep), commit("k-"+title, upsert("t1", h.row("t1", "p1", title))))
		r := frames[*ssp2.PushResult](m)[0]
		if r.Results[0].Code != string(ssp2.CodeConstraintViolation) || r.Results[0].Message != rowValidatorFailed {
			t.Fatalf("%s: %+v", title, r)
		}
	}
	// Deleting an absent row runs no validator; deleting a present one sees it.
	n := len(seen)
	h.sync(alice, 2, hdr("c", ep), commit("d1", del("absent")))
	if len(seen) != n {
		t.Fatal("validator ran for an absent-row delete")
	}
	h.sync(alice, 2, hdr("c", ep), commit("d2", del("t1")))
	if v := seen[len(seen)-1]; v.Op != ssp2.OpDelete || v.Row != nil || v.Stored["title"] != "fine" {
		t.Fatalf("delete validation = %+v", v)
	}
}

func TestReservedHostCodes(t *testing.T) {
	for _, code := range []string{"sync.nope", "blob.x", "operation.y", "presence.z", "client.w", ""} {
		if ValidateHostCode(code) == nil {
			t.Errorf("%q accepted", code)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Reject with a reserved code did not panic")
		}
	}()
	Reject("sync.forbidden", "no")
}

func TestCommitValidator(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		// A commit that writes a row titled "needs-sibling" must also write
		// "<id>-sib" — the candidate state sees siblings in any order.
		c.CommitValidator = func(ctx context.Context, v CommitValidation) error {
			for _, op := range v.Operations {
				if op.Row == nil || op.Row["title"] != "needs-sibling" {
					continue
				}
				_, _, ok, err := v.Candidate.GetRow(ctx, "tasks", op.RowID+"-sib")
				if err != nil {
					return err
				}
				if !ok {
					r := Reject("app.sibling_missing", "sibling required")
					r.OpIndex = op.OpIndex
					return r
				}
			}
			rows, err := v.Candidate.ScanRows(ctx, "tasks", map[string][]string{"project_id": {"p1"}}, "", 10)
			if err != nil {
				return err
			}
			if len(rows) > 3 {
				return errors.New("too many rows for this test")
			}
			return nil
		}
	})
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	m := h.sync(alice, 2, hdr("c", ep), commit("k1", upsert("x", h.row("x", "p1", "plain")), upsert("a", h.row("a", "p1", "needs-sibling"))))
	r := frames[*ssp2.PushResult](m)[0]
	if r.Status != ssp2.PushRejected || r.Results[0].OpIndex != 1 || r.Results[0].Code != "app.sibling_missing" {
		t.Fatalf("missing sibling = %+v", r)
	}
	m = h.sync(alice, 2, hdr("c", ep), commit("k2", upsert("a", h.row("a", "p1", "needs-sibling")), upsert("a-sib", h.row("a-sib", "p1", "sib"))))
	if r := frames[*ssp2.PushResult](m)[0]; r.Status != ssp2.PushApplied {
		t.Fatalf("with sibling = %+v", r)
	}
	m = h.sync(alice, 2, hdr("c", ep), commit("k3", upsert("b", h.row("b", "p1", "x")), upsert("c", h.row("c", "p1", "y"))))
	if r := frames[*ssp2.PushResult](m)[0]; r.Results[0].Code != string(ssp2.CodeConstraintViolation) || r.Results[0].Message != commitValidatorFailed {
		t.Fatalf("unexpected validator error = %+v", r)
	}
}

func TestConstraintViolationIsPersisted(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sync.db")
	h := newHarnessAt(t, path)
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	// A unique index the schema does not know about: the database refuses
	// the second title, and the engine reports it as an op-level
	// constraint violation.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE UNIQUE INDEX tasks_title ON tasks(title)`); err != nil {
		t.Fatal(err)
	}
	h.sync(alice, 2, hdr("c", ep), commit("k1", upsert("t1", h.row("t1", "p1", "same"))))
	m := h.sync(alice, 2, hdr("c", ep), commit("k2", upsert("t9", h.row("t9", "p1", "new")), upsert("t2", h.row("t2", "p1", "same"))))
	r := frames[*ssp2.PushResult](m)[0]
	if r.Status != ssp2.PushRejected || r.Results[0].OpIndex != 1 || r.Results[0].Code != string(ssp2.CodeConstraintViolation) || r.Results[0].Message != "constraint violation" {
		t.Fatalf("constraint = %+v", r)
	}
	// Persisted and replayed, and the sibling insert rolled back.
	m = h.sync(alice, 2, hdr("c", ep), commit("k2", upsert("t2", h.row("t2", "p1", "other"))))
	if r := frames[*ssp2.PushResult](m)[0]; r.Results[0].Code != string(ssp2.CodeConstraintViolation) {
		t.Fatalf("replay = %+v", r)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM tasks WHERE _sync_row_id = 't9'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("sibling row count = %d, %v", n, err)
	}
}

func TestIdempotencyCacheMiss(t *testing.T) {
	h := newHarness(t, nil)
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	err := h.store.WriteTx(context.Background(), "p", func(tx storage.Tx) error {
		_, err := tx.IdempotencyPut(context.Background(), storage.PushRecord{ClientID: "c", ClientCommitID: "corrupt", Status: storage.PushApplied, CommitSeq: 1, Result: []byte("not a result")})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // not persisted: the answer repeats
		m := h.sync(alice, 2, hdr("c", ep), commit("corrupt", upsert("t1", h.row("t1", "p1", "x"))))
		r := frames[*ssp2.PushResult](m)[0]
		if r.Status != ssp2.PushRejected || r.CommitSeq != nil || len(r.Results) != 1 || r.Results[0].Code != string(ssp2.CodeIdempotencyCacheMiss) || !r.Results[0].Retryable {
			t.Fatalf("cache miss = %+v", r)
		}
	}
}

func TestConcurrentDeliveriesApplyOnce(t *testing.T) {
	h := newHarness(t, nil)
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	var wg sync.WaitGroup
	results := make([]*ssp2.PushResult, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := h.try(alice, 2, hdr("c", ep), commit("same", upsert("t1", h.row("t1", "p1", "once"))))
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = frames[*ssp2.PushResult](m)[0]
		}()
	}
	wg.Wait()
	applied := 0
	for _, r := range results {
		if r == nil {
			t.FailNow()
		}
		if r.Status == ssp2.PushApplied {
			applied++
		} else if r.Status != ssp2.PushCached || *r.CommitSeq != 1 {
			t.Fatalf("duplicate delivery = %+v", r)
		}
	}
	if applied != 1 {
		t.Fatalf("%d deliveries applied, want exactly 1", applied)
	}
	if seq, _ := h.store.CommitMaxSeq(context.Background(), "p"); seq != 1 {
		t.Fatalf("max seq = %d, want 1", seq)
	}
}

// newHarnessAt is newHarness on a given SQLite path.
func newHarnessAt(t *testing.T, path string) *harness {
	t.Helper()
	h := newHarness(t, nil)
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.EnsureSchema(ctx, h.schema); err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Schema: h.schema, Store: st, Clock: clock.NewManual(time.UnixMilli(h.now))})
	if err != nil {
		t.Fatal(err)
	}
	h.store, h.e = st, e
	return h
}

// uniqueTitleSchema is taskSchema with a declared unique index on title.
const uniqueTitleSchema = `{"version":1,"tables":[{"name":"tasks","columns":[
	{"name":"id","type":"string"},
	{"name":"project_id","type":"string"},
	{"name":"title","type":"string","nullable":true},
	{"name":"n","type":"integer","nullable":true}],
	"primaryKey":"id","scopes":["project:{project_id}"],
	"indexes":[{"name":"tasks_title","columns":["title"],"unique":true}]}]}`

// TestDeclaredUniqueViolationIsPersisted: on both stores, a commit whose
// second upsert breaks a declared unique index is rejected at that op and
// persisted, and its first upsert is rolled back; on PostgreSQL both
// upserts are of rows the push has just read, whose writes the store
// defers to one pipeline, so the violation reaches the op only because
// the store runs the push again unpipelined.
func TestDeclaredUniqueViolationIsPersisted(t *testing.T) {
	forStores(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		h := newHarnessOn(t, open(t), uniqueTitleSchema, nil)
		alice := id("alice", "p1")
		ep := h.epoch(alice)
		h.sync(alice, 2, hdr("c", ep), commit("k1", upsert("t1", h.row("t1", "p1", "same"))))
		m := h.sync(alice, 2, hdr("c", ep), commit("k2", upsert("t9", h.row("t9", "p1", "new")), upsert("t2", h.row("t2", "p1", "same"))))
		r := frames[*ssp2.PushResult](m)[0]
		if r.Status != ssp2.PushRejected || len(r.Results) == 0 || r.Results[0].OpIndex != 1 || r.Results[0].Code != string(ssp2.CodeConstraintViolation) {
			t.Fatalf("constraint = %+v", r)
		}
		m = h.sync(alice, 2, hdr("c", ep), commit("k2", upsert("t2", h.row("t2", "p1", "other"))))
		if r := frames[*ssp2.PushResult](m)[0]; len(r.Results) == 0 || r.Results[0].Code != string(ssp2.CodeConstraintViolation) {
			t.Fatalf("replay = %+v", r)
		}
		err := h.store.ReadTx(context.Background(), func(tx storage.ReadTx) error {
			if _, ok, err := tx.RowGet(context.Background(), "p", "tasks", "t9"); err != nil || ok {
				return fmt.Errorf("sibling row t9 stored: %v %v", ok, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
