package bus

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Event is one commit event read from SYNC_COMMITS.
type Event struct {
	Meta
	// StreamSeq is the event's sequence in SYNC_COMMITS: resume after it
	// with FollowParams.StartSeq = StreamSeq + 1.
	StreamSeq uint64
	Subject   string
	Header    nats.Header
	// Data is the JSON body (see CommitBody).
	Data []byte
}

// FollowParams selects the events a Follower delivers.
type FollowParams struct {
	// Partition restricts delivery to one partition; the zero Partition
	// means every partition.
	Partition Partition
	// Table restricts delivery to one table; "" means every table.
	Table string
	// StartSeq is the first stream sequence to deliver (catch-up); 0
	// delivers only events stored after Follow returns.
	StartSeq uint64
	// Logger receives warnings about messages that are not commit events
	// (they are skipped); nil discards.
	Logger *slog.Logger
}

// Follower delivers commit events in stream order, exactly once each, to
// one handler call at a time. It is backed by an ordered consumer, which
// recreates itself after a gap or a reconnect and resumes after the last
// delivered event.
type Follower struct {
	cc       jetstream.ConsumeContext
	stopOnce sync.Once
}

// Follow starts delivering the commit events of namespace names to fn.
func Follow(ctx context.Context, js jetstream.JetStream, names Names, p FollowParams, fn func(Event)) (*Follower, error) {
	filter := names.CommitSubjects()
	switch {
	case p.Partition.token != "" && p.Table != "":
		var err error
		if filter, err = names.CommitSubject(p.Partition, p.Table); err != nil {
			return nil, fmt.Errorf("follow: %w", err)
		}
	case p.Partition.token != "":
		filter = names.PartitionCommits(p.Partition)
	case p.Table != "":
		var err error
		if filter, err = names.TableCommits(p.Table); err != nil {
			return nil, fmt.Errorf("follow: %w", err)
		}
	}
	logger := p.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	}
	if p.StartSeq > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = p.StartSeq
	}
	cons, err := js.OrderedConsumer(ctx, names.CommitStream(), cfg)
	if err != nil {
		return nil, fmt.Errorf("follow %s: %w", filter, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			logger.Warn("bus: follow: message without metadata", "subject", m.Subject(), "err", err)
			return
		}
		meta, err := names.ParseMeta(m.Subject(), m.Headers())
		if err != nil {
			logger.Warn("bus: follow: skipping message", "subject", m.Subject(), "stream_seq", md.Sequence.Stream, "err", err)
			return
		}
		fn(Event{Meta: meta, StreamSeq: md.Sequence.Stream, Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
	})
	if err != nil {
		return nil, fmt.Errorf("follow %s: %w", filter, err)
	}
	return &Follower{cc: cc}, nil
}

// Stop ends delivery and waits until the handler has returned for the
// last time, at most until ctx ends. It is idempotent.
func (f *Follower) Stop(ctx context.Context) error {
	f.stopOnce.Do(func() { f.cc.Stop() })
	select {
	case <-f.cc.Closed():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("follow stop: %w", ctx.Err())
	}
}
