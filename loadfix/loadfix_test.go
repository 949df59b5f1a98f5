package loadfix

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

type backend struct {
	name string
	cfg  func(testing.TB, *node.Config)
}

var backends = []backend{
	{"sqlite", func(testing.TB, *node.Config) {}},
	{"postgres", func(tb testing.TB, c *node.Config) { c.Store.Postgres.URL, c.Store.Postgres.Schema = pgtest.Schema(tb) }},
}

// startLoadNode starts a real node (store, embedded NATS, segments,
// engine, HTTP on random ports) serving the fixture, as serve
// --load-fixture wires it.
func startLoadNode(tb testing.TB, b backend) (*node.Node, *Fixture) {
	tb.Helper()
	var fix *Fixture
	cfg := node.Config{
		DataDir: tb.TempDir(), Schema: Schema(), HTTP: node.HTTPConfig{Listen: "127.0.0.1:0"},
		NATS: embedded.Config{Port: embedded.RandomPort}, API: httpapi.Config{Auth: Auth()},
		Routes: func(_ context.Context, n *node.Node, h http.Handler) (http.Handler, func(context.Context) error, error) {
			f, err := New(Config{Store: n.Store, Engine: n.Engine})
			if err != nil {
				return nil, nil, err
			}
			fix = f
			return f.Wrap(h), nil, nil
		},
	}
	b.cfg(tb, &cfg)
	if cfg.Store.Postgres.URL == "" {
		cfg.Store.SQLite.Synchronous = sqlitestore.SynchronousNormal
	}
	n, err := node.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			tb.Errorf("stop: %v", err)
		}
	})
	return n, fix
}

func post(tb testing.TB, url string, body any, out any) {
	tb.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			tb.Fatalf("POST %s: %s: %v", url, raw, err)
		}
	}
}

func metrics(tb testing.TB, base string) map[string]any {
	tb.Helper()
	resp, err := http.Get(base + "/__load/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
		tb.Fatalf("metrics: %d, %v", resp.StatusCode, err)
	}
	return m
}

func loadClient(tb testing.TB, base string) *client.Client {
	tb.Helper()
	c, err := client.New(client.Config{BaseURL: base, Schema: Schema()})
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.Subscribe("tasks", "tasks", map[string][]string{"project_id": {Project}}); err != nil {
		tb.Fatal(err)
	}
	return c
}

