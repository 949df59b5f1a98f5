package edge_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/admin"
	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/edge"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/node"
)

func httpGet(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLinkStateReported: the hub reports the link and the replica lag in
// its metrics, in /readyz (staying ready while the edge is cut) and on
// syncnode.admin.edge.status.
func TestLinkStateReported(t *testing.T) {
	tp := startTopology(t)
	ctx := context.Background()
	writer := clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer")
	pushTodos(t, writer, "a", 3)
	tp.waitReplica(edgePart)
	poll.Until(t, waitShort, "lag 0 at seq 3", func() bool {
		l := tp.link()
		return l.LagCommits == 0 && len(l.Partitions) == 1 && l.Partitions[0].AppliedSeq == 3
	})

	metrics := httpGet(t, tp.hub.URL()+"/metrics")
	for _, want := range []string{`syncnode_edge_link_up{edge="shop1"} 1`, `syncnode_edge_replica_lag_commits{edge="shop1"} 0`, "syncnode_edge_replica_applied_total 3"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	var ready struct {
		Ready bool              `json:"ready"`
		Edges []edge.LinkStatus `json:"edges"`
	}
	if err := json.Unmarshal([]byte(httpGet(t, tp.hub.URL()+"/readyz")), &ready); err != nil {
		t.Fatal(err)
	}
	if !ready.Ready || len(ready.Edges) != 1 || !ready.Edges[0].Up || len(ready.Edges[0].Partitions) != 1 || ready.Edges[0].Partitions[0].AppliedSeq != 3 {
		t.Fatalf("readyz = %+v", ready)
	}

	tp.cut()
	pushTodos(t, writer, "b", 4)
	// The hub learns the edge's new max only from a status it cannot get
	// while cut: the lag it reports is as of the last status.
	if err := json.Unmarshal([]byte(httpGet(t, tp.hub.URL()+"/readyz")), &ready); err != nil {
		t.Fatal(err)
	}
	if !ready.Ready || ready.Edges[0].Up || ready.Edges[0].Error == "" {
		t.Fatalf("readyz while cut = %+v: want ready, the link down with its error", ready)
	}
	// Reads of the replica go on while the edge is cut off.
	reader := clientOf(t, tp.hub, edgePart, &client.MemoryStore{}, "hub-reader")
	if _, err := reader.SyncUntilIdle(ctx); err != nil {
		t.Fatalf("a pull from the replica while cut: %v", err)
	}
	if reader.Count("todos") != 3 {
		t.Fatalf("the replica served %d rows while cut, want 3", reader.Count("todos"))
	}
	// Downs: the hub's first poll, before the edge started, and the cut.
	if m := httpGet(t, tp.hub.URL()+"/metrics"); !strings.Contains(m, `syncnode_edge_link_up{edge="shop1"} 0`) || !strings.Contains(m, `syncnode_edge_link_changes_total{state="down"} 2`) {
		t.Errorf("metrics while cut lack the link down:\n%s", grepLines(m, "syncnode_edge"))
	}

	tp.restore()
	tp.waitReplica(edgePart)
	// The status is the replication loop's, updated once an applied page
	// has committed: the replica's SQL can be ahead of it for a moment.
	var st []edge.LinkStatus
	poll.Until(t, waitShort, "edge.status caught up", func() bool {
		st = nil
		if err := admin.NewClient(tp.hub.NATS.Conn(), 0).Call(ctx, bus.AdminEdgeStatus, struct{}{}, &st); err != nil {
			t.Fatal(err)
		}
		return len(st) == 1 && len(st[0].Partitions) == 1 && st[0].Partitions[0].AppliedSeq == 7 && st[0].LagCommits == 0
	})
	if len(st) != 1 || !st[0].Up || !st[0].Sourced || st[0].Partitions[0].AppliedSeq != 7 || st[0].Partitions[0].EdgeSeq != 7 || st[0].LagCommits != 0 {
		t.Fatalf("edge.status = %+v", st)
	}
}

// TestEdgeRefusesLeakyTopology: an edge whose JetStream domain is not its
// name, that has no leaf remote, or whose remote lets one of the node's
// subjects cross does not start.
func TestEdgeRefusesLeakyTopology(t *testing.T) {
	hub := startHub(t, t.TempDir())
	hubURL := hub.NATS.LeafURL()
	good := edgeConf(t, hubURL)
	cases := map[string]string{
		"domain":       strings.Replace(good, "domain: shop1", "domain: elsewhere", 1),
		"no remote":    good[:strings.Index(good, "remotes: [")] + "}\n",
		"exports leak": strings.Replace(good, `deny_exports: ["sync.>", `, `deny_exports: [`, 1),
		// The last list is deny_imports: drop its $O.>.
		"imports leak": good[:strings.LastIndex(good, `, "$O.>"]`)] + good[strings.LastIndex(good, `, "$O.>"]`)+len(`, "$O.>"`):],
	}
	for name, conf := range cases {
		t.Run(name, func(t *testing.T) {
			if conf == good {
				t.Fatal("the case changed nothing")
			}
			dir := t.TempDir()
			path := writeConf(t, filepath.Join(dir, "conf"), conf)
			n, err := node.New(nodeConfig(t, dir, path))
			if err != nil {
				t.Fatal(err)
			}
			err = n.Start(context.Background())
			if err == nil {
				_ = n.Stop(context.Background())
			}
			if !errors.Is(err, node.ErrEdgeTopology) {
				t.Fatalf("start = %v, want ErrEdgeTopology", err)
			}
		})
	}
}

// nodeConfig is the edge's node config for a nats.conf at path.
func nodeConfig(t *testing.T, dir, path string) node.Config {
	return nodetest.Config(t, func(c *node.Config) {
		c.Name, c.DataDir = edgeName, filepath.Join(dir, "data")
		c.NATS = embedded.Config{ConfigFile: path}
		c.Edge = edge.Config{Name: edgeName, Homes: homes}
	})
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
