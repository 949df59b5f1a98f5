package storagetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

var txTests = []test{
	{"Unregistered", testTxUnregistered},
	{"ConcurrentPushesSerialize", testTxSerialize},
	{"ConcurrentPushesRowsAhead", testTxRowsAhead},
	{"LockExcludesWhileHeld", testTxLockHeld},
	{"OtherPartitionsByCapability", testTxOtherPartition},
	{"LockWaitHonoursContext", testTxLockWaitCancel},
	{"ErrorRollsBack", testTxErrorRollsBack},
	{"ReadTxSnapshot", testTxSnapshot},
	{"SavepointRollback", testTxSavepoint},
	{"AbortedUntilSavepointRollback", testTxAborted},
}

func testTxUnregistered(t *testing.T, e *env) {
	s, _ := e.store()
	called := false
	err := s.WriteTx(t.Context(), "nobody", func(storage.Tx) error { called = true; return nil })
	wantCode(t, err, ssp2.CodeStoragePartitionUnregistered)
	if called {
		t.Fatal("fn ran for an unregistered partition")
	}
}

// push is what the push path does under the lock for one single-change
// commit: re-check idempotency, read the row, upsert it, append the
// commit, persist the result. It returns the version read and written.
func push(ctx context.Context, s storage.Store, partition string, rw storage.RowWrite, clientCommitID string) (before, after, seq int64, err error) {
	err = s.WriteTx(ctx, partition, func(tx storage.Tx) error {
		if _, ok, err := tx.IdempotencyGet(ctx, "client", clientCommitID); err != nil || ok {
			return fmt.Errorf("locked re-check: ok %v err %v", ok, err)
		}
		if r, ok, err := tx.RowGet(ctx, partition, "tasks", rw.RowID); err != nil {
			return err
		} else if ok {
			before = r.ServerVersion
		}
		v, err := tx.RowUpsert(ctx, "tasks", rw)
		if err != nil {
			return err
		}
		after = v
		seq, err = tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: 1, ActorID: "actor", ClientID: "client",
			ClientCommitID: clientCommitID, SchemaVersion: 1, Changes: []storage.Change{change(rw, "tasks", v)}})
		if err != nil {
			return err
		}
		_, err = tx.IdempotencyPut(ctx, storage.PushRecord{ClientID: "client", ClientCommitID: clientCommitID,
			Status: storage.PushApplied, CommitSeq: seq, Result: []byte(clientCommitID), CreatedAtMs: 1})
		return err
	})
	return before, after, seq, err
}

func testTxSerialize(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	rw := task(t, sc, "t1", "p1", 1, "x")
	const n = 8
	var (
		wg                  sync.WaitGroup
		before, after, seqs [n]int64
		errs                [n]error
		start               = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			<-start
			before[i], after[i], seqs[i], errs[i] = push(t.Context(), s, p.ID, rw, fmt.Sprint("cc", i))
		})
	}
	close(start)
	wg.Wait()
	seenBefore := map[int64]bool{}
	seenSeq := map[int64]bool{}
	for i := range n {
		check(t, errs[i])
		if after[i] != before[i]+1 {
			t.Fatalf("push %d read version %d and wrote %d: the read-modify-write interleaved", i, before[i], after[i])
		}
		if seenBefore[before[i]] {
			t.Fatalf("two pushes read version %d: they were not serialized", before[i])
		}
		seenBefore[before[i]] = true
		seenSeq[seqs[i]] = true
	}
	for seq := int64(1); seq <= n; seq++ {
		if !seenSeq[seq] {
			t.Fatalf("commit seqs %v are not dense 1..%d", seqs, n)
		}
	}
	check(t, s.ReadTx(t.Context(), func(tx storage.ReadTx) error {
		r, ok, err := tx.RowGet(t.Context(), p.ID, "tasks", "t1")
		if err != nil || !ok || r.ServerVersion != n {
			t.Fatalf("final row = %+v, %v, %v; want version %d", r, ok, err, n)
		}
		return nil
	}))
	if m, err := s.CommitMaxSeq(t.Context(), p.ID); err != nil || m != n {
		t.Fatalf("CommitMaxSeq = %d, %v; want %d", m, err, n)
	}
}

