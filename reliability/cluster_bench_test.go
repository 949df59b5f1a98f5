package reliability

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// BenchmarkClusterPushPull is push-pull rounds (one upsert, then a sync
// that pushes it and pulls the partition) from 24 clients over 24
// partitions, against one node and against a three-member cluster on the
// same PostgreSQL, each client on member i%n. It reports rounds/s.
func BenchmarkClusterPushPull(b *testing.B) {
	for _, members := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", members), func(b *testing.B) {
			pgURL, pgSchema := pgtest.Schema(b)
			var c *cluster
			if members == 1 {
				ch, err := spawnChild(childSpec{DataDir: b.TempDir(), PGURL: pgURL, PGSchema: pgSchema})
				if err != nil {
					b.Fatal(err)
				}
				c = &cluster{nodes: []*child{ch}, dead: make([]atomic.Bool, 1)}
				b.Cleanup(func() { c.kill(b, 0) })
			} else {
				c = startCluster(b, members, pgURL, pgSchema)
			}
			const clients = 24
			ccs := make([]*clusterClient, clients)
			for i := range ccs {
				ccs[i] = newClusterClient(b, c, i, clients)
				warmRound(b, ccs[i], 0) // the bootstrap, outside the timing
			}
			var next atomic.Int64
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for _, cc := range ccs {
				wg.Go(func() {
					for n := 1; next.Add(1) <= int64(b.N); n++ {
						if err := cc.round(context.Background(), b, n); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rounds/s")
		})
	}
}

// BenchmarkClusterFailover kills the member a client syncs with and
// measures the time from the kill to the client's first successful round
// on a survivor (the client notices the dead member by a failed round).
func BenchmarkClusterFailover(b *testing.B) {
	pgURL, pgSchema := pgtest.Schema(b)
	var total time.Duration
	for range b.N {
		b.StopTimer()
		c := startCluster(b, 3, pgURL, pgSchema)
		cc := newClusterClient(b, c, 0, 1)
		for n := 1; n <= 3; n++ {
			warmRound(b, cc, n)
		}
		b.StartTimer()
		killed := time.Now()
		c.kill(b, 0)
		for n := 4; ; n++ {
			if err := cc.round(context.Background(), b, n); err == nil {
				break
			}
			if time.Since(killed) > 30*time.Second {
				b.Fatal("no successful round 30 s after the kill")
			}
			cc.member = c.live(cc.member + 1)
			cc.connect(b, c.nodes[cc.member].url)
		}
		total += time.Since(killed)
		b.StopTimer()
		for i := 1; i < 3; i++ {
			c.kill(b, i)
		}
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/failover")
}

// warmRound runs a round until it succeeds: right after a cluster starts
// a round may be refused with a retryable code while the serve gate
// settles.
func warmRound(b *testing.B, cc *clusterClient, n int) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cc.round(context.Background(), b, n)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		<-time.After(10 * time.Millisecond) // a client's retry pause
	}
}
