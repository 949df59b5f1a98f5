package relay

import (
	"fmt"
	"testing"

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
			r.Committed(p, epoch(), logged(s))
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
	r.Committed(p, epoch(), logged(b))
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
	r.Committed(p, "another-epoch", logged(f))
	e.flush(r)
	if got := r.Stats().Held - before; got != 1 {
		t.Fatalf("%d commits published unread; want 1, none of another epoch", got)
	}
	e.checkLogInStream(p)

	// A commit nobody handed over, announced by Notify, after one that
	// was: the run publishes the held one and reads the log for the other.
	g := e.commit(p, "todos")
	e.commit(p, "projects")
	r.Committed(p, epoch(), logged(g))
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

// TestRelayHeldIsBounded: commits no run takes (a relay that cannot
// publish) are held up to maxHeld in all, then dropped: the log has them.
func TestRelayHeldIsBounded(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	r := e.relay(Config{}) // not started: nothing takes what is held
	for i := range 3 * maxHeld {
		r.Committed([]string{"a", "b", "c"}[i%3], "epoch", storage.Commit{CommitSeq: int64(i/3 + 1)})
	}
	// One commit each in many more partitions once it is full.
	for i := range maxHeld {
		r.Committed(fmt.Sprintf("p%d", i), "epoch", storage.Commit{CommitSeq: 1})
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
