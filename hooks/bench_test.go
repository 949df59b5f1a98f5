package hooks_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/hooks"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
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

// pct is the p-quantile of sorted lat in milliseconds.
func pct(lat []time.Duration, p float64) float64 {
	return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
}

// percentiles reports the p50 and p99 of lat.
func percentiles(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(pct(lat, 0.50), "p50-ms")
	b.ReportMetric(pct(lat, 0.99), "p99-ms")
}

// round is one upsert plus Sync on c, checked: the commit applies and
// the pull brings wantCommits commits.
func round(b *testing.B, c *client.Client, i, wantCommits int) time.Duration {
	ctx := context.Background()
	start := time.Now()
	if _, err := c.Upsert(ctx, "todos", nodetest.Todo(fmt.Sprintf("t%d", i%100), "p1", fmt.Sprint("edit ", i))); err != nil {
		b.Fatal(err)
	}
	res, err := c.Sync(ctx)
	if err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	if len(res.Pushed) != 1 || len(res.Rejected) != 0 || res.Commits != wantCommits {
		b.Fatalf("round: pushed %d, rejected %v, pulled %d commits", len(res.Pushed), res.Rejected, res.Commits)
	}
	return d
}

// paired runs b.N rounds on each of two clients, one of a node without
// the hook and one of a node with it, alternating which goes first, so
// that both see the same load on a shared machine (separate runs drift
// apart by more than the overhead measured). It reports each side's p50
// and p99, the p50 the hook adds and that as a percentage.
func paired(b *testing.B, without, with *client.Client, wantCommits int) {
	b.Helper()
	for _, c := range []*client.Client{without, with} {
		if _, err := c.SyncUntilIdle(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	lw, lh := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			lw = append(lw, round(b, without, i, wantCommits))
			lh = append(lh, round(b, with, i, wantCommits))
		} else {
			lh = append(lh, round(b, with, i, wantCommits))
			lw = append(lw, round(b, without, i, wantCommits))
		}
	}
	b.StopTimer()
	slices.Sort(lw)
	slices.Sort(lh)
	w, h := pct(lw, 0.50), pct(lh, 0.50)
	b.ReportMetric(w, "without-p50-ms")
	b.ReportMetric(pct(lw, 0.99), "without-p99-ms")
	b.ReportMetric(h, "with-p50-ms")
	b.ReportMetric(pct(lh, 0.99), "with-p99-ms")
	b.ReportMetric(h-w, "added-p50-ms")
	b.ReportMetric(100*(h-w)/w, "added-p50-%")
}

// BenchmarkValidateHook is a push round without and with the validate
// hook (a responder that accepts, over loopback TCP): the target is
// ≤ 1 ms p50 added.
func BenchmarkValidateHook(b *testing.B) {
	plain := nodetest.Start(b, nil)
	n := nodetest.Start(b, func(c *node.Config) { c.Hooks.Validate = &hooks.ValidateConfig{} })
	answer(b, n, "syncnode.hook.validate.>", `{"accept":true}`)
	tok := nodetest.Token(b, "alice", "acme", p1)
	paired(b, nodetest.Client(b, plain, tok), nodetest.Client(b, n, tok), 0)
	hookMean(b, n, "validate")
}

// BenchmarkScopesHook is a push + pull round with the token's static
// scopes and with the scopes hook answering from a warm cache: the target
// is ≤ 3% overhead.
func BenchmarkScopesHook(b *testing.B) {
	plain := nodetest.Start(b, nil)
	n := nodetest.Start(b, func(c *node.Config) {
		c.Hooks.Scopes = &hooks.ScopesConfig{Cache: hooks.CacheConfig{TTL: time.Hour}}
	})
	answer(b, n, "syncnode.hook.scopes.>", `{"scopes":{"project_id":["p1"]}}`)
	tok := nodetest.Token(b, "alice", "acme", p1)
	var cs []*client.Client
	for _, nd := range []*node.Node{plain, n} {
		c := nodetest.Client(b, nd, tok)
		if err := c.Subscribe("s1", "todos", p1); err != nil {
			b.Fatal(err)
		}
		cs = append(cs, c)
	}
	paired(b, cs[0], cs[1], 1)
}

// BenchmarkValidateRequest is the validate hook's request alone, from a
// running node's connection to an accepting responder over loopback TCP,
// for a one-row commit: the part of BenchmarkValidateHook's added time
// that crosses the bus.
func BenchmarkValidateRequest(b *testing.B) {
	n := nodetest.Start(b, func(c *node.Config) { c.Hooks.Validate = &hooks.ValidateConfig{} })
	answer(b, n, "syncnode.hook.validate.>", `{"accept":true}`)
	cv := engine.CommitValidation{Partition: "acme", ActorID: "alice", ClientID: "c1", ClientCommitID: "cc1",
		Operations: []engine.OperationEvidence{{Op: ssp2.OpUpsert, Table: "todos", RowID: "t1",
			Row: engine.Row{"id": "t1", "project_id": "p1", "title": "edit 1", "done": false}}}}
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := n.Hooks.Validator.Validate(ctx, cv); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	percentiles(b, lat)
}

// hookMean reports the mean latency of hook's requests as the node's
// metrics recorded them: how much of a round's added time is the request.
func hookMean(b *testing.B, n *node.Node, hook string) {
	resp, err := http.Get(n.URL() + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	value := func(series string) float64 {
		for line := range strings.SplitSeq(string(text), "\n") {
			if v, ok := strings.CutPrefix(line, series+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				return f
			}
		}
		b.Fatalf("no %s in the metrics", series)
		return 0
	}
	label := `{hook="` + hook + `"}`
	sum, count := value("syncnode_hook_request_duration_seconds_sum"+label), value("syncnode_hook_request_duration_seconds_count"+label)
	b.ReportMetric(sum/count*1000, "hook-mean-ms")
}
