package storagetest

import (
	"fmt"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

var pruneTests = []test{
	{"Refusals", testPruneRefusals},
	{"RetentionFloorAndMonotonic", testPruneRetention},
	{"ActiveClientFloor", testPruneActiveFloor},
	{"AgeForce", testPruneAgeForce},
	{"EpochRotation", testPruneEpoch},
}

const (
	day   = int64(24 * 60 * 60 * 1000)
	nowMs = 400 * day
)

// pruneLog appends n single-change commits; commit i (1-based) is created
// at createdAt(i).
func pruneLog(t *testing.T, s storage.Store, sc *schema.Schema, n int, createdAt func(i int) int64) storage.Partition {
	t.Helper()
	p := partition(t, s)
	ctx := t.Context()
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		for i := 1; i <= n; i++ {
			rw := task(t, sc, fmt.Sprint("t", i), "p1", int64(i), nil)
			if _, err := tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: createdAt(i), ActorID: "a", ClientID: "c",
				ClientCommitID: fmt.Sprint(i), SchemaVersion: 1, Changes: []storage.Change{change(rw, "tasks", 1)}}); err != nil {
				return err
			}
		}
		return nil
	})
	p, err := s.PartitionGet(ctx, p.ID)
	check(t, err)
	return p
}

func recent(int) int64 { return nowMs - 1000 }

func prune(t *testing.T, s storage.Store, p storage.PruneParams) storage.PruneResult {
	t.Helper()
	if p.NowMs == 0 {
		p.NowMs = nowMs
	}
	r, err := s.Prune(t.Context(), p)
	if err != nil {
		t.Fatalf("Prune(%+v): %v", p, err)
	}
	return r
}

func testPruneRefusals(t *testing.T, e *env) {
	s, sc := e.store()
	p := pruneLog(t, s, sc, 3, recent)
	ctx := t.Context()
	ok := storage.PruneParams{Partition: p.ID, LogEpoch: p.LogEpoch, ThroughSeq: 1, NowMs: nowMs, MinRetainedCommits: 1}
	cases := []struct {
		name string
		edit func(*storage.PruneParams)
		code ssp2.Code
	}{
		{"unregistered", func(x *storage.PruneParams) { x.Partition = "nobody" }, ssp2.CodeStoragePartitionUnregistered},
		{"epoch", func(x *storage.PruneParams) { x.LogEpoch = "stale" }, ssp2.CodeStoragePruneEpochMismatch},
		{"negative cursor", func(x *storage.PruneParams) { x.ThroughSeq = -1 }, ssp2.CodeStorageInvalidPruneCursor},
		{"cursor past max", func(x *storage.PruneParams) { x.ThroughSeq = 4 }, ssp2.CodeStorageInvalidPruneCursor},
		{"active window", func(x *storage.PruneParams) { x.ActiveWindowMs = -1 }, ssp2.CodeStorageInvalidLimit},
		{"age force", func(x *storage.PruneParams) { x.AgeForceMs = -1 }, ssp2.CodeStorageInvalidLimit},
		{"min retained", func(x *storage.PruneParams) { x.MinRetainedCommits = -1 }, ssp2.CodeStorageInvalidLimit},
	}
	for _, tc := range cases {
		pp := ok
		tc.edit(&pp)
		_, err := s.Prune(ctx, pp)
		if ssp2.CodeOf(err) != tc.code {
			t.Errorf("%s: Prune = %v, want %s", tc.name, err, tc.code)
		}
	}
	if got, err := s.PartitionGet(ctx, p.ID); err != nil || got.HorizonSeq != 0 {
		t.Fatalf("refusals moved the horizon: %+v, %v", got, err)
	}
}

