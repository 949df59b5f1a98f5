package pgstore

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/storagetest"
)

// TestWriteGroup queues WriteTx calls behind a leader that holds the
// partition and checks that they share its transaction (one txid) and
// still behave each as a WriteTx of its own: a member whose fn fails or
// leaves the transaction aborted writes nothing and gets its error at
// once; every other member's row and commit are durable when its WriteTx
// returns, with dense commit seqs.
func TestWriteGroup(t *testing.T) {
	s, sc := roundTripStore(t, 4, nil, false)
	ctx := t.Context()
	const members = 9
	var (
		mu   sync.Mutex
		txid = map[int]int64{}
		seqs = map[int]int64{}
	)
	errBoom := errors.New("boom")
	push := func(i int) func(tx storage.Tx) error {
		return func(stx storage.Tx) error {
			x := stx.(*tx)
			var id int64
			if _, err := x.queryRow(ctx, "SELECT txid_current()", nil, &id); err != nil {
				return err
			}
			rw := roundTripRow(t, sc, fmt.Sprintf("r%d", i), "x")
			v, err := x.RowUpsert(ctx, "tasks", rw)
			if err != nil {
				return err
			}
			mu.Lock()
			txid[i] = id
			mu.Unlock()
			switch i % 3 {
			case 1:
				return errBoom
			case 2:
				// A database error nobody rolled back: the member ends
				// aborted.
				if _, err := x.exec(ctx, "SELECT 1/0"); err != nil {
					_ = x.fail("divide", "", err)
				}
				return nil
			}
			seq, err := x.CommitAppend(ctx, storage.CommitParams{ActorID: "a", ClientID: "c", ClientCommitID: fmt.Sprint(i), SchemaVersion: 1,
				Changes: []storage.Change{{Table: "tasks", RowID: rw.RowID, Op: storage.OpUpsert, RowVersion: v, Scopes: rw.Scopes, Row: rw.Payload}}})
			mu.Lock()
			seqs[i] = seq
			mu.Unlock()
			return err
		}
	}
	errs := runGroup(t, s, members, false, push)
	for i, err := range errs {
		var want error
		switch i % 3 {
		case 1:
			want = errBoom
		case 2:
			want = storage.ErrTxAborted
		}
		if !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Errorf("member %d: WriteTx = %v, want %v", i, err, want)
		}
		if txid[i] != txid[0] {
			t.Errorf("member %d ran in transaction %d, the leader in %d", i, txid[i], txid[0])
		}
	}
	// The members run in the order they queued: the seqs are dense in
	// some order.
	var got []int64
	for i := 0; i < members; i += 3 {
		got = append(got, seqs[i])
	}
	slices.Sort(got)
	for k, seq := range got {
		if seq != int64(k+1) {
			t.Errorf("appended seqs %v, want 1..%d", got, len(got))
			break
		}
	}
	err := s.ReadTx(ctx, func(rtx storage.ReadTx) error {
		for i := range members {
			_, ok, err := rtx.RowGet(ctx, "p", "tasks", fmt.Sprintf("r%d", i))
			if err != nil {
				return err
			}
			if ok != (i%3 == 0) {
				t.Errorf("row of member %d stored: %v", i, ok)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := s.CommitMaxSeq(ctx, "p"); err != nil || m != int64(len(got)) {
		t.Fatalf("CommitMaxSeq = %d, %v; want %d", m, err, len(got))
	}
}

// TestWriteGroupMemberSavepoint: a member's first Savepoint takes the
// member's own savepoint (no statement of its own), and rolling it back
// undoes the member's writes before it and nothing of the others', and
// the member goes on to write and commit; a released one keeps them.
func TestWriteGroupMemberSavepoint(t *testing.T) {
	s, sc := roundTripStore(t, 4, nil, false)
	ctx := t.Context()
	const members = 7
	var (
		mu      sync.Mutex
		aliased = map[int]bool{}
	)
	push := func(i int) func(tx storage.Tx) error {
		return func(stx storage.Tx) error {
			sp, err := stx.Savepoint(ctx)
			if err != nil {
				return err
			}
			mu.Lock()
			aliased[i] = sp.(*savepoint).member
			mu.Unlock()
			if _, err := stx.RowUpsert(ctx, "tasks", roundTripRow(t, sc, fmt.Sprintf("r%d", i), "x")); err != nil {
				return err
			}
			if i%2 == 1 {
				err = sp.Rollback(ctx)
			} else {
				err = sp.Release(ctx)
			}
			if err != nil {
				return err
			}
			_, err = stx.IdempotencyPut(ctx, storage.PushRecord{ClientID: "c", ClientCommitID: fmt.Sprint(i), Status: storage.PushRejected, Result: []byte("r"), CreatedAtMs: 1})
			return err
		}
	}
	for i, err := range runGroup(t, s, members, true, push) {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		if aliased[i] != (i > 0) {
			t.Errorf("member %d: savepoint aliased %v, want %v", i, aliased[i], i > 0)
		}
		_, ok, err := s.IdempotencyGet(ctx, "p", "c", fmt.Sprint(i))
		if err != nil || !ok {
			t.Errorf("member %d: record %v, %v", i, ok, err)
		}
	}
	err := s.ReadTx(ctx, func(rtx storage.ReadTx) error {
		for i := range members {
			_, ok, err := rtx.RowGet(ctx, "p", "tasks", fmt.Sprintf("r%d", i))
			if err != nil {
				return err
			}
			if ok != (i%2 == 0) {
				t.Errorf("member %d: row stored %v, want %v", i, ok, i%2 == 0)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// runGroup runs push(0) as the leader of partition "p"'s write group and
// holds the partition until push(1) … push(members-1) wait behind it, so
// they all join its transaction, then lets them run and returns each one's
// WriteTx error. The leader holds before its own fn when holdFirst, after
// it otherwise.
func runGroup(t *testing.T, s *Store, members int, holdFirst bool, push func(i int) func(storage.Tx) error) []error {
	t.Helper()
	ctx := t.Context()
	var held atomic.Bool
	release := make(chan struct{})
	errs := make([]error, members)
	var wg sync.WaitGroup
	wg.Go(func() {
		errs[0] = s.WriteTx(ctx, "p", func(tx storage.Tx) error {
			if !holdFirst {
				if err := push(0)(tx); err != nil {
					return err
				}
			}
			held.Store(true)
			<-release
			if holdFirst {
				return push(0)(tx)
			}
			return nil
		})
	})
	poll.Until(t, 10*time.Second, "the leader holds the partition", held.Load)
	for i := 1; i < members; i++ {
		wg.Go(func() { errs[i] = s.WriteTx(ctx, "p", push(i)) })
	}
	waitQueued(t, s, "p", members-1)
	close(release)
	wg.Wait()
	return errs
}

// waitQueued waits until n WriteTx calls wait in the partition's group.
func waitQueued(t *testing.T, s *Store, partition string, n int) {
	t.Helper()
	poll.Until(t, 10*time.Second, "every member queued", func() bool {
		s.groups.mu.Lock()
		defer s.groups.mu.Unlock()
		g := s.groups.m[partition]
		return g != nil && len(g.waiting) == n
	})
}

// TestWriteGroupDeferredUpsert: a member's upsert of a row it has read
// goes with its other writes (no round trip of its own) and returns the
// version the row then has; when such a deferred upsert fails (a CHECK
// constraint here), the member is rolled back and runs again, and this
// time RowUpsert itself returns the *ConstraintError, so the member can
// roll back to its savepoint and persist the rejection as a push does,
// while the other members' writes stay. A lone leader's deferred upsert
// that fails runs it again as well.
func TestWriteGroupDeferredUpsert(t *testing.T) {
	s, sc := roundTripStore(t, 4, nil, false)
	ctx := t.Context()
	if err := s.HookConstrain(ctx, "tasks", "title", storage.ConstraintCheck); err != nil {
		t.Fatal(err)
	}
	const members = 4 // the leader and three members; member 2 is refused
	for i := range members {
		if err := s.WriteTx(ctx, "p", func(tx storage.Tx) error {
			_, err := tx.RowUpsert(ctx, "tasks", roundTripRow(t, sc, fmt.Sprintf("r%d", i), "first"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu       sync.Mutex
		runs     = map[int]int{}
		versions = map[int]int64{}
		upsertEr = map[int]error{}
	)
	push := func(i int) func(tx storage.Tx) error {
		return func(stx storage.Tx) error {
			mu.Lock()
			runs[i]++
			mu.Unlock()
			key := fmt.Sprint("k", i)
			if _, ok, err := stx.IdempotencyGet(ctx, "c", key); err != nil || ok {
				return fmt.Errorf("re-check: %v %v", ok, err)
			}
			sp, err := stx.Savepoint(ctx)
			if err != nil {
				return err
			}
			id := fmt.Sprintf("r%d", i)
			if _, ok, err := stx.RowGet(ctx, "p", "tasks", id); err != nil || !ok {
				return fmt.Errorf("row get: %v %v", ok, err)
			}
			title := "second"
			if i == 2 {
				title = storagetest.CheckForbiddenValue
			}
			rw := roundTripRow(t, sc, id, title)
			v, err := stx.RowUpsert(ctx, "tasks", rw)
			mu.Lock()
			versions[i], upsertEr[i] = v, err
			mu.Unlock()
			status, seq := storage.PushApplied, int64(0)
			var ce *storage.ConstraintError
			switch {
			case errors.As(err, &ce):
				if err := sp.Rollback(ctx); err != nil {
					return err
				}
				status = storage.PushRejected
			case err != nil:
				return err
			default:
				if err := sp.Release(ctx); err != nil {
					return err
				}
				if seq, err = stx.CommitAppend(ctx, storage.CommitParams{ActorID: "a", ClientID: "c", ClientCommitID: key, SchemaVersion: 1,
					Changes: []storage.Change{{Table: "tasks", RowID: id, Op: storage.OpUpsert, RowVersion: v, Scopes: rw.Scopes, Row: rw.Payload}}}); err != nil {
					return err
				}
			}
			_, err = stx.IdempotencyPut(ctx, storage.PushRecord{ClientID: "c", ClientCommitID: key, ActorID: "a",
				Status: status, CommitSeq: seq, Result: []byte("r"), CreatedAtMs: 1})
			return err
		}
	}
	for i, err := range runGroup(t, s, members, false, push) {
		if err != nil {
			t.Errorf("member %d: WriteTx = %v", i, err)
		}
	}
	// Member 2's first run deferred its upsert, whose failure made it run
	// again; the others ran once.
	for i := range members {
		want := 1
		if i == 2 {
			want = 2
		}
		if runs[i] != want {
			t.Errorf("member %d ran %d times, want %d", i, runs[i], want)
		}
	}
	var ce *storage.ConstraintError
	if !errors.As(upsertEr[2], &ce) || ce.Kind != storage.ConstraintCheck {
		t.Errorf("member 2's upsert = %v, want a check *ConstraintError", upsertEr[2])
	}
	err := s.ReadTx(ctx, func(rtx storage.ReadTx) error {
		for i := range members {
			r, ok, err := rtx.RowGet(ctx, "p", "tasks", fmt.Sprintf("r%d", i))
			if err != nil || !ok {
				return fmt.Errorf("row %d: %v %v", i, ok, err)
			}
			want := int64(2)
			if i == 2 {
				want = 1
			} else if versions[i] != want {
				t.Errorf("member %d: RowUpsert returned version %d, the row has %d", i, versions[i], r.ServerVersion)
			}
			if r.ServerVersion != want {
				t.Errorf("row %d has version %d, want %d", i, r.ServerVersion, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A leader's deferred upsert that fails runs its fn again, too.
	leaderRuns := 0
	err = s.WriteTx(ctx, "p", func(tx storage.Tx) error {
		leaderRuns++
		if _, _, err := tx.RowGet(ctx, "p", "tasks", "r0"); err != nil {
			return err
		}
		_, err := tx.RowUpsert(ctx, "tasks", roundTripRow(t, sc, "r0", storagetest.CheckForbiddenValue))
		return err
	})
	if !errors.As(err, &ce) || ce.Kind != storage.ConstraintCheck || leaderRuns != 2 {
		t.Errorf("a lone leader's refused upsert: WriteTx = %v after %d runs, want a check *ConstraintError after 2", err, leaderRuns)
	}
	for i := range members {
		rec, ok, err := s.IdempotencyGet(ctx, "p", "c", fmt.Sprint("k", i))
		want := storage.PushApplied
		if i == 2 {
			want = storage.PushRejected
		}
		if err != nil || !ok || rec.Status != want {
			t.Errorf("push result %d = %+v, %v, %v; want status %d", i, rec, ok, err, want)
		}
	}
}
