package engine

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/syncnode/syncnode/internal/rusage"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// TestStartCacheSteadyAndForeignWrites: a steady push + pull round of a
// known client is served from the store's start cache, a replay in such
// a round is still answered from its stored result, and what another
// process writes to the same SQLite file — an epoch rotation, a binding
// to another actor, a prune past the cursor — is answered as it would be
// without a cache.
func TestStartCacheSteadyAndForeignWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sync.db")
	open := func() *sqlitestore.Store {
		s, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	h := newHarnessOn(t, open(), taskSchema, nil)
	other := open() // another process on the same file
	ctx := context.Background()
	alice := id("alice", "p1")
	ep := h.epoch(alice)

	cursor := int64(0)
	round := func(key string) *ssp2.Message {
		t.Helper()
		m := h.sync(alice, 2, hdr("c1", ep), commit(key, upsert("t-"+key, h.row("t-"+key, "p1", key))),
			&ssp2.PullHeader{Accept: 3}, sub("s", cursor, "p1"))
		if end := frames[*ssp2.SubEnd](m); len(end) == 1 {
			cursor = end[0].NextCursor
		}
		return m
	}
	for i := range 5 {
		m := round(fmt.Sprintf("k%d", i))
		if res := frames[*ssp2.PushResult](m); len(res) != 1 || res[0].Status != ssp2.PushApplied {
			t.Fatalf("round %d: %+v", i, res)
		}
	}
	if n := h.e.Metrics().StartsCached.Load(); n < 3 {
		t.Fatalf("%d of 5 steady rounds served from the cache", n)
	}
	// A replay in a cached round: the locked lookup finds the result.
	before := h.e.Metrics().StartsCached.Load()
	m := round("k1")
	if res := frames[*ssp2.PushResult](m); len(res) != 1 || res[0].Status != ssp2.PushCached || *res[0].CommitSeq != 2 {
		t.Fatalf("replay: %+v", res)
	}
	if h.e.Metrics().StartsCached.Load() != before+1 {
		t.Fatal("the replay's start was not served from the cache")
	}

	// Another process prunes past the client's cursor: the pull resets.
	old := int64(1) // an older cursor of the client's
	part, err := other.PartitionGet(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if pr, err := other.Prune(ctx, storage.PruneParams{Partition: "p", LogEpoch: part.LogEpoch, ThroughSeq: part.MaxCommitSeq, NowMs: h.now, Literal: true}); err != nil || pr.HorizonSeq <= old {
		t.Fatalf("prune: %+v, %v", pr, err)
	}
	m = h.sync(alice, 2, hdr("c1", ep), &ssp2.PullHeader{Accept: 3}, sub("s", old, "p1"))
	if ss := frames[*ssp2.SubStart](m); len(ss) != 1 || ss[0].Status != ssp2.SubReset {
		t.Fatalf("pull behind another process's prune: %+v", *ss[0])
	}

	// Another process rotates the epoch: the old epoch is told to reset
	// to the new one.
	rot, err := other.PartitionRotateEpoch(ctx, "p", h.now)
	if err != nil {
		t.Fatal(err)
	}
	m = round("k10")
	if rh := m.Frames[0].(*ssp2.RespHeader); !rh.ResetRequired || rh.LogEpoch != rot.LogEpoch || len(m.Frames) != 1 {
		t.Fatalf("after another process's rotation: %+v (%d frames)", rh, len(m.Frames))
	}
	// The rotation freed the client id; bob takes it elsewhere: alice is
	// refused under the new epoch.
	if _, err := other.ClientBind(ctx, storage.Client{Partition: "p", ClientID: "c1", ActorID: "bob", WireVersion: 2, Cursor: -1, UpdatedAtMs: h.now}); err != nil {
		t.Fatal(err)
	}
	ep = rot.LogEpoch
	_, err = h.try(alice, 2, hdr("c1", ep), &ssp2.PullHeader{Accept: 3}, sub("s", -1, "p1"))
	wantCode(t, err, ssp2.CodeInvalidClientID)
}

// uncachedStore reads every request's start from the database: the
// baseline of BenchmarkPushPullRound.
type uncachedStore struct{ *sqlitestore.Store }

func (s uncachedStore) RequestStart(ctx context.Context, q storage.RequestStartParams) (storage.RequestStart, error) {
	q.Fresh = true
	return s.Store.RequestStart(ctx, q)
}

// BenchmarkPushPullRound is a steady push + pull round of one known
// client (one commit, one incremental subscription) on SQLite with
// synchronous=NORMAL, its start served from the store's cache or read
// (uncached). cpu-ns/op is the process's CPU per round, which the
// shared machine's load disturbs less than the wall time.
func BenchmarkPushPullRound(b *testing.B) {
	for _, bc := range []struct {
		name   string
		cached bool
	}{{"cached", true}, {"uncached", false}} {
		b.Run(bc.name, func(b *testing.B) {
			var st storage.Store = openSQLiteNormal(b)
			if !bc.cached {
				st = uncachedStore{st.(*sqlitestore.Store)}
			}
			h := newHarnessOn(b, st, taskSchema, nil)
			alice := id("alice", "p1")
			ep := h.epoch(alice)
			ctx := context.Background()
			var out bytes.Buffer
			cursor := int64(0)
			payload := h.row("t1", "p1", "x")
			b.ReportAllocs()
			cpu := rusage.Self().CPU
			for i := 0; b.Loop(); i++ {
				body, err := (&ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
					hdr("c1", ep), commit(fmt.Sprint(i), upsert("t1", payload)), &ssp2.PullHeader{Accept: 3}, sub("s", cursor, "p1"),
				}}).AppendEncode(nil)
				if err != nil {
					b.Fatal(err)
				}
				out.Reset()
				if err := h.e.Sync(ctx, alice, body, &out); err != nil {
					b.Fatal(err)
				}
				cursor++
			}
			b.StopTimer()
			b.ReportMetric(float64((rusage.Self().CPU-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
			if n := h.e.Metrics().PushApplied.Load(); n < int64(b.N) {
				b.Fatalf("%d of %d pushes applied", n, b.N)
			}
			// The first rounds of a client fill the cache; an uncached
			// store must serve none (a run of one round proves nothing
			// about the cached side, so only that side has a floor).
			cached := h.e.Metrics().StartsCached.Load()
			if (bc.cached && cached < int64(b.N)-2) || (!bc.cached && cached != 0) {
				b.Fatalf("%d of %d starts cached", cached, b.N)
			}
		})
	}
}
