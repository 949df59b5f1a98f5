package realtime_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/internal/proxytest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// deployment is nodes sharing one PostgreSQL schema and one NATS server,
// each reaching NATS through a proxy of its own.
type deployment struct {
	nodes   []*node.Node
	proxies []*proxytest.Proxy
}

func startDeployment(t testing.TB, n int, mods ...func(*node.Config)) *deployment {
	t.Helper()
	pgURL, pgSchema := pgtest.Schema(t)
	srv := embeddedtest.Start(t)
	target := strings.TrimPrefix(srv.ClientURL(), "nats://")
	d := &deployment{}
	for i := range n {
		p := proxytest.Start(t, target)
		d.proxies = append(d.proxies, p)
		d.nodes = append(d.nodes, startNode(t, append([]func(*node.Config){func(c *node.Config) {
			c.Name = "node-" + string(rune('a'+i))
			c.Store.Postgres.URL, c.Store.Postgres.Schema = pgURL, pgSchema
			c.NATS = embedded.Config{Mode: embedded.ModeExternal, URLs: []string{"nats://" + p.Addr()}}
			c.Realtime.Hub.FallbackPollInterval = 20 * time.Millisecond
			c.Realtime.Hub.PresenceAliveInterval = 50 * time.Millisecond
		}}, mods...)...))
	}
	return d
}

// gatesLive waits until every node's serve gate watches its KV bucket:
// from then on a gate change on one node reaches all of them (a node's
// gate binds the bucket in the background after it starts).
func (d *deployment) gatesLive(t testing.TB) {
	t.Helper()
	for i, n := range d.nodes {
		poll.Until(t, wait, fmt.Sprintf("node %d's gate to watch KV", i), n.Gate.WatchLive)
	}
}

// wakeAtLeast waits for a wake-up with reason whose cursor reached seq.
func (c *wsClient) wakeAtLeast(reason ssp2.WakeReason, seq int64) {
	c.t.Helper()
	c.until("a wake-up at "+string(reason), func() bool {
		for _, m := range c.events {
			if w, ok := m.(*ssp2.Wake); ok && w.Reason == reason && w.Cursor >= seq {
				return true
			}
		}
		return false
	})
}

// assertContiguous checks the client applied every commit from first to
// last exactly once.
func assertContiguous(t testing.TB, c *wsClient, first, last int64) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	want := []int64{}
	for s := first; s <= last; s++ {
		want = append(want, s)
	}
	if !slices.Equal(c.rep.seqs, want) {
		t.Fatalf("applied commits %v, want each of %d..%d once, in order", c.rep.seqs, first, last)
	}
}

func TestCommitOnOneNodeIsADeltaOnAnother(t *testing.T) {
	d := startDeployment(t, 2)
	a, b := d.nodes[0], d.nodes[1]
	pa := newPusher(t, a.URL(), "alice", "p1")
	c := mustDial(t, b.URL(), token(t, "bob", "p1"), "bob-1")
	c.subscribe("tasks", "p1")
	first := pa.push([2]string{"r1", "p1"})
	c.sync()
	s := pa.push([2]string{"r2", "p1"})
	if got := deltaSeq(t, c.applyDelta(0)); got != s {
		t.Fatalf("delta on node b carries %d, want %d", got, s)
	}

	// Node b loses NATS: its sessions are woken from SQL, and catch up by
	// pulling over the socket.
	m := b.Realtime.Metrics()
	gaps := m.TailGaps.Load()
	d.proxies[1].Cut()
	poll.Until(t, wait, "node b to see NATS down", func() bool { return !b.NATS.Conn().IsConnected() })
	for range 2 {
		s = pa.push([2]string{"r3", "p1"}, [2]string{"r4", "p1"})
		c.wakeAtLeast(ssp2.WakeCatchupRequired, s)
		c.sync()
	}
	deltas := c.numDeltas()

	// Back on the bus: the consumer replays what it missed (skipped: the
	// session already observed it) and deltas resume.
	d.proxies[1].Restore()
	poll.Until(t, wait, "node b to reconnect", func() bool { return b.NATS.Conn().IsConnected() })
	// The reconnect's gap report reads the partition in SQL and wakes a
	// session behind it: a commit that lands before that read is answered
	// with a wake-up, not a delta. The read is queued on the partition's
	// worker ahead of every commit the report precedes, so once a commit
	// made after the report is answered (delta or wake-up) it has run,
	// and a sync leaves the session live.
	waitMetric(t, "the reconnect's gap", m.TailGaps.Load, gaps+1)
	probe := pa.push([2]string{"r5", "p1"})
	c.until("the probe's delta or wake-up", func() bool {
		if len(c.deltas) > deltas {
			return true
		}
		for _, e := range c.events {
			if w, ok := e.(*ssp2.Wake); ok && w.Cursor >= probe {
				return true
			}
		}
		return false
	})
	c.sync()
	deltas = c.numDeltas()
	for i := range 3 {
		s = pa.push([2]string{"r5", "p1"})
		if got := deltaSeq(t, c.applyDelta(deltas+i)); got != s {
			t.Fatalf("delta %d after the reconnect carries %d, want %d", i, got, s)
		}
	}
	assertContiguous(t, c, first, s)
	assertMatchesServer(t, b.Store, c, "p1")
}

