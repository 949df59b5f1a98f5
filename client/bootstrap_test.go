package client

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/syncnode/syncnode/engine"
)

// seedOps is the commit size seed uses; servers that are seeded allow it.
const seedOps = 5000

func allowSeeding(cfg *engine.Config) { cfg.MaxOperations = new(seedOps) }

// seed pushes n task rows into project through a client of its own.
func seed(t testing.TB, srv *server, n int, project string) {
	t.Helper()
	c := srv.client("seeder", nil, func(cfg *Config) {
		cfg.MaxOperations = seedOps
		cfg.Token = srv.token("seeder", project)
	})
	ctx := context.Background()
	for start := 0; start < n; start += seedOps {
		ops := make([]Op, 0, seedOps)
		for i := start; i < min(n, start+seedOps); i++ {
			row := task(fmt.Sprintf("%s-%07d", project, i), project, fmt.Sprintf("task number %d of the seeded project", i))
			row["priority"] = i % 5
			row["updated_at_ms"] = 1_700_000_000_000 + i
			ops = append(ops, Upsert("tasks", row))
		}
		if _, err := c.Commit(ctx, ops...); err != nil {
			t.Fatal(err)
		}
		res, err := c.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Rejected) > 0 {
			t.Fatal(res.Rejected[0])
		}
	}
	if len(c.Pending()) != 0 {
		t.Fatal("seeding did not drain")
	}
}

// TestBootstrapInterruptedAndResumed: a 100k-row bootstrap is cut off in
// the middle of a response; a client rebuilt from the persisted state
// resumes from the stored token (it does not start over) and ends with
// exactly the server's rows.
func TestBootstrapInterruptedAndResumed(t *testing.T) {
	bothStores(t, testBootstrapInterruptedAndResumed)
}

func testBootstrapInterruptedAndResumed(t *testing.T) {
	if testing.Short() {
		t.Skip("100k rows")
	}
	const n = 100_000
	srv := newServer(t, allowSeeding)
	seed(t, srv, n, "p1")
	// Rows of another project must not leak in.
	seed(t, srv, 1000, "p2")

	store := &MemoryStore{Rows: true}
	ft := newFaultTransport()
	// 10 pages of 1000 rows (about 93 KB each) per round, uncompressed so
	// the cut lands where it is meant to: the third data response dies
	// after about 4.8 pages.
	pull := PullOptions{LimitSnapshotRows: 1000, MaxSnapshotPages: 10}
	ft.cutAt, ft.cutBytes = 4, 450_000
	a := srv.client("alice", []string{"p1"}, func(cfg *Config) {
		cfg.Store, cfg.Pull, cfg.AcceptEncoding = store, pull, "identity"
		cfg.HTTPClient = &http.Client{Transport: ft}
	})
	ctx := context.Background()
	var err error
	var rounds int
	for err == nil {
		_, err = a.Sync(ctx) // the first exchange acquires the epoch, so /sync #4 is the third data round
		rounds++
		if rounds > 10 {
			t.Fatal("the cut never happened")
		}
	}
	if ft.cuts.Load() != 1 {
		t.Fatalf("cut %d responses, want 1 (err %v)", ft.cuts.Load(), err)
	}
	t.Logf("cut after %d rounds: %v; replica holds %d rows", rounds, err, a.Count("tasks"))
	sub := a.Subscriptions()[0]
	if sub.BootstrapState == nil || a.Count("tasks") <= 20_000 || a.Count("tasks") >= 30_000 {
		t.Fatalf("after the cut: token %s, %d rows (want 20k < rows < 30k: two whole rounds plus the applied blocks of the cut one)", sub.BootstrapState, a.Count("tasks"))
	}

	// Restart: a new client on the same state resumes from the token.
	b := srv.client("alice", []string{"p1"}, func(cfg *Config) { cfg.Store, cfg.Pull = store, pull })
	if got := b.Subscriptions()[0]; string(got.BootstrapState) != string(sub.BootstrapState) || got.Cursor != sub.Cursor {
		t.Fatalf("restored subscription %+v, want token %s", got, sub.BootstrapState)
	}
	res := mustSync(t, b)
	if res.SegmentRows != n-20_000 {
		t.Fatalf("the resumed bootstrap delivered %d rows, want the %d after the persisted token", res.SegmentRows, n-20_000)
	}
	sameRows(t, "resumed", replicaRows(b), srv.serverRows("p1"))
	if b.Subscriptions()[0].BootstrapState != nil {
		t.Fatal("bootstrap not complete")
	}
}
