package client

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkBootstrap100k bootstraps a 100 000-row subscription over
// loopback HTTP into a fresh client per iteration: the server builds every
// page from SQLite and streams it inline; the client decodes and applies
// it block by block. rows/s counts rows landed in the replica.
func BenchmarkBootstrap100k(b *testing.B) {
	const n = 100_000
	srv := newServer(b, allowSeeding)
	seed(b, srv, n, "p1")
	for _, bc := range []struct {
		name     string
		pull     PullOptions
		encoding string
	}{
		// The server's default page size: 1000-row pages, 4 per round.
		{"pages=1000x4/zstd", PullOptions{}, ""},
		// Bulk pages: 10 000-row pages, 10 per round (one round).
		{"pages=10000x10/zstd", PullOptions{LimitSnapshotRows: 10_000, MaxSnapshotPages: 10}, ""},
		{"pages=10000x10/identity", PullOptions{LimitSnapshotRows: 10_000, MaxSnapshotPages: 10}, "identity"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			var rounds int
			cpu0 := cpuTime()
			for b.Loop() {
				c := srv.client("alice", []string{"p1"}, func(cfg *Config) { cfg.Pull, cfg.AcceptEncoding = bc.pull, bc.encoding })
				res, err := c.SyncUntilIdle(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if c.Count("tasks") != n {
					b.Fatalf("replica holds %d rows", c.Count("tasks"))
				}
				rounds += res.Rounds
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(rounds)/float64(b.N), "rounds/op")
			// Rows per second of process CPU, client and server together:
			// steadier than rows/s on a shared machine.
			b.ReportMetric(float64(n)*float64(b.N)/(cpuTime()-cpu0).Seconds(), "rows/cpu-s")
		})
	}
}

