package edge_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/edge"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// hubCluster is n hub nodes on one PostgreSQL schema whose embedded
// servers form one NATS cluster (domain hub), and one edge whose leaf
// remote lists every hub's leaf listener.
type hubCluster struct {
	t               testing.TB
	pgURL, pgSchema string
	hubs            []*node.Node
	stopped         []bool
	edg             *node.Node
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startHubCluster starts the hubs together (a JetStream meta leader
// needs a quorum of them), then the edge. A third NATS server without a
// syncnode (JetStream only) joins the hubs' cluster: with two servers
// JetStream loses its quorum with either, and the survivor could no
// longer publish or stop cleanly — a hub cluster needs three NATS
// servers, whatever the number of syncnodes.
func startHubCluster(t testing.TB, n int, mods ...func(i int, c *node.Config)) *hubCluster {
	t.Helper()
	pgURL, pgSchema := pgtest.Schema(t)
	hc := &hubCluster{t: t, pgURL: pgURL, pgSchema: pgSchema, hubs: make([]*node.Node, n), stopped: make([]bool, n)}
	ports := make([]int, n+1)
	routes := make([]string, n+1)
	for i := range n + 1 {
		ports[i] = freePort(t)
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i])
	}
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	adir := t.TempDir()
	arbiter, err := embedded.New(embedded.Config{ConfigFile: writeConf(t, filepath.Join(adir, "conf"), hubConf(t)), DataDir: filepath.Join(adir, "data"),
		ServerName: "hub-nats-3", Cluster: embedded.ClusterConfig{Name: "hub", Host: "127.0.0.1", Port: ports[n], Routes: routes},
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { errs[n] = arbiter.Start(context.Background()) })
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := arbiter.Stop(ctx); err != nil {
			t.Errorf("stop the third NATS server: %v", err)
		}
	})
	for i := range n {
		dir := t.TempDir()
		conf := writeConf(t, filepath.Join(dir, "conf"), hubConf(t))
		cfg := nodetest.Config(t, func(c *node.Config) {
			c.Name, c.DataDir = fmt.Sprintf("hub-%d", i+1), filepath.Join(dir, "data")
			c.NATS = embedded.Config{ConfigFile: conf, ServerName: c.Name,
				Cluster: embedded.ClusterConfig{Name: "hub", Host: "127.0.0.1", Port: ports[i], Routes: routes}}
			c.Store.Postgres = pgstore.Config{URL: pgURL, Schema: pgSchema}
			c.Edge = edge.Config{Homes: homes, PingInterval: 50 * time.Millisecond}
			c.Realtime.Hub.FallbackPollInterval = 20 * time.Millisecond
			for _, mod := range mods {
				mod(i, c)
			}
		})
		wg.Go(func() {
			nd, err := node.New(cfg)
			if err == nil {
				err = nd.Start(context.Background())
			}
			hc.hubs[i], errs[i] = nd, err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("hub NATS server %d: %v", i+1, err)
		}
	}
	t.Cleanup(func() {
		for i := range hc.hubs {
			hc.stop(i)
		}
	})
	urls := make([]string, n)
	for i, h := range hc.hubs {
		urls[i] = `"` + h.NATS.LeafURL() + `"`
	}
	edir := t.TempDir()
	conf := writeConf(t, filepath.Join(edir, "conf"), docConf(t, "edge.conf", map[string]string{
		"listen: 127.0.0.1:4223":                  "listen: 127.0.0.1:-1",
		`url: "nats-leaf://hub.example.com:7422"`: "urls: [" + strings.Join(urls, ", ") + "]",
		`reconnect: "250ms"`:                      `reconnect: "100ms"`,
	}))
	hc.edg = nodetest.Start(t, func(c *node.Config) {
		c.Name, c.DataDir = edgeName, filepath.Join(edir, "data")
		c.NATS = embedded.Config{ConfigFile: conf}
		c.Edge = edge.Config{Name: edgeName, Homes: homes}
	})
	return hc
}

func (hc *hubCluster) stop(i int) {
	if hc.stopped[i] || hc.hubs[i] == nil {
		return
	}
	hc.stopped[i] = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := hc.hubs[i].Stop(ctx); err != nil {
		hc.t.Errorf("stop hub %d: %v", i+1, err)
	}
}

// holders lists the running hubs that report replicating the edge.
func (hc *hubCluster) holders() []int {
	var out []int
	for i, h := range hc.hubs {
		if hc.stopped[i] {
			continue
		}
		for _, s := range h.EdgeHub.Status() {
			if s.Edge == edgeName && s.Replicating {
				out = append(out, i)
			}
		}
	}
	return out
}

