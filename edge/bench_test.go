package edge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/internal/poll"
)

// BenchmarkEdgeCatchUp: the edge takes 2,000 commits while cut off; the
// clock starts when the link is restored (the proxy accepts again) and
// stops when the hub's replica holds the edge's max seq (replica-ms) and
// when the hub's source stream holds every event (sourced-ms). Leaf
// reconnect 100ms and status polls every 50ms, as in the tests.
func BenchmarkEdgeCatchUp(b *testing.B) {
	const queued = 2000
	tp := startTopology(b)
	ctx := context.Background()
	writer := clientOf(b, tp.edg, edgePart, &client.MemoryStore{}, "bench-writer")
	pushTodos(b, writer, "warmup", 10)
	tp.waitReplica(edgePart)
	var replicaTotal, sourcedTotal, linkTotal time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		poll.Until(b, waitLong, "sourced warm", func() bool { return edgeStreamCount(b, tp.hub) == uint64(10+i*queued) })
		tp.cut()
		pushTodos(b, writer, fmt.Sprintf("run%d", i), queued)
		want := uint64(10 + (i+1)*queued)
		ep, err := tp.edg.Store.PartitionGet(ctx, edgePart)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		tp.px.Restore()
		var replicaAt, linkAt time.Duration
		poll.Until(b, time.Minute, "caught up", func() bool {
			if linkAt == 0 && tp.edg.NATS.LeafConnections() > 0 {
				linkAt = time.Since(start)
			}
			if replicaAt == 0 {
				if hp, err := tp.hub.Store.PartitionGet(ctx, edgePart); err == nil && hp.MaxCommitSeq == ep.MaxCommitSeq {
					replicaAt = time.Since(start)
				}
			}
			return replicaAt != 0 && edgeStreamCount(b, tp.hub) == want
		})
		sourcedTotal += time.Since(start)
		replicaTotal += replicaAt
		linkTotal += linkAt
	}
	b.ReportMetric(float64(linkTotal.Milliseconds())/float64(b.N), "link-ms")
	b.ReportMetric(float64(replicaTotal.Milliseconds())/float64(b.N), "replica-ms")
	b.ReportMetric(float64(sourcedTotal.Milliseconds())/float64(b.N), "sourced-ms")
}

// BenchmarkSourceResumeAfterLongCut compares, in one cut, the hub's
// durable source (EDGE_<edge>_COMMITS) with a plain cross-domain source
// of the same stream (the server's ephemeral source consumer): the link
// stays cut until the hub reports the plain source silent for 21 s (the
// edge deletes the server's ephemeral source consumer after 10 s without
// interest, the hub checks its sources every 10 s), one commit is made,
// and the clock runs from the restore until each stream holds it.
func BenchmarkSourceResumeAfterLongCut(b *testing.B) {
	tp := startTopology(b)
	ctx := context.Background()
	names := bus.Names{}
	js := tp.hub.NATS.JetStream()
	const plain = "EXP_PLAIN_SOURCE"
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: plain, Sources: []*jetstream.StreamSource{{
		Name: names.CommitStream(), Domain: edgeName,
		SubjectTransforms: []jetstream.SubjectTransformConfig{{Source: names.AllCommits(), Destination: "plain." + names.AllCommits()}},
	}}}); err != nil {
		b.Fatal(err)
	}
	count := func(name string) uint64 {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return 0
		}
		info, err := s.Info(ctx)
		if err != nil {
			return 0
		}
		return info.State.Msgs
	}
	// silent is how long the plain stream's source has not heard from
	// the edge, as the hub reports it.
	silent := func() time.Duration {
		st, err := js.Stream(ctx, plain)
		if err != nil {
			return 0
		}
		info, err := st.Info(ctx)
		if err != nil || len(info.Sources) == 0 {
			return 0
		}
		return info.Sources[0].Active
	}
	writer := clientOf(b, tp.edg, edgePart, &client.MemoryStore{}, "bench-writer")
	var durable, eph time.Duration
	for i := range b.N {
		pushTodos(b, writer, fmt.Sprintf("warm%d", i), 1)
		want := uint64(2*i + 1)
		poll.Until(b, waitLong, "both sourced", func() bool { return count(plain) == want && edgeStreamCount(b, tp.hub) == want })
		tp.cut()
		// Past the edge's inactive threshold for the server's ephemeral
		// source consumer (10 s) and a health check of the hub's (10 s).
		poll.Until(b, time.Minute, "the plain source silent for 21s", func() bool { return silent() >= 21*time.Second })
		pushTodos(b, writer, fmt.Sprintf("cut%d", i), 1)
		start := time.Now()
		tp.px.Restore()
		var d, e time.Duration
		poll.Until(b, 5*time.Minute, "both resumed", func() bool {
			if d == 0 && edgeStreamCount(b, tp.hub) == want+1 {
				d = time.Since(start)
			}
			if e == 0 && count(plain) == want+1 {
				e = time.Since(start)
			}
			return d != 0 && e != 0
		})
		durable += d
		eph += e
		b.Logf("run %d: durable source resumed %v after the restore, ephemeral %v", i, d, e)
	}
	b.ReportMetric(float64(durable.Milliseconds())/float64(b.N), "durable-ms")
	b.ReportMetric(float64(eph.Milliseconds())/float64(b.N), "ephemeral-ms")
}
