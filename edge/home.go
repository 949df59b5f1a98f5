package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/lifecycle"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// queueGroup load-balances the edge service across the nodes of one edge
// (a clustered edge on one database).
const queueGroup = "syncnode-edge"

// maxForwarded bounds the forwarded pushes an edge runs at once.
const maxForwarded = 16

// Home is the edge side: it answers its hub's status and commit-page
// requests from SQL, runs the pushes the hub forwards, and keeps the
// durable consumer the hub's source stream reads.
type Home struct {
	cfg   Config
	homes Homes
	log   *slog.Logger
	subs  []*nats.Subscription
	sem   chan struct{}
	tasks lifecycle.Tasks // the requests in flight
	life  lifecycle.Once
	// commandsFn runs forwarded remote commands (ServeCommands).
	commandsFn atomic.Pointer[Commands]
}

// NewHome validates cfg (Name is required) and returns the edge side.
func NewHome(cfg Config) (*Home, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		return nil, errors.New("edge: Home needs Config.Name")
	}
	if cfg.Conn == nil || cfg.JetStream == nil || cfg.Store == nil || cfg.Engine == nil {
		return nil, errors.New("edge: Home needs Conn, JetStream, Store and Engine")
	}
	homes, _ := ParseHomes(cfg.Homes)
	return &Home{cfg: cfg, homes: homes, log: cfg.Logger, sem: make(chan struct{}, maxForwarded)}, nil
}

// SourceConsumerConfig is the durable consumer on an edge's commit
// stream that the hub's source stream reads (durable sourcing). Unlike
// the server's own ephemeral source consumer it outlives a cut link, and
// the hub's source, backing off after failed requests, probes its
// delivery subject and retries as soon as the consumer's heartbeat
// arrives over the returning link — rather than at the end of a backoff
// that grows by 10 s per failure.
func SourceConsumerConfig(names bus.Names, edge string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        bus.EdgeSourceConsumer,
		DeliverSubject: names.EdgeDeliverSubject(edge),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckFlowControlPolicy,
		IdleHeartbeat:  time.Second,
		Description:    "read by the hub's " + names.EdgeStream(edge) + " source stream",
	}
}

// Start creates the source consumer and subscribes the service.
func (h *Home) Start(ctx context.Context) error {
	return h.life.Start(func() error {
		if _, err := h.cfg.JetStream.CreateOrUpdatePushConsumer(ctx, h.cfg.Names.CommitStream(), SourceConsumerConfig(h.cfg.Names, h.cfg.Name)); err != nil {
			return fmt.Errorf("edge: source consumer: %w", err)
		}
		for _, s := range []struct {
			subject string
			fn      func(context.Context, []byte) any
		}{
			{bus.EdgeStatusSubject(h.cfg.Name), h.status},
			{bus.EdgeCommitsSubject(h.cfg.Name), h.commits},
			{bus.EdgePushSubject(h.cfg.Name), h.push},
			{bus.EdgeRowsSubject(h.cfg.Name), h.rows},
			{bus.EdgeBlobSubject(h.cfg.Name), h.blob},
			{bus.EdgeCommandSubject(h.cfg.Name), h.command},
		} {
			sub, err := h.cfg.Conn.QueueSubscribe(s.subject, queueGroup, h.handler(s.fn))
			if err != nil {
				h.unsubscribe()
				return fmt.Errorf("edge: subscribe %s: %w", s.subject, err)
			}
			h.subs = append(h.subs, sub)
		}
		return h.cfg.Conn.Flush()
	})
}

// handler runs fn on its own goroutine (a forwarded push may wait on the
// partition lock) and answers its value as JSON.
func (h *Home) handler(fn func(context.Context, []byte) any) nats.MsgHandler {
	return func(m *nats.Msg) {
		h.sem <- struct{}{}
		started := h.tasks.Go(func() {
			defer func() { <-h.sem }()
			ctx, cancel := context.WithTimeout(context.Background(), h.cfg.RequestTimeout)
			defer cancel()
			b, err := json.Marshal(fn(ctx, m.Data))
			if err != nil {
				h.log.Error("edge: encode reply", "subject", m.Subject, "err", err)
				return
			}
			if err := m.Respond(b); err != nil {
				h.log.Debug("edge: reply", "subject", m.Subject, "err", err)
			}
		})
		if !started {
			<-h.sem // stopping: the requester's timeout answers it
		}
	}
}

