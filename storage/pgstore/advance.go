package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/storage"
)

// Cursor advances (ClientAdvance) wait in memory and are written together:
// one statement for every advance of the last ClientAdvanceDelay, in a
// transaction that commits with synchronous_commit off (it waits for no
// WAL flush; a crash may lose it, which the contract allows). A steady
// push + pull round then spends no round trip on its cursor. A ClientPut
// writes the pending ones after its own record, and Close what is left.

// maxPendingAdvances bounds the queue; past it an advance is written at
// once.
const maxPendingAdvances = 16384

type advanceKey struct{ partition, clientID string }

type advances struct {
	mu      sync.Mutex
	pending map[advanceKey]storage.ClientAckParams
	timer   *time.Timer // armed while pending is not empty
	closed  bool
	// writing is held while a flush writes, so that a ClientPut, which
	// supersedes a pending advance, cannot be overtaken by one taken
	// before it.
	writing sync.Mutex
}

// errClosed refuses an advance after Close.
var errClosed = errors.New("pgstore: store closed")

// ClientAdvance implements storage.Store.
func (s *Store) ClientAdvance(ctx context.Context, p storage.ClientAckParams) error {
	a := &s.advances
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return fmt.Errorf("advance client: %w", errClosed)
	}
	if a.pending == nil {
		a.pending = map[advanceKey]storage.ClientAckParams{}
	}
	k := advanceKey{p.Partition, p.ClientID}
	if prev, ok := a.pending[k]; ok {
		// The same client again before a flush: keep the furthest
		// cursor (an epoch rotation in between fails both).
		p.Cursor, p.NowMs = max(p.Cursor, prev.Cursor), max(p.NowMs, prev.NowMs)
	} else if len(a.pending) >= maxPendingAdvances {
		a.mu.Unlock()
		if err := s.writeAdvances(ctx, []storage.ClientAckParams{p}); err != nil {
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

// supersede drops a pending advance of a client whose record is being
// replaced: written later it could raise the new record's cursor.
func (a *advances) supersede(partition, clientID string) {
	a.writing.Lock()
	a.mu.Lock()
	delete(a.pending, advanceKey{partition, clientID})
	a.mu.Unlock()
	a.writing.Unlock()
}

// flushAdvances writes the pending advances. A failure loses them, as a
// crash would: the cursors stay where they were.
func (s *Store) flushAdvances() {
	a := &s.advances
	a.writing.Lock()
	defer a.writing.Unlock()
	a.mu.Lock()
	pending := a.pending
	a.pending = nil
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	a.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	ps := make([]storage.ClientAckParams, 0, len(pending))
	for _, p := range pending {
		ps = append(ps, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = s.writeAdvances(ctx, ps)
}

// closeAdvances refuses further advances and writes the pending ones.
func (s *Store) closeAdvances() {
	s.advances.mu.Lock()
	s.advances.closed = true
	s.advances.mu.Unlock()
	s.flushAdvances()
}

const qClientAdvance = `UPDATE sync_clients c SET cursor = greatest(c.cursor, a.cursor), updated_at_ms = greatest(c.updated_at_ms, a.now_ms)
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[])
		AS a(partition, client_id, actor_id, log_epoch, cursor, now_ms)
	WHERE c.partition = a.partition AND c.client_id = a.client_id AND c.actor_id = a.actor_id
	AND EXISTS (SELECT 1 FROM sync_partitions p WHERE p.id = a.partition AND p.log_epoch = a.log_epoch)`

// writeAdvances applies advances as ClientAck would, in one round trip.
// The arrays are in key order, so the record locks are taken in the same
// order by every flush; flushes are serialized anyway (writing) but for
// the rare direct write of a full queue.
func (s *Store) writeAdvances(ctx context.Context, ps []storage.ClientAckParams) error {
	slices.SortFunc(ps, func(x, y storage.ClientAckParams) int {
		if c := strings.Compare(x.Partition, y.Partition); c != 0 {
			return c
		}
		return strings.Compare(x.ClientID, y.ClientID)
	})
	n := len(ps)
	part, client, actor, epoch := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	cursor, now := make([]int64, n), make([]int64, n)
	for i, p := range ps {
		part[i], client[i], actor[i], epoch[i], cursor[i], now[i] = p.Partition, p.ClientID, p.ActorID, p.LogEpoch, p.Cursor, p.NowMs
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SET LOCAL synchronous_commit TO OFF")
	b.Queue(qClientAdvance, part, client, actor, epoch, cursor, now)
	b.Queue("COMMIT")
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	return nil
}
