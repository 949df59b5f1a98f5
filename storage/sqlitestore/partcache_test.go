package sqlitestore

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
)

// TestPartCacheSnapshotExact: a write transaction starts from the
// partition row under the lock, and a planned section answers from the
// partition cache only what its snapshot holds, or what the database held
// a moment before that differs in newer commits only. Pushes of this
// store and of another Store on the file (as another process) and prunes
// run while sections read; each section also reads the row itself in its
// snapshot, and the row the store answered with (cached or not) must be
// that row, or one with a lower max commitSeq and the same horizon and
// epoch, never lower than one the same reader was answered before. The
// cache must also have served some without a read.
func TestPartCacheSnapshotExact(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sync.db")
	sc, err := schema.Parse([]byte(crashSchema))
	if err != nil {
		t.Fatal(err)
	}
	open := func() *Store {
		s, err := Open(ctx, Config{Path: path}) // FULL: a COMMIT takes long enough to race
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		if err := s.EnsureSchema(ctx, sc); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s, twin := open(), open()
	const part = "p"
	if _, err := s.PartitionTouch(ctx, part, 1); err != nil {
		t.Fatal(err)
	}
	wp := storage.WindowParams{Partition: part, Table: "items", Scopes: map[string][]string{"owner": {"o1"}}, Limit: 1000}

	var (
		stop    atomic.Bool
		writers sync.WaitGroup
		n       atomic.Int64
	)
	push := func(w *Store, name string) {
		for i := 0; !stop.Load(); i++ {
			err := w.WriteTx(ctx, part, func(stx storage.Tx) error {
				// The row the transaction starts from (maybe the cache's,
				// lockedPartition) is the one under the lock.
				got := stx.Locked()
				direct, ok, err := readPartition(ctx, stx.(*tx).c, part)
				if err != nil || !ok {
					return fmt.Errorf("direct read: %v %v", ok, err)
				}
				if got != direct {
					return fmt.Errorf("write transaction starts from %+v, the database holds %+v", got, direct)
				}
				return crashCommit(ctx, t, sc, stx, fmt.Sprintf("%s-%d", name, i), 1)
			})
			if err != nil {
				t.Errorf("%s push: %v", name, err)
				return
			}
			n.Add(1)
			if i%5 == 4 {
				// Move the horizon up to the commit before the newest.
				p, err := w.PartitionGet(ctx, part)
				if err == nil {
					_, err = w.Prune(ctx, storage.PruneParams{Partition: part, LogEpoch: p.LogEpoch, ThroughSeq: p.MaxCommitSeq - 1, NowMs: 1 << 40, Literal: true})
				}
				if err != nil {
					t.Errorf("%s prune: %v", name, err)
					return
				}
			}
		}
	}
	writers.Go(func() { push(s, "a") })
	writers.Go(func() { push(s, "b") })
	writers.Go(func() { push(twin, "twin") })

	var readers sync.WaitGroup
	for r := range 3 {
		readers.Go(func() {
			// seen is the highest max commitSeq this reader was answered:
			// one client's cursor, which must never be past a later answer.
			seen := int64(0)
			// At least 500 sections, and on until the writers made 300
			// pushes (prunes among them).
			for i := 0; i < 500 || n.Load() < 300; i++ {
				var got, direct storage.Partition
				var win storage.Window
				wp := wp
				wp.AfterSeq = seen // the client's cursor
				err := s.ReadTx(ctx, func(rtx storage.ReadTx) error {
					rtx.(storage.WindowPlanner).PlanWindow(wp)
					var err error
					if got, err = rtx.Partition(ctx, part); err != nil {
						return err
					}
					if win, err = rtx.CommitWindow(ctx, wp); err != nil {
						return err
					}
					// The row itself, in the snapshot, read so that the store
					// takes it for the window's statements (checkCached).
					t := rtx.(*tx)
					ran := t.c.ran
					var ok bool
					if direct, ok, err = readPartition(ctx, t.c, part); err != nil || !ok {
						return fmt.Errorf("direct read: %v %v", ok, err)
					}
					t.windowRan += t.c.ran - ran
					return nil
				})
				if err != nil {
					t.Errorf("reader %d: %v", r, err)
					return
				}
				// The answer is the snapshot's, or one of a moment before it
				// that differs in newer commits only.
				older := got
				older.MaxCommitSeq = direct.MaxCommitSeq
				if older != direct || got.MaxCommitSeq > direct.MaxCommitSeq || win.MaxSeq != got.MaxCommitSeq || win.HorizonSeq != direct.HorizonSeq {
					t.Errorf("reader %d, section %d: answered %+v (window to %d, horizon %d), its snapshot holds %+v", r, i, got, win.MaxSeq, win.HorizonSeq, direct)
					return
				}
				if got.MaxCommitSeq < seen {
					t.Errorf("reader %d, section %d: answered max commitSeq %d after %d", r, i, got.MaxCommitSeq, seen)
					return
				}
				seen = got.MaxCommitSeq
			}
		})
	}
	readers.Wait()
	stop.Store(true)
	writers.Wait()
	st := s.partCacheStats()
	t.Logf("%d pushes; partition cache: %+v", n.Load(), st)
	if st.Hits == 0 {
		t.Fatal("no section was served from the partition cache")
	}
}
