package hooks_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/hooks"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/node"
)

// answer runs a hook responder on a TCP connection of its own (a host
// process's view of the bus): every request gets reply.
func answer(b *testing.B, n *node.Node, subject, reply string) {
	b.Helper()
	nc, err := nats.Connect(n.NATS.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte(reply)) }); err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
}

// rounds runs b.N rounds of one upsert plus Sync and reports their p50
// and p99.
func rounds(b *testing.B, c *client.Client, wantCommits int) {
	b.Helper()
	ctx := context.Background()
	if _, err := c.SyncUntilIdle(ctx); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if _, err := c.Upsert(ctx, "todos", nodetest.Todo(fmt.Sprintf("t%d", i%100), "p1", fmt.Sprint("edit ", i))); err != nil {
			b.Fatal(err)
		}
		res, err := c.Sync(ctx)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		if len(res.Pushed) != 1 || len(res.Rejected) != 0 || res.Commits != wantCommits {
			b.Fatalf("round: pushed %d, rejected %v, pulled %d commits", len(res.Pushed), res.Rejected, res.Commits)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkValidateHook is a push round without and with the validate
// hook (a responder that accepts, over loopback TCP): the target is
// ≤ 1 ms p50 added.
func BenchmarkValidateHook(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "without", true: "with"}[on], func(b *testing.B) {
			n := nodetest.Start(b, func(c *node.Config) {
				if on {
					c.Hooks.Validate = &hooks.ValidateConfig{}
				}
			})
			if on {
				answer(b, n, "syncnode.hook.validate.>", `{"accept":true}`)
			}
			rounds(b, nodetest.Client(b, n, nodetest.Token(b, "alice", "acme", p1)), 0)
		})
	}
}

// BenchmarkScopesHook is a push + pull round with the token's static
// scopes and with the scopes hook answering from a warm cache: the target
// is ≤ 3% overhead.
func BenchmarkScopesHook(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "token-scopes", true: "hook-warm-cache"}[on], func(b *testing.B) {
			n := nodetest.Start(b, func(c *node.Config) {
				if on {
					c.Hooks.Scopes = &hooks.ScopesConfig{Cache: hooks.CacheConfig{TTL: time.Hour}}
				}
			})
			if on {
				answer(b, n, "syncnode.hook.scopes.>", `{"scopes":{"project_id":["p1"]}}`)
			}
			c := nodetest.Client(b, n, nodetest.Token(b, "alice", "acme", p1))
			if err := c.Subscribe("s1", "todos", p1); err != nil {
				b.Fatal(err)
			}
			rounds(b, c, 1)
		})
	}
}
