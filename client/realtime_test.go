package client

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// wait bounds every poll of these tests.
const wait = 30 * time.Second

// goLive starts a realtime session for c (no wake jitter, fast
// reconnects) and waits until it is connected.
func goLive(t testing.TB, c *Client, mod func(*RealtimeConfig)) *Realtime {
	t.Helper()
	cfg := RealtimeConfig{WakeJitter: -1, ReconnectMin: 5 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if mod != nil {
		mod(&cfg)
	}
	rt, err := c.NewRealtime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := rt.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	poll.Until(t, wait, c.ClientID()+" to connect", func() bool { return rt.Status().State == RealtimeConnected })
	return rt
}

// applyLog records the commitSeqs a client applied, rounds and deltas
// alike, in order.
type applyLog struct {
	mu   sync.Mutex
	seqs []int64
}

func (l *applyLog) record(res Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seqs = append(l.seqs, res.CommitSeqs...)
}

func (l *applyLog) has(seq int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.seqs, seq)
}

// await waits until the client applied seq.
func (l *applyLog) await(t testing.TB, seq int64) {
	t.Helper()
	poll.Until(t, wait, fmt.Sprintf("commit %d to be applied", seq), func() bool { return l.has(seq) })
}

// exactlyOnce fails t unless the client applied want, each once, in
// order.
func (l *applyLog) exactlyOnce(t testing.TB, want []int64) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Equal(l.seqs, want) {
		t.Fatalf("applied commits %v, want %v (each once, in order)", l.seqs, want)
	}
}

// pushTask commits one task upsert from c, pushes it and returns its
// commitSeq.
func pushTask(t testing.TB, c *Client, id, project, title string) int64 {
	t.Helper()
	mustCommit(t, c, Upsert("tasks", task(id, project, title)))
	res, err := c.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Pushed) != 1 || res.Pushed[0].Status != ssp2.PushApplied {
		t.Fatalf("push of %s: %+v", id, res.Pushed)
	}
	return res.Pushed[0].CommitSeq
}

// listener connects bob, subscribed to p1 and recording what he applies,
// and waits until his first round is done and its ack reached the hub.
func listener(t testing.TB, srv *server, n *node.Node) (*Client, *Realtime, *applyLog) {
	t.Helper()
	log := &applyLog{}
	b := srv.client("bob", []string{"p1"}, func(cfg *Config) { cfg.AppliedFunc = log.record })
	rt := goLive(t, b, nil)
	firstRound(t, rt)
	acksSeen(t, n, 1)
	return b, rt, log
}

// firstRound waits until a session's first round ended with its ack.
func firstRound(t testing.TB, rt *Realtime) {
	t.Helper()
	poll.Until(t, wait, "the first round", func() bool { return rt.Stats().Acks >= 1 })
}

// acksSeen waits until the node's hub processed n acks in all: from then
// on a session whose last ack reached what it observed gets deltas.
func acksSeen(t testing.TB, n *node.Node, want int64) {
	t.Helper()
	poll.Until(t, wait, fmt.Sprintf("%d acks at the hub", want), func() bool { return n.Realtime.Metrics().Acks.Load() >= want })
}

// TestRealtimeDeltas: client A pushes over HTTP; client B, connected,
// receives every commit of its scope as a delta, applies it exactly once
// and in order, and acknowledges it; commits outside B's scope do not
// break the stream. B's replica equals the server's rows and its client
// record's cursor follows its acks.
func TestRealtimeDeltas(t *testing.T) { bothStores(t, testRealtimeDeltas) }

