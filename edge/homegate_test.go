package edge_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/ssp2"
)

// TestHubGateFollowsHome: a backfill of an edge partition runs at the
// edge; from its declaration until its activation the hub refuses the
// replica (retryable sync.schema_not_ready, reason
// home_checkpoint_pending) — while the batch already committed is in the
// replica — and serves it again, backfill included, once the edge
// activated the checkpoint. A realtime session of the hub gets no delta
// of the batch: it is answered reset-required, as at the home.
func TestHubGateFollowsHome(t *testing.T) {
	tp := startTopology(t)
	ctx := context.Background()
	pushTodos(t, clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer"), "seed", 2)
	tp.waitReplica(edgePart)
	reader := clientOf(t, tp.hub, edgePart, &client.MemoryStore{Rows: true}, "hub-reader")
	syncOK(t, reader)
	live := clientOf(t, tp.hub, edgePart, &client.MemoryStore{Rows: true}, "hub-live")
	syncOK(t, live)
	rt, err := live.NewRealtime(client.RealtimeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Stop(context.Background()) })
	poll.Until(t, waitShort, "realtime connected", func() bool { return rt.Status().State == client.RealtimeConnected })
	m := tp.hub.Realtime.Metrics()
	deltas, resets := m.Deltas.Load(), m.WakesReset.Load()

	finish := startHeldMigration(t, ctx, tp.edg)
	// The first batch is committed at the edge (seq 3) and replicated;
	// the hub refuses the partition meanwhile.
	tp.waitReplica(edgePart)
	poll.Until(t, waitLong, "the hub refuses the migrating partition", func() bool {
		_, err := reader.SyncUntilIdle(ctx)
		var ce *client.Error
		if !errors.As(err, &ce) {
			return false
		}
		if ce.Code != ssp2.CodeSchemaNotReady || !ce.Retryable || !strings.Contains(string(ce.Details), `"home_checkpoint_pending"`) {
			t.Fatalf("refusal %v, want the retryable sync.schema_not_ready", err)
		}
		return true
	})
	if hp, _ := tp.hub.Store.PartitionGet(ctx, edgePart); hp.MaxCommitSeq != 3 {
		t.Fatalf("replica at seq %d, want 3 (the first batch)", hp.MaxCommitSeq)
	}
	if reader.Count("todos") != 2 {
		t.Fatalf("the hub served %d rows mid-migration, want the 2 from before it", reader.Count("todos"))
	}
	// The hub's realtime hub handles the batch commit one way or the
	// other: a delta, or a reset-required wake.
	poll.Until(t, waitLong, "the batch commit reached the hub's sessions", func() bool {
		return m.Deltas.Load() > deltas || m.WakesReset.Load() > resets
	})
	if m.Deltas.Load() != deltas {
		t.Fatalf("the hub sent %d deltas mid-migration, want none", m.Deltas.Load()-deltas)
	}
	if _, ok := live.Row("todos", "bf-1"); ok {
		t.Fatal("the hub's realtime client holds the migration's batch row mid-migration")
	}

	if err := finish(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLong, "the hub serves the partition again", func() bool {
		_, err := reader.SyncUntilIdle(ctx)
		return err == nil
	})
	if reader.Count("todos") != 4 {
		t.Fatalf("hub reader holds %d rows after the migration, want 4", reader.Count("todos"))
	}
	poll.Until(t, waitLong, "the realtime client back with the backfill", func() bool {
		_, ok := live.Row("todos", "bf-2")
		return ok && live.Count("todos") == 4
	})
	sameRows(t, rows(t, tp.edg.Store, edgePart), rows(t, tp.hub.Store, edgePart))
}