// testTxRowsAhead: concurrent pushes that name their rows ahead
// (storage.RowPrefetcher) read what serialized pushes read: every read
// sees the writes of the pushes before it and the transaction's own, and
// a write undone by a savepoint rollback is undone for the reads after it.
// Each push also flips a second row between absent and present. Half of
// them also read the rows ahead inside the transaction
// (storage.TxRowPrefetcher), after the rollback and before the writes.
func testTxRowsAhead(t *testing.T, e *env) {
	s, sc := e.store()
	rp, ok := s.(storage.RowPrefetcher)
	if !ok {
		t.Skip("the store reads no rows ahead")
	}
	p := partition(t, s)
	ctx := t.Context()
	rw, flip := task(t, sc, "t1", "p1", 1, "x"), task(t, sc, "t2", "p1", 1, "y")
	refs := []storage.RowRef{{Table: "tasks", RowID: "t1"}, {Table: "tasks", RowID: "t2"}, {Table: "tasks", RowID: "absent"}}
	const n = 12
	var (
		wg                  sync.WaitGroup
		before, after, seqs [n]int64
		flipped             [n]bool // t2 existed when the push read it
		errs                [n]error
		start               = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = rp.WriteTxRows(ctx, p.ID, refs, func(tx storage.Tx) error {
				if i%3 == 0 {
					sp, err := tx.Savepoint(ctx)
					if err != nil {
						return err
					}
					if _, err := tx.RowUpsert(ctx, "tasks", rw); err != nil {
						return err
					}
					if err := sp.Rollback(ctx); err != nil {
						return err
					}
				}
				if tp, ok := tx.(storage.TxRowPrefetcher); ok && i%2 == 0 {
					// Read ahead inside the transaction too (a command's
					// rows): what follows reads the same.
					if err := tp.PrefetchRows(ctx, refs); err != nil {
						return err
					}
				}
				var v int64
				if i%3 == 1 {
					// Written before it is read: the read sees the write.
					var err error
					if v, err = tx.RowUpsert(ctx, "tasks", rw); err != nil {
						return err
					}
					before[i] = v - 1
				} else {
					if r, ok, err := tx.RowGet(ctx, p.ID, "tasks", "t1"); err != nil {
						return err
					} else if ok {
						before[i] = r.ServerVersion
					}
					var err error
					if v, err = tx.RowUpsert(ctx, "tasks", rw); err != nil {
						return err
					}
				}
				after[i] = v
				if r, ok, err := tx.RowGet(ctx, p.ID, "tasks", "t1"); err != nil || !ok || r.ServerVersion != v {
					return fmt.Errorf("own write read back as %+v, %v, %v; want version %d", r, ok, err, v)
				}
				if _, ok, err := tx.RowGet(ctx, p.ID, "tasks", "absent"); err != nil || ok {
					return fmt.Errorf("absent row: %v, %v", ok, err)
				}
				_, exists, err := tx.RowGet(ctx, p.ID, "tasks", "t2")
				if err != nil {
					return err
				}
				flipped[i] = exists
				changes := []storage.Change{change(rw, "tasks", v)}
				if exists {
					if _, err := tx.RowDelete(ctx, "tasks", "t2"); err != nil {
						return err
					}
					changes = append(changes, storage.Change{Table: "tasks", RowID: "t2", Op: storage.OpDelete, Scopes: flip.Scopes})
				} else {
					fv, err := tx.RowUpsert(ctx, "tasks", flip)
					if err != nil {
						return err
					}
					changes = append(changes, change(flip, "tasks", fv))
				}
				key := fmt.Sprint("ahead", i)
				seqs[i], err = tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: 1, ActorID: "actor", ClientID: "client",
					ClientCommitID: key, SchemaVersion: 1, Changes: changes})
				return err
			})
		})
	}
	close(start)
	wg.Wait()
	seen := map[int64]bool{}
	for i := range n {
		check(t, errs[i])
		if after[i] != before[i]+1 || seen[before[i]] {
			t.Fatalf("push %d read version %d and wrote %d (versions read: %v)", i, before[i], after[i], before)
		}
		seen[before[i]] = true
		// The pushes flip t2 in commit order: the k-th found it present
		// when k is even.
		if want := seqs[i]%2 == 0; flipped[i] != want {
			t.Fatalf("push %d (commit %d) read t2 present = %v, want %v", i, seqs[i], flipped[i], want)
		}
	}
}