// waitHolder waits until exactly one running hub replicates the edge and
// returns it.
func (hc *hubCluster) waitHolder() int {
	hc.t.Helper()
	var h []int
	poll.Until(hc.t, waitLong, "one replicating hub", func() bool { h = hc.holders(); return len(h) == 1 })
	return h[0]
}

// waitReplica waits until the replica (one SQL for every hub) holds the
// edge's max seq.
func (hc *hubCluster) waitReplica() {
	hc.t.Helper()
	ctx := context.Background()
	poll.Until(hc.t, waitLong, "replica caught up", func() bool {
		e, err := hc.edg.Store.PartitionGet(ctx, edgePart)
		if err != nil {
			return false
		}
		live := hc.live()
		h, err := hc.hubs[live].Store.PartitionGet(ctx, edgePart)
		return err == nil && h.MaxCommitSeq == e.MaxCommitSeq
	})
}

func (hc *hubCluster) live() int {
	for i := range hc.hubs {
		if !hc.stopped[i] {
			return i
		}
	}
	panic("no hub running")
}

// applied sums the commits every hub applied to the replica.
func (hc *hubCluster) applied() int64 {
	var n int64
	for _, h := range hc.hubs {
		n += h.EdgeHub.Metrics().Applied.Load()
	}
	return n
}

