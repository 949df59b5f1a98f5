package realtime_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
)

// Core NATS does not deduplicate: a relay's republish after a crash can
// deliver a commit event twice (only the stream drops the copy). The
// copy is one more event for the hub and no second delta for the socket.
func TestDuplicateEventIsOneDelta(t *testing.T) {
	n := startNode(t)
	a := newPusher(t, n.URL(), "alice", "p1")
	c := registered(t, n, "bob", "bob-1", "p1")
	first := a.push([2]string{"r1", "p1"})
	if got := deltaSeq(t, c.applyDelta(0)); got != first {
		t.Fatalf("delta carries %d, want %d", got, first)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var names bus.Names
	p, err := bus.NewPartition(partition)
	if err != nil {
		t.Fatal(err)
	}
	st, err := n.NATS.JetStream().Stream(ctx, names.CommitStream())
	if err != nil {
		t.Fatal(err)
	}
	ev, err := st.GetLastMsgForSubject(ctx, names.PartitionCommits(p))
	if err != nil {
		t.Fatal(err)
	}
	m := n.Realtime.Metrics()
	events := m.BusEvents.Load()
	// Published again on core NATS, as a replaying relay would; the
	// stream refuses it (its compare-and-set header is stale).
	if err := n.NATS.Conn().PublishMsg(&nats.Msg{Subject: ev.Subject, Header: ev.Header, Data: ev.Data}); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, "the duplicate to reach the hub", m.BusEvents.Load, events+1)
	// The hub handles a partition's events in arrival order, so once the
	// next commit's delta is in, the duplicate has been handled.
	s := a.push([2]string{"r2", "p1"})
	if got := deltaSeq(t, c.applyDelta(1)); got != s {
		t.Fatalf("second delta carries %d, want %d", got, s)
	}
	if got := c.numDeltas(); got != 2 {
		t.Fatalf("%d deltas for 2 commits", got)
	}
	assertContiguous(t, c, first, s)
	assertMatchesServer(t, n.Store, c, "p1")
}

// The hub follows the live tail, not a consumer of the stream: after a
// burst of commits delivered to a socket, SYNC_COMMITS has no consumer,
// so nothing loads events back from its file store (bus/tail.go).
func TestHubLeavesTheStreamWithoutConsumers(t *testing.T) {
	n := startNode(t)
	a := newPusher(t, n.URL(), "alice", "p1")
	registered(t, n, "bob", "bob-1", "p1")
	m := n.Realtime.Metrics()
	events := m.BusEvents.Load()
	for i := range 30 {
		a.push([2]string{"r" + string(rune('a'+i)), "p1"})
	}
	waitMetric(t, "every commit's event at the hub", m.BusEvents.Load, events+30)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := n.NATS.JetStream().Stream(ctx, bus.Names{}.CommitStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs < 30 || info.State.Consumers != 0 {
		t.Fatalf("stream holds %d events and %d consumers, want ≥30 and 0", info.State.Msgs, info.State.Consumers)
	}
}