// holdWriteTx starts a WriteTx on partition that runs before (nil:
// nothing), then holds the transaction, and with it the partition's lock,
// until release is called, and then runs after (nil: nothing). It returns
// once the lock is held; release returns the WriteTx's error.
func holdWriteTx(t *testing.T, s storage.Store, partition string, before, after func(storage.Tx) error) (release func() error) {
	t.Helper()
	inside, proceed := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.WriteTx(t.Context(), partition, func(tx storage.Tx) error {
			if before != nil {
				if err := before(tx); err != nil {
					return err
				}
			}
			close(inside)
			<-proceed
			if after != nil {
				return after(tx)
			}
			return nil
		})
	}()
	select {
	case <-inside:
	case err := <-done:
		t.Fatalf("the holding WriteTx ended before it held the lock: %v", err)
	}
	return func() error {
		close(proceed)
		return <-done
	}
}

// testTxLockHeld holds one partition's lock and checks that a second
// WriteTx on it does not get in before the first commits.
func testTxLockHeld(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	release := holdWriteTx(t, s, p.ID, func(tx storage.Tx) error {
		if _, err := tx.RowUpsert(ctx, "tasks", task(t, sc, "t1", "p1", 1, "first")); err != nil {
			return err
		}
		// Rolling back a savepoint keeps the lock.
		sp, err := tx.Savepoint(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.RowUpsert(ctx, "tasks", task(t, sc, "t2", "p1", 1, "undone")); err != nil {
			return err
		}
		return sp.Rollback(ctx)
	}, nil)
	secondIn := make(chan int64, 1)
	secondDone := make(chan error, 1)
	go func() {
		secondDone <- s.WriteTx(ctx, p.ID, func(tx storage.Tx) error {
			r, _, err := tx.RowGet(ctx, p.ID, "tasks", "t1")
			secondIn <- r.ServerVersion
			return err
		})
	}()
	// The second transaction must not run while the first holds the lock.
	select {
	case v := <-secondIn:
		t.Fatalf("a second WriteTx ran while the lock was held (read version %d)", v)
	case <-time.After(200 * time.Millisecond):
	}
	check(t, release())
	if v := <-secondIn; v != 1 {
		t.Fatalf("second WriteTx read version %d, want 1 (the first's committed write)", v)
	}
	check(t, <-secondDone)
}

// testTxOtherPartition: with ConcurrentPartitionWriters, holding one
// partition's lock does not block another partition's WriteTx.
func testTxOtherPartition(t *testing.T, e *env) {
	s, _ := e.store()
	if !s.Capabilities().ConcurrentPartitionWriters {
		t.Skip("store serializes every partition behind one writer")
	}
	p, q := partition(t, s), partition(t, s)
	ctx := t.Context()
	release := holdWriteTx(t, s, p.ID, nil, nil)
	otherDone := make(chan error, 1)
	go func() { otherDone <- s.WriteTx(ctx, q.ID, func(tx storage.Tx) error { return nil }) }()
	select {
	case err := <-otherDone:
		check(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a WriteTx on another partition waited for the held lock")
	}
	check(t, release())
}

// testTxLockWaitCancel: a WriteTx waiting for a held lock gives up when
// its context ends, without running fn; the holder is unaffected.
func testTxLockWaitCancel(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	release := holdWriteTx(t, s, p.ID, nil, func(tx storage.Tx) error {
		_, err := tx.RowUpsert(ctx, "tasks", task(t, sc, "t1", "p1", 1, nil))
		return err
	})
	waitCtx, cancel := context.WithCancel(ctx)
	secondDone := make(chan error, 1)
	ran := false
	go func() {
		secondDone <- s.WriteTx(waitCtx, p.ID, func(tx storage.Tx) error { ran = true; return nil })
	}()
	cancel()
	if err := <-secondDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("WriteTx with a cancelled context = %v, want context.Canceled", err)
	}
	if ran {
		t.Fatal("fn ran although the context ended while waiting for the lock")
	}
	check(t, release())
}

func testTxErrorRollsBack(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	boom := errors.New("boom")
	err := s.WriteTx(ctx, p.ID, func(tx storage.Tx) error {
		if _, err := tx.RowUpsert(ctx, "tasks", task(t, sc, "t1", "p1", 1, nil)); err != nil {
			return err
		}
		if _, err := tx.CommitAppend(ctx, storage.CommitParams{Changes: []storage.Change{change(task(t, sc, "t1", "p1", 1, nil), "tasks", 1)}}); err != nil {
			return err
		}
		return boom
	})
	if err != boom {
		t.Fatalf("WriteTx = %v, want fn's error unchanged", err)
	}
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
		if _, ok, err := tx.RowGet(ctx, p.ID, "tasks", "t1"); err != nil || ok {
			t.Fatalf("row after rollback: ok %v err %v", ok, err)
		}
		return nil
	}))
	if m, err := s.CommitMaxSeq(ctx, p.ID); err != nil || m != 0 {
		t.Fatalf("CommitMaxSeq after rollback = %d, %v", m, err)
	}
}

