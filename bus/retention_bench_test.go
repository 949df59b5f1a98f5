package bus

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/bus/bustest"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/internal/poll"
)

// BenchmarkBlockRetention measures what the commit stream's file store
// keeps resident after a burst of commit events with no consumer at all
// (the hubs follow the live tail, see tail.go): 30,000 events of 1.1 KB on
// one partition, about what a quiet 20-VU push-pull node publishes in 8 s,
// then the live heap after two collections. plain publishes with no
// reader; follow adds an ordered consumer (Follow, what the hubs used);
// with cas, each publish carries
// the relay's compare-and-set on the partition's last subject sequence.
// Up to nats-server v2.15.2 the server answered that by loading the last
// message from the block (stream.go LoadLastMsg; filestore.go cacheLookup
// stamps the block's last load), so every block filled in the last 10 s
// kept its 4 MB buffer (tryExpireWriteCache recycles it at rollover only
// when nothing loaded from it): 49 MB here. v2.15.3 reads the sequence
// from the block's per-subject index (LoadLastSeq) and cas is back at
// plain's ~8 MB. tail+cas is a node now: the relay's compare-and-set and
// the hubs' live tail.
//
//	go test ./bus -run '^$' -bench BlockRetention -benchtime 1x
func BenchmarkBlockRetention(b *testing.B) {
	for _, mode := range []string{"plain", "follow", "cas", "tail+cas"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				b.ReportMetric(retainedMB(b, mode), "liveMB")
			}
		})
	}
}

func retainedMB(b *testing.B, mode string) float64 {
	cas := mode == "cas" || mode == "tail+cas"
	srv := embeddedtest.Start(b)
	ctx := bustest.Context(b)
	if err := EnsureStreams(ctx, srv.JetStream(), prod, StreamsConfig{}.WithDefaults()); err != nil {
		b.Fatal(err)
	}
	p := mustNewPartition(b, "load")
	js := srv.JetStream()
	var seen atomic.Int64
	switch mode {
	case "follow": // what the hubs did before: an ordered consumer
		f, err := Follow(ctx, js, prod, FollowParams{}, func(Event) { seen.Add(1) })
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = f.Stop(ctx) }()
	case "tail+cas": // what they do now
		t, err := TailCommits(srv.Conn(), prod, TailConfig{OnEvent: func(TailEvent) { seen.Add(1) }, OnGap: func(Gap) {}})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = t.Stop(ctx) }()
	}
	body := make([]byte, 1100)
	var last uint64
	for i := range 30000 {
		m := tailEvent(b, p, int64(i+1), "todos")
		m.Data = body
		if cas {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
			m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, prod.PartitionCommits(p))
		}
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			b.Fatal(err)
		}
		last = ack.Sequence
	}
	if mode == "follow" || mode == "tail+cas" {
		poll.Until(b, 30*time.Second, "every event delivered", func() bool { return seen.Load() == 30000 })
	}
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / 1e6
}