func (h *Home) status(ctx context.Context, _ []byte) any {
	parts, err := h.cfg.Store.Partitions(ctx)
	if err != nil {
		return statusReply{Edge: h.cfg.Name, Error: errorToWire(err)}
	}
	pending, err := h.pendingAtHome(ctx)
	if err != nil {
		return statusReply{Edge: h.cfg.Name, Error: errorToWire(err)}
	}
	r := statusReply{Edge: h.cfg.Name, Partitions: []partitionStatus{}}
	for _, p := range parts {
		if h.homes.Of(p.ID) == h.cfg.Name {
			r.Partitions = append(r.Partitions, partitionStatus{ID: p.ID, LogEpoch: p.LogEpoch, MaxCommitSeq: p.MaxCommitSeq, HorizonSeq: p.HorizonSeq,
				Pending: pending[p.ID]})
		}
	}
	return r
}

func (h *Home) commits(ctx context.Context, body []byte) any {
	var req commitsRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return commitsReply{Error: errorToWire(ssp2.Errorf(ssp2.CodeInvalidRequest, "commits request: %v", err))}
	}
	if h.homes.Of(req.Partition) != h.cfg.Name {
		return commitsReply{Error: errorToWire(ssp2.Errorf(ssp2.CodeForbidden, "partition is not homed at edge %s", h.cfg.Name))}
	}
	limit := min(max(req.Limit, 1), maxPageCommits)
	for {
		p, cs, err := h.cfg.Store.PartitionCommitRange(ctx, req.Partition, req.AfterSeq, limit)
		if err != nil {
			return commitsReply{Error: errorToWire(err)}
		}
		r := commitsReply{LogEpoch: p.LogEpoch, MaxCommitSeq: p.MaxCommitSeq, HorizonSeq: p.HorizonSeq, Commits: make([]wireCommit, len(cs))}
		for i, c := range cs {
			r.Commits[i] = toWire(c)
		}
		// Halve a page that would not fit in one message (JSON adds a
		// third to the rows' base64).
		if limit == 1 || h.fits(r) {
			pending, err := h.pendingAtHome(ctx, req.Partition)
			if err != nil {
				return commitsReply{Error: errorToWire(err)}
			}
			r.Pending = pending[req.Partition]
			return r
		}
		limit /= 2
	}
}

// fits reports whether r's JSON fits the server's max_payload, with room
// for headers.
func (h *Home) fits(r any) bool {
	max := h.cfg.Conn.MaxPayload()
	if max <= 0 {
		return true
	}
	b, err := json.Marshal(r)
	return err == nil && int64(len(b))+4096 <= max
}

func (h *Home) push(ctx context.Context, body []byte) any {
	var req pushRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return pushReply{Error: errorToWire(ssp2.Errorf(ssp2.CodeInvalidRequest, "push request: %v", err))}
	}
	if h.homes.Of(req.Partition) != h.cfg.Name {
		return pushReply{Error: errorToWire(ssp2.Errorf(ssp2.CodeForbidden, "partition is not homed at edge %s", h.cfg.Name))}
	}
	decoded, err := ssp2.DecodeRequestWindow(req.Body, ssp2.WireWindow{Min: ssp2.MinWireVersion, Max: ssp2.MaxWireVersion})
	if err != nil {
		return pushReply{Error: errorToWire(err)}
	}
	id := engine.Identity{Partition: req.Partition, ActorID: req.ActorID, Scopes: engine.StaticScopes(req.Scopes)}
	// The response is the hub's to write: the results it needs are the
	// ones stored, read back below.
	var out bytes.Buffer
	if err := h.cfg.Engine.Sync(ctx, id, req.Body, &out); err != nil {
		return pushReply{Error: errorToWire(err)}
	}
	r := pushReply{Records: map[string]wireRecord{}}
	for _, c := range decoded.Commits {
		rec, ok, err := h.cfg.Store.IdempotencyGet(ctx, req.Partition, decoded.Header.ClientID, c.ClientCommitID)
		if err != nil {
			return pushReply{Error: errorToWire(err)}
		}
		if ok {
			r.Records[c.ClientCommitID] = wireRecord{ActorID: rec.ActorID, Status: rec.Status, CommitSeq: rec.CommitSeq, Result: rec.Result, CreatedAtMs: rec.CreatedAtMs}
		}
	}
	return r
}

func (h *Home) unsubscribe() {
	for _, s := range h.subs {
		_ = s.Unsubscribe()
	}
	h.subs = nil
}

// Stop unsubscribes and waits, within ctx, for the requests in flight.
func (h *Home) Stop(ctx context.Context) error {
	return h.life.Stop(func() error {
		h.unsubscribe()
		if err := h.tasks.Wait(ctx); err != nil {
			return fmt.Errorf("edge: stop: %w", err)
		}
		return nil
	})
}

// toRecord is the stored result a wireRecord carries.
func (w wireRecord) toRecord(clientID, clientCommitID string) storage.PushRecord {
	return storage.PushRecord{ClientID: clientID, ClientCommitID: clientCommitID, ActorID: w.ActorID, Status: w.Status,
		CommitSeq: w.CommitSeq, Result: w.Result, CreatedAtMs: w.CreatedAtMs}
}
