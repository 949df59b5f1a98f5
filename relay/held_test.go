package relay

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/storage"
)

// TestRelayPublishesHeldCommits: commits handed over by Committed are
// published without a read when they continue the stream's tail; a gap
// (a commit nobody handed over), another epoch or a Notify makes the run
// read the log, and the stream holds exactly the log either way.
func TestRelayPublishesHeldCommits(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	r := e.relay(Config{})
	e.start(r)
	const p = "p1"
	logged := func(seq int64) storage.Commit {
		t.Helper()
		cs, err := e.store.CommitRange(e.ctx, p, seq-1, 1)
		if err != nil || len(cs) != 1 {
			t.Fatalf("read commit %d: %v, %d commits", seq, err, len(cs))
		}
		return cs[0]
	}
	epoch := func() string {
		part, err := e.store.PartitionGet(e.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return part.LogEpoch
	}
	hand := func(seqs ...int64) {
		for _, s := range seqs {
			r.Committed(p, epoch(), logged(s), 0)
		}
		e.flush(r)
	}

	// The first run finds the stream's tail by reading it.
	e.commit(p, "todos")
	r.Notify(p)
	e.flush(r)
	e.checkLogInStream(p)

	// At the tail: every handed commit goes out unread.
	before := r.Stats().Held
	for range 10 {
		s := e.commit(p, "projects", "todos")
		hand(s)
	}
	if got := r.Stats().Held - before; got != 10 {
		t.Fatalf("%d of 10 commits published as handed over", got)
	}
	e.checkLogInStream(p)

	// Out of order: the run either finds both or reads the log across
	// the gap.
	a, b := e.commit(p, "todos"), e.commit(p, "todos")
	r.Committed(p, epoch(), logged(b), 0)
	hand(a)
	e.checkLogInStream(p)

	// A gap: commit c was never handed over, so d is not the next one
	// and the run reads the log.
	before = r.Stats().Held
	e.commit(p, "todos")
	d := e.commit(p, "projects")
	hand(d)
	if got := r.Stats().Held - before; got != 0 {
		t.Fatalf("%d commits published unread across a gap", got)
	}
	e.checkLogInStream(p)

	// Another epoch than the stream's: read from the log.
	before = r.Stats().Held
	f := e.commit(p, "todos")
	hand(f)
	r.Committed(p, "another-epoch", logged(f), 0)
	e.flush(r)
	if got := r.Stats().Held - before; got != 1 {
		t.Fatalf("%d commits published unread; want 1, none of another epoch", got)
	}
	e.checkLogInStream(p)

	// A commit nobody handed over, announced by Notify, after one that
	// was: the run publishes the held one and reads the log for the other.
	g := e.commit(p, "todos")
	e.commit(p, "projects")
	r.Committed(p, epoch(), logged(g), 0)
	r.Notify(p)
	e.flush(r)
	e.checkLogInStream(p)
	// Back at the tail, handed commits go out unread again.
	before = r.Stats().Held
	x := e.commit(p, "todos")
	hand(x)
	if got := r.Stats().Held - before; got != 1 {
		t.Fatalf("%d commits published unread; want 1", got)
	}
	e.checkLogInStream(p)
}

// TestRelayHeldOutOfOrder: the members of a group commit hand their
// commits over in no particular order. A run woken by a later commit
// waits for the earlier one's hand-over instead of reading the log, so
// both go out as handed over (with ce-reactions); a gap that outlasts the
// wait is read from the log, as before.
func TestRelayHeldOutOfOrder(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	r := e.relay(Config{})
	r.gapWait = time.Hour // the earlier commit comes when the test hands it over
	e.start(r)
	const p = "p1"
	// The first run finds the stream's tail by reading it.
	e.commit(p, "todos")
	r.Notify(p)
	e.flush(r)
	part, err := e.store.PartitionGet(e.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	logged := func(seq int64) storage.Commit {
		t.Helper()
		cs, err := e.store.CommitRange(e.ctx, p, seq-1, 1)
		if err != nil || len(cs) != 1 {
			t.Fatalf("read commit %d: %v, %d commits", seq, err, len(cs))
		}
		return cs[0]
	}
	gapSeen := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		h := r.held[p]
		return h != nil && !h.gapAt.IsZero()
	}
	for round := range 3 {
		before := r.Stats().Held
		a, b := e.commit(p, "todos"), e.commit(p, "projects", "todos")
		r.Committed(p, part.LogEpoch, logged(b), 1)
		poll.Until(t, 10*time.Second, "the run to find the gap", gapSeen)
		r.Committed(p, part.LogEpoch, logged(a), 0)
		e.flush(r)
		if got := r.Stats().Held - before; got != 2 {
			t.Fatalf("round %d: %d of 2 commits published as handed over", round, got)
		}
		if gapSeen() {
			t.Fatalf("round %d: the gap is still marked after it was filled", round)
		}
		e.checkLogInStream(p)
	}

	// A commit that is never handed over: after the wait the run reads
	// the log.
	r.mu.Lock()
	r.gapWait = time.Millisecond
	r.mu.Unlock()
	before := r.Stats().Held
	e.commit(p, "todos")
	d := e.commit(p, "projects")
	r.Committed(p, part.LogEpoch, logged(d), 0)
	e.flush(r)
	if got := r.Stats().Held - before; got != 0 {
		t.Fatalf("%d commits published unread across a gap", got)
	}
	e.checkLogInStream(p)
}

// TestRelayHeldIsBounded: commits no run takes (a relay that cannot
// publish) are held up to maxHeld in all, then dropped: the log has them.
func TestRelayHeldIsBounded(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	r := e.relay(Config{}) // not started: nothing takes what is held
	for i := range 3 * maxHeld {
		r.Committed([]string{"a", "b", "c"}[i%3], "epoch", storage.Commit{CommitSeq: int64(i/3 + 1)}, 0)
	}
	// One commit each in many more partitions once it is full.
	for i := range maxHeld {
		r.Committed(fmt.Sprintf("p%d", i), "epoch", storage.Commit{CommitSeq: 1}, 0)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, h := range r.held {
		n += len(h.commits)
	}
	if n != r.nHeld || n > maxHeld {
		t.Fatalf("%d commits held (counted %d); want at most %d", n, r.nHeld, maxHeld)
	}
}

// TestRelayEventsSayReactions: an event of a commit handed over by
// Committed carries the number of reactions the commit enqueued
// (ce-reactions), an event read back from the log carries none, and the
// partition watcher's coalesced change may react unless every commit in
// it said it enqueued none — so a runner skips its claim only then.
func TestRelayEventsSayReactions(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	changes := make(chan bus.PartitionChange, 16)
	w, err := bus.WatchPartitions(e.srv.Conn(), prod, bus.WatchConfig{OnChange: func(ch bus.PartitionChange) {
		if ch.Partition.ID() == "block" {
			once.Do(func() { close(entered); <-release })
			return
		}
		changes <- ch
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer mustStop(t, w)
	headers := make(chan nats.Header, 64)
	sub, err := e.srv.Conn().Subscribe("sync.*.commit.*", func(m *nats.Msg) {
		if tok, _, _ := prod.ParseCommitSubject(m.Subject); tok != "block" {
			headers <- m.Header
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := e.srv.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	r := e.relay(Config{BatchMessages: 1})
	e.start(r)
	hand := func(p string, reactions int) {
		t.Helper()
		seq := e.commit(p, "todos")
		cs, err := e.store.CommitRange(e.ctx, p, seq-1, 1)
		if err != nil || len(cs) != 1 {
			t.Fatalf("read commit %d: %v", seq, err)
		}
		part, err := e.store.PartitionGet(e.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		r.Committed(p, part.LogEpoch, cs[0], reactions)
		e.flush(r)
	}
	drain := func(n int) []string {
		t.Helper()
		var got []string
		for range n {
			select {
			case h := <-headers:
				v, ok := h[bus.HeaderReactions]
				got = append(got, fmt.Sprint(ok, v))
			case <-time.After(10 * time.Second):
				t.Fatalf("%d of %d events arrived", len(got), n)
			}
		}
		return got
	}
	// Each partition's first run reads the log to find the stream's tail:
	// a commit nobody handed over, which says nothing.
	for _, p := range []string{"mixed", "none", "logged"} {
		e.commit(p, "todos")
		r.Notify(p)
		e.flush(r)
	}
	drain(3)
	for range 3 {
		select {
		case ch := <-changes:
			if !ch.MayReact {
				t.Errorf("partition %s: a commit read from the log may not react", ch.Partition.ID())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the first commits' changes never came")
		}
	}
	e.commit("block", "todos")
	r.Notify("block")
	e.flush(r)
	<-entered // the watcher is held in its callback: what follows coalesces
	hand("mixed", 2)
	hand("mixed", 0)
	hand("none", 0)
	hand("none", 0)
	e.commit("logged", "todos")
	r.Notify("logged")
	e.flush(r)
	if got, want := strings.Join(drain(5), " "), "true [2] true [0] true [0] true [0] false []"; got != want {
		t.Fatalf("ce-reactions of the events: %s; want %s", got, want)
	}
	close(release)
	want := map[string]bool{"mixed": true, "none": false, "logged": true}
	for len(want) > 0 {
		select {
		case ch := <-changes:
			may, ok := want[ch.Partition.ID()]
			if !ok {
				t.Fatalf("unexpected change %+v", ch)
			}
			if ch.MayReact != may {
				t.Errorf("partition %s at %d: MayReact %v, want %v", ch.Partition.ID(), ch.CommitSeq, ch.MayReact, may)
			}
			delete(want, ch.Partition.ID())
		case <-time.After(10 * time.Second):
			t.Fatalf("no coalesced change for %v", want)
		}
	}
}