func testTxSnapshot(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
		before, err := tx.Partition(ctx, p.ID)
		if err != nil {
			return err
		}
		// A commit lands while the snapshot is open.
		if _, _, _, err := push(ctx, s, p.ID, task(t, sc, "t1", "p1", 1, nil), "c1"); err != nil {
			return err
		}
		after, err := tx.Partition(ctx, p.ID)
		if err != nil {
			return err
		}
		if after.MaxCommitSeq != before.MaxCommitSeq {
			t.Fatalf("snapshot saw max seq move from %d to %d", before.MaxCommitSeq, after.MaxCommitSeq)
		}
		if _, ok, err := tx.RowGet(ctx, p.ID, "tasks", "t1"); err != nil || ok {
			t.Fatalf("snapshot sees a row committed after it began: ok %v err %v", ok, err)
		}
		w, err := tx.CommitWindow(ctx, storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1"}}, Limit: 10})
		if err != nil {
			return err
		}
		if w.MaxSeq != 0 || len(w.Commits) != 0 || !w.Complete {
			t.Fatalf("window in the snapshot = %+v, want empty at max seq 0", w)
		}
		return nil
	}))
	err := s.ReadTx(ctx, func(tx storage.ReadTx) error {
		_, err := tx.Partition(ctx, "nobody")
		return err
	})
	wantCode(t, err, ssp2.CodeStoragePartitionUnregistered)
}

