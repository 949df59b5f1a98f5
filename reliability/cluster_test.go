package reliability

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// clusterSpec makes a child node a member of a NATS cluster: its own
// server and node name, its route port, every member's route.
type clusterSpec struct {
	Name, Server string
	Port         int
	Routes       []string
}

func (c *clusterSpec) apply(cfg *node.Config) {
	cfg.Name = c.Server
	cfg.NATS.ServerName = c.Server
	cfg.NATS.Cluster = embedded.ClusterConfig{Name: c.Name, Host: "127.0.0.1", Port: c.Port, Routes: c.Routes}
	// A killed member's unpublished commits are published by a survivor
	// at the latest on its next resync.
	cfg.Relay.ResyncInterval = time.Second
}

// cluster is child nodes on one PostgreSQL schema whose embedded NATS
// servers form one cluster.
type cluster struct {
	nodes []*child
	dead  []atomic.Bool
}

// startCluster starts n member processes together (a JetStream meta
// leader needs a quorum) and waits until every one serves. The route
// ports are picked free beforehand; when another process took one in the
// meantime, the whole cluster is started again on new ports.
func startCluster(t testing.TB, n int, pgURL, pgSchema string) *cluster {
	t.Helper()
	return startClusterOf(t, n, pgURL, pgSchema, nil)
}

// startClusterOf is startCluster with every member a hub node of hub
// (nil: none).
func startClusterOf(t testing.TB, n int, pgURL, pgSchema string, hub *hubSpec) *cluster {
	t.Helper()
	for attempt := 1; ; attempt++ {
		c, err := tryCluster(t, n, pgURL, pgSchema, hub)
		if err == nil {
			t.Cleanup(func() {
				for i, ch := range c.nodes {
					if !c.dead[i].Load() {
						_ = ch.cmd.Process.Signal(syscall.SIGTERM)
						_ = ch.cmd.Wait()
					}
				}
			})
			return c
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
		t.Logf("cluster start attempt %d: a route port was taken; again on new ports", attempt)
	}
}

func tryCluster(t testing.TB, n int, pgURL, pgSchema string, hub *hubSpec) (*cluster, error) {
	ports := make([]int, n)
	routes := make([]string, n)
	for i := range n {
		ports[i] = freePort(t)
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i])
	}
	c := &cluster{nodes: make([]*child, n), dead: make([]atomic.Bool, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c.nodes[i], errs[i] = spawnChild(childSpec{DataDir: t.TempDir(), PGURL: pgURL, PGSchema: pgSchema, Hub: hub,
				Cluster: &clusterSpec{Name: "reliability", Server: fmt.Sprintf("member-%d", i), Port: ports[i], Routes: routes}})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, ch := range c.nodes {
			if ch != nil {
				_ = ch.cmd.Process.Signal(syscall.SIGKILL)
				_ = ch.cmd.Wait()
			}
		}
		return nil, err
	}
	return c, nil
}

// kill sends SIGKILL to member i and waits for it to die.
func (c *cluster) kill(t testing.TB, i int) {
	t.Helper()
	c.dead[i].Store(true)
	if err := c.nodes[i].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[i].cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("member %d exit %v, want killed:\n%s", i, err, c.nodes[i].out)
	}
}