// BenchmarkBootstrap100kNode bootstraps 100 000 rows through a whole node
// (node.New and Start: segment store, embedded NATS): 10 000-row pages travel as
// SEGMENT_REFs and are fetched from GET /segments/{id}. The first
// iteration builds the segments; later ones reuse them, as every client
// after the first does in production.
func BenchmarkBootstrap100kNode(b *testing.B) {
	const n = 100_000
	srv, _ := startNode(b, 0)
	seed(b, srv, n, "p1")
	ctx := context.Background()
	var downloads int
	cpu0 := cpuTime()
	for b.Loop() {
		c := srv.client("alice", []string{"p1"}, func(cfg *Config) {
			cfg.Pull = PullOptions{LimitSnapshotRows: 10_000, MaxSnapshotPages: 10}
		})
		res, err := c.SyncUntilIdle(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if c.Count("tasks") != n {
			b.Fatalf("replica holds %d rows", c.Count("tasks"))
		}
		downloads += res.Downloads
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(downloads)/float64(b.N), "downloads/op")
	b.ReportMetric(float64(n)*float64(b.N)/(cpuTime()-cpu0).Seconds(), "rows/cpu-s")
}

// BenchmarkPushPull20Clients runs 20 concurrent clients, each in its own
// project, each round pushing one small commit and pulling its
// subscription in the same request (SPEC.md §7.2: push and pull ride one
// round). One op is one round of one client; rounds/s is the aggregate,
// p50 and p95 the round latency (queueing the commit included). The
// sub-benchmarks differ in the Accept-Encoding the clients send: the
// default zstd, gzip, or identity.
//
// The engine sub-benchmarks serve from an engine over SQLite behind the
// HTTP handler; node runs a whole node (relay publishing every commit to
// the embedded NATS server included).
func BenchmarkPushPull20Clients(b *testing.B) {
	for _, enc := range []struct{ name, accept string }{{"zstd", ""}, {"identity", "identity"}} {
		b.Run("engine/"+enc.name, func(b *testing.B) { benchPushPull(b, newServer(b, nil), 20, enc.accept) })
	}
	b.Run("node/zstd", func(b *testing.B) {
		srv, _ := startNode(b, 0)
		benchPushPull(b, srv, 20, "")
	})
}

func benchPushPull(b *testing.B, srv *server, clients int, acceptEncoding string) {
	ctx := context.Background()
	cs := make([]*Client, clients)
	for i := range cs {
		cs[i] = srv.client(fmt.Sprintf("user%d", i), []string{fmt.Sprintf("p%d", i)}, func(cfg *Config) { cfg.AcceptEncoding = acceptEncoding })
		if _, err := cs[i].SyncUntilIdle(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	lat := make([][]time.Duration, clients)
	b.ResetTimer()
	cpu0 := cpuTime()
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			project := fmt.Sprintf("p%d", i)
			for {
				k := next.Add(1)
				if k > int64(b.N) {
					return
				}
				row := task(fmt.Sprintf("%s-t%d", project, k%100), project, "a small edit")
				row["updated_at_ms"] = k
				start := time.Now()
				if _, err := c.Upsert(ctx, "tasks", row); err != nil {
					b.Error(err)
					return
				}
				res, err := c.Sync(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], time.Since(start))
				if len(res.Pushed) != 1 || res.Commits != 1 {
					b.Errorf("round pushed %d and pulled %d commits", len(res.Pushed), res.Commits)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu := cpuTime() - cpu0
	all := slices.Concat(lat...)
	if len(all) == 0 {
		return
	}
	b.ReportMetric(float64(len(all))/b.Elapsed().Seconds(), "rounds/s")
	reportLatency(b, all)
	// Process CPU (clients and server together) per round: steadier than
	// wall-clock rates on a shared machine.
	b.ReportMetric(float64(cpu.Microseconds())/float64(len(all)), "cpu-µs/round")
}

// reportLatency reports the p50 and p95 of ds in milliseconds.
func reportLatency(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	pct := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.95), "p95-ms")
}

// BenchmarkRealtimePropagation measures one node, real WebSockets: client
// A pushes one commit (over POST /sync, or over its own socket), client B
// — connected, subscribed — receives it as a delta and applies it; one op
// is one commit, timed from A's write until B's replica holds it.
// deltas/op is the share that arrived as deltas (the rest through a
// wake-up and a round).
func BenchmarkRealtimePropagation(b *testing.B) {
	for _, socket := range []bool{false, true} {
		name := "push=http"
		if socket {
			name = "push=socket"
		}
		b.Run(name, func(b *testing.B) {
			srv, n := startNode(b, 0)
			a := srv.client("alice", nil, func(cfg *Config) { cfg.Token = srv.token("alice", "p1") })
			mustSync(b, a)
			if socket {
				goLive(b, a, nil)
			}
			applied := make(chan int64, 64)
			bob := srv.client("bob", []string{"p1"}, func(cfg *Config) {
				cfg.AppliedFunc = func(res Result) {
					for _, s := range res.CommitSeqs {
						applied <- s
					}
				}
			})
			rt := goLive(b, bob, nil)
			firstRound(b, rt)
			acksSeen(b, n, 1)
			ds := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				seq := pushTask(b, a, "t"+strconv.Itoa(i%100), "p1", "edit "+strconv.Itoa(i))
				for got := int64(0); got != seq; {
					select {
					case got = <-applied:
					case <-time.After(wait):
						b.Fatalf("commit %d never reached bob", seq)
					}
				}
				ds = append(ds, time.Since(start))
			}
			b.StopTimer()
			reportLatency(b, ds)
			b.ReportMetric(float64(rt.Stats().Deltas)/float64(b.N), "deltas/op")
		})
	}
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkImageBootstrap100k bootstraps 100 000 rows on the SQLite-image
// lane (SPEC.md §5.3) through a whole node over loopback HTTP into a
// fresh Go client per iteration.
//
// warm: the image is built once before the timer; every iteration is a
// client's pull, one SEGMENT_REF, the image's download (identity or
// zstd) and its verified apply — what every client after the first pays.
// cold: each iteration first commits one row outside the timer, moving
// the pin, so the iteration builds a new image (rows read, database
// written with the modernc SQLite, stored in the Object Store) before
// the client downloads and applies it; build-ms is the engine's build
// time alone.
func BenchmarkImageBootstrap100k(b *testing.B) {
	const n = 100_000
	srv, nd := startNode(b, 0)
	seed(b, srv, n, "p1")
	ctx := context.Background()
	pull := PullOptions{Accept: 7}
	bootstrap := func(b *testing.B, enc string) {
		c := srv.client("alice", []string{"p1"}, func(cfg *Config) { cfg.Pull, cfg.SegmentAcceptEncoding = pull, enc })
		res, err := c.SyncUntilIdle(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if res.Images != 1 || c.Count("tasks") != n {
			b.Fatalf("%d images, replica holds %d rows", res.Images, c.Count("tasks"))
		}
	}
	for _, enc := range []string{"identity", "zstd"} {
		b.Run("warm/"+enc, func(b *testing.B) {
			bootstrap(b, enc) // builds, or finds the image built
			cpu0 := cpuTime()
			for b.Loop() {
				bootstrap(b, enc)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(n)*float64(b.N)/(cpuTime()-cpu0).Seconds(), "rows/cpu-s")
		})
	}
	b.Run("cold", func(b *testing.B) {
		m := nd.Engine.Metrics()
		built0, nanos0 := m.ImagesBuilt.Load(), m.ImageBuildNanos.Load()
		writer := srv.client("writer", []string{"p1"}, nil)
		i := 0
		var cpu time.Duration
		for b.Loop() {
			b.StopTimer()
			i++
			row := task("p1-0000001", "p1", fmt.Sprintf("edit %d", i))
			row["priority"], row["updated_at_ms"] = 1, 1_700_000_000_001
			if _, err := writer.Commit(ctx, Upsert("tasks", row)); err != nil {
				b.Fatal(err)
			}
			if _, err := writer.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			cpu0 := cpuTime()
			bootstrap(b, "identity")
			cpu += cpuTime() - cpu0
		}
		built := m.ImagesBuilt.Load() - built0
		if built != int64(b.N) {
			b.Fatalf("%d images built in %d iterations", built, b.N)
		}
		b.ReportMetric(float64(m.ImageBuildNanos.Load()-nanos0)/float64(built)/1e6, "build-ms")
		// Process CPU of the whole cold bootstrap (build, store, download,
		// apply): steadier than wall time on a shared machine.
		b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
	})
}
