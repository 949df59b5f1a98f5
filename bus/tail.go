package bus

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Following the live tail.
//
// A node's own realtime hub and operations watch hub need every commit
// event as it is published, and never an old one: they read the commits
// themselves from SQL, which is the source of truth, and the event only
// says "this commit exists now". An ordered consumer (Follow) gives them
// exactly-once delivery, but every message it delivers is loaded from the
// stream's file store, and nats-server (v2.15.2 filestore.go
// tryExpireWriteCache) recycles a message block's 4 MB write buffer when
// the block is full only if nothing loaded from it; a block a consumer
// read from keeps its buffer until 10 s after the last load
// (defaultCacheBufferExpiration, not settable per stream). Under a push
// storm that was ~10 blocks, ~48 MB of a 20–50 VU node's live heap
// (BenchmarkBlockRetention). The relay's compare-and-set on each publish
// loaded the partition's last message too before v2.15.3, which reads
// the expected subject sequence from the block's per-subject index
// instead; so with Tail nothing on a node reads the tail block.
//
// Tail subscribes on core NATS to the commit subjects instead: the server
// routes each publish to the subscription as it routes it to the stream,
// from the publish path, and the store is never read. The price is core
// NATS's at-most-once delivery, and Tail turns every way an event can be
// missed into one signal, OnGap:
//
//   - The subscription overflows its pending limits (a slow consumer):
//     the client drops the message and counts it in Subscription.Dropped.
//     A drop happens only while the queue is full, so the handler is
//     still to run for every queued message and sees the count change
//     right after the event it is handling; a one-second check covers
//     the rest.
//   - The connection drops and comes back: events published meanwhile
//     went nowhere. nats.go re-subscribes before it reports CONNECTED;
//     Tail then flushes (the server has processed the SUB when the PONG
//     arrives) and only then reports the gap, so a commit whose event was
//     missed is already in SQL when the subscriber re-reads it. Status
//     events can be lost (nats.go drops them on a full listener), so the
//     reconnect count is what is compared, on every status event and
//     every second.
//
// The subscriber's answer to OnGap is to re-read SQL for what it tracks;
// an event is only ever a hint. Core NATS also does not deduplicate: a
// relay that republishes after a crash delivers some events twice (the
// stream's Nats-Msg-Id window drops them there), a stale relay's publish
// that the stream rejects with a compare-and-set error is still
// delivered, and two relays racing over a lease handover can interleave.
// Each such event still names a commit SQL holds under that epoch and
// seq, so a subscriber that ignores seqs at or below the highest it has
// handled (per partition and epoch) is unaffected. Events of one
// partition come from one publisher connection at a time in commit order
// (the relay), and NATS keeps one publisher's order, also across routes
// and leaf nodes, so per-partition order is what the stream would have
// stored.
//
// Catch-up readers (a position in the stream to resume from, exactly
// once) keep using Follow.

// TailEvent is one commit event as published: what Event carries, without
// a stream sequence (the event was not read from the stream, and may
// never have been stored in it).
type TailEvent struct {
	Meta
	Subject string
	Header  nats.Header
	// Data is the JSON body (see CommitBody).
	Data []byte
}

// Gap says why a Tail may have missed events.
type Gap string

// Gap reasons.
const (
	GapDropped     Gap = "dropped"     // the subscription overflowed (slow consumer)
	GapReconnected Gap = "reconnected" // the connection was lost and is back
)

// Default pending limits of a Tail: a queue that is empty in steady state
// and bounded under a storm. Overflowing it costs one resync from SQL.
const (
	DefaultTailPendingMsgs  = 64 << 10
	DefaultTailPendingBytes = 32 << 20
)

// TailConfig configures TailCommits.
type TailConfig struct {
	// OnEvent receives every commit event of the namespace as it is
	// published, one call at a time, in arrival order. Blocking here
	// fills the pending queue, then drops (OnGap). Required.
	OnEvent func(TailEvent)
	// OnGap is called after events may have been missed, once the
	// subscription is live again: re-read whatever you track from SQL.
	// Calls are never concurrent with each other; they may be with
	// OnEvent. Required.
	OnGap func(Gap)
	// PendingMsgs and PendingBytes bound the subscription's queue; zero
	// means DefaultTailPendingMsgs / DefaultTailPendingBytes.
	PendingMsgs, PendingBytes int
	// Logger receives warnings; nil discards.
	Logger *slog.Logger
}

