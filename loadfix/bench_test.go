package loadfix

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkReset100k times POST /__load/reset {"seedRows": 100000} over
// HTTP against a real node: wipe the partition (the previous 100k rows
// included, from the second iteration on) and seed 100k rows. Target:
// under 5 s.
func BenchmarkReset100k(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			n, _ := startLoadNode(b, be)
			b.ResetTimer()
			for b.Loop() {
				post(b, n.URL()+"/__load/reset", map[string]int{"seedRows": 100_000}, nil)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/reset")
		})
	}
}

// BenchmarkMetricsUnderLoad times GET /__load/metrics while 16 clients
// push and pull against the same node as fast as they can (each round an
// upsert then an incremental pull of 10k seeded rows' project). Target:
// under 10 ms. It reports the median and p99 of the metrics calls and the
// protocol rounds the load completed meanwhile.
func BenchmarkMetricsUnderLoad(b *testing.B) {
	n, _ := startLoadNode(b, backends[0])
	base := n.URL()
	post(b, base+"/__load/reset", map[string]int{"seedRows": 10_000}, nil)

	ctx, cancel := context.WithCancel(context.Background())
	var rounds atomic.Int64
	var wg sync.WaitGroup
	const clients = 16
	for w := range clients {
		c := loadClient(b, base)
		if _, err := c.SyncUntilIdle(ctx); err != nil { // bootstrap before the clock starts
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				if _, err := c.Upsert(ctx, "tasks", map[string]any{"id": fmt.Sprintf("w%d-%d", w, i), "project_id": Project,
					"title": "load", "done": false, "priority": 1, "updated_at_ms": int64(i)}); err != nil {
					return
				}
				if _, err := c.Sync(ctx); err != nil {
					return
				}
				rounds.Add(1)
			}
		}()
	}

	hc := &http.Client{}
	var lat []time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		resp, err := hc.Get(base + "/__load/metrics")
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	cancel()
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(rounds.Load()), "load-rounds")
}