func testRealtimeDeltas(t *testing.T) {
	srv, n := startNode(t, 0)
	a := srv.client("alice", []string{"p1", "p2"}, nil)
	mustSync(t, a)
	// A new client is told to sync: its first round rides the socket and
	// ends with an ack.
	b, rt, log := listener(t, srv, n)

	var want []int64
	for i := range 12 {
		if i%4 == 3 {
			pushTask(t, a, fmt.Sprintf("other-%d", i), "p2", "not for bob")
		}
		seq := pushTask(t, a, fmt.Sprintf("t%d", i%5), "p1", fmt.Sprintf("edit %d", i))
		want = append(want, seq)
		log.await(t, seq)
	}
	st := rt.Stats()
	if st.Deltas != 12 || st.Rounds != 1 || st.DeltasDropped != 0 || st.Wakes != 0 {
		t.Fatalf("stats %+v: want every commit as a delta after one round", st)
	}
	log.exactlyOnce(t, want)
	sameRows(t, "bob", replicaRows(b), srv.serverRows("p1"))
	poll.Until(t, wait, "bob's record to follow his acks", func() bool {
		rec, ok, err := srv.store.ClientGet(context.Background(), partition, b.ClientID())
		return err == nil && ok && rec.Cursor == want[len(want)-1]
	})
	if got := b.Subscriptions()[0].Cursor; got != want[len(want)-1] {
		t.Fatalf("bob's cursor %d, want %d", got, want[len(want)-1])
	}
}

// TestRealtimeCatchUpAtConnect: a client behind at connect is told so by
// hello, catches up with one round over the socket, then receives
// deltas.
func TestRealtimeCatchUpAtConnect(t *testing.T) { bothStores(t, testRealtimeCatchUpAtConnect) }

func testRealtimeCatchUpAtConnect(t *testing.T) {
	srv, n := startNode(t, 0)
	a := srv.client("alice", []string{"p1"}, nil)
	var log applyLog
	b := srv.client("bob", []string{"p1"}, func(cfg *Config) { cfg.AppliedFunc = log.record })
	pushTask(t, a, "t0", "p1", "before")
	mustSync(t, b) // a bootstrap: no COMMIT frames
	var want []int64
	for i := range 5 {
		want = append(want, pushTask(t, a, fmt.Sprintf("t%d", i), "p1", "while bob is away"))
	}
	rt := goLive(t, b, nil)
	poll.Until(t, wait, "bob to catch up", func() bool { return log.has(want[len(want)-1]) })
	if st := rt.Stats(); st.Rounds != 1 || st.Deltas != 0 {
		t.Fatalf("catch-up stats %+v: want one round, no deltas", st)
	}
	acksSeen(t, n, 1)
	for i := range 3 {
		seq := pushTask(t, a, fmt.Sprintf("t%d", i), "p1", "live")
		want = append(want, seq)
		log.await(t, seq)
	}
	if st := rt.Stats(); st.Deltas != 3 {
		t.Fatalf("stats %+v: want 3 deltas after the catch-up", st)
	}
	log.exactlyOnce(t, want)
	sameRows(t, "bob", replicaRows(b), srv.serverRows("p1"))
}

// TestRealtimeWakeRunsRound: a delta over the server's size cap becomes a
// delta-too-large wake-up; the client answers it with a round, which
// brings the commit, and deltas resume.
func TestRealtimeWakeRunsRound(t *testing.T) {
	srv, n := startNode(t, 0, func(c *node.Config) { c.Realtime.Hub.MaxDeltaBytes = 1 << 10 })
	a := srv.client("alice", []string{"p1"}, nil)
	mustSync(t, a)
	b, rt, log := listener(t, srv, n)

	big := pushTask(t, a, "big", "p1", strings.Repeat("x", 4<<10))
	log.await(t, big)
	if st := rt.Stats(); st.Wakes != 1 || st.Rounds != 2 || st.Deltas != 0 {
		t.Fatalf("stats %+v: want one wake-up answered by a round", st)
	}
	acksSeen(t, n, 2)
	// A commit that lands while the wake-up's round is still pulling
	// (a loaded machine) is brought by that round, and the server answers
	// it with a catch-up wake-up instead of a delta; so small commits go
	// until one arrives as a delta.
	want := []int64{big}
	for i := 0; rt.Stats().Deltas == 0; i++ {
		if i == 10 {
			t.Fatalf("stats %+v: deltas did not resume after the wake-up's round", rt.Stats())
		}
		small := pushTask(t, a, fmt.Sprintf("small%d", i), "p1", "fits")
		want = append(want, small)
		log.await(t, small)
	}
	log.exactlyOnce(t, want)
	sameRows(t, "bob", replicaRows(b), srv.serverRows("p1"))
}

