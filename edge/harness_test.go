package edge_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncnode/syncnode/backfill"
	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/edge"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/internal/proxytest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// The topology of every test: one hub, one edge "shop1" whose leaf
// remote dials the hub through a proxy the test can cut, and the
// partition "p-shop1" homed at the edge.
const (
	edgeName  = "shop1"
	edgePart  = "p-shop1"
	hubPart   = "p-hub"
	project   = "proj"
	waitLong  = 2 * time.Minute // a bound, not a timing: -race on a loaded machine is slow
	waitShort = 10 * time.Second
)

var homes = map[string]string{edgePart: edgeName}

// hubConf is docs/nats/hub.conf on random ports.
func hubConf(t testing.TB) string {
	return docConf(t, "hub.conf", map[string]string{
		"listen: 127.0.0.1:4223": "listen: 127.0.0.1:-1",
		"listen: 0.0.0.0:7422":   "listen: 127.0.0.1:-1",
	})
}

// edgeConf is docs/nats/edge.conf on a random client port, dialing the
// hub at hubURL, with a 100ms leaf reconnect.
func edgeConf(t testing.TB, hubURL string) string {
	return docConf(t, "edge.conf", map[string]string{
		"listen: 127.0.0.1:4223":           "listen: 127.0.0.1:-1",
		"nats-leaf://hub.example.com:7422": hubURL,
		`reconnect: "250ms"`:               `reconnect: "100ms"`,
	})
}

// docConf reads an example config of docs/nats and applies the
// replacements, each of which must match.
func docConf(t testing.TB, name string, repl map[string]string) string {
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
	return text
}

