package edge_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/ssp2"
)

// pushTodos commits n todos (ids prefix-0…) through c, syncing every
// batch, and fails unless every commit applied.
func pushTodos(t testing.TB, c *client.Client, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	const batch = 200
	for i := 0; i < n; i += batch {
		for j := i; j < min(i+batch, n); j++ {
			id := fmt.Sprintf("%s-%05d", prefix, j)
			if _, err := c.Upsert(ctx, "todos", nodetest.Todo(id, project, "todo "+id)); err != nil {
				t.Fatal(err)
			}
		}
		res, err := c.SyncUntilIdle(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Rejected) > 0 {
			t.Fatalf("rejected: %+v", res.Rejected[0])
		}
	}
	if p := c.Pending(); len(p) != 0 {
		t.Fatalf("%d commits still pending", len(p))
	}
}

// TestEdgeCutOffCatchesUp: an edge cut off from its hub takes 2,000
// commits from its own clients; once the link returns the hub's replica
// equals the edge's rows, with the edge's epoch and commit seqs, and a
// device that synced at the edge moves to the hub without a reset and
// receives the edge's later commits with the edge's seqs.
func TestEdgeCutOffCatchesUp(t *testing.T) {
	tp := startTopology(t)
	ctx := context.Background()
	device := &client.MemoryStore{Rows: true}
	atEdge := clientOf(t, tp.edg, edgePart, device, "device-1")
	pushTodos(t, atEdge, "warmup", 10)
	tp.waitReplica(edgePart)

	tp.cut()
	pushTodos(t, atEdge, "offline", 2000)
	ep, err := tp.edg.Store.PartitionGet(ctx, edgePart)
	if err != nil {
		t.Fatal(err)
	}
	if ep.MaxCommitSeq != 2010 {
		t.Fatalf("edge max seq %d, want 2010", ep.MaxCommitSeq)
	}
	if hp, _ := tp.hub.Store.PartitionGet(ctx, edgePart); hp.MaxCommitSeq != 10 {
		t.Fatalf("hub replica moved while cut: max seq %d, want 10", hp.MaxCommitSeq)
	}

	tp.restore()
	tp.waitReplica(edgePart)
	hp, err := tp.hub.Store.PartitionGet(ctx, edgePart)
	if err != nil {
		t.Fatal(err)
	}
	if hp.LogEpoch != ep.LogEpoch || hp.MaxCommitSeq != ep.MaxCommitSeq {
		t.Fatalf("hub replica %+v, edge %+v: epoch and seqs must be the edge's", hp, ep)
	}
	sameRows(t, rows(t, tp.edg.Store, edgePart), rows(t, tp.hub.Store, edgePart))
	hubLog, err := tp.hub.Store.CommitRange(ctx, edgePart, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	edgeLog, err := tp.edg.Store.CommitRange(ctx, edgePart, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(hubLog) != fmt.Sprint(edgeLog) {
		t.Fatalf("hub log differs from the edge's (%d vs %d commits)", len(hubLog), len(edgeLog))
	}

	// A fresh client of the hub bootstraps the edge's rows under its epoch.
	fresh := clientOf(t, tp.hub, edgePart, &client.MemoryStore{}, "hub-reader")
	if _, err := fresh.SyncUntilIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fresh.Count("todos"); got != 2010 {
		t.Fatalf("hub served %d rows, want 2010", got)
	}
	if fresh.LogEpoch() != ep.LogEpoch {
		t.Fatalf("hub served epoch %q, want the edge's %q", fresh.LogEpoch(), ep.LogEpoch)
	}

	// The device moves to the hub: no reset, and the edge's next commits
	// arrive with the edge's seqs.
	other := clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "device-2")
	pushTodos(t, other, "later", 5)
	tp.waitReplica(edgePart)
	atHub := clientOf(t, tp.hub, edgePart, device, "device-1")
	res, err := atHub.SyncUntilIdle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.EpochReset {
		t.Fatal("moving from the edge to the hub reset the client's log")
	}
	if fmt.Sprint(res.CommitSeqs) != "[2011 2012 2013 2014 2015]" {
		t.Fatalf("commit seqs at the hub %v, want the edge's 2011..2015", res.CommitSeqs)
	}
	if atHub.Count("todos") != 2015 {
		t.Fatalf("device holds %d rows, want 2015", atHub.Count("todos"))
	}
}

// TestHubForwardsEdgePush: a push for an edge partition sent to the hub
// is applied at the edge while linked, refused with the retryable
// sync.schema_not_ready while cut (nothing applied anywhere), and applied
// once when the client retries after the link returns.
func TestHubForwardsEdgePush(t *testing.T) {
	tp := startTopology(t)
	ctx := context.Background()
	// A partition the hub has no replica of yet is refused, retryably.
	c := clientOf(t, tp.hub, edgePart, &client.MemoryStore{}, "hub-writer")
	_, err := c.SyncUntilIdle(ctx)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != ssp2.CodeSchemaNotReady || !ce.Retryable {
		t.Fatalf("round before any replica: %v, want retryable sync.schema_not_ready", err)
	}
	pushTodos(t, clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer"), "seed", 1)
	tp.waitReplica(edgePart)
	syncOK(t, c)

	if _, err := c.Upsert(ctx, "todos", nodetest.Todo("linked", project, "written at the hub")); err != nil {
		t.Fatal(err)
	}
	res := syncOK(t, c)
	if len(res.Pushed) != 1 || res.Pushed[0].Status != ssp2.PushApplied || res.Pushed[0].CommitSeq != 2 {
		t.Fatalf("pushed %+v, want applied at seq 2", res.Pushed)
	}
	if _, ok := rowAt(t, tp, "linked"); !ok {
		t.Fatal("the forwarded commit is not at the edge")
	}
	if c.Count("todos") != 2 {
		t.Fatalf("the round's pull holds %d rows, want 2 (its own commit included)", c.Count("todos"))
	}

	tp.cut()
	if _, err := c.Upsert(ctx, "todos", nodetest.Todo("cut", project, "written while cut")); err != nil {
		t.Fatal(err)
	}
	_, err = c.Sync(ctx)
	if !errors.As(err, &ce) || ce.Code != ssp2.CodeSchemaNotReady || !ce.Retryable || ce.Status != 503 {
		t.Fatalf("push while cut: %v, want retryable sync.schema_not_ready (503)", err)
	}
	if len(c.Pending()) != 1 {
		t.Fatalf("%d commits pending after the refusal, want 1", len(c.Pending()))
	}
	if _, ok := rowAt(t, tp, "cut"); ok {
		t.Fatal("a refused push reached the edge")
	}

	tp.restore()
	res = syncOK(t, c)
	if len(res.Pushed) != 1 || res.Pushed[0].Status != ssp2.PushApplied || res.Pushed[0].CommitSeq != 3 {
		t.Fatalf("retry after relink pushed %+v, want applied at seq 3", res.Pushed)
	}
	if _, ok := rowAt(t, tp, "cut"); !ok {
		t.Fatal("the retried commit is not at the edge")
	}
	tp.waitReplica(edgePart)
	sameRows(t, rows(t, tp.edg.Store, edgePart), rows(t, tp.hub.Store, edgePart))
	if got := tp.hub.EdgeHub.Metrics().Forwarded.Load(); got != 2 {
		t.Fatalf("forwarded %d pushes, want 2", got)
	}
}

func syncOK(t testing.TB, c *client.Client) client.Result {
	t.Helper()
	res, err := c.SyncUntilIdle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) > 0 {
		t.Fatalf("rejected: %+v", res.Rejected[0])
	}
	return res
}

func rowAt(t testing.TB, tp *topology, id string) (int64, bool) {
	t.Helper()
	for _, r := range rows(t, tp.edg.Store, edgePart) {
		if r.RowID == id {
			return r.ServerVersion, true
		}
	}
	return 0, false
}

// TestHubRealtimeEdgeDeltas: a realtime client of the hub subscribed to
// an edge partition receives deltas for commits made at the edge while
// linked.
func TestHubRealtimeEdgeDeltas(t *testing.T) {
	tp := startTopology(t)
	ctx := context.Background()
	writer := clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer")
	pushTodos(t, writer, "first", 1)
	tp.waitReplica(edgePart)

	reader := clientOf(t, tp.hub, edgePart, &client.MemoryStore{}, "hub-reader")
	syncOK(t, reader)
	rt, err := reader.NewRealtime(client.RealtimeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Stop(context.Background()) })
	poll.Until(t, waitShort, "realtime connected", func() bool { return rt.Status().State == client.RealtimeConnected })

	pushTodos(t, writer, "live", 3)
	poll.Until(t, waitLong, "deltas of the edge's commits", func() bool {
		_, ok := reader.Row("todos", "live-00002")
		return ok && rt.Stats().Deltas >= 1
	})
	if reader.Count("todos") != 4 {
		t.Fatalf("hub realtime client holds %d rows, want 4", reader.Count("todos"))
	}
}