// TestHubClusterReplicatesOnce: two hub nodes on one PostgreSQL, one edge.
// Only the lease holder replicates (the other applies nothing, yet
// serves the replica and forwards pushes); when the holder stops, the
// other takes the lease and the replica keeps converging; across both,
// every edge commit was applied exactly once, at the edge's seq.
func TestHubClusterReplicatesOnce(t *testing.T) {
	hc := startHubCluster(t, 2)
	ctx := context.Background()
	writer := clientOf(t, hc.edg, edgePart, &client.MemoryStore{}, "edge-writer")
	pushTodos(t, writer, "a", 300)
	hc.waitReplica()
	holder := hc.waitHolder()
	other := 1 - holder
	// The counter trails the replica's SQL by the apply's return.
	poll.Until(t, waitShort, "the holder counted 300 applied", func() bool { return hc.hubs[holder].EdgeHub.Metrics().Applied.Load() == 300 })
	if got := hc.hubs[other].EdgeHub.Metrics().Applied.Load(); got != 0 {
		t.Fatalf("the hub without the lease applied %d commits", got)
	}
	// The other hub serves the replica and forwards a push; its round's
	// pull sees the commit once the holder applied it.
	device := clientOf(t, hc.hubs[other], edgePart, &client.MemoryStore{Rows: true}, "hub-device")
	if _, err := device.Upsert(ctx, "todos", nodetest.Todo("via-other", project, "pushed at the hub without the lease")); err != nil {
		t.Fatal(err)
	}
	res := syncOK(t, device)
	if len(res.Pushed) != 1 || res.Pushed[0].CommitSeq != 301 {
		t.Fatalf("pushed %+v, want applied at the edge at seq 301", res.Pushed)
	}
	if device.Count("todos") != 301 {
		t.Fatalf("the device holds %d rows, want 301", device.Count("todos"))
	}

	// The holder stops while the edge keeps writing.
	done := make(chan struct{})
	go func() {
		defer close(done)
		pushTodos(t, writer, "b", 300)
	}()
	hc.stop(holder)
	<-done
	if h := hc.waitHolder(); h != other {
		t.Fatalf("hub %d replicates, want hub %d", h+1, other+1)
	}
	pushTodos(t, writer, "c", 100)
	hc.waitReplica()

	ep, err := hc.edg.Store.PartitionGet(ctx, edgePart)
	if err != nil {
		t.Fatal(err)
	}
	hp, err := hc.hubs[other].Store.PartitionGet(ctx, edgePart)
	if err != nil {
		t.Fatal(err)
	}
	if ep.MaxCommitSeq != 701 || hp.MaxCommitSeq != 701 || hp.LogEpoch != ep.LogEpoch {
		t.Fatalf("edge %+v, replica %+v: want both at seq 701 under the edge's epoch", ep, hp)
	}
	poll.Until(t, waitShort, "the applied counters settled", func() bool { return hc.applied() >= 701 })
	if got := hc.applied(); got != 701 {
		t.Fatalf("the hubs applied %d commits in all, want 701: none twice", got)
	}
	if got := hc.hubs[other].EdgeHub.Metrics().LeaseTaken.Load(); got != 1 {
		t.Fatalf("the surviving hub took the lease %d times, want 1", got)
	}
	// The database ends the holder's lock session (as it does when a
	// holder's process dies): the lease is lost and taken again.
	terminateLeaseSession(t, hc.pgURL, hc.pgSchema)
	poll.Until(t, waitLong, "the lease taken again", func() bool {
		return hc.hubs[other].EdgeHub.Metrics().LeaseTaken.Load() == 2 && len(hc.holders()) == 1
	})
	pushTodos(t, writer, "d", 10)
	hc.waitReplica()
	poll.Until(t, waitShort, "the applied counters settled", func() bool { return hc.applied() >= 711 })
	if got := hc.applied(); got != 711 {
		t.Fatalf("the hubs applied %d commits in all, want 711: none twice", got)
	}

	sameRows(t, rows(t, hc.edg.Store, edgePart), rows(t, hc.hubs[other].Store, edgePart))
	edgeLog, err := hc.edg.Store.CommitRange(ctx, edgePart, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	hubLog, err := hc.hubs[other].Store.CommitRange(ctx, edgePart, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if len(hubLog) != len(edgeLog) {
		t.Fatalf("replica log %d commits, edge %d", len(hubLog), len(edgeLog))
	}
	for i := range hubLog {
		if hubLog[i].CommitSeq != edgeLog[i].CommitSeq || hubLog[i].ClientCommitID != edgeLog[i].ClientCommitID {
			t.Fatalf("commit %d: replica %d/%s, edge %d/%s", i, hubLog[i].CommitSeq, hubLog[i].ClientCommitID, edgeLog[i].CommitSeq, edgeLog[i].ClientCommitID)
		}
	}
}

// terminateLeaseSession ends, from another session, the database session
// holding an edge replication lease of the schema.
func terminateLeaseSession(t testing.TB, url, schema string) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND classid = hashtext($1)::oid AND objid = hashtext($2)::oid`,
		edge.LeaseName(edgeName), schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("terminated %d lease sessions, want 1", n)
	}
}

// TestHubFollowerRefusesMigrationAtOnce: a hub node without the edge's
// lease (a follower) refuses the replica as soon as the holder applied a
// batch of a migration at the edge — not when its own status ping, here
// an hour apart, would tell it — because it serves only positions the
// holder vouched for (edge/follower.go); it serves again, backfill
// included, once the holder applied the activation.
func TestHubFollowerRefusesMigrationAtOnce(t *testing.T) {
	const follower = 1
	hc := startHubCluster(t, 2, func(i int, c *node.Config) {
		if i == follower {
			c.Edge.PingInterval = time.Hour
			// A bound on the wait for the holder's note, not a timing:
			// the refusal's reason must be the holder's.
			c.Edge.RequestTimeout = waitShort
		}
	})
	ctx := context.Background()
	if hc.waitHolder() == follower {
		// The lock goes to the hub waiting for it; the follower waits
		// again behind it.
		terminateLeaseSession(t, hc.pgURL, hc.pgSchema)
		poll.Until(t, waitLong, "the other hub replicating", func() bool {
			h := hc.holders()
			return len(h) == 1 && h[0] != follower
		})
	}
	pushTodos(t, clientOf(t, hc.edg, edgePart, &client.MemoryStore{}, "edge-writer"), "seed", 2)
	hc.waitReplica()
	reader := clientOf(t, hc.hubs[follower], edgePart, &client.MemoryStore{Rows: true}, "follower-reader")
	syncOK(t, reader)
	if reader.Count("todos") != 2 {
		t.Fatalf("the follower served %d rows, want 2", reader.Count("todos"))
	}

	finish := startHeldMigration(t, ctx, hc.edg)
	// The first batch (seq 3) is in the replica: the follower's very next
	// request is refused, with the holder's reason.
	hc.waitReplica()
	if hp, _ := hc.hubs[follower].Store.PartitionGet(ctx, edgePart); hp.MaxCommitSeq != 3 {
		t.Fatalf("replica at seq %d, want 3 (the first batch)", hp.MaxCommitSeq)
	}
	_, err := reader.SyncUntilIdle(ctx)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != ssp2.CodeSchemaNotReady || !ce.Retryable || !strings.Contains(string(ce.Details), `"home_checkpoint_pending"`) {
		t.Fatalf("the follower answered %v mid-migration, want the retryable sync.schema_not_ready (home_checkpoint_pending)", err)
	}
	if reader.Count("todos") != 2 {
		t.Fatalf("the follower served %d rows mid-migration, want the 2 from before it", reader.Count("todos"))
	}

	if err := finish(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitLong, "the follower serves the partition again", func() bool {
		_, err := reader.SyncUntilIdle(ctx)
		return err == nil
	})
	if reader.Count("todos") != 4 {
		t.Fatalf("the follower's reader holds %d rows after the migration, want 4", reader.Count("todos"))
	}
	if got := hc.hubs[follower].EdgeHub.Metrics().FollowerUnconfirmed.Load(); got != 0 {
		t.Fatalf("the follower refused %d requests unconfirmed, want 0 (the holder answers)", got)
	}
}
