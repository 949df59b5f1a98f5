package realtime

import (
	"context"
	"sync"

	"github.com/syncnode/syncnode/storage"
)

// ackWriter persists acks to client records (SPEC.md §8.2) off the
// socket's path: each session's latest ack is written once, however many
// arrived while the previous write ran. A write updates only an existing
// record of the session's actor under the session's epoch, monotonically
// (storage.Store.ClientAck).
type ackWriter struct {
	h       *Hub
	mu      sync.Mutex
	pending map[*session]struct{}
	wake    chan struct{}
}

func newAckWriter(h *Hub) *ackWriter {
	return &ackWriter{h: h, pending: map[*session]struct{}{}, wake: make(chan struct{}, 1)}
}

func (a *ackWriter) add(s *session) {
	a.mu.Lock()
	a.pending[s] = struct{}{}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *ackWriter) run() {
	for {
		select {
		case <-a.h.ctx.Done():
			return
		case <-a.wake:
			a.flush(a.h.ctx)
		}
	}
}

// flush writes every pending ack.
func (a *ackWriter) flush(ctx context.Context) {
	a.mu.Lock()
	batch := a.pending
	a.pending = map[*session]struct{}{}
	a.mu.Unlock()
	for s := range batch {
		s.mu.Lock()
		p := storage.ClientAckParams{Partition: s.ident.Partition, ClientID: s.clientID, ActorID: s.ident.ActorID,
			LogEpoch: s.epoch, Cursor: s.cursor, NowMs: a.h.nowMs()}
		due := s.cursor > s.persisted
		s.mu.Unlock()
		if !due {
			continue
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sqlTimeout)
		ok, err := a.h.cfg.Store.ClientAck(wctx, p)
		cancel()
		if err != nil {
			a.h.log.Warn("realtime: persist ack", "partition", p.Partition, "client", p.ClientID, "err", err)
			continue
		}
		if !ok {
			a.h.metrics.AcksRefused.Add(1)
		}
		// A refusal (no record of this actor under this epoch: a delayed
		// ack from before a rotation, a client that never pulled) changes
		// nothing, and is not retried.
		s.mu.Lock()
		s.persisted = max(s.persisted, p.Cursor)
		s.mu.Unlock()
	}
}
