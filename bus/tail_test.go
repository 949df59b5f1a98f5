package bus

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus/bustest"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/internal/poll"
)

// tailEvent builds a commit event of partition p as the relay publishes
// it (the headers ParseMeta reads).
func tailEvent(t testing.TB, p Partition, seq int64, table string) *nats.Msg {
	t.Helper()
	subj, err := prod.CommitSubject(p, table)
	if err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set(HeaderType, EventTypeCommit)
	h.Set(HeaderLogEpoch, "e1")
	h.Set(HeaderCommitSeq, strconv.FormatInt(seq, 10))
	h.Set(HeaderTable, table)
	h.Set(HeaderID, EventID(p, "e1", seq, table))
	h.Set(nats.MsgIdHdr, EventID(p, "e1", seq, table))
	return &nats.Msg{Subject: subj, Header: h, Data: []byte(`{}`)}
}

// tailLog records what a Tail delivers.
type tailLog struct {
	mu   sync.Mutex
	seqs []int64
	gaps []Gap
}

func (l *tailLog) onEvent(ev TailEvent) {
	l.mu.Lock()
	l.seqs = append(l.seqs, ev.CommitSeq)
	l.mu.Unlock()
}

func (l *tailLog) onGap(g Gap) {
	l.mu.Lock()
	l.gaps = append(l.gaps, g)
	l.mu.Unlock()
}

func (l *tailLog) snapshot() ([]int64, []Gap) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.seqs...), append([]Gap(nil), l.gaps...)
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 20*time.Second, what, cond)
}

func mustNewPartition(t testing.TB, id string) Partition {
	t.Helper()
	p, err := NewPartition(id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The tail sees every event published into the stream, in publish order,
// and the stream has no consumer for it: nothing is loaded back from the
// file store, which is the point of following the tail on core NATS.
func TestTailDeliversPublishedEventsWithoutAConsumer(t *testing.T) {
	t.Parallel()
	srv := embeddedtest.Start(t)
	ctx := bustest.Context(t)
	if err := EnsureStreams(ctx, srv.JetStream(), prod, StreamsConfig{}.WithDefaults()); err != nil {
		t.Fatal(err)
	}
	var log tailLog
	tail, err := TailCommits(srv.Conn(), prod, TailConfig{OnEvent: log.onEvent, OnGap: log.onGap})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := tail.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()
	p := mustNewPartition(t, "p1")
	pub, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	js := srv.JetStream()
	const n = 200
	for i := range n {
		if _, err := js.PublishMsg(ctx, tailEvent(t, p, int64(i+1), "todos")); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "every event", func() bool { s, _ := log.snapshot(); return len(s) == n })
	seqs, gaps := log.snapshot()
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("event %d has seq %d: not in publish order (%v)", i, s, seqs)
		}
	}
	if len(gaps) != 0 {
		t.Fatalf("gaps %v on a quiet connection", gaps)
	}
	st, err := js.Stream(ctx, prod.CommitStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n || info.State.Consumers != 0 {
		t.Fatalf("stream holds %d events with %d consumers, want %d with 0", info.State.Msgs, info.State.Consumers, n)
	}
}

// A subscriber that falls behind its pending limits loses events; the
// tail reports the gap.
func TestTailReportsDroppedEvents(t *testing.T) {
	t.Parallel()
	srv := embeddedtest.Start(t)
	ctx := bustest.Context(t)
	slow := make(chan struct{}, 1)
	nc, err := srv.Connect(nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			select {
			case slow <- struct{}{}:
			default:
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	release := make(chan struct{})
	var once sync.Once
	var log tailLog
	tail, err := TailCommits(nc, prod, TailConfig{
		OnEvent: func(ev TailEvent) {
			once.Do(func() { <-release }) // stuck on the first event
			log.onEvent(ev)
		},
		OnGap:       log.onGap,
		PendingMsgs: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := tail.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()
	p := mustNewPartition(t, "p1")
	// One event in the handler, one queued, the rest over the limit.
	for i := range 10 {
		if err := srv.Conn().PublishMsg(tailEvent(t, p, int64(i+1), "todos")); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-slow:
	case <-ctx.Done():
		t.Fatal("no slow consumer reported")
	}
	close(release)
	// Events still arriving may be dropped after the first report: one
	// gap or more, each a drop.
	waitUntil(t, "the gap", func() bool { return tail.Gaps() >= 1 })
	seqs, gaps := log.snapshot()
	for _, g := range gaps {
		if g != GapDropped {
			t.Fatalf("gaps %v, want only %s", gaps, GapDropped)
		}
	}
	if len(seqs) >= 10 || seqs[0] != 1 {
		t.Fatalf("delivered %v: expected the first event and fewer than all", seqs)
	}
	// Live again afterwards.
	if err := srv.Conn().PublishMsg(tailEvent(t, p, 11, "todos")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the next event", func() bool { s, _ := log.snapshot(); return s[len(s)-1] == 11 })
}

// Events published while the connection is down are lost on core NATS;
// the tail reports the gap after the reconnect, once the server holds
// the subscription again, so an event published after the report arrives.
func TestTailReportsReconnect(t *testing.T) {
	t.Parallel()
	srv := embeddedtest.Start(t)
	ctx := bustest.Context(t)
	nc, err := nats.Connect(srv.ClientURL(), nats.ReconnectWait(5*time.Millisecond), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var log tailLog
	tail, err := TailCommits(nc, prod, TailConfig{OnEvent: log.onEvent, OnGap: log.onGap})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := tail.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()
	p := mustNewPartition(t, "p1")
	if err := srv.Conn().PublishMsg(tailEvent(t, p, 1, "todos")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first event", func() bool { s, _ := log.snapshot(); return len(s) == 1 })
	id, err := nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.NATSServer().DisconnectClientByID(id); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the reconnect's gap", func() bool { return tail.Gaps() == 1 })
	if _, gaps := log.snapshot(); gaps[0] != GapReconnected {
		t.Fatalf("gap %v, want %s", gaps[0], GapReconnected)
	}
	if err := srv.Conn().PublishMsg(tailEvent(t, p, 2, "todos")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the event after the reconnect", func() bool { s, _ := log.snapshot(); return s[len(s)-1] == 2 })
}
