package sqlitestore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/syncnode/syncnode/storage"
)

// Cursor advances (ClientAdvance) wait in memory for the next group
// transaction of the writer, which applies them before its COMMIT: they
// cost no transaction and no fsync of their own. A timer bounds the wait
// when no write comes (storage.ClientAdvanceDelay), and Close applies what
// is left.

// maxPendingAdvances bounds the queue; past it an advance is written at
// once, as ClientAck.
const maxPendingAdvances = 16384

type advanceKey struct{ partition, clientID string }

type advances struct {
	mu      sync.Mutex
	pending map[advanceKey]storage.ClientAckParams
	timer   *time.Timer // armed while pending is not empty
}

const qClientAdvance = `UPDATE sync_clients SET cursor = max(cursor, ?), updated_at_ms = max(updated_at_ms, ?)
	WHERE partition = ? AND client_id = ? AND actor_id = ?
	AND EXISTS (SELECT 1 FROM sync_partitions WHERE id = ? AND log_epoch = ?)`

// ClientAdvance implements storage.Store.
func (s *Store) ClientAdvance(ctx context.Context, p storage.ClientAckParams) error {
	select {
	case <-s.closed:
		return ErrClosed
	default:
	}
	a := &s.advances
	a.mu.Lock()
	if a.pending == nil {
		a.pending = map[advanceKey]storage.ClientAckParams{}
	}
	k := advanceKey{p.Partition, p.ClientID}
	if prev, ok := a.pending[k]; ok {
		// The same client again before a write carried the first: keep
		// the furthest cursor.
		p.Cursor, p.NowMs = max(p.Cursor, prev.Cursor), max(p.NowMs, prev.NowMs)
	} else if len(a.pending) >= maxPendingAdvances {
		a.mu.Unlock()
		if _, err := s.ClientAck(ctx, p); err != nil {
			return fmt.Errorf("advance client: %w", err)
		}
		return nil
	}
	a.pending[k] = p
	if a.timer == nil {
		a.timer = time.AfterFunc(storage.ClientAdvanceDelay, s.flushAdvances)
	}
	a.mu.Unlock()
	return nil
}

// flushAdvances runs an empty write, whose group applies the pending
// advances; the timer calls it when no other write came.
func (s *Store) flushAdvances() {
	_ = s.write(context.Background(), func(*conn) error { return nil })
}

// supersede drops a pending advance of a client whose record is being
// replaced: applied later it could raise the new record's cursor.
func (a *advances) supersede(partition, clientID string) {
	a.mu.Lock()
	delete(a.pending, advanceKey{partition, clientID})
	a.mu.Unlock()
}

// take empties the queue.
func (a *advances) take() map[advanceKey]storage.ClientAckParams {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.pending
	a.pending = nil
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	return p
}

// applyAdvances writes the pending advances in c's open transaction,
// inside a savepoint: a failure drops them (their loss is harmless) and
// leaves the transaction as it was.
func (s *Store) applyAdvances(c *conn) {
	pending := s.advances.take()
	if len(pending) == 0 {
		return
	}
	if _, err := c.exec(stmtCtx, "SAVEPOINT advances"); err != nil {
		return
	}
	for _, p := range pending {
		if _, err := c.exec(stmtCtx, qClientAdvance, p.Cursor, p.NowMs, p.Partition, p.ClientID, p.ActorID, p.Partition, p.LogEpoch); err != nil {
			_, _ = c.exec(stmtCtx, "ROLLBACK TO advances")
			break
		}
	}
	_, _ = c.exec(stmtCtx, "RELEASE advances")
}

// closeAdvances applies the advances still pending when the store closes,
// on the writer connection the coordinator left.
func (s *Store) closeAdvances() error {
	s.advances.mu.Lock()
	n := len(s.advances.pending)
	s.advances.mu.Unlock()
	if n == 0 {
		return nil
	}
	c := s.writerConn
	if _, err := c.exec(stmtCtx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("close: apply client advances: %w", err)
	}
	s.applyAdvances(c)
	if _, err := c.exec(stmtCtx, "COMMIT"); err != nil {
		rollback(c)
		return fmt.Errorf("close: apply client advances: %w", err)
	}
	return nil
}