// Tail is a live-tail subscription to commit events. See TailCommits.
type Tail struct {
	cfg   TailConfig
	nc    *nats.Conn
	names Names
	sub   *nats.Subscription

	check  chan struct{}
	status chan nats.Status
	stop   chan struct{}
	done   chan struct{} // the monitor returned
	idle   chan struct{} // Stop's wait ended
	once   sync.Once

	// hmu is held while OnEvent runs; Stop takes it to know that no call
	// runs or will run.
	hmu     sync.Mutex
	stopped bool

	dropped dropCount
	recon   uint64 // reconnects last acted on (monitor only)
	gaps    atomic.Int64
}

// TailCommits subscribes on nc to every commit event of namespace names
// (sync.*.commit.*, whoever published it) and delivers them to
// cfg.OnEvent; cfg.OnGap hears of every way an event may have been
// missed. The subscription is live when TailCommits returns.
func TailCommits(nc *nats.Conn, names Names, cfg TailConfig) (*Tail, error) {
	if cfg.OnEvent == nil || cfg.OnGap == nil {
		return nil, fmt.Errorf("tail commits: OnEvent and OnGap are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PendingMsgs == 0 {
		cfg.PendingMsgs = DefaultTailPendingMsgs
	}
	if cfg.PendingBytes == 0 {
		cfg.PendingBytes = DefaultTailPendingBytes
	}
	t := &Tail{
		cfg: cfg, nc: nc, names: names,
		check: make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		recon: nc.Stats().Reconnects,
	}
	// The listener goes first, so a reconnect right after the subscribe
	// is seen.
	t.status = nc.StatusChanged(nats.CONNECTED)
	sub, err := subscribeCommits(nc, names, t.onMsg, cfg.PendingMsgs, cfg.PendingBytes)
	if err != nil {
		nc.RemoveStatusListener(t.status)
		return nil, fmt.Errorf("tail commits: %w", err)
	}
	t.sub = sub
	go t.monitor()
	return t, nil
}

func (t *Tail) onMsg(m *nats.Msg) {
	meta, err := t.names.ParseMeta(m.Subject, m.Header)
	if err != nil {
		t.cfg.Logger.Warn("bus: tail: skipping message", "subject", m.Subject, "err", err)
	} else {
		t.hmu.Lock()
		if !t.stopped {
			t.cfg.OnEvent(TailEvent{Meta: meta, Subject: m.Subject, Header: m.Header, Data: m.Data})
		}
		t.hmu.Unlock()
	}
	if t.dropped.moved(m.Sub) {
		t.poke()
	}
}

func (t *Tail) poke() {
	select {
	case t.check <- struct{}{}:
	default:
	}
}

// monitor turns drops and reconnects into OnGap calls, one at a time.
func (t *Tail) monitor() {
	defer close(t.done)
	defer t.nc.RemoveStatusListener(t.status)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-t.check:
		case <-t.status:
		case <-tick.C:
		}
		t.checkGaps()
	}
}

func (t *Tail) checkGaps() {
	if r := t.nc.Stats().Reconnects; r != t.recon && t.nc.IsConnected() {
		// The round trip proves the server holds the re-sent SUB: from
		// here on no event is missed for the reconnect.
		if err := t.nc.FlushTimeout(5 * time.Second); err != nil {
			return // not back after all; the next check retries
		}
		t.recon = r
		t.cfg.Logger.Info("bus: tail: NATS connection back; resyncing from SQL")
		t.gap(GapReconnected)
	}
	if n := t.dropped.take(t.sub); n != 0 {
		t.cfg.Logger.Warn("bus: tail: commit events dropped (slow consumer); resyncing from SQL", "dropped", n)
		t.gap(GapDropped)
	}
}

func (t *Tail) gap(g Gap) {
	t.cfg.OnGap(g)
	t.gaps.Add(1) // after the call: tests wait on it
}

// Gaps is the number of OnGap calls that have returned.
func (t *Tail) Gaps() int64 { return t.gaps.Load() }

// Stop unsubscribes and waits until no OnEvent or OnGap call runs or will
// run, at most until ctx ends. It is idempotent.
func (t *Tail) Stop(ctx context.Context) error {
	t.once.Do(func() {
		_ = t.sub.Unsubscribe()
		close(t.stop)
		t.idle = make(chan struct{})
		go func() {
			t.hmu.Lock()
			t.stopped = true
			t.hmu.Unlock()
			<-t.done
			close(t.idle)
		}()
	})
	select {
	case <-t.idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("tail stop: %w", ctx.Err())
	}
}
