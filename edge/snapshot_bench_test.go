package edge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/internal/poll"
)

// BenchmarkSnapshotRebuild: the edge holds 2,000 rows; each run, cut
// off, it takes 10 more commits and prunes its whole log, so the hub must
// rebuild the replica from a snapshot of the edge's rows. The clock runs
// from the restore of the link until the replica holds the edge's epoch
// and max seq (rebuild-ms). Leaf reconnect 100ms and status polls every
// 50ms, as in the tests.
func BenchmarkSnapshotRebuild(b *testing.B) {
	const rows = 2000
	tp := startTopology(b)
	ctx := context.Background()
	writer := clientOf(b, tp.edg, edgePart, &client.MemoryStore{}, "bench-writer")
	pushTodos(b, writer, "seed", rows)
	tp.waitReplica(edgePart)
	var total time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		tp.cut()
		pushTodos(b, writer, fmt.Sprintf("run%d", i), 10)
		ep, err := tp.edg.Store.PartitionGet(ctx, edgePart)
		if err != nil {
			b.Fatal(err)
		}
		pruneEdge(b, tp, ep.MaxCommitSeq)
		b.StartTimer()
		start := time.Now()
		tp.px.Restore()
		poll.Until(b, time.Minute, "rebuilt", func() bool {
			hp, err := tp.hub.Store.PartitionGet(ctx, edgePart)
			return err == nil && hp.MaxCommitSeq == ep.MaxCommitSeq && tp.hub.EdgeHub.Metrics().Snapshots.Load() == int64(i+1)
		})
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "rebuild-ms")
}