// TestHubRestartWhileEdgeWrites: the hub restarts while a client of the
// edge keeps pushing; the new hub process resumes the replica and the
// source stream from what it stored, and catches up.
func TestHubRestartWhileEdgeWrites(t *testing.T) {
	tp := startTopology(t)
	ctx := context.Background()
	writer := clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer")
	pushTodos(t, writer, "before", 50)
	tp.waitReplica(edgePart)

	const during = 150
	done := make(chan error, 1)
	var pushed atomic.Int64
	go func() {
		for i := 0; i < during; i++ {
			id := fmt.Sprintf("during-%05d", i)
			if _, err := writer.Upsert(ctx, "todos", nodetest.Todo(id, project, id)); err != nil {
				done <- err
				return
			}
			if _, err := writer.SyncUntilIdle(ctx); err != nil {
				done <- err
				return
			}
			pushed.Add(1)
		}
		done <- nil
	}()
	poll.Until(t, waitLong, "writes under way", func() bool { return pushed.Load() >= 20 })
	if err := tp.hub.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	tp.hub = startHub(t, tp.hubDir)
	tp.px.Retarget(trimLeaf(tp.hub.NATS.LeafURL()))
	tp.waitLink(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tp.waitReplica(edgePart)
	sameRows(t, rows(t, tp.edg.Store, edgePart), rows(t, tp.hub.Store, edgePart))
	poll.Until(t, waitLong, "sourced events", func() bool { return edgeStreamCount(t, tp.hub) == 50+during })
}

// TestEdgeRestartWithBacklog: an edge restarts with commits the hub has
// not seen (taken while cut); after it is back and linked the replica
// catches up.
func TestEdgeRestartWithBacklog(t *testing.T) {
	tp := startTopology(t)
	ctx := context.Background()
	writer := clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer")
	pushTodos(t, writer, "linked", 20)
	tp.waitReplica(edgePart)

	tp.cut()
	pushTodos(t, writer, "backlog", 500)
	if err := tp.edg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	tp.px.Restore()
	tp.edg = startEdge(t, tp.edgeDir, "nats-leaf://"+tp.px.Addr())
	tp.waitLink(true)
	tp.waitReplica(edgePart)
	sameRows(t, rows(t, tp.edg.Store, edgePart), rows(t, tp.hub.Store, edgePart))
	poll.Until(t, waitLong, "sourced events", func() bool { return edgeStreamCount(t, tp.hub) == 520 })
}

func trimLeaf(u string) string { return u[len("nats-leaf://"):] }