func testPruneRetention(t *testing.T, e *env) {
	s, sc := e.store()
	p := pruneLog(t, s, sc, 30, recent)
	ctx := t.Context()
	// The default keeps the newest 1000: nothing goes.
	if r := prune(t, s, storage.PruneParams{Partition: p.ID, LogEpoch: p.LogEpoch, ThroughSeq: 30}); r.HorizonSeq != 0 || r.RemovedCommits != 0 {
		t.Fatalf("default retention pruned: %+v", r)
	}
	r := prune(t, s, storage.PruneParams{Partition: p.ID, LogEpoch: p.LogEpoch, ThroughSeq: 30, MinRetainedCommits: 5})
	if r.HorizonSeq != 25 || r.RemovedCommits != 25 {
		t.Fatalf("Prune keeping 5 = %+v, want horizon 25, 25 removed", r)
	}
	commits, changes, index, err := hooks(t, s).HookCountLog(ctx, p.ID)
	check(t, err)
	if commits != 5 || changes != 5 || index != 10 {
		t.Fatalf("log after prune: %d commits, %d changes, %d index rows; want 5, 5, 10", commits, changes, index)
	}
	got, err := s.PartitionGet(ctx, p.ID)
	check(t, err)
	if got.HorizonSeq != 25 || got.MaxCommitSeq != 30 {
		t.Fatalf("partition after prune = %+v", got)
	}
	rng, err := s.CommitRange(ctx, p.ID, 0, 100)
	check(t, err)
	if len(rng) != 5 || rng[0].CommitSeq != 26 {
		t.Fatalf("range after prune starts at %d (%d commits), want 26 (5)", rng[0].CommitSeq, len(rng))
	}
	w, _ := window(t, s, storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1"}}, Limit: 100})
	if w.HorizonSeq != 25 || len(w.Commits) != 5 || w.Commits[0].CommitSeq != 26 {
		t.Fatalf("window after prune: horizon %d, %d commits", w.HorizonSeq, len(w.Commits))
	}
	// The horizon never goes down, and a pass below it does nothing.
	for _, through := range []int64{10, 25} {
		if r := prune(t, s, storage.PruneParams{Partition: p.ID, LogEpoch: p.LogEpoch, ThroughSeq: through, MinRetainedCommits: 1}); r.HorizonSeq != 25 || r.RemovedCommits != 0 {
			t.Fatalf("Prune through %d = %+v, want horizon 25, nothing removed", through, r)
		}
	}
	if r := prune(t, s, storage.PruneParams{Partition: p.ID, LogEpoch: p.LogEpoch, ThroughSeq: 27, MinRetainedCommits: 1}); r.HorizonSeq != 27 || r.RemovedCommits != 2 {
		t.Fatalf("Prune through 27 = %+v", r)
	}
}

func putClient(t *testing.T, s storage.Store, partition, id string, cursor, updatedAtMs int64) {
	t.Helper()
	check(t, s.ClientPut(t.Context(), storage.Client{Partition: partition, ClientID: id, ActorID: "a", WireVersion: 2, Cursor: cursor, UpdatedAtMs: updatedAtMs}))
}

func testPruneActiveFloor(t *testing.T, e *env) {
	s, sc := e.store()
	p := pruneLog(t, s, sc, 30, recent)
	putClient(t, s, p.ID, "active", 12, nowMs-day)
	putClient(t, s, p.ID, "stale", 3, nowMs-20*day)     // outside the 14-day window
	putClient(t, s, p.ID, "bootstrapping", -1, nowMs-1) // no cursor yet
	r := prune(t, s, storage.PruneParams{Partition: p.ID, LogEpoch: p.LogEpoch, ThroughSeq: 28, MinRetainedCommits: 1})
	if r.HorizonSeq != 12 || r.RemovedCommits != 12 {
		t.Fatalf("Prune with an active client at 12 = %+v, want horizon 12", r)
	}
	// A longer active window brings the stale client back in.
	q := pruneLog(t, s, sc, 30, recent)
	putClient(t, s, q.ID, "stale", 3, nowMs-20*day)
	r = prune(t, s, storage.PruneParams{Partition: q.ID, LogEpoch: q.LogEpoch, ThroughSeq: 28, MinRetainedCommits: 1, ActiveWindowMs: 30 * day})
	if r.HorizonSeq != 3 {
		t.Fatalf("Prune with a 30-day window = %+v, want horizon 3", r)
	}
	// With no active client the request and retention floor decide.
	r = prune(t, s, storage.PruneParams{Partition: q.ID, LogEpoch: q.LogEpoch, ThroughSeq: 28, MinRetainedCommits: 1})
	if r.HorizonSeq != 28 {
		t.Fatalf("Prune with only a stale client = %+v, want horizon 28", r)
	}
}

func testPruneAgeForce(t *testing.T, e *env) {
	s, sc := e.store()
	old := func(i int) int64 {
		if i <= 20 {
			return nowMs - 60*day
		}
		return nowMs - day
	}
	p := pruneLog(t, s, sc, 30, old)
	putClient(t, s, p.ID, "laggard", 5, nowMs-day)
	// Commits older than 30 days go regardless of the laggard at 5.
	r := prune(t, s, storage.PruneParams{Partition: p.ID, LogEpoch: p.LogEpoch, ThroughSeq: 28, MinRetainedCommits: 1})
	if r.HorizonSeq != 20 || r.RemovedCommits != 20 {
		t.Fatalf("Prune with age force = %+v, want horizon 20", r)
	}
	// A longer age limit keeps the laggard's commits.
	q := pruneLog(t, s, sc, 30, old)
	putClient(t, s, q.ID, "laggard", 5, nowMs-day)
	r = prune(t, s, storage.PruneParams{Partition: q.ID, LogEpoch: q.LogEpoch, ThroughSeq: 28, MinRetainedCommits: 1, AgeForceMs: 90 * day})
	if r.HorizonSeq != 5 {
		t.Fatalf("Prune with a 90-day age limit = %+v, want horizon 5", r)
	}
	// The request still bounds an age-forced horizon.
	r = prune(t, s, storage.PruneParams{Partition: q.ID, LogEpoch: q.LogEpoch, ThroughSeq: 10, MinRetainedCommits: 1})
	if r.HorizonSeq != 10 {
		t.Fatalf("Prune through 10 with age force = %+v, want horizon 10", r)
	}
}

func testPruneEpoch(t *testing.T, e *env) {
	s, sc := e.store()
	p := pruneLog(t, s, sc, 10, recent)
	ctx := t.Context()
	rotated, err := s.PartitionRotateEpoch(ctx, p.ID, nowMs)
	check(t, err)
	_, err = s.Prune(ctx, storage.PruneParams{Partition: p.ID, LogEpoch: p.LogEpoch, ThroughSeq: 5, NowMs: nowMs, MinRetainedCommits: 1})
	wantCode(t, err, ssp2.CodeStoragePruneEpochMismatch)
	if r := prune(t, s, storage.PruneParams{Partition: p.ID, LogEpoch: rotated.LogEpoch, ThroughSeq: 5, MinRetainedCommits: 1}); r.HorizonSeq != 5 {
		t.Fatalf("Prune with the rotated epoch = %+v", r)
	}
}
