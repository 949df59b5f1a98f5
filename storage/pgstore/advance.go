package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/advances"
)

// Cursor advances (ClientAdvance) wait in memory (advances.Queue) and are
// written together: one statement for every advance of the last
// ClientAdvanceDelay, in a transaction that commits with
// synchronous_commit off (it waits for no WAL flush; a crash may lose it,
// which the contract allows). A steady push + pull round then spends no
// round trip on its cursor. A ClientPut writes the pending ones after its
// own record, and Close what is left.
type pendingAdvances struct {
	advances.Queue
	// writing is held while a flush writes, so that a ClientPut, which
	// supersedes a pending advance, cannot be overtaken by one taken
	// before it.
	writing sync.Mutex
}

// errClosed refuses an advance after Close.
var errClosed = errors.New("pgstore: store closed")

// ClientAdvance implements storage.Store.
func (s *Store) ClientAdvance(ctx context.Context, p storage.ClientAckParams) error {
	switch err := s.advances.Add(p); {
	case errors.Is(err, advances.ErrClosed):
		return fmt.Errorf("advance client: %w", errClosed)
	case errors.Is(err, advances.ErrFull):
		if err := s.writeAdvances(ctx, []storage.ClientAckParams{p}); err != nil {
			s.cache.DropClient(p.Partition, p.ClientID)
			return fmt.Errorf("advance client: %w", err)
		}
	}
	// The start cache holds the advance at once, as it will be written.
	s.cache.Advance(p)
	return nil
}

// supersede drops a pending advance of a client whose record is being
// replaced, after any flush that has taken it.
func (a *pendingAdvances) supersede(partition, clientID string) {
	a.writing.Lock()
	a.Supersede(partition, clientID)
	a.writing.Unlock()
}

// flushAdvances writes the pending advances. A failure loses them, as a
// crash would: the cursors stay where they were.
func (s *Store) flushAdvances() {
	a := &s.advances
	a.writing.Lock()
	defer a.writing.Unlock()
	ps := a.Take()
	if len(ps) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = s.writeAdvances(ctx, ps)
}

// closeAdvances refuses further advances and writes the pending ones.
func (s *Store) closeAdvances() {
	s.advances.Close()
	s.flushAdvances()
}

const qClientAdvance = `UPDATE sync_clients c SET cursor = greatest(c.cursor, a.cursor), updated_at_ms = greatest(c.updated_at_ms, a.now_ms)
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[])
		AS a(partition, client_id, actor_id, log_epoch, cursor, now_ms)
	WHERE c.partition = a.partition AND c.client_id = a.client_id AND c.actor_id = a.actor_id
	AND EXISTS (SELECT 1 FROM sync_partitions p WHERE p.id = a.partition AND p.log_epoch = a.log_epoch)`

// writeAdvances applies advances as ClientAck would, in one round trip.
// They come in key order (advances.Queue.Take), so the record locks are
// taken in the same order by every flush; flushes are serialized anyway
// (writing) but for the rare direct write past a full queue.
func (s *Store) writeAdvances(ctx context.Context, ps []storage.ClientAckParams) error {
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
	return s.pool.SendBatch(ctx, b).Close()
}