// TestLoadFixture drives /__load over HTTP on both stores: reset seeds
// rows a client bootstraps, metrics count from the reset, prune keeps the
// newest 50 commits, and a second reset starts over.
func TestLoadFixture(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			n, _ := startLoadNode(t, b)
			ctx := context.Background()
			base := n.URL()

			post(t, base+"/__load/reset", map[string]int{"seedRows": 2500}, nil)
			c := loadClient(t, base)
			res, err := c.SyncUntilIdle(ctx)
			if err != nil || c.Count("tasks") != 2500 {
				t.Fatalf("bootstrap: %d rows, %+v, %v", c.Count("tasks"), res, err)
			}
			row, ok := c.Row("tasks", "row-0001234")
			if !ok || row.Values["project_id"] != Project || row.Values["title"] != "Seeded task 1234" || row.Values["priority"] != int64(4) ||
				row.Values["done"] != false || row.Values["updated_at_ms"] != int64(seedEpochMs+1234) || c.Version("tasks", "row-0001234") != 1 {
				t.Fatalf("seeded row = %+v, version %d", row, c.Version("tasks", "row-0001234"))
			}

			for i := range 60 {
				if _, err := c.Upsert(ctx, "tasks", map[string]any{"id": fmt.Sprintf("new-%02d", i), "project_id": Project, "title": "t", "done": false, "priority": 1, "updated_at_ms": 1}); err != nil {
					t.Fatal(err)
				}
				if _, err := c.Sync(ctx); err != nil {
					t.Fatal(err)
				}
			}
			m := metrics(t, base)
			for _, k := range []string{"rssBytes", "peakRssBytes", "cpuSeconds", "requests", "requestErrors", "requestDurationMs", "segmentsBuilt", "segmentsReused",
				"pushApplied", "pushConflicted", "pushRejected", "realtimeDeltas", "realtimeWakes", "realtimeOpened", "realtimeClosed", "realtimeRounds", "realtimeAcks", "pruneRuns", "pruneRemovedCommits"} {
				if _, ok := m[k]; !ok {
					t.Errorf("metrics lack %s: %v", k, m)
				}
			}
			if m["pushApplied"] != 60.0 || m["segmentsBuilt"].(float64) < 1 || m["requests"].(float64) < 61 || m["requestErrors"] != 0.0 ||
				m["rssBytes"].(float64) <= 0 || m["peakRssBytes"].(float64) < m["rssBytes"].(float64) || m["cpuSeconds"].(float64) <= 0 {
				t.Fatalf("metrics = %v", m)
			}
			d := m["requestDurationMs"].(map[string]any)
			if d["p50"].(float64) <= 0 || d["p50"].(float64) > d["p99"].(float64) {
				t.Fatalf("durations = %v", d)
			}

			var pr struct{ RemovedCommits *int64 }
			post(t, base+"/__load/prune", nil, &pr)
			if pr.RemovedCommits == nil || *pr.RemovedCommits != 10 {
				t.Fatalf("prune removed %v, want 10 (60 commits, 50 retained)", pr.RemovedCommits)
			}
			if m := metrics(t, base); m["pruneRuns"] != 1.0 || m["pruneRemovedCommits"] != 10.0 {
				t.Fatalf("prune metrics = %v", m)
			}

			// A second reset starts over: fresh partition, zeroed metrics.
			post(t, base+"/__load/reset", map[string]int{"seedRows": 10}, nil)
			m = metrics(t, base)
			if m["requests"] != 0.0 || m["pushApplied"] != 0.0 || m["pruneRuns"] != 0.0 || m["segmentsBuilt"] != 0.0 {
				t.Fatalf("metrics after reset = %v", m)
			}
			p, err := n.Store.PartitionGet(ctx, Partition)
			if err != nil || p.MaxCommitSeq != 0 || p.HorizonSeq != 0 {
				t.Fatalf("partition after reset = %+v, %v", p, err)
			}
			// The old client is told to reset and converges on the new seed.
			if _, err := c.SyncUntilIdle(ctx); err != nil || c.Count("tasks") != 10 {
				t.Fatalf("old client after reset: %d rows, %v", c.Count("tasks"), err)
			}
		})
	}
}

func TestHistogram(t *testing.T) {
	var h histogram
	if got := h.percentiles(0.5); got[0] != 0 {
		t.Fatalf("empty p50 = %v", got)
	}
	// 1..1000 ms, one each.
	for i := 1; i <= 1000; i++ {
		h.observe(time.Duration(i) * time.Millisecond)
	}
	for _, tc := range []struct{ q, want float64 }{{0.5, 500}, {0.95, 950}, {0.99, 990}} {
		got := h.percentiles(tc.q)[0]
		if math.Abs(got-tc.want)/tc.want > 0.07 {
			t.Errorf("p%v = %v, want %v within 7%%", tc.q*100, got, tc.want)
		}
	}
	// Buckets are monotonic and cover every value up to the cap.
	prev := -1
	for us := uint64(0); us < 1<<22; us = us*9/8 + 1 {
		b := bucketOf(us)
		if b < prev || b >= nBuckets {
			t.Fatalf("bucketOf(%d) = %d after %d", us, b, prev)
		}
		if mid := bucketMid(b); us >= subBuckets && math.Abs(mid-float64(us))/float64(us) > 1.0/subBuckets {
			t.Fatalf("bucket %d mid %v is far from %d", b, mid, us)
		}
		prev = b
	}
	h.reset()
	if got := h.percentiles(0.99); got[0] != 0 {
		t.Fatalf("after reset p99 = %v", got)
	}
}

func TestRSS(t *testing.T) {
	rss, peak := readRSS()
	if rss <= 0 || peak < rss {
		t.Fatalf("rss %d, peak %d", rss, peak)
	}
}