// TestRealtimeDropTriggersRound: a delta the client could not apply (as
// when its queue overflows) stops delta application and asks for a
// round; the round brings the commits, a delta it overtook is skipped as
// a duplicate, and deltas resume: nothing applies twice.
func TestRealtimeDropTriggersRound(t *testing.T) {
	srv, n := startNode(t, 0)
	a := srv.client("alice", []string{"p1"}, nil)
	mustSync(t, a)
	b, rt, log := listener(t, srv, n)
	first := pushTask(t, a, "t1", "p1", "one")
	log.await(t, first)

	// Drop as a queue overflow would, while the round lock is held: the
	// recovery round waits for it, and the next delta waits in the queue.
	s := b.live.Load()
	queued := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.queue)
	}
	var second int64
	func() {
		b.syncMu.Lock()
		defer b.syncMu.Unlock()
		s.drop()
		if s.isContiguous() {
			t.Fatal("a drop left the socket contiguous")
		}
		second = pushTask(t, a, "t2", "p1", "two")
		poll.Until(t, wait, "the second delta to wait in the queue", func() bool { return queued() == 1 })
	}()
	log.await(t, second)
	poll.Until(t, wait, "the overtaken delta to be skipped", func() bool { return rt.Stats().DeltasSkipped == 1 })
	if st := rt.Stats(); st.DeltasDropped != 1 || st.Rounds != 2 || st.Deltas != 1 {
		t.Fatalf("stats %+v: want the drop repaired by one round", st)
	}
	acksSeen(t, n, 3)
	third := pushTask(t, a, "t3", "p1", "three")
	log.await(t, third)
	if st := rt.Stats(); st.Deltas != 2 {
		t.Fatalf("stats %+v: want deltas to resume", st)
	}
	log.exactlyOnce(t, []int64{first, second, third})
	sameRows(t, "bob", replicaRows(b), srv.serverRows("p1"))
}

