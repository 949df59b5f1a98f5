package realtime_test

import (
	"fmt"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

// deltaSeq is the commit a delta carries.
func deltaSeq(t testing.TB, m *ssp2.Message) int64 {
	t.Helper()
	cs := framesOf[*ssp2.Commit](m)
	if len(cs) == 0 {
		t.Fatalf("delta without COMMIT: %+v", m.Frames)
	}
	return cs[0].CommitSeq
}

func TestPushReachesAnotherClientAsDeltas(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		n := startNode(t, b.on(t))
		a := newPusher(t, n.URL(), "alice", "p1", "p2")
		c := mustDial(t, n.URL(), token(t, "bob", "p1"), "bob-1")
		if h := c.hello(); !h.RequiresSync || h.Cursor != -1 || h.ClientID != "bob-1" || h.ActorID != "bob" || h.ProtocolVersion != 1 {
			t.Fatalf("hello of a new client: %+v", h)
		}
		seed := a.push([2]string{"t0", "p1"})
		c.subscribe("tasks", "p1")
		c.sync()

		var want []int64
		for i := range 3 {
			want = append(want, a.push([2]string{"t" + string(rune('1'+i)), "p1"}))
		}
		a.push([2]string{"other", "p2"}) // not bob's: no delta, but observed
		want = append(want, a.push([2]string{"t1", "p1"}))
		for i, seq := range want {
			m := c.applyDelta(i)
			if got := deltaSeq(t, m); got != seq {
				t.Fatalf("delta %d carries commit %d, want %d", i, got, seq)
			}
			if h := m.Frames[0].(*ssp2.RespHeader); h.LogEpoch != a.epoch || h.ResetRequired {
				t.Fatalf("delta header %+v, want epoch %s", h, a.epoch)
			}
			if se := framesOf[*ssp2.SubEnd](m); len(se) != 1 || se[0].NextCursor != seq {
				t.Fatalf("delta %d ends %+v", i, se)
			}
		}
		if got := c.numDeltas(); got != len(want) {
			t.Fatalf("%d deltas arrived, want %d (exactly once)", got, len(want))
		}
		assertMatchesServer(t, n.Store, c, "p1")
		if c.rep.seqs[0] != seed {
			t.Fatalf("the initial pull applied %v", c.rep.seqs)
		}
		waitMetric(t, "acks persisted", func() int64 {
			cl, _, _ := n.Store.ClientGet(t.Context(), partition, "bob-1")
			return cl.Cursor
		}, want[len(want)-1])
		if got := n.Realtime.Metrics().Deltas.Load(); got != int64(len(want)) {
			t.Fatalf("metrics count %d deltas, want %d", got, len(want))
		}
	})
}

func TestDeltasUseTheRecordsWireVersion(t *testing.T) {
	n := startNode(t)
	a := newPusher(t, n.URL(), "alice", "p1")
	tok := token(t, "bob", "p1")
	// bob's last pull was a wire version 1 request over HTTP.
	status, b := postSync(t, n.URL(), tok, encode(t, 1, &ssp2.ReqHeader{ClientID: "bob-1", SchemaVersion: 1}, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
		&ssp2.Subscription{ID: "tasks", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}}))
	if status != 200 {
		t.Fatalf("v1 pull: %d %s", status, b)
	}
	c := mustDial(t, n.URL(), tok, "bob-1")
	if h := c.hello(); h.RequiresSync {
		t.Fatalf("hello after a pull at the head: %+v", h)
	}
	s := a.push([2]string{"r1", "p1"})
	m := c.delta(0)
	if m.WireVersion != 1 || deltaSeq(t, m) != s || m.Frames[0].(*ssp2.RespHeader).LogEpoch != "" {
		t.Fatalf("delta for a v1 client: wire %d %+v", m.WireVersion, m.Frames[0])
	}
}

func TestAckNeverCreatesARecord(t *testing.T) {
	n := startNode(t)
	c := mustDial(t, n.URL(), token(t, "bob", "p1"), "bob-1")
	c.hello()
	c.ack(5)
	waitMetric(t, "the ack to be refused", n.Realtime.Metrics().AcksRefused.Load, 1)
	if _, ok, err := n.Store.ClientGet(t.Context(), partition, "bob-1"); err != nil || ok {
		t.Fatalf("an ack without a record: record %v, %v", ok, err)
	}
}

// TestDeltaEncodedOncePerRegistrationSet: a commit reaching several
// sockets registered alike is encoded once; every socket is sent those
// bytes.
func TestDeltaEncodedOncePerRegistrationSet(t *testing.T) {
	const sockets = 3
	n := startNode(t)
	a := newPusher(t, n.URL(), "alice", "p1")
	seq0 := a.push([2]string{"r0", "p1"})
	registerClients(t, n.Store, "bob", sockets, seq0)
	got := make(chan int64, sockets)
	tok := token(t, "bob", "p1")
	for i := range sockets {
		s, err := openBenchSocket(t.Context(), n.URL(), tok, fmt.Sprintf("fan-%d", i), func(seq int64) { got <- seq })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.close)
	}
	m := n.Realtime.Metrics()
	before := m.DeltaEncodes.Load()
	seq := a.push([2]string{"r1", "p1"})
	for range sockets {
		if s := <-got; s != seq {
			t.Fatalf("a socket got commit %d, want %d", s, seq)
		}
	}
	if enc := m.DeltaEncodes.Load() - before; enc != 1 {
		t.Fatalf("%d encodings of one commit for %d sockets registered alike, want 1", enc, sockets)
	}
	// The server counts a delta after its write returns, which may be
	// after the client read it.
	waitMetric(t, "deltas written", m.Deltas.Load, sockets)
}
