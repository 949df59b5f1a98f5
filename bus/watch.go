package bus

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// PartitionChange says that a partition's log reached CommitSeq under
// LogEpoch (the escaped epoch, as in the ce-logepoch header). Changes are
// coalesced: a callback may skip intermediate sequences.
type PartitionChange struct {
	Partition Partition
	LogEpoch  string
	CommitSeq int64
	// MayReact is false only when every event coalesced into this change
	// said that its commit enqueued no durable reactions (ce-reactions
	// "0"); an event that does not say counts as one that may have.
	MayReact bool
}

// WatchConfig configures WatchPartitions.
type WatchConfig struct {
	// OnChange receives coalesced changes, one call at a time, never
	// concurrently. Required.
	OnChange func(PartitionChange)
	// OnResync is called when events may have been lost (the subscription
	// dropped messages as a slow consumer): re-read every partition you
	// track. Optional.
	OnResync func()
	// Logger receives warnings; nil discards.
	Logger *slog.Logger
}

// Watcher is the cross-node "partition changed" notifier: a core NATS
// subscription to every commit event (sync.*.commit.*), whoever published
// it, coalesced per partition into OnChange calls. It is at-most-once like
// all core NATS: use it to wake up, then read SQL (or Follow the stream)
// for the data.
type Watcher struct {
	cfg   WatchConfig
	names Names
	sub   *nats.Subscription

	mu      sync.Mutex
	pending map[string]PartitionChange // by token
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	dropped dropCount // dispatcher only
}

// WatchPartitions subscribes on nc to the commit events of namespace
// names and starts the dispatcher.
func WatchPartitions(nc *nats.Conn, names Names, cfg WatchConfig) (*Watcher, error) {
	if cfg.OnChange == nil {
		return nil, fmt.Errorf("watch partitions: OnChange is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{
		cfg:     cfg,
		names:   names,
		pending: make(map[string]PartitionChange),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	// The handler only updates a map, so it keeps up with a flood; a
	// larger buffer absorbs bursts before NATS would drop.
	sub, err := subscribeCommits(nc, names, w.onMsg, 1<<20, 256<<20)
	if err != nil {
		return nil, fmt.Errorf("watch partitions: %w", err)
	}
	w.sub = sub
	go w.dispatch()
	return w, nil
}

func (w *Watcher) onMsg(m *nats.Msg) {
	meta, err := w.names.ParseMeta(m.Subject, m.Header)
	if err != nil {
		w.cfg.Logger.Warn("bus: watch: skipping message", "subject", m.Subject, "err", err)
		return
	}
	tok := meta.Partition.token
	w.mu.Lock()
	cur, ok := w.pending[tok]
	mayReact := meta.Reactions != 0 || ok && cur.MayReact
	if !ok || cur.LogEpoch != meta.LogEpoch || meta.CommitSeq > cur.CommitSeq {
		w.pending[tok] = PartitionChange{Partition: meta.Partition, LogEpoch: meta.LogEpoch, CommitSeq: meta.CommitSeq, MayReact: mayReact}
	} else if mayReact != cur.MayReact {
		cur.MayReact = mayReact
		w.pending[tok] = cur
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Watcher) dispatch() {
	defer close(w.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	batch := make(map[string]PartitionChange)
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
			w.checkDropped()
			continue
		case <-w.wake:
		}
		w.checkDropped()
		w.mu.Lock()
		batch, w.pending = w.pending, batch
		w.mu.Unlock()
		for tok, ch := range batch {
			delete(batch, tok)
			select {
			case <-w.stop:
				return
			default:
			}
			w.cfg.OnChange(ch)
		}
	}
}

func (w *Watcher) checkDropped() {
	if w.sub == nil {
		return
	}
	n := w.dropped.take(w.sub)
	if n == 0 {
		return
	}
	w.cfg.Logger.Warn("bus: watch: commit events dropped (slow consumer); resyncing", "dropped", n)
	if w.cfg.OnResync != nil {
		w.cfg.OnResync()
	}
}

// Stop unsubscribes and waits for the dispatcher to return, at most until
// ctx ends. It is idempotent.
func (w *Watcher) Stop(ctx context.Context) error {
	w.once.Do(func() {
		_ = w.sub.Unsubscribe()
		close(w.stop)
	})
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("watch stop: %w", ctx.Err())
	}
}