// TestDeltaApply drives the delta apply path directly with deltas built
// like the server builds them: a delta continuing a synced subscription
// applies and is acked at its cursor; the same delta again is a
// duplicate that advances nothing; one under another log epoch, for an
// unknown subscription or for one not synced yet asks for a round
// instead.
func TestDeltaApply(t *testing.T) {
	srv := newServer(t, nil)
	a := srv.client("alice", []string{"p1"}, nil)
	seq := pushTask(t, a, "t1", "p1", "one")
	b := srv.client("bob", []string{"p1"}, nil)
	mustSync(t, b)
	if err := b.Subscribe("sub-later", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
		t.Fatal(err)
	}
	tbl, _ := b.schema.Table("tasks")
	rowBytes, _, err := encodeRow(tbl, task("t2", "p1", "from a delta"))
	if err != nil {
		t.Fatal(err)
	}
	delta := func(epoch, sub string, seq int64) []byte {
		v := int64(1)
		m := &ssp2.Message{WireVersion: 3, Kind: ssp2.KindResponse, Frames: []ssp2.Frame{
			&ssp2.RespHeader{LogEpoch: epoch},
			&ssp2.SubStart{ID: sub, Status: ssp2.SubActive, EffectiveScopes: map[string][]string{"project_id": {"p1"}}},
			&ssp2.Commit{CommitSeq: seq, CreatedAtMs: 1, ActorID: "alice", Tables: []string{"tasks"}, Changes: []ssp2.Change{
				{RowID: "t2", Op: ssp2.OpUpsert, RowVersion: &v, Row: rowBytes, Scopes: map[string]string{"project_id": "p1"}}}},
			&ssp2.SubEnd{NextCursor: seq},
		}}
		b, err := m.AppendEncode(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		msg       []byte
		ack       int64
		commits   int
		needRound bool
	}{
		{"continues", delta(b.LogEpoch(), "sub-p1", seq+1), seq + 1, 1, false},
		{"duplicate", delta(b.LogEpoch(), "sub-p1", seq+1), 0, 0, false},
		{"older", delta(b.LogEpoch(), "sub-p1", seq), 0, 0, false},
		{"another epoch", delta("other-epoch", "sub-p1", seq+2), 0, 0, true},
		{"not synced", delta(b.LogEpoch(), "sub-later", seq+2), 0, 0, true},
		{"unknown subscription", delta(b.LogEpoch(), "sub-gone", seq+2), 0, 0, false},
	} {
		ack, needRound, res, err := b.applyDelta(ctx, tc.msg)
		if err != nil || ack != tc.ack || res.Commits != tc.commits || needRound != tc.needRound {
			t.Fatalf("%s: ack %d, %d commits, needRound %v, err %v; want ack %d, %d commits, needRound %v",
				tc.name, ack, res.Commits, needRound, err, tc.ack, tc.commits, tc.needRound)
		}
	}
	if got := b.Subscriptions()[0].Cursor; got != seq+1 {
		t.Fatalf("cursor %d after the deltas, want %d", got, seq+1)
	}
	if r, ok := b.Row("tasks", "t2"); !ok || r.Values["title"] != "from a delta" {
		t.Fatalf("row t2 = %+v, %v", r, ok)
	}
	// A delta that does not decode is an error: the caller drops it.
	if _, needRound, _, err := b.applyDelta(ctx, []byte("SSP2garbage")); err == nil || !needRound {
		t.Fatalf("garbage delta: needRound %v, err %v", needRound, err)
	}
}

// TestSocketRoundEqualsHTTPRound: a client syncing over the socket and one
// syncing over HTTP reach the same replica, the same subscription states
// and the same push outcomes; every round of the first rides the socket.
func TestSocketRoundEqualsHTTPRound(t *testing.T) { bothStores(t, testSocketRoundEqualsHTTPRound) }

func testSocketRoundEqualsHTTPRound(t *testing.T) {
	srv, _ := startNode(t, 0)
	seed(t, srv, 1500, "p1")
	pull := func(cfg *Config) {
		cfg.Pull = PullOptions{LimitSnapshotRows: 200, MaxSnapshotPages: 2, LimitCommits: 3}
	}
	x := srv.client("xavier", []string{"p1"}, pull)
	y := srv.client("yvonne", []string{"p1"}, pull)
	rt := goLive(t, y, nil)
	for step := range 3 {
		rx := mustSync(t, x)
		ry := mustSync(t, y)
		if rx.SocketRounds != 0 || ry.SocketRounds != ry.Rounds {
			t.Fatalf("step %d: http client rode the socket %d times; socket client %d of %d rounds", step, rx.SocketRounds, ry.SocketRounds, ry.Rounds)
		}
		sameRows(t, "socket replica vs http replica", replicaRows(y), replicaRows(x))
		sameRows(t, "socket replica vs server", replicaRows(y), srv.serverRows("p1"))
		sx, sy := x.Subscriptions()[0], y.Subscriptions()[0]
		if sx.Cursor != sy.Cursor || sx.Status != sy.Status || ssp2.ScopeDigest(sx.Effective) != ssp2.ScopeDigest(sy.Effective) {
			t.Fatalf("step %d: subscriptions differ: http %+v, socket %+v", step, sx, sy)
		}
		// Both write, then both see both writes.
		for i, c := range []*Client{x, y} {
			mustCommit(t, c, Upsert("tasks", task(fmt.Sprintf("p1-%07d", step*10+i), "p1", c.ClientID())),
				Delete("tasks", fmt.Sprintf("p1-%07d", 1000+step*10+i)))
		}
		px, py := mustSync(t, x), mustSync(t, y)
		if len(px.Pushed) != 1 || len(py.Pushed) != 1 || px.Pushed[0].Status != py.Pushed[0].Status || py.SocketRounds != py.Rounds {
			t.Fatalf("step %d: pushes answered %+v over http, %+v over the socket", step, px.Pushed, py.Pushed)
		}
	}
	mustSync(t, x)
	mustSync(t, y)
	sameRows(t, "final", replicaRows(y), replicaRows(x))
	if rt.Stats().Connects != 1 {
		t.Fatalf("stats %+v: the socket reconnected", rt.Stats())
	}
}

// natsOutage is a NATS server a node reaches as an external deployment
// and a test can stop and start again on the same port and store.
type natsOutage struct {
	t    testing.TB
	port int
	dir  string
	srv  *embedded.Server
}

func startNATS(t testing.TB) *natsOutage {
	t.Helper()
	o := &natsOutage{t: t, dir: t.TempDir()}
	o.start(embedded.RandomPort)
	_, p, err := net.SplitHostPort(strings.TrimPrefix(o.srv.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	if o.port, err = strconv.Atoi(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.stop)
	return o
}

func (o *natsOutage) start(port int) {
	o.srv = embeddedtest.Start(o.t, embeddedtest.WithPort(port), embeddedtest.WithDataDir(o.dir), embeddedtest.WithoutCleanup())
}

func (o *natsOutage) stop() {
	if o.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := o.srv.Stop(ctx); err != nil {
		o.t.Error(err)
	}
	o.srv = nil
}

// TestRealtimeNATSOutage: the node loses its NATS connection; its hub
// wakes the sessions from SQL, the client answers with rounds and
// converges; once NATS is back deltas resume, and no commit is applied
// twice.
func TestRealtimeNATSOutage(t *testing.T) { bothStores(t, testRealtimeNATSOutage) }

func testRealtimeNATSOutage(t *testing.T) {
	nats := startNATS(t)
	srv, n := startNode(t, 0, func(c *node.Config) {
		c.NATS = embedded.Config{Mode: embedded.ModeExternal, URLs: []string{nats.srv.ClientURL()}}
		c.Realtime.Hub.FallbackPollInterval = 20 * time.Millisecond
	})
	a := srv.client("alice", []string{"p1"}, nil)
	mustSync(t, a)
	b, rt, log := listener(t, srv, n)
	var want []int64
	want = append(want, pushTask(t, a, "t0", "p1", "before"))
	log.await(t, want[0])

	nats.stop()
	poll.Until(t, wait, "the node to see NATS down", func() bool { return !n.NATS.Conn().IsConnected() })
	for i := range 3 {
		seq := pushTask(t, a, fmt.Sprintf("t%d", i), "p1", "during the outage")
		want = append(want, seq)
		log.await(t, seq)
	}
	if st := rt.Stats(); st.Wakes < 1 || st.Rounds < 2 {
		t.Fatalf("stats %+v: want the outage answered with wake-ups and rounds", st)
	}
	sameRows(t, "bob during the outage", replicaRows(b), srv.serverRows("p1"))

	nats.start(nats.port)
	poll.Until(t, wait, "the node to reconnect to NATS", func() bool { return n.NATS.Conn().IsConnected() })
	deltas := rt.Stats().Deltas
	for i := range 3 {
		seq := pushTask(t, a, fmt.Sprintf("t%d", i), "p1", "after the outage")
		want = append(want, seq)
		log.await(t, seq)
	}
	poll.Until(t, wait, "deltas to resume", func() bool { return rt.Stats().Deltas > deltas })
	log.exactlyOnce(t, want)
	sameRows(t, "bob", replicaRows(b), srv.serverRows("p1"))
}

// TestRealtimeNodeRestart: the node stops and starts again on the same
// address and data; the client's socket is lost, it reconnects with
// backoff and converges without applying anything twice.
func TestRealtimeNodeRestart(t *testing.T) { bothStores(t, testRealtimeNodeRestart) }

func testRealtimeNodeRestart(t *testing.T) {
	dir := t.TempDir()
	var pgURL, pgSchema string
	if strings.Contains(t.Name(), "/postgres") {
		pgURL, pgSchema = pgtest.Schema(t)
	}
	same := func(addr string) func(*node.Config) {
		return func(c *node.Config) {
			c.DataDir, c.HTTP.Listen = dir, addr
			if pgURL != "" {
				c.Store.Postgres.URL, c.Store.Postgres.Schema = pgURL, pgSchema
			}
		}
	}
	srv, n := startNode(t, 0, same("127.0.0.1:0"))
	a := srv.client("alice", []string{"p1"}, nil)
	mustSync(t, a)
	b, rt, log := listener(t, srv, n)
	want := []int64{pushTask(t, a, "t0", "p1", "before")}
	log.await(t, want[0])

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, wait, "bob to lose the socket", func() bool { return rt.Status().State != RealtimeConnected })
	srv2, _ := startNode(t, 0, same(strings.TrimPrefix(srv.URL, "http://")))
	srv2.secret = srv.secret
	poll.Until(t, wait, "bob to reconnect", func() bool { return rt.Stats().Connects >= 2 && rt.Status().State == RealtimeConnected })
	for i := range 3 {
		seq := pushTask(t, a, fmt.Sprintf("t%d", i), "p1", "after the restart")
		want = append(want, seq)
		log.await(t, seq)
	}
	log.exactlyOnce(t, want)
	sameRows(t, "bob", replicaRows(b), srv2.serverRows("p1"))
}

// TestRealtimeHeartbeatTimeout: a connection that hears nothing for the
// heartbeat timeout is replaced by a new one.
func TestRealtimeHeartbeatTimeout(t *testing.T) {
	srv, _ := startNode(t, 0, func(c *node.Config) { c.Realtime.Hub.HeartbeatInterval = time.Hour })
	b := srv.client("bob", []string{"p1"}, nil)
	rt := goLive(t, b, func(c *RealtimeConfig) { c.HeartbeatTimeout = 100 * time.Millisecond })
	poll.Until(t, wait, "reconnects after silence", func() bool { return rt.Stats().Connects >= 3 })
}

// TestRealtimeRefused: a refused connect reports the server's code and
// schedules another attempt; rounds keep using POST /sync meanwhile.
func TestRealtimeRefused(t *testing.T) {
	srv, _ := startNode(t, 0)
	b := srv.client("bob", []string{"p1"}, func(cfg *Config) { cfg.Token = "not-a-token" })
	rt, err := b.NewRealtime(RealtimeConfig{ReconnectMin: 5 * time.Millisecond, ReconnectMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var refusals int
	rt.cfg.StateFunc = func(s RealtimeStatus) {
		mu.Lock()
		defer mu.Unlock()
		if s.State == RealtimeRefused && s.Reason == string(ssp2.CodeAuthRequired) && s.RetryDelay > 0 {
			refusals++
		}
	}
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, wait, "two refusals", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return refusals >= 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := rt.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := rt.Status(); st.State != RealtimeDisconnected {
		t.Fatalf("after Stop: %+v", st)
	}
}

// TestRealtimeStop: Stop closes the socket normally; later rounds go to
// POST /sync and a new session can start.
func TestRealtimeStop(t *testing.T) {
	srv, n := startNode(t, 0)
	b := srv.client("bob", []string{"p1"}, nil)
	rt := goLive(t, b, nil)
	firstRound(t, rt)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := rt.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rt.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	poll.Until(t, wait, "the hub to see the socket closed", func() bool { return n.Realtime.Metrics().Open() == 0 })
	if res := mustSync(t, b); res.SocketRounds != 0 {
		t.Fatalf("a round after Stop rode the socket: %+v", res)
	}
	rt2 := goLive(t, b, nil)
	if res := mustSync(t, b); res.SocketRounds != res.Rounds {
		t.Fatalf("a round of the new session went to HTTP: %+v", res)
	}
	if rt2.Stats().Connects != 1 {
		t.Fatalf("new session stats %+v", rt2.Stats())
	}
}

// TestRealtimePresence: publish, update and leave reach a scope-mate and
// its peer list; a key not held is refused to the publisher; a peer that
// disconnects leaves.
func TestRealtimePresence(t *testing.T) {
	srv, _ := startNode(t, 0)
	var mu sync.Mutex
	var seen []string
	var refused []ssp2.PresenceErrorCode
	a := srv.client("alice", []string{"p1"}, nil)
	b := srv.client("bob", []string{"p1"}, nil)
	ra := goLive(t, a, func(c *RealtimeConfig) {
		c.PresenceErrorFunc = func(e *ssp2.PresenceError) {
			mu.Lock()
			defer mu.Unlock()
			refused = append(refused, e.Code)
		}
	})
	rb := goLive(t, b, func(c *RealtimeConfig) {
		c.PresenceFunc = func(f *ssp2.PresenceFanout) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, string(f.Kind)+" "+f.ActorID+" "+string(f.Doc))
		}
	})
	// Registrations come from each client's first round.
	poll.Until(t, wait, "both first rounds", func() bool { return ra.Stats().Acks >= 1 && rb.Stats().Acks >= 1 })
	ctx := context.Background()
	waitSeen := func(n int) {
		t.Helper()
		poll.Until(t, wait, fmt.Sprintf("%d presence events", n), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) >= n
		})
	}
	for i, doc := range []json.RawMessage{json.RawMessage(`{"cursor":1}`), json.RawMessage(`{"cursor":2}`), nil} {
		if err := ra.Publish(ctx, "project:p1", doc); err != nil {
			t.Fatal(err)
		}
		waitSeen(i + 1)
		peers := rb.Peers("project:p1")
		if (doc == nil) != (len(peers) == 0) || doc != nil && string(peers[0].Doc) != string(doc) {
			t.Fatalf("after publishing %s bob sees peers %+v", doc, peers)
		}
	}
	if err := ra.Publish(ctx, "project:p9", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, wait, "the refusal", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(refused) == 1
	})
	if err := ra.Publish(ctx, "project:p1", json.RawMessage(`{"cursor":3}`)); err != nil {
		t.Fatal(err)
	}
	waitSeen(4)
	sctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := ra.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	waitSeen(5)
	mu.Lock()
	defer mu.Unlock()
	want := []string{`join alice {"cursor":1}`, `update alice {"cursor":2}`, "leave alice ", `join alice {"cursor":3}`, "leave alice "}
	if !slices.Equal(seen, want) || refused[0] != ssp2.PresenceForbidden {
		t.Fatalf("bob saw %q, alice was refused %v; want %q and presence.forbidden", seen, refused, want)
	}
	if len(rb.Peers("project:p1")) != 0 {
		t.Fatal("a disconnected peer is still listed")
	}
}