func TestEpochRotationResetsEveryNode(t *testing.T) {
	d := startDeployment(t, 2)
	pa := newPusher(t, d.nodes[0].URL(), "alice", "p1")
	var clients []*wsClient
	for i, n := range d.nodes {
		c := mustDial(t, n.URL(), token(t, "bob", "p1"), "bob-"+string(rune('1'+i)))
		c.subscribe("tasks", "p1")
		clients = append(clients, c)
	}
	pa.push([2]string{"r1", "p1"})
	for _, c := range clients {
		c.sync()
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	d.gatesLive(t)
	rotated, err := d.nodes[0].Gate.RotateEpoch(ctx, partition)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range clients {
		c.wakeAtLeast(ssp2.WakeResetRequired, 0)
		// The client resets onto the new epoch over the socket; deltas
		// then carry it.
		c.sync()
		if c.rep.epoch != rotated.LogEpoch {
			t.Fatalf("client %d reset onto %s, want %s", i, c.rep.epoch, rotated.LogEpoch)
		}
	}
	pa.epoch = rotated.LogEpoch
	s := pa.push([2]string{"r2", "p1"})
	for i, c := range clients {
		m := c.applyDelta(0)
		if got := deltaSeq(t, m); got != s || m.Frames[0].(*ssp2.RespHeader).LogEpoch != rotated.LogEpoch {
			t.Fatalf("client %d: delta %d under %s, want %d under %s", i, got, m.Frames[0].(*ssp2.RespHeader).LogEpoch, s, rotated.LogEpoch)
		}
		assertMatchesServer(t, d.nodes[i].Store, c, "p1")
	}
}

func TestGateRefusalResetsTheNodesThatRefuse(t *testing.T) {
	d := startDeployment(t, 2)
	a, b := d.nodes[0], d.nodes[1]
	pa := newPusher(t, a.URL(), "alice", "p1")
	pa.push([2]string{"r1", "p1"})
	ca := registered(t, a, "bob", "bob-a", "p1")
	cb := registered(t, b, "bob", "bob-b", "p1")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	// Node a declares a backfill: it keeps serving the partition, node b
	// refuses it, and b's sessions are told to reset.
	d.gatesLive(t)
	cp, err := a.Gate.Declare(ctx, partition, "bf")
	if err != nil {
		t.Fatal(err)
	}
	cb.wakeAtLeast(ssp2.WakeResetRequired, 0)
	s := pa.push([2]string{"r2", "p1"})
	if got := deltaSeq(t, ca.applyDelta(0)); got != s {
		t.Fatalf("node a's delta carries %d, want %d", got, s)
	}
	cb.wakeAtLeast(ssp2.WakeResetRequired, s)
	if cb.numDeltas() != 0 {
		t.Fatal("node b sent a delta of a partition its gate refuses")
	}

	if out, err := a.Gate.Activate(ctx, storage.CheckpointActivateParams{CheckpointKey: cp.CheckpointKey, OwnerEpoch: cp.OwnerEpoch,
		Watermark: s, Sources: []string{"tasks"}}); err != nil || out != storage.ActivateActivated {
		t.Fatalf("activate: %v %v", out, err)
	}
	poll.Until(t, wait, "node b to serve again", func() bool { _, err := b.Gate.Admit(ctx, partition); return err == nil })
	cb.sync()
	s = pa.push([2]string{"r3", "p1"})
	if got := deltaSeq(t, cb.applyDelta(0)); got != s {
		t.Fatalf("node b's delta after the activation carries %d, want %d", got, s)
	}
	assertMatchesServer(t, b.Store, cb, "p1")
}

func TestCommitMissedWhileDisconnectedWakesAfterReconnect(t *testing.T) {
	// No polls while the bus is down beyond the one at the disconnect, and
	// no periodic resync: only the tail's gap report after the reconnect
	// can tell node b of a commit whose event it never received.
	d := startDeployment(t, 2, func(c *node.Config) {
		c.Realtime.Hub.FallbackPollInterval = time.Hour
		c.Realtime.Hub.ResyncInterval = -1
	})
	a, b := d.nodes[0], d.nodes[1]
	pa := newPusher(t, a.URL(), "alice", "p1")
	c := mustDial(t, b.URL(), token(t, "bob", "p1"), "bob-1")
	c.subscribe("tasks", "p1")
	first := pa.push([2]string{"r1", "p1"})
	c.sync()
	m := b.Realtime.Metrics()
	checks, gaps := m.PartitionChecks.Load(), m.TailGaps.Load()

	d.proxies[1].Cut()
	poll.Until(t, wait, "node b to see NATS down", func() bool { return !b.NATS.Conn().IsConnected() })
	// The poll at the disconnect has read the partition: what is
	// committed from here on, node b hears of only through the gap.
	waitMetric(t, "the disconnect's poll", m.PartitionChecks.Load, checks+1)
	s := pa.push([2]string{"r2", "p1"})
	d.proxies[1].Restore()
	waitMetric(t, "the reconnect's gap", m.TailGaps.Load, gaps+1)
	c.wakeAtLeast(ssp2.WakeCatchupRequired, s)
	c.sync()
	deltas := c.numDeltas()

	// Live again: the next commit is a delta.
	s = pa.push([2]string{"r3", "p1"})
	if got := deltaSeq(t, c.applyDelta(deltas)); got != s {
		t.Fatalf("delta after the reconnect carries %d, want %d", got, s)
	}
	if got := c.rep.seqs[0]; got != first {
		t.Fatalf("first commit applied %d, want %d", got, first)
	}
	assertMatchesServer(t, b.Store, c, "p1")
}