func testTxSavepoint(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	a := task(t, sc, "a", "p1", 1, nil)
	b := task(t, sc, "b", "p1", 1, nil)
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		if _, err := tx.RowUpsert(ctx, "tasks", a); err != nil {
			return err
		}
		sp, err := tx.Savepoint(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.RowUpsert(ctx, "tasks", b); err != nil {
			return err
		}
		if seq, err := tx.CommitAppend(ctx, storage.CommitParams{Changes: []storage.Change{change(b, "tasks", 1)}}); err != nil || seq != 1 {
			return fmt.Errorf("append = %d, %v", seq, err)
		}
		inner, err := tx.Savepoint(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.RowUpsert(ctx, "tasks", a); err != nil {
			return err
		}
		check(t, inner.Release(ctx))
		check(t, sp.Rollback(ctx))
		if err := sp.Rollback(ctx); err == nil {
			t.Fatal("a spent savepoint rolled back again")
		}
		if _, ok, err := tx.RowGet(ctx, p.ID, "tasks", "b"); err != nil || ok {
			t.Fatalf("b after savepoint rollback: ok %v err %v", ok, err)
		}
		if r, ok, err := tx.RowGet(ctx, p.ID, "tasks", "a"); err != nil || !ok || r.ServerVersion != 1 {
			t.Fatalf("a after savepoint rollback = %+v %v %v, want version 1", r, ok, err)
		}
		// The rolled-back commit's seq is reused.
		seq, err := tx.CommitAppend(ctx, storage.CommitParams{Changes: []storage.Change{change(a, "tasks", 1)}})
		if err != nil || seq != 1 {
			return fmt.Errorf("append after rollback = %d, %v; want 1", seq, err)
		}
		keep, err := tx.Savepoint(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.RowUpsert(ctx, "tasks", b); err != nil {
			return err
		}
		return keep.Release(ctx)
	})
	commits, err := s.CommitRange(ctx, p.ID, 0, 10)
	check(t, err)
	if len(commits) != 1 || len(commits[0].Changes) != 1 || commits[0].Changes[0].RowID != "a" {
		t.Fatalf("commits = %+v, want one commit changing a", commits)
	}
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
		if _, ok, err := tx.RowGet(ctx, p.ID, "tasks", "b"); err != nil || !ok {
			t.Fatalf("b written after the released savepoint: ok %v err %v", ok, err)
		}
		return nil
	}))
}

// testTxAborted provokes a constraint violation inside a WriteTx: the
// transaction refuses further work until a savepoint taken before the
// failure is rolled back, and a nil return after an unhandled failure
// rolls back with ErrTxAborted.
func testTxAborted(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	check(t, hooks(t, s).HookConstrain(ctx, "tasks", "title", storage.ConstraintNotNull))
	ok := task(t, sc, "ok", "p1", 1, "x")
	bad := task(t, sc, "bad", "p1", 1, nil)
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		sp, err := tx.Savepoint(ctx)
		if err != nil {
			return err
		}
		_, err = tx.RowUpsert(ctx, "tasks", bad)
		var ce *storage.ConstraintError
		if !errors.As(err, &ce) {
			t.Fatalf("upsert of a NULL title = %v, want a constraint error", err)
		}
		if _, err := tx.RowUpsert(ctx, "tasks", ok); !errors.Is(err, storage.ErrTxAborted) {
			t.Fatalf("call after the failure = %v, want ErrTxAborted", err)
		}
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
		_, err = tx.RowUpsert(ctx, "tasks", ok)
		return err
	})
	err := s.WriteTx(ctx, p.ID, func(tx storage.Tx) error {
		if _, err := tx.RowUpsert(ctx, "tasks", task(t, sc, "lost", "p1", 1, "y")); err != nil {
			return err
		}
		_, _ = tx.RowUpsert(ctx, "tasks", bad)
		return nil
	})
	if !errors.Is(err, storage.ErrTxAborted) {
		t.Fatalf("WriteTx returning nil after an unhandled failure = %v, want ErrTxAborted", err)
	}
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
		if _, found, err := tx.RowGet(ctx, p.ID, "tasks", "ok"); err != nil || !found {
			t.Fatalf("row written after the savepoint rollback: found %v err %v", found, err)
		}
		if _, found, err := tx.RowGet(ctx, p.ID, "tasks", "lost"); err != nil || found {
			t.Fatalf("row of the aborted transaction: found %v err %v", found, err)
		}
		return nil
	}))
}
