package sqlitestore

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/advances"
)

// Cursor advances (ClientAdvance) wait in memory (advances.Queue) for the
// next group transaction of the writer, which applies them before its
// COMMIT: they cost no transaction and no fsync of their own. The queue's
// timer bounds the wait when no write comes (storage.ClientAdvanceDelay),
// and Close applies what is left.

const qClientAdvance = `UPDATE sync_clients SET cursor = max(cursor, ?), updated_at_ms = max(updated_at_ms, ?)
	WHERE partition = ? AND client_id = ? AND actor_id = ?
	AND EXISTS (SELECT 1 FROM sync_partitions WHERE id = ? AND log_epoch = ?)`

// ClientAdvance implements storage.Store. Past a full queue the advance
// is written at once, as ClientAck.
func (s *Store) ClientAdvance(ctx context.Context, p storage.ClientAckParams) error {
	select {
	case <-s.closed:
		return ErrClosed
	default:
	}
	err := s.advances.Add(p)
	if errors.Is(err, advances.ErrFull) {
		// ClientAck keeps the start cache.
		if _, err := s.ClientAck(ctx, p); err != nil {
			return fmt.Errorf("advance client: %w", err)
		}
		return nil
	}
	if err == nil {
		s.cache.Advance(p)
	}
	return nil
}

// flushAdvances runs an empty write, whose group applies the pending
// advances; the queue's timer calls it when no other write came.
func (s *Store) flushAdvances() {
	_ = s.writeTouching(context.Background(), touchNone, func(*conn) error { return nil })
}

// applyAdvances writes the pending advances in c's open transaction,
// inside a savepoint: a failure drops them (their loss is harmless) and
// leaves the transaction as it was.
func (s *Store) applyAdvances(c *conn) {
	pending := s.advances.Take()
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
	if s.advances.Len() == 0 {
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