func writeConf(t testing.TB, dir, text string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startHub starts (or restarts, on the same dir) the hub.
func startHub(t testing.TB, dir string, mods ...func(*node.Config)) *node.Node {
	t.Helper()
	conf := writeConf(t, filepath.Join(dir, "conf"), hubConf(t))
	return nodetest.Start(t, func(c *node.Config) {
		c.Name, c.DataDir = "hub-1", filepath.Join(dir, "data")
		c.NATS = embedded.Config{ConfigFile: conf}
		c.Edge = edge.Config{Homes: homes, PingInterval: 50 * time.Millisecond}
		c.Realtime.Hub.FallbackPollInterval = 20 * time.Millisecond
		for _, m := range mods {
			m(c)
		}
	})
}

// startEdge starts (or restarts) the edge, dialing the hub at hubURL.
func startEdge(t testing.TB, dir, hubURL string, mods ...func(*node.Config)) *node.Node {
	t.Helper()
	conf := writeConf(t, filepath.Join(dir, "conf"), edgeConf(t, hubURL))
	return nodetest.Start(t, func(c *node.Config) {
		c.Name, c.DataDir = edgeName, filepath.Join(dir, "data")
		c.NATS = embedded.Config{ConfigFile: conf}
		c.Edge = edge.Config{Name: edgeName, Homes: homes}
		for _, m := range mods {
			m(c)
		}
	})
}

// topology is a hub and an edge linked through a proxy.
type topology struct {
	t        testing.TB
	hubDir   string
	edgeDir  string
	hub, edg *node.Node
	px       *proxytest.Proxy
}

func startTopology(t testing.TB) *topology { return startTopologyWith(t, nil, nil) }

// startTopologyWith is startTopology with hubMod and edgeMod (either may
// be nil) applied to the hub's and the edge's configs.
func startTopologyWith(t testing.TB, hubMod, edgeMod func(*node.Config)) *topology {
	t.Helper()
	tp := &topology{t: t, hubDir: t.TempDir(), edgeDir: t.TempDir()}
	var hm, em []func(*node.Config)
	if hubMod != nil {
		hm = append(hm, hubMod)
	}
	if edgeMod != nil {
		em = append(em, edgeMod)
	}
	tp.hub = startHub(t, tp.hubDir, hm...)
	tp.px = proxytest.Start(t, strings.TrimPrefix(tp.hub.NATS.LeafURL(), "nats-leaf://"))
	tp.edg = startEdge(t, tp.edgeDir, "nats-leaf://"+tp.px.Addr(), em...)
	tp.waitLink(true)
	return tp
}

// link is the hub's view of the edge.
func (tp *topology) link() edge.LinkStatus {
	for _, s := range tp.hub.EdgeHub.Status() {
		if s.Edge == edgeName {
			return s
		}
	}
	tp.t.Fatalf("hub has no link to %s", edgeName)
	return edge.LinkStatus{}
}

// waitLink waits until both sides see the link up (or down).
func (tp *topology) waitLink(up bool) {
	tp.t.Helper()
	poll.Until(tp.t, waitLong, fmt.Sprintf("link up=%v", up), func() bool {
		return tp.link().Up == up && (tp.edg.NATS.LeafConnections() > 0) == up
	})
}

// cut cuts the link and waits until both sides noticed.
func (tp *topology) cut() {
	tp.t.Helper()
	tp.px.Cut()
	tp.waitLink(false)
}

func (tp *topology) restore() {
	tp.t.Helper()
	tp.px.Restore()
	tp.waitLink(true)
}

// waitReplica waits until the hub's replica of the partition holds the
// edge's max commit seq.
func (tp *topology) waitReplica(partition string) {
	tp.t.Helper()
	ctx := context.Background()
	poll.Until(tp.t, waitLong, "replica caught up", func() bool {
		e, err := tp.edg.Store.PartitionGet(ctx, partition)
		if err != nil {
			return false
		}
		h, err := tp.hub.Store.PartitionGet(ctx, partition)
		return err == nil && h.MaxCommitSeq == e.MaxCommitSeq
	})
}

// client returns a client of n for the edge partition, with its state in
// store (shared by clients that stand for one device moving between
// nodes).
func clientOf(t testing.TB, n *node.Node, partition string, store client.Store, clientID string) *client.Client {
	t.Helper()
	tok := nodetest.Token(t, "alice", partition, map[string][]string{"project_id": {project}})
	c, err := client.New(client.Config{BaseURL: n.URL(), Token: tok, Schema: nodetest.Schema(t), Store: store, ClientID: clientID})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Subscriptions()) == 0 {
		if err := c.Subscribe("todos", "todos", map[string][]string{"project_id": {project}}); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// rows lists every row of todos in a store's partition.
func rows(t testing.TB, st storage.Store, partition string) []storage.Row {
	t.Helper()
	var out []storage.Row
	after := ""
	for {
		page, err := st.RowList(context.Background(), storage.RowListParams{Partition: partition, Table: "todos", AfterRowID: after, Limit: 1000})
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

// sameRows fails unless the replica's rows equal the edge's: ids,
// versions, payloads and stored scopes.
func sameRows(t testing.TB, edgeRows, hubRows []storage.Row) {
	t.Helper()
	if len(edgeRows) != len(hubRows) {
		t.Fatalf("hub replica has %d rows, the edge %d", len(hubRows), len(edgeRows))
	}
	for i := range edgeRows {
		e, h := edgeRows[i], hubRows[i]
		if e.RowID != h.RowID || e.ServerVersion != h.ServerVersion || string(e.Payload) != string(h.Payload) || fmt.Sprint(e.Scopes) != fmt.Sprint(h.Scopes) {
			t.Fatalf("row %d: hub %+v, edge %+v", i, h, e)
		}
	}
}

// edgeStreamCount is the number of events the hub's source stream holds.
func edgeStreamCount(t testing.TB, hub *node.Node) uint64 {
	t.Helper()
	s, err := hub.NATS.JetStream().Stream(context.Background(), bus.Names{}.EdgeStream(edgeName))
	if err != nil {
		return 0
	}
	info, err := s.Info(context.Background())
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// startHeldMigration runs, at the edge node edg, a backfill of
// todo_titles over the edge's partition whose first batch (row bf-1, at
// seq 3 after two seed commits) commits and whose second then waits: it
// returns once the first committed. finish releases the second batch
// (bf-2, the last) and returns the job's error; the cleanup releases it
// too, so a failing test does not leave the batch holding the edge's
// partition lock.
func startHeldMigration(t *testing.T, ctx context.Context, edg *node.Node) (finish func() error) {
	t.Helper()
	todos, _ := nodetest.Schema(t).Table("todos")
	row := func(id string) ssp2.Operation {
		b, err := todos.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte(project)}, {Bytes: []byte("backfilled")}, {Bool: false}})
		if err != nil {
			t.Error(err)
		}
		return ssp2.Operation{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: b}
	}
	runner, err := edg.Backfiller(backfill.Config{})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	second := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := runner.Run(ctx, backfill.Job{Partition: edgePart, Name: "todo_titles", Sources: []string{"todos"},
			Batch: func(_ context.Context, _ storage.Tx, cursor string) ([]ssp2.Operation, string, bool, error) {
				if cursor == "" {
					return []ssp2.Operation{row("bf-1")}, "1", false, nil
				}
				close(second)
				<-release
				return []ssp2.Operation{row("bf-2")}, "2", true, nil
			}})
		done <- err
	}()
	select {
	case <-second:
	case err := <-done:
		t.Fatalf("the migration ended before its second batch: %v", err)
	}
	return func() error {
		unblock()
		return <-done
	}
}
