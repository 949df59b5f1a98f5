package edge_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// TestReplicaSnapshotAfterEdgePrune: cut off, the edge takes inserts,
// updates and deletes, then prunes its log far past what the hub
// replicated. When the link returns — with a client of the edge still
// writing — the hub rebuilds the replica from a snapshot of the edge's
// rows: it equals the edge's rows (ids, versions, payloads, scopes) under
// the edge's epoch, continues the edge's log with the edge's seqs, and a
// hub client that had synced before catches up to the edge's rows.
func TestReplicaSnapshotAfterEdgePrune(t *testing.T) {
	tp := startTopology(t)
	ctx := context.Background()
	writer := clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer")
	pushTodos(t, writer, "linked", 20)
	tp.waitReplica(edgePart)
	reader := clientOf(t, tp.hub, edgePart, &client.MemoryStore{}, "hub-reader")
	syncOK(t, reader)

	tp.cut()
	pushTodos(t, writer, "offline", 300)
	for i := 0; i < 10; i++ { // updates: versions above 1
		id := fmt.Sprintf("linked-%05d", i)
		if _, err := writer.Upsert(ctx, "todos", nodetest.Todo(id, project, "updated "+id)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 10; i < 15; i++ {
		if _, err := writer.Delete(ctx, "todos", fmt.Sprintf("linked-%05d", i)); err != nil {
			t.Fatal(err)
		}
	}
	syncOK(t, writer)
	ep, err := tp.edg.Store.PartitionGet(ctx, edgePart)
	if err != nil {
		t.Fatal(err)
	}
	res := pruneEdge(t, tp, ep.MaxCommitSeq-5)
	if res.HorizonSeq <= 20 {
		t.Fatalf("edge pruned through %d, not past the replica's 20", res.HorizonSeq)
	}

	// The edge keeps writing while the hub rebuilds.
	during := clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer-2")
	var stop atomic.Bool
	done := make(chan error, 1)
	go func() {
		for i := 0; !stop.Load() || i < 20; i++ {
			id := fmt.Sprintf("during-%05d", i)
			if _, err := during.Upsert(ctx, "todos", nodetest.Todo(id, project, id)); err != nil {
				done <- err
				return
			}
			if _, err := during.SyncUntilIdle(ctx); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	tp.restore()
	tp.waitReplicaEpoch(edgePart)
	stop.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tp.waitReplicaEpoch(edgePart)
	edgeRows := rows(t, tp.edg.Store, edgePart)
	sameRows(t, edgeRows, rows(t, tp.hub.Store, edgePart))
	if got := tp.hub.EdgeHub.Metrics().Snapshots.Load(); got < 1 {
		t.Fatalf("%d snapshot rebuilds, want ≥ 1", got)
	}
	hp, err := tp.hub.Store.PartitionGet(ctx, edgePart)
	if err != nil {
		t.Fatal(err)
	}
	if hp.LogEpoch != ep.LogEpoch || hp.HorizonSeq < res.HorizonSeq {
		t.Fatalf("hub replica %+v: want the edge's epoch %s and a horizon ≥ the edge's %d", hp, ep.LogEpoch, res.HorizonSeq)
	}

	// The log continues with the edge's seqs, through the usual checks.
	pushTodos(t, writer, "after", 5)
	tp.waitReplicaEpoch(edgePart)
	edgeRows = rows(t, tp.edg.Store, edgePart)
	sameRows(t, edgeRows, rows(t, tp.hub.Store, edgePart))
	e2, _ := tp.edg.Store.PartitionGet(ctx, edgePart)
	hubLog, err := tp.hub.Store.CommitRange(ctx, edgePart, e2.MaxCommitSeq-5, 10)
	if err != nil {
		t.Fatal(err)
	}
	edgeLog, err := tp.edg.Store.CommitRange(ctx, edgePart, e2.MaxCommitSeq-5, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hubLog) != 5 || fmt.Sprint(hubLog) != fmt.Sprint(edgeLog) {
		t.Fatalf("hub's last commits differ from the edge's (%d vs %d)", len(hubLog), len(edgeLog))
	}

	// A hub client from before the prune is past nothing it can page: it
	// re-bootstraps to the edge's rows.
	syncRetrying(t, reader)
	if reader.Count("todos") != len(edgeRows) {
		t.Fatalf("hub reader holds %d rows, the edge %d", reader.Count("todos"), len(edgeRows))
	}
	for _, r := range edgeRows {
		got, ok := reader.Row("todos", r.RowID)
		if !ok || got.Version != r.ServerVersion {
			t.Fatalf("hub reader row %s: %+v %v, edge version %d", r.RowID, got, ok, r.ServerVersion)
		}
	}
}

// pruneEdge prunes the edge partition's log through seq, whatever the
// clients' cursors, and fails unless the horizon got there. The prune
// runs a second "later", so that commits and cursors of this very
// millisecond are past the retention windows, which are zero.
func pruneEdge(t testing.TB, tp *topology, through int64) storage.PruneResult {
	t.Helper()
	ep, err := tp.edg.Store.PartitionGet(context.Background(), edgePart)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tp.edg.Store.Prune(context.Background(), storage.PruneParams{Partition: edgePart, LogEpoch: ep.LogEpoch, ThroughSeq: through,
		NowMs: time.Now().Add(time.Second).UnixMilli(), Literal: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.HorizonSeq != through {
		t.Fatalf("edge pruned through %d, want %d", res.HorizonSeq, through)
	}
	return res
}

// TestReplicaSnapshotResumesAfterHubStop: the hub stopped half-way
// through a snapshot rebuild (its SQL holds the placeholder epoch and a
// part of the rows). Restarted with the link cut, it refuses the
// partition rather than serve the partial replica; once linked it starts
// the rebuild over and ends with the edge's rows.
func TestReplicaSnapshotResumesAfterHubStop(t *testing.T) {
	tp := startTopology(t)
	ctx := context.Background()
	writer := clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer")
	pushTodos(t, writer, "linked", 20)
	tp.waitReplica(edgePart)

	tp.cut()
	pushTodos(t, writer, "offline", 30)
	ep, err := tp.edg.Store.PartitionGet(ctx, edgePart)
	if err != nil {
		t.Fatal(err)
	}
	pruneEdge(t, tp, ep.MaxCommitSeq)
	if err := tp.hub.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// What a hub stopped inside snapshot() leaves: the replica dropped,
	// registered under a placeholder epoch, some rows written.
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(tp.hubDir, "data", node.SQLiteFile)})
	if err != nil {
		t.Fatal(err)
	}
	sc := nodetest.Schema(t)
	if err := st.EnsureSchema(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if err := st.PartitionWipe(ctx, edgePart); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PartitionAdopt(ctx, edgePart, "~snapshot~stopped", 1); err != nil {
		t.Fatal(err)
	}
	part := rows(t, tp.edg.Store, edgePart)[:7]
	if err := st.WriteTx(ctx, edgePart, func(tx storage.Tx) error {
		table, _ := sc.Table("todos")
		for _, r := range part {
			vals, err := table.Codec.DecodeRow(r.Payload, nil)
			if err != nil {
				return err
			}
			if _, err := tx.RowUpsert(ctx, "todos", storage.RowWrite{RowID: r.RowID, Values: vals, Scopes: r.Scopes, Payload: r.Payload, Version: r.ServerVersion}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	tp.hub = startHub(t, tp.hubDir)
	tp.px.Retarget(trimLeaf(tp.hub.NATS.LeafURL()))
	reader := clientOf(t, tp.hub, edgePart, &client.MemoryStore{}, "hub-reader")
	_, err = reader.SyncUntilIdle(ctx)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != ssp2.CodeSchemaNotReady || !strings.Contains(string(ce.Details), "replica_rebuilding") {
		t.Fatalf("the partial replica at the restarted hub: %v, want sync.schema_not_ready, reason replica_rebuilding", err)
	}

	tp.restore()
	tp.waitReplicaEpoch(edgePart)
	sameRows(t, rows(t, tp.edg.Store, edgePart), rows(t, tp.hub.Store, edgePart))
	syncRetrying(t, reader)
	if reader.Count("todos") != 50 || reader.LogEpoch() != ep.LogEpoch {
		t.Fatalf("hub reader: %d rows under %q, want 50 under the edge's %q", reader.Count("todos"), reader.LogEpoch(), ep.LogEpoch)
	}
}