// TestRealtimeConfigValidate refuses bad values.
func TestRealtimeConfigValidate(t *testing.T) {
	for _, c := range []RealtimeConfig{
		{HeartbeatTimeout: time.Microsecond},
		{ReconnectMin: time.Second, ReconnectMax: time.Millisecond},
		{MaxMessageBytes: 10},
	} {
		if err := c.WithDefaults().Validate(); err == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
	if err := (RealtimeConfig{}).WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, nil)
	c := srv.client("bob", []string{"p1"}, nil)
	if _, err := c.NewRealtime(RealtimeConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NewRealtime(RealtimeConfig{}); err == nil {
		t.Fatal("a second session was accepted")
	}
}

// TestResponseEnd finds END across arbitrary chunk boundaries.
func TestResponseEnd(t *testing.T) {
	m := &ssp2.Message{WireVersion: 3, Kind: ssp2.KindResponse, Frames: []ssp2.Frame{
		&ssp2.RespHeader{LogEpoch: "e"},
		&ssp2.SubStart{ID: "s", Status: ssp2.SubActive, EffectiveScopes: map[string][]string{"project_id": {"p1"}}},
		&ssp2.SubEnd{NextCursor: 7},
	}}
	b, err := m.AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	for size := 1; size <= len(b); size++ {
		e := responseEnd{at: 8}
		for off := 0; off < len(b); off += size {
			chunk := b[off:min(off+size, len(b))]
			done, excess := e.feed(chunk)
			last := off+size >= len(b)
			if done != last || excess != 0 {
				t.Fatalf("chunks of %d: at %d done %v excess %d", size, off, done, excess)
			}
		}
	}
	e := responseEnd{at: 8}
	if done, excess := e.feed(append(b, 1, 2, 3)); !done || excess != 3 {
		t.Fatalf("trailing bytes: done %v excess %d", done, excess)
	}
}
