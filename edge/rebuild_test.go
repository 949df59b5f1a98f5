package edge_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// waitReplicaEpoch waits until the hub's replica of the partition has
// the edge's epoch and max commit seq.
func (tp *topology) waitReplicaEpoch(partition string) {
	tp.t.Helper()
	ctx := context.Background()
	poll.Until(tp.t, waitLong, "replica rebuilt under the edge's epoch", func() bool {
		e, err := tp.edg.Store.PartitionGet(ctx, partition)
		if err != nil {
			return false
		}
		h, err := tp.hub.Store.PartitionGet(ctx, partition)
		if err != nil || h.LogEpoch != e.LogEpoch || h.MaxCommitSeq != e.MaxCommitSeq {
			return false
		}
		// The loop's view follows the SQL it wrote: served again.
		for _, r := range tp.link().Partitions {
			if r.Partition == partition {
				return !r.Rebuilding && r.LogEpoch == e.LogEpoch && r.AppliedSeq == e.MaxCommitSeq
			}
		}
		return false
	})
}

// TestReplicaRebuildsOnEpochRotation: the edge rotates its partition's
// log epoch while linked (restore --rotate-epochs); the hub drops its
// replica and re-pages it under the new epoch, and its realtime client
// of the partition is answered with reset-required and resets onto the
// new epoch.
func TestReplicaRebuildsOnEpochRotation(t *testing.T) {
	tp := startTopology(t)
	ctx := context.Background()
	pushTodos(t, clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer"), "before", 20)
	tp.waitReplica(edgePart)

	reader := clientOf(t, tp.hub, edgePart, &client.MemoryStore{}, "hub-reader")
	syncOK(t, reader)
	oldEpoch := reader.LogEpoch()
	rt, err := reader.NewRealtime(client.RealtimeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Stop(context.Background()) })
	poll.Until(t, waitShort, "realtime connected", func() bool { return rt.Status().State == client.RealtimeConnected })

	np, err := tp.edg.Gate.RotateEpoch(ctx, edgePart)
	if err != nil {
		t.Fatal(err)
	}
	if np.LogEpoch == oldEpoch {
		t.Fatal("the rotation kept the epoch")
	}
	tp.waitReplicaEpoch(edgePart)
	sameRows(t, rows(t, tp.edg.Store, edgePart), rows(t, tp.hub.Store, edgePart))
	poll.Until(t, waitLong, "the hub's realtime client reset onto the new epoch", func() bool {
		return reader.LogEpoch() == np.LogEpoch && reader.Count("todos") == 20
	})
	if got := tp.hub.Realtime.Metrics().WakesReset.Load(); got < 1 {
		t.Fatalf("hub sent %d reset-required wakes, want ≥ 1", got)
	}

	// Replication carries on under the new epoch.
	pushAfterRotation(t, clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer-2"), "after", 5)
	tp.waitReplicaEpoch(edgePart)
	poll.Until(t, waitLong, "deltas under the new epoch", func() bool {
		_, ok := reader.Row("todos", "after-00004")
		return ok
	})
	if got := tp.hub.EdgeHub.Metrics().Rebuilds.Load(); got != 1 {
		t.Fatalf("%d rebuilds, want 1", got)
	}
}

// TestReplicaRebuildsAfterRestoreWhileCut: while cut off, the edge is
// restored from a backup older than what the hub replicated (its log
// rewinds from 50 commits to 20, under a new epoch) and takes 5 new
// commits. When the link returns the hub's replica equals the edge's
// rows — the 30 lost commits gone — with the edge's epoch and seqs, and
// a hub client that had synced the lost rows resets and re-bootstraps.
func TestReplicaRebuildsAfterRestoreWhileCut(t *testing.T) {
	tp := startTopology(t)
	ctx := context.Background()
	pushTodos(t, clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer"), "kept", 20)
	backup := filepath.Join(t.TempDir(), "edge-backup.db")
	dbPath := filepath.Join(tp.edgeDir, "data", node.SQLiteFile)
	if _, err := sqlitestore.Backup(ctx, dbPath, backup); err != nil {
		t.Fatal(err)
	}
	pushTodos(t, clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer-2"), "lost", 30)
	tp.waitReplica(edgePart)
	reader := clientOf(t, tp.hub, edgePart, &client.MemoryStore{}, "hub-reader")
	syncOK(t, reader)
	if reader.Count("todos") != 50 {
		t.Fatalf("hub reader holds %d rows, want 50", reader.Count("todos"))
	}
	oldEpoch := reader.LogEpoch()

	tp.cut()
	if err := tp.edg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sqlitestore.Restore(ctx, backup, dbPath); err != nil {
		t.Fatal(err)
	}
	tp.edg = startEdge(t, tp.edgeDir, "nats-leaf://"+tp.px.Addr())
	np, err := tp.edg.Gate.RotateEpoch(ctx, edgePart)
	if err != nil {
		t.Fatal(err)
	}
	if np.MaxCommitSeq != 20 || np.LogEpoch == oldEpoch {
		t.Fatalf("restored edge at %+v, want seq 20 under a new epoch", np)
	}
	pushAfterRotation(t, clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer-3"), "new", 5)
	// Cut off, the hub keeps serving what it has.
	if hp, _ := tp.hub.Store.PartitionGet(ctx, edgePart); hp.LogEpoch != oldEpoch || hp.MaxCommitSeq != 50 {
		t.Fatalf("hub replica changed while cut: %+v", hp)
	}

	tp.restore()
	tp.waitReplicaEpoch(edgePart)
	edgeRows := rows(t, tp.edg.Store, edgePart)
	if len(edgeRows) != 25 {
		t.Fatalf("restored edge holds %d rows, want 25", len(edgeRows))
	}
	sameRows(t, edgeRows, rows(t, tp.hub.Store, edgePart))
	hubLog, err := tp.hub.Store.CommitRange(ctx, edgePart, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(hubLog) != 25 || hubLog[24].CommitSeq != 25 {
		t.Fatalf("hub log holds %d commits, want the edge's 1..25", len(hubLog))
	}

	res := syncRetrying(t, reader)
	if !res.EpochReset || reader.LogEpoch() != np.LogEpoch {
		t.Fatalf("hub reader: reset %v, epoch %q, want a reset onto %q", res.EpochReset, reader.LogEpoch(), np.LogEpoch)
	}
	if reader.Count("todos") != 25 {
		t.Fatalf("hub reader holds %d rows after the reset, want 25", reader.Count("todos"))
	}
	for _, r := range edgeRows {
		if strings.HasPrefix(r.RowID, "lost-") {
			t.Fatalf("row %s of the lost commits survived the restore", r.RowID)
		}
	}
	if got := tp.hub.EdgeHub.Metrics().Rebuilds.Load(); got != 1 {
		t.Fatalf("%d rebuilds, want 1", got)
	}
}

// pushAfterRotation commits n todos through c at the edge right after an
// epoch rotation there, retrying as syncRetrying does.
func pushAfterRotation(t testing.TB, c *client.Client, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%s-%05d", prefix, i)
		if _, err := c.Upsert(ctx, "todos", nodetest.Todo(id, project, "todo "+id)); err != nil {
			t.Fatal(err)
		}
	}
	syncRetrying(t, c)
}

// syncRetrying syncs c until idle right after a gate change of its
// partition — an epoch rotation at the edge, a replica rebuild at the
// hub, each of which rewrites the partition's serve-gate token: a
// request in flight then is refused with the retryable
// sync.schema_not_ready ("the serve gate changed during the request"),
// which a client retries. Any other failure fails the test.
func syncRetrying(t testing.TB, c *client.Client) client.Result {
	t.Helper()
	var res client.Result
	poll.Until(t, waitShort, "served after the gate change", func() bool {
		var err error
		res, err = c.SyncUntilIdle(context.Background())
		var ce *client.Error
		if errors.As(err, &ce) && ce.Code == ssp2.CodeSchemaNotReady && ce.Retryable {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Rejected) > 0 {
			t.Fatalf("rejected: %+v", res.Rejected[0])
		}
		return len(c.Pending()) == 0
	})
	return res
}