// live is the first member from i on that is not dead.
func (c *cluster) live(i int) int {
	for k := range len(c.nodes) {
		j := (i + k) % len(c.nodes)
		if !c.dead[j].Load() {
			return j
		}
	}
	panic("no member alive")
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

// clusterClient is one device of the storm: a Go client whose durable
// state survives moving to another member.
type clusterClient struct {
	id, partition string
	tok           string
	store         client.Store
	member        int
	cl            *client.Client

	mu        sync.Mutex
	acked     map[string]int64 // clientCommitId → acknowledged seq
	afterKill int              // commits acknowledged since the kill
	moved     bool             // it left the killed member
	failover  time.Duration    // kill → its first successful round on a survivor
	errors    int
}

func newClusterClient(t testing.TB, c *cluster, i int, partitions int) *clusterClient {
	return newClusterClientAs(t, c, fmt.Sprintf("dev-%d", i), fmt.Sprintf("shop-%d", i%partitions), i%len(c.nodes))
}

// newClusterClientAs is a device id of partition on member.
func newClusterClientAs(t testing.TB, c *cluster, id, partition string, member int) *clusterClient {
	cc := &clusterClient{id: id, partition: partition, store: &client.MemoryStore{Rows: true}, member: member, acked: map[string]int64{}}
	tok, err := auth.Mint(secret, auth.Principal{ActorID: cc.id, Partition: cc.partition,
		Scopes: map[string][]string{"project_id": {"p1"}}}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cc.tok = tok
	cc.connect(t, c.nodes[cc.member].url)
	return cc
}

// connect (re)builds the client on a member's URL from its stored state.
func (cc *clusterClient) connect(t testing.TB, url string) {
	cl, err := client.New(client.Config{BaseURL: url, Token: cc.tok, ClientID: cc.id, Schema: mustSchema(t), Store: cc.store,
		CommitID: func(n int64) string { return fmt.Sprintf("%s-c%d", cc.id, n) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Subscribe("items", "items", map[string][]string{"project_id": {"p1"}}); err != nil {
		t.Fatal(err)
	}
	cc.cl = cl
}

// round writes one row and syncs; it records what was acknowledged.
func (cc *clusterClient) round(ctx context.Context, t testing.TB, n int) error {
	if len(cc.cl.Pending()) == 0 {
		row := map[string]any{"id": fmt.Sprintf("%s-r%d", cc.id, n), "project_id": "p1", "body": "x", "n": int64(n), "score": 0.5, "weight": 1.0}
		if _, err := cc.cl.Upsert(ctx, "items", row); err != nil {
			t.Errorf("%s: upsert: %v", cc.id, err)
			return err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := cc.cl.Sync(rctx)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for _, p := range res.Pushed {
		if p.Status == ssp2.PushRejected {
			t.Errorf("%s: commit %s rejected", cc.id, p.ClientCommitID)
			continue
		}
		if prev, ok := cc.acked[p.ClientCommitID]; ok && prev != p.CommitSeq {
			t.Errorf("%s: commit %s acknowledged at %d, then at %d", cc.id, p.ClientCommitID, prev, p.CommitSeq)
		}
		cc.acked[p.ClientCommitID] = p.CommitSeq
	}
	return err
}

// TestClusterMemberKilledMidStorm runs three syncnode processes on one
// PostgreSQL schema whose embedded NATS servers form a cluster (streams,
// KV and object store at R3), 20 clients spread over them and over five
// partitions pushing and pulling, and kills one member with SIGKILL mid
// storm. Its clients move to a survivor; then no acknowledged commit is
// lost, the log of every partition is dense, every commit is on the bus
// exactly once per table, and every client holds every row of its
// partition.
func TestClusterMemberKilledMidStorm(t *testing.T) {
	pgURL, pgSchema := pgtest.Schema(t)
	c := startCluster(t, 3, pgURL, pgSchema)
	const clients, partitions = 20, 5
	before, after := pick(8, 40), pick(8, 40)

	nc, err := nats.Connect(c.nodes[1].natsURL + "," + c.nodes[2].natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	assertReplicas(t, js, 3, bus.Names{}.CommitStream(), bus.Names{}.ControlStream(),
		bus.KVStream(bus.Names{}.GateBucket()), bus.KVStream(bus.Names{}.LeaseBucket()), bus.ObjectStream(bus.Names{}.SegmentsBucket()))

	ccs := make([]*clusterClient, clients)
	for i := range ccs {
		ccs[i] = newClusterClient(t, c, i, partitions)
	}
	var acks atomic.Int64
	var killedAt atomic.Pointer[time.Time]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for _, cc := range ccs {
		wg.Go(func() {
			for n := 1; ctx.Err() == nil; {
				err := cc.round(ctx, t, n)
				if err == nil {
					n++
					acks.Add(1)
					if k := killedAt.Load(); k != nil {
						cc.mu.Lock()
						if cc.moved && cc.failover == 0 {
							cc.failover = time.Since(*k)
						}
						cc.afterKill++
						done := cc.afterKill >= after
						cc.mu.Unlock()
						if done {
							return
						}
					}
					continue
				}
				if ctx.Err() != nil {
					return
				}
				cc.mu.Lock()
				cc.errors++
				if c.dead[cc.member].Load() {
					cc.member, cc.moved = c.live(cc.member+1), true
					cc.connect(t, c.nodes[cc.member].url)
				}
				cc.mu.Unlock()
			}
		})
	}

	poll.Until(t, 60*time.Second, "acks before the kill", func() bool { return acks.Load() >= int64(clients*before) })
	now := time.Now()
	killedAt.Store(&now)
	c.kill(t, 0)
	// A fresh device bootstraps at a survivor right after the kill, at
	// its first attempt: the segment store may find its object store's
	// stream without a leader for a moment, and the bootstrap's pages are
	// then built in memory and sent inline (engine.SegmentFallbacks).
	fresh := newClusterClientAs(t, c, "fresh-dev", "shop-1", c.live(1))
	fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
	_, ferr := fresh.cl.SyncUntilIdle(fctx)
	fcancel()
	freshAt := time.Since(now)
	if ferr != nil {
		t.Fatalf("a fresh device's bootstrap at member %d right after the kill: %v", fresh.member, ferr)
	}
	if fresh.cl.Count("items") == 0 {
		t.Fatalf("a fresh device's bootstrap at member %d right after the kill holds no rows", fresh.member)
	}
	storm := make(chan struct{})
	go func() { wg.Wait(); close(storm) }()
	select {
	case <-storm:
	case <-time.After(120 * time.Second):
		cancel()
		<-storm
		t.Fatalf("clients did not finish %d rounds each after the kill", after)
	}

	// Convergence: every client, on a survivor, pulls until idle.
	for _, cc := range ccs {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := cc.cl.SyncUntilIdle(sctx)
		scancel()
		if err != nil {
			t.Fatalf("%s on member %d: sync until idle: %v", cc.id, cc.member, err)
		}
	}

	cfg, err := nodeConfig(store{dataDir: t.TempDir(), pgURL: pgURL, pgSchema: pgSchema})
	if err != nil {
		t.Fatal(err)
	}
	st, err := node.OpenStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	logs := map[string][]storage.Commit{}
	total := 0
	for p := range partitions {
		part := fmt.Sprintf("shop-%d", p)
		logs[part] = partitionLog(t, st, part)
		total += len(logs[part])
	}
	// Lost commits: every acknowledged one is in its partition's log once,
	// at its seq.
	var worst time.Duration
	moved, errs := 0, 0
	for _, cc := range ccs {
		byID := map[string]int64{}
		for _, cm := range logs[cc.partition] {
			if cm.ClientID != cc.id {
				continue
			}
			if _, dup := byID[cm.ClientCommitID]; dup {
				t.Fatalf("commit %s applied twice", cm.ClientCommitID)
			}
			byID[cm.ClientCommitID] = cm.CommitSeq
		}
		for id, seq := range cc.acked {
			if got, ok := byID[id]; !ok || got != seq {
				t.Fatalf("%s: acknowledged commit %s (seq %d) is at %d in the log (present %v)", cc.id, id, seq, got, ok)
			}
		}
		// Convergence: the client holds every row of its partition.
		want := map[string]bool{}
		for _, cm := range logs[cc.partition] {
			for _, ch := range cm.Changes {
				want[ch.RowID] = true
			}
		}
		got := map[string]bool{}
		for _, r := range cc.cl.Rows("items") {
			got[r.ID] = true
		}
		if len(got) != len(want) {
			t.Fatalf("%s holds %d rows of %s, the log %d", cc.id, len(got), cc.partition, len(want))
		}
		for id := range want {
			if !got[id] {
				t.Fatalf("%s lacks row %s", cc.id, id)
			}
		}
		if cc.member == 0 {
			t.Fatalf("%s still on the killed member", cc.id)
		}
		if cc.moved {
			moved++
			worst = max(worst, cc.failover)
		}
		errs += cc.errors
	}
	if moved != clients/3+min(clients%3, 1) {
		t.Fatalf("%d clients moved off the killed member, want its %d", moved, clients/3+min(clients%3, 1))
	}

	// The bus: once the survivors relayed everything, every commit is
	// there exactly once (checkBus fails on a duplicate).
	// The stream may be electing a leader after the kill: each read is
	// one short attempt.
	poll.Until(t, 30*time.Second, "every commit on the bus", func() bool {
		actx, acancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer acancel()
		stream, err := js.Stream(actx, bus.Names{}.CommitStream())
		return err == nil && stream.CachedInfo().State.Msgs >= uint64(total)
	})
	events := 0
	for part, commits := range logs {
		events += checkBus(t, js, part, commits, true)
	}
	if events != total {
		t.Fatalf("%d events for %d commits", events, total)
	}
	t.Logf("%d commits over %d partitions, %d events; %d clients moved, slowest first round after the kill %v; %d failed rounds; a fresh device bootstrapped %d rows at a survivor %v after the kill (its segment fallbacks: %s)",
		total, partitions, events, moved, worst, errs, fresh.cl.Count("items"), freshAt, metricOf(c.nodes[fresh.member].url, "syncnode_segment_fallbacks_total"))
}

// partitionLog is a partition's whole commit log, checked dense.
func partitionLog(t testing.TB, st storage.Store, partition string) []storage.Commit {
	t.Helper()
	var commits []storage.Commit
	for after := int64(0); ; {
		page, err := st.CommitRange(context.Background(), partition, after, storage.MaxCommitRangeLimit)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		commits = append(commits, page...)
		after = page[len(page)-1].CommitSeq
	}
	for i, cm := range commits {
		if cm.CommitSeq != int64(i+1) {
			t.Fatalf("%s: log not dense: commit %d has seq %d", partition, i+1, cm.CommitSeq)
		}
	}
	return commits
}

// assertReplicas checks the replication factor of streams.
func assertReplicas(t testing.TB, js jetstream.JetStream, want int, streams ...string) {
	t.Helper()
	for _, name := range streams {
		var got int
		poll.Until(t, 30*time.Second, "stream "+name, func() bool {
			s, err := js.Stream(context.Background(), name)
			if err != nil {
				return false
			}
			got = s.CachedInfo().Config.Replicas
			return true
		})
		if got != want {
			t.Fatalf("stream %s has %d replicas, want %d", name, got, want)
		}
	}
}

// metricOf is the value of one unlabelled metric a member's /metrics
// reports, or the reason it has none: for logs.
func metricOf(url, name string) string {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return "absent"
}
