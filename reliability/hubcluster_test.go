package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/edge"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// The edge topology of the hub-cluster kill test: one edge "shop1" and
// its partition "p-shop1".
const (
	edgeName = "shop1"
	edgePart = "p-shop1"
)

var edgeHomes = map[string]string{edgePart: edgeName}

// hubSpec makes a child a hub node: its nats.conf (JetStream domain hub,
// a leaf listener) and the homes table.
type hubSpec struct {
	ConfFile     string
	Homes        map[string]string
	PingInterval time.Duration
}

func (h *hubSpec) apply(cfg *node.Config) {
	cfg.NATS = embedded.Config{ConfigFile: h.ConfFile}
	cfg.Edge = edge.Config{Homes: h.Homes, PingInterval: h.PingInterval}
}

// docConf writes an example config of docs/nats with the replacements
// applied (each must match) into dir and returns its path.
func docConf(t testing.TB, dir, name string, repl map[string]string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "nats", name))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for old, repl := range repl {
		if !strings.Contains(text, old) {
			t.Fatalf("docs/nats/%s has no %q", name, old)
		}
		text = strings.ReplaceAll(text, old, repl)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// replicating asks a hub child's /readyz whether it holds the edge's
// replication lease.
func replicating(ch *child) bool {
	resp, err := http.Get(ch.url + "/readyz")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var body struct {
		Edges []edge.LinkStatus `json:"edges"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
		return false
	}
	for _, s := range body.Edges {
		if s.Edge == edgeName && s.Replicating {
			return true
		}
	}
	return false
}

// holders lists the live hub members holding the lease.
func (c *cluster) holders() []int {
	var out []int
	for i, ch := range c.nodes {
		if !c.dead[i].Load() && replicating(ch) {
			out = append(out, i)
		}
	}
	return out
}

// edgeWriter pushes bursts of one-row commits at the edge and records
// what was acknowledged.
type edgeWriter struct {
	cl     *client.Client
	n      int
	acked  map[string]int64
	errors int
}

// burst queues k commits and syncs until they are acknowledged.
func (w *edgeWriter) burst(ctx context.Context, t *testing.T, k int) {
	for range k {
		w.n++
		row := map[string]any{"id": fmt.Sprintf("r%d", w.n), "project_id": "p1", "body": "x", "n": int64(w.n), "score": 0.5, "weight": 1.0}
		if _, err := w.cl.Upsert(ctx, "items", row); err != nil {
			t.Errorf("edge writer: upsert: %v", err)
			return
		}
	}
	for len(w.cl.Pending()) > 0 && ctx.Err() == nil {
		res, err := w.cl.Sync(ctx)
		for _, p := range res.Pushed {
			if p.Status == ssp2.PushRejected {
				t.Errorf("edge writer: commit %s rejected", p.ClientCommitID)
			}
			w.acked[p.ClientCommitID] = p.CommitSeq
		}
		if err != nil {
			w.errors++
		}
	}
}

func edgeClient(t testing.TB, url, clientID string) *client.Client {
	t.Helper()
	tok, err := auth.Mint(secret, auth.Principal{ActorID: "alice", Partition: edgePart, Scopes: map[string][]string{"project_id": {"p1"}}}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(client.Config{BaseURL: url, Token: tok, ClientID: clientID, Schema: mustSchema(t), Store: &client.MemoryStore{Rows: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Subscribe("items", "items", map[string][]string{"project_id": {"p1"}}); err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestHubClusterHolderKilled runs a hub of three syncnode processes on
// one PostgreSQL schema (one NATS cluster, domain hub) and an edge whose
// leaf remote lists all three. The edge's client writes bursts of
// commits; the hub member holding the edge's replication lease (the
// PostgreSQL advisory lock) is SIGKILLed while the edge writes and the
// replica trails it. A survivor takes the lease over; the replica
// converges to the edge's rows, with the edge's epoch, commit seqs and
// row versions, every commit applied once; the hub's bus carries every
// replicated commit exactly once; the sourced stream holds each edge
// event once; a device at a survivor pulls every row. It logs the
// takeover time (kill → a survivor replicating) and the catch-up time
// (kill → the replica holding what the edge held at the kill).
func TestHubClusterHolderKilled(t *testing.T) {
	pgURL, pgSchema := pgtest.Schema(t)
	confDir := t.TempDir()
	hub := &hubSpec{ConfFile: docConf(t, confDir, "hub.conf", map[string]string{
		"listen: 127.0.0.1:4223": "listen: 127.0.0.1:-1",
		"listen: 0.0.0.0:7422":   "listen: 127.0.0.1:-1",
	}), Homes: edgeHomes, PingInterval: 50 * time.Millisecond}
	c := startClusterOf(t, 3, pgURL, pgSchema, hub)
	leafs := make([]string, len(c.nodes))
	for i, ch := range c.nodes {
		leafs[i] = `"` + ch.leafURL + `"`
	}
	ecfg, err := nodeConfig(store{dataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ecfg.Name = edgeName
	ecfg.NATS = embedded.Config{ConfigFile: docConf(t, confDir, "edge.conf", map[string]string{
		"listen: 127.0.0.1:4223":                  "listen: 127.0.0.1:-1",
		`url: "nats-leaf://hub.example.com:7422"`: "urls: [" + strings.Join(leafs, ", ") + "]",
		`reconnect: "250ms"`:                      `reconnect: "100ms"`,
	})}
	ecfg.Edge = edge.Config{Name: edgeName, Homes: edgeHomes}
	edg, err := runNode(context.Background(), ecfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := edg.Stop(ctx); err != nil {
			t.Errorf("stop the edge: %v", err)
		}
	})

	cfg, err := nodeConfig(store{dataDir: t.TempDir(), pgURL: pgURL, pgSchema: pgSchema})
	if err != nil {
		t.Fatal(err)
	}
	hubStore, err := node.OpenStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer hubStore.Close()
	ctx := context.Background()
	// The members installed it; this reads its rows.
	if err := hubStore.EnsureSchema(ctx, cfg.Schema); err != nil {
		t.Fatal(err)
	}
	maxSeq := func(st storage.Store) int64 {
		p, err := st.PartitionGet(ctx, edgePart)
		if err != nil {
			return -1
		}
		return p.MaxCommitSeq
	}

	w := &edgeWriter{cl: edgeClient(t, edg.URL(), "edge-writer"), acked: map[string]int64{}}
	w.burst(ctx, t, 100)
	poll.Until(t, 2*time.Minute, "the replica holding the first burst", func() bool { return maxSeq(hubStore) == maxSeq(edg.Store) })
	var holder []int
	poll.Until(t, 30*time.Second, "one hub member replicating", func() bool { holder = c.holders(); return len(holder) == 1 })

	// The writer keeps pushing bursts across the kill; the holder dies
	// once the edge has a backlog past what the replica held.
	wctx, stopWriter := context.WithCancel(ctx)
	defer stopWriter()
	var wg sync.WaitGroup
	killed := make(chan struct{})
	wg.Go(func() {
		for after := 0; wctx.Err() == nil; {
			w.burst(wctx, t, 50)
			select {
			case <-killed:
				if after++; after == pick(6, 30) {
					return
				}
			default:
			}
		}
	})
	start := maxSeq(edg.Store)
	poll.Until(t, time.Minute, "the edge writing past the replica", func() bool { return maxSeq(edg.Store) >= start+100 })
	edgeAtKill := maxSeq(edg.Store)
	at := time.Now()
	c.kill(t, holder[0])
	replicaAtKill := maxSeq(hubStore)
	close(killed)

	var takeover, caughtUp time.Duration
	var survivor []int
	poll.Until(t, 2*time.Minute, "a survivor replicating, the backlog applied", func() bool {
		if takeover == 0 {
			if survivor = c.holders(); len(survivor) == 1 {
				takeover = time.Since(at)
			}
		}
		if caughtUp == 0 && maxSeq(hubStore) >= edgeAtKill {
			caughtUp = time.Since(at)
		}
		return takeover > 0 && caughtUp > 0
	})
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	poll.Until(t, 2*time.Minute, "the replica holding the edge's max seq", func() bool { return maxSeq(hubStore) == maxSeq(edg.Store) })
	if h := c.holders(); len(h) != 1 || h[0] != survivor[0] {
		t.Fatalf("members replicating after the catch-up: %v, want [%d]", h, survivor[0])
	}

	// The replica is the edge's: epoch, log (seq, commit id, row
	// versions), rows.
	ep, err := edg.Store.PartitionGet(ctx, edgePart)
	if err != nil {
		t.Fatal(err)
	}
	hp, err := hubStore.PartitionGet(ctx, edgePart)
	if err != nil {
		t.Fatal(err)
	}
	if hp.LogEpoch != ep.LogEpoch || hp.MaxCommitSeq != ep.MaxCommitSeq {
		t.Fatalf("replica %s@%d, edge %s@%d", hp.LogEpoch, hp.MaxCommitSeq, ep.LogEpoch, ep.MaxCommitSeq)
	}
	edgeLog, hubLog := partitionLog(t, edg.Store, edgePart), partitionLog(t, hubStore, edgePart)
	if len(edgeLog) != len(hubLog) {
		t.Fatalf("replica log %d commits, edge %d", len(hubLog), len(edgeLog))
	}
	for i, e := range edgeLog {
		h := hubLog[i]
		if h.CommitSeq != e.CommitSeq || h.ClientID != e.ClientID || h.ClientCommitID != e.ClientCommitID || len(h.Changes) != len(e.Changes) {
			t.Fatalf("commit %d: replica %d %s/%s, edge %d %s/%s", i, h.CommitSeq, h.ClientID, h.ClientCommitID, e.CommitSeq, e.ClientID, e.ClientCommitID)
		}
		for k := range e.Changes {
			if h.Changes[k].RowID != e.Changes[k].RowID || h.Changes[k].RowVersion != e.Changes[k].RowVersion {
				t.Fatalf("commit %d change %d: replica %+v, edge %+v", e.CommitSeq, k, h.Changes[k], e.Changes[k])
			}
		}
	}
	for id, seq := range w.acked {
		if edgeLog[seq-1].ClientCommitID != id {
			t.Fatalf("acknowledged commit %s (seq %d) is not at its seq at the edge", id, seq)
		}
	}
	edgeRows, hubRows := itemRows(t, edg.Store), itemRows(t, hubStore)
	if len(edgeRows) != len(hubRows) || len(edgeRows) != w.n {
		t.Fatalf("replica %d rows, edge %d, written %d", len(hubRows), len(edgeRows), w.n)
	}
	for i, e := range edgeRows {
		h := hubRows[i]
		if h.RowID != e.RowID || h.ServerVersion != e.ServerVersion || string(h.Payload) != string(e.Payload) {
			t.Fatalf("row %d: replica %s v%d, edge %s v%d", i, h.RowID, h.ServerVersion, e.RowID, e.ServerVersion)
		}
	}

	// The hub's bus: the survivors' relays publish every replicated
	// commit, those the killed member left unpublished included, once
	// (checkBus fails on a duplicate). Each read is one short attempt:
	// the stream may be electing a leader after the kill.
	var urls []string
	for i, ch := range c.nodes {
		if !c.dead[i].Load() {
			urls = append(urls, ch.natsURL)
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	streamMsgs := func(name string) uint64 {
		actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		s, err := js.Stream(actx, name)
		if err != nil {
			return 0
		}
		return s.CachedInfo().State.Msgs
	}
	total := uint64(len(hubLog)) // one table per commit: one event each
	poll.Until(t, time.Minute, "every replicated commit on the hub's bus", func() bool { return streamMsgs(bus.Names{}.CommitStream()) >= total })
	if got := checkBus(t, js, edgePart, hubLog, true); got != len(hubLog) {
		t.Fatalf("%d hub events for %d commits", got, len(hubLog))
	}
	if got := checkBus(t, edg.NATS.JetStream(), edgePart, edgeLog, true); got != len(edgeLog) {
		t.Fatalf("%d edge events for %d commits", got, len(edgeLog))
	}
	src := bus.Names{}.EdgeStream(edgeName)
	poll.Until(t, time.Minute, "every edge event sourced into "+src, func() bool { return streamMsgs(src) >= total })
	if got := streamMsgs(src); got != total {
		t.Fatalf("%s holds %d events, the edge published %d", src, got, total)
	}

	// A device at a survivor pulls the replica: every row, at its first
	// attempt. Right after the kill the bootstrap's segment upload may
	// find the object store's stream still electing a leader; the pages
	// are then built in memory and sent inline (engine.SegmentFallbacks).
	dev := edgeClient(t, c.nodes[survivor[0]].url, "hub-device")
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := dev.SyncUntilIdle(sctx); err != nil {
		t.Fatalf("the device at member %d: %v; its log:\n%s", survivor[0], err, c.nodes[survivor[0]].out)
	}
	if got := len(dev.Rows("items")); got != w.n {
		t.Fatalf("the device at member %d holds %d rows, want %d", survivor[0], got, w.n)
	}
	t.Logf("killed member %d (the holder) with the edge at seq %d and the replica at %d; member %d replicating %v after the kill, the replica at the edge's seq of the kill %v after it; %d commits, %d rows, %d failed edge rounds",
		holder[0], edgeAtKill, replicaAtKill, survivor[0], takeover, caughtUp, len(edgeLog), w.n, w.errors)
}

// itemRows lists every row of items in a store's edge partition.
func itemRows(t testing.TB, st storage.Store) []storage.Row {
	t.Helper()
	var out []storage.Row
	for after := ""; ; {
		page, err := st.RowList(context.Background(), storage.RowListParams{Partition: edgePart, Table: "items", AfterRowID: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if len(page) < 1000 {
			return out
		}
		after = page[len(page)-1].RowID
	}
}
