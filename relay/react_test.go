package relay

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
)

// changeLog records a watcher's callbacks and checks they never overlap.
type changeLog struct {
	mu      sync.Mutex
	last    map[string]bus.PartitionChange
	calls   int
	inCall  atomic.Int32
	overlap atomic.Bool
}

func newChangeLog() *changeLog { return &changeLog{last: map[string]bus.PartitionChange{}} }

func (c *changeLog) onChange(ch bus.PartitionChange) {
	if c.inCall.Add(1) > 1 {
		c.overlap.Store(true)
	}
	defer c.inCall.Add(-1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if prev, ok := c.last[ch.Partition.ID()]; ok && prev.LogEpoch == ch.LogEpoch && ch.CommitSeq < prev.CommitSeq {
		c.overlap.Store(true) // went backwards
	}
	c.last[ch.Partition.ID()] = ch
}

func (c *changeLog) seq(p string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last[p].CommitSeq
}

// Two embedded servers clustered over loopback routes: a relay on one
// node, and on both nodes a partition watcher, a core subscriber and an
// ordered follower see every event.
func TestClusterBothNodesSeeEveryEvent(t *testing.T) {
	t.Parallel()
	servers := embeddedtest.StartCluster(t, 2)
	e := newRelayEnvOn(t, servers[0])
	r := e.relay(Config{Streams: bus.StreamsConfig{Commits: bus.StreamConfig{Replicas: 2}, Control: bus.StreamConfig{Replicas: 2}}})
	e.start(r)

	parts := []string{"a", "b", "c"}
	type nodeView struct {
		watch  *changeLog
		mu     sync.Mutex
		core   int
		follow map[string][]int64
	}
	views := make([]*nodeView, len(servers))
	for i, srv := range servers {
		v := &nodeView{watch: newChangeLog(), follow: map[string][]int64{}}
		views[i] = v
		w, err := bus.WatchPartitions(srv.Conn(), prod, bus.WatchConfig{OnChange: v.watch.onChange})
		if err != nil {
			t.Fatal(err)
		}
		defer mustStop(t, w)
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		sub, err := nc.Subscribe(prod.AllCommits(), func(*nats.Msg) { v.mu.Lock(); v.core++; v.mu.Unlock() })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		f, err := bus.Follow(e.ctx, srv.JetStream(), prod, bus.FollowParams{StartSeq: 1}, func(ev bus.Event) {
			v.mu.Lock()
			v.follow[ev.Partition.ID()] = append(v.follow[ev.Partition.ID()], ev.CommitSeq)
			v.mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		defer mustStop(t, f)
	}
	// Route interest propagates asynchronously: wait until a probe
	// published on node 0 reaches a subscriber on node 1.
	waitRouteInterest(t, servers[0].Conn(), servers[1].Conn())

	const commits = 20
	for i := range commits {
		for _, p := range parts {
			if i%2 == 0 {
				e.commit(p, "todos", "projects")
			} else {
				e.commit(p, "todos")
			}
			r.Notify(p)
		}
	}
	e.flush(r)
	total := 0
	for _, p := range parts {
		total += len(e.checkLogInStream(p))
	}
	for i, v := range views {
		waitFor(t, 10*time.Second, fmt.Sprintf("node %d sees every event", i), func() error {
			v.mu.Lock()
			defer v.mu.Unlock()
			if v.core != total {
				return fmt.Errorf("core subscriber: %d of %d", v.core, total)
			}
			n := 0
			for _, s := range v.follow {
				n += len(s)
			}
			if n != total {
				return fmt.Errorf("follower: %d of %d", n, total)
			}
			for _, p := range parts {
				if got := v.watch.seq(p); got != commits {
					return fmt.Errorf("watcher: %s at %d", p, got)
				}
			}
			return nil
		})
		if v.watch.overlap.Load() {
			t.Errorf("node %d: watcher callbacks overlapped or went backwards", i)
		}
		for p, seqs := range v.follow {
			for j := 1; j < len(seqs); j++ {
				if seqs[j] < seqs[j-1] {
					t.Fatalf("node %d: %s out of order: %v", i, p, seqs)
				}
			}
		}
	}
	info, err := servers[1].JetStream().Stream(e.ctx, prod.CommitStream())
	if err != nil {
		t.Fatal(err)
	}
	if c := info.CachedInfo().Cluster; c == nil || len(c.Replicas) != 1 {
		t.Errorf("SYNC_COMMITS cluster info %+v, want a leader and one replica", c)
	}
}

func waitRouteInterest(t *testing.T, pub, sub *nats.Conn) {
	t.Helper()
	got := make(chan struct{}, 1)
	s, err := sub.Subscribe("probe.route", func(*nats.Msg) {
		select {
		case got <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe()
	_ = sub.Flush()
	waitFor(t, 10*time.Second, "route interest", func() error {
		_ = pub.Publish("probe.route", nil)
		select {
		case <-got:
			return nil
		default:
			return errors.New("not yet")
		}
	})
}

// The watcher coalesces per partition: a burst of commits becomes fewer
// callbacks ending at the last commit, never concurrent.
func TestWatchPartitionsCoalesces(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	block := make(chan struct{})
	var first sync.Once
	log := newChangeLog()
	resynced := atomic.Int32{}
	w, err := bus.WatchPartitions(e.srv.Conn(), prod, bus.WatchConfig{
		OnChange: func(ch bus.PartitionChange) {
			first.Do(func() { <-block }) // a slow consumer
			log.onChange(ch)
		},
		OnResync: func() { resynced.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer mustStop(t, w)
	r := e.relay(Config{BatchMessages: 1})
	e.start(r)
	for range 50 {
		e.commit("p", "todos")
		e.commit("q", "projects")
		r.Notify("p")
		r.Notify("q")
	}
	e.flush(r)
	close(block)
	waitFor(t, 10*time.Second, "the watcher reaches the last commits", func() error {
		if log.seq("p") != 50 || log.seq("q") != 50 {
			return fmt.Errorf("p at %d, q at %d", log.seq("p"), log.seq("q"))
		}
		return nil
	})
	log.mu.Lock()
	calls := log.calls
	log.mu.Unlock()
	if calls >= 100 {
		t.Errorf("%d callbacks for 100 commits: not coalesced", calls)
	}
	if log.overlap.Load() {
		t.Errorf("callbacks overlapped or went backwards")
	}
	if _, err := bus.WatchPartitions(e.srv.Conn(), prod, bus.WatchConfig{}); err == nil {
		t.Errorf("WatchPartitions without OnChange accepted")
	}
}

// bus.Follow catches up from a stream sequence and filters by partition and
// table.
func TestFollowCatchUpAndFilters(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	r := e.relay(Config{})
	e.start(r)
	for range 10 {
		e.commit("p", "todos", "projects")
		e.commit("q", "todos")
	}
	r.Notify("p")
	r.Notify("q")
	e.flush(r)
	all := e.streamEvents()

	collect := func(fp bus.FollowParams, want int) []bus.Event {
		t.Helper()
		var mu sync.Mutex
		var got []bus.Event
		f, err := bus.Follow(e.ctx, e.js, prod, fp, func(ev bus.Event) { mu.Lock(); got = append(got, ev); mu.Unlock() })
		if err != nil {
			t.Fatal(err)
		}
		defer mustStop(t, f)
		waitFor(t, 10*time.Second, fmt.Sprintf("%d events for %+v", want, fp), func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(got) < want {
				return fmt.Errorf("%d", len(got))
			}
			return nil
		})
		mustStop(t, f)
		mu.Lock()
		defer mu.Unlock()
		if len(got) != want {
			t.Fatalf("%d events, want %d", len(got), want)
		}
		return got
	}
	from := all[10].StreamSeq
	got := collect(bus.FollowParams{StartSeq: from}, len(all)-10)
	if got[0].StreamSeq != from || got[len(got)-1].StreamSeq != all[len(all)-1].StreamSeq {
		t.Errorf("catch-up range %d..%d", got[0].StreamSeq, got[len(got)-1].StreamSeq)
	}
	p := mustPartition(t, "p")
	for _, ev := range collect(bus.FollowParams{StartSeq: 1, Partition: p}, 20) {
		if ev.Partition.ID() != "p" {
			t.Fatalf("partition filter let %q through", ev.Partition.ID())
		}
	}
	for _, ev := range collect(bus.FollowParams{StartSeq: 1, Table: "projects"}, 10) {
		if ev.Table != "projects" {
			t.Fatalf("table filter let %q through", ev.Table)
		}
	}
	collect(bus.FollowParams{StartSeq: 1, Partition: p, Table: "todos"}, 10)
	if _, err := bus.Follow(e.ctx, e.js, prod, bus.FollowParams{Table: "bad.table"}, func(bus.Event) {}); !errors.Is(err, bus.ErrInvalidTable) {
		t.Errorf("bad table: %v", err)
	}

	// New-only delivery starts after bus.Follow returns.
	var n atomic.Int32
	f, err := bus.Follow(e.ctx, e.js, prod, bus.FollowParams{}, func(bus.Event) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer mustStop(t, f)
	e.commit("q", "todos")
	r.Notify("q")
	e.flush(r)
	waitFor(t, 5*time.Second, "the new event", func() error {
		if n.Load() != 1 {
			return fmt.Errorf("%d events", n.Load())
		}
		return nil
	})
}
