package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/admincore"
	"github.com/syncnode/syncnode/storage/internal/commitlog"
)

func (s *Store) readPartition(ctx context.Context, partition string) (p storage.Partition, ok bool, err error) {
	rows, err := s.pool.Query(ctx, qPartition, partition)
	if err != nil {
		return p, false, err
	}
	defer rows.Close()
	if rows.Next() {
		ok = true
		if err := scanPartition(rows, &p); err != nil {
			return p, false, err
		}
	}
	rows.Close()
	return p, ok, rows.Err()
}

// PartitionTouch implements storage.Store: usually one read; the first
// touch inserts (the first creator's epoch wins), and a stale last-seen is
// refreshed unless a push holds the row lock (SKIP LOCKED: the next touch
// refreshes it), so the request path never waits for a push.
func (s *Store) PartitionTouch(ctx context.Context, partition string, nowMs int64) (storage.Partition, error) {
	p, ok, err := s.readPartition(ctx, partition)
	if err != nil {
		return p, fmt.Errorf("touch partition: %w", err)
	}
	return s.touched(ctx, partition, nowMs, p, ok)
}

// qPartitionClient reads a partition row and one client record of it in
// one statement; the client columns are defaults when it has none.
const qPartitionClient = `SELECT ` + partitionCols + `, c.client_id IS NOT NULL, coalesce(c.actor_id, ''),
	coalesce(c.wire_version, 0), coalesce(c.cursor, -1), coalesce(c.updated_at_ms, 0), c.subscriptions
	FROM sync_partitions p LEFT JOIN sync_clients c ON c.partition = p.id AND c.client_id = $2 WHERE p.id = $1`

// PartitionTouchClient implements storage.Store like PartitionTouch, the
// client record read in the partition row's statement (one round trip).
func (s *Store) PartitionTouchClient(ctx context.Context, partition, clientID string, nowMs int64) (storage.Partition, storage.Client, bool, error) {
	var (
		p     storage.Partition
		cl    = storage.Client{Partition: partition, ClientID: clientID}
		hasCl bool
		wire  int32
		subs  *string
	)
	err := s.pool.QueryRow(ctx, qPartitionClient, partition, clientID).Scan(
		&p.ID, &p.LogEpoch, &p.EpochRequired, &p.CreatedAtMs, &p.LastSeenMs, &p.MaxCommitSeq, &p.HorizonSeq,
		&hasCl, &cl.ActorID, &wire, &cl.Cursor, &cl.UpdatedAtMs, &subs)
	ok := err == nil
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	if err != nil {
		return p, storage.Client{}, false, fmt.Errorf("touch partition: %w", err)
	}
	if p, err = s.touched(ctx, partition, nowMs, p, ok); err != nil || !hasCl {
		return p, storage.Client{}, false, err
	}
	cl.WireVersion = uint16(wire)
	if subs != nil {
		cl.Subscriptions = []byte(*subs)
	}
	return p, cl, true, nil
}

// touched completes a touch after the read of p (ok: the row exists): it
// creates the row, or refreshes a stale last-seen time.
func (s *Store) touched(ctx context.Context, partition string, nowMs int64, p storage.Partition, ok bool) (storage.Partition, error) {
	var err error
	if ok && p.LastSeenMs >= nowMs-storage.TouchGranularityMs {
		return p, nil
	}
	// The row read again below fills the start cache (startcache's
	// generation rule: a drop meanwhile wins).
	gen := s.cache.Gen()
	if !ok {
		if _, err := s.pool.Exec(ctx, `INSERT INTO sync_partitions (id, log_epoch, created_at_ms, last_seen_ms)
			VALUES ($1, $2, $3, $3) ON CONFLICT (id) DO NOTHING`, partition, commitlog.NewEpoch(), nowMs); err != nil {
			return p, fmt.Errorf("touch partition: %w", err)
		}
		s.analyzer.wrote("sync_partitions", 1)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE sync_partitions SET last_seen_ms = $2
		WHERE id = (SELECT id FROM sync_partitions WHERE id = $1 AND last_seen_ms < $3 FOR UPDATE SKIP LOCKED)`,
		partition, nowMs, nowMs-storage.TouchGranularityMs); err != nil {
		return p, fmt.Errorf("touch partition: %w", err)
	}
	if p, ok, err = s.readPartition(ctx, partition); err == nil && !ok {
		err = errors.New("partition vanished after insert")
	}
	if err != nil {
		return p, fmt.Errorf("touch partition: %w", err)
	}
	s.cache.SetPartition(gen, p)
	return p, nil
}

// PartitionAdopt implements storage.Store.
func (s *Store) PartitionAdopt(ctx context.Context, partition, logEpoch string, nowMs int64) (storage.Partition, error) {
	defer s.cache.Drop(partition)
	if err := commitlog.CheckEpoch(logEpoch); err != nil {
		return storage.Partition{}, err
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO sync_partitions (id, log_epoch, created_at_ms, last_seen_ms)
		VALUES ($1, $2, $3, $3) ON CONFLICT (id) DO NOTHING`, partition, logEpoch, nowMs)
	if err != nil {
		return storage.Partition{}, fmt.Errorf("adopt partition: %w", err)
	}
	s.analyzer.wrote("sync_partitions", int(tag.RowsAffected()))
	p, ok, err := s.readPartition(ctx, partition)
	if err == nil && !ok {
		err = errors.New("partition vanished after insert")
	}
	if err != nil {
		return storage.Partition{}, fmt.Errorf("adopt partition: %w", err)
	}
	return p, nil
}

// PartitionRebase implements storage.Store.
func (s *Store) PartitionRebase(ctx context.Context, partition, fromEpoch, logEpoch string, seq int64) (storage.Partition, error) {
	defer s.cache.Drop(partition)
	if err := commitlog.CheckEpoch(logEpoch); err != nil {
		return storage.Partition{}, err
	}
	var p storage.Partition
	err := s.writeTx(ctx, partition, func(t *tx) error {
		horizon, err := commitlog.RebaseHorizon(t.locked, fromEpoch, seq)
		if err != nil {
			return err
		}
		if _, err := t.exec(ctx, `UPDATE sync_partitions SET log_epoch = $1, horizon_seq = $2 WHERE id = $3`, logEpoch, horizon, partition); err != nil {
			return t.fail("rebase partition", "sync_partitions", err)
		}
		p = t.locked
		p.LogEpoch, p.HorizonSeq, p.MaxCommitSeq = logEpoch, horizon, seq
		return nil
	})
	if err != nil {
		return storage.Partition{}, fmt.Errorf("rebase partition: %w", err)
	}
	return p, nil
}

// PartitionGet implements storage.Store.
func (s *Store) PartitionGet(ctx context.Context, partition string) (storage.Partition, error) {
	p, ok, err := s.readPartition(ctx, partition)
	if err != nil {
		return p, fmt.Errorf("get partition: %w", err)
	}
	if !ok {
		return p, unregistered("get partition", partition)
	}
	return p, nil
}

// Partitions implements storage.Store.
func (s *Store) Partitions(ctx context.Context) ([]storage.Partition, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+partitionCols+` FROM sync_partitions p ORDER BY p.id`)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	defer rows.Close()
	var out []storage.Partition
	for rows.Next() {
		var p storage.Partition
		if err := scanPartition(rows, &p); err != nil {
			return nil, fmt.Errorf("list partitions: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	return out, nil
}

// PartitionRotateEpoch implements storage.Store under the partition row
// lock, so it serializes with pushes and pruning.
func (s *Store) PartitionRotateEpoch(ctx context.Context, partition string, nowMs int64) (storage.Partition, error) {
	defer s.cache.Drop(partition)
	var p storage.Partition
	err := s.writeTx(ctx, partition, func(t *tx) error {
		t.queue(`UPDATE sync_partitions SET log_epoch = $2, epoch_required = TRUE, last_seen_ms = greatest(last_seen_ms, $3) WHERE id = $1`,
			partition, commitlog.NewEpoch(), nowMs)
		t.queue(`DELETE FROM sync_clients WHERE partition = $1`, partition)
		var ok bool
		var err error
		p, ok, err = t.readPartition(ctx, partition)
		if err == nil && !ok {
			err = fmt.Errorf("partition %q vanished under the lock", partition)
		}
		return err
	})
	if err != nil {
		return storage.Partition{}, fmt.Errorf("rotate epoch: %w", err)
	}
	return p, nil
}

const (
	qIdempotencyGet = `SELECT status, commit_seq, result, created_at_ms, coalesce(actor_id, '') FROM sync_idempotency
		WHERE partition = $1 AND client_id = $2 AND client_commit_id = $3`
	qIdempotencyInsert = `INSERT INTO sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, created_at_ms, actor_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
)

func scanRecord(rows pgx.Rows, r *storage.PushRecord) error {
	var status int16
	if err := rows.Scan(&status, &r.CommitSeq, &r.Result, &r.CreatedAtMs, &r.ActorID); err != nil {
		return err
	}
	r.Status = storage.PushStatus(status)
	return nil
}

// IdempotencyGet implements storage.Store (the optimistic lookup).
func (s *Store) IdempotencyGet(ctx context.Context, partition, clientID, clientCommitID string) (storage.PushRecord, bool, error) {
	r := storage.PushRecord{ClientID: clientID, ClientCommitID: clientCommitID}
	rows, err := s.pool.Query(ctx, qIdempotencyGet, partition, clientID, clientCommitID)
	if err != nil {
		return r, false, fmt.Errorf("get push result: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		rows.Close()
		if err := rows.Err(); err != nil {
			return storage.PushRecord{}, false, fmt.Errorf("get push result: %w", err)
		}
		s.hints.add(partition, idemKey{clientID, clientCommitID})
		return storage.PushRecord{}, false, nil
	}
	if err := scanRecord(rows, &r); err != nil {
		return storage.PushRecord{}, false, fmt.Errorf("get push result: %w", err)
	}
	return r, true, nil
}

// IdempotencyGet implements storage.Tx (the locked re-check). A miss is
// remembered: under the lock nobody else can store the key, so a later
// IdempotencyPut of it needs no conflict check and can be queued.
func (t *tx) IdempotencyGet(ctx context.Context, clientID, clientCommitID string) (storage.PushRecord, bool, error) {
	if err := t.check(); err != nil {
		return storage.PushRecord{}, false, err
	}
	key := idemKey{clientID, clientCommitID}
	if r, ok := t.put[key]; ok {
		return r, true, nil
	}
	if r, ok := t.pre[key]; ok {
		if r != nil {
			return *r, true, nil
		}
		if t.absent == nil {
			t.absent = map[idemKey]bool{}
		}
		t.absent[key] = true
		return storage.PushRecord{}, false, nil
	}
	r := storage.PushRecord{ClientID: clientID, ClientCommitID: clientCommitID}
	found := false
	err := t.query(ctx, qIdempotencyGet, []any{t.locked.ID, clientID, clientCommitID}, func(rows pgx.Rows) error {
		if !rows.Next() {
			return nil
		}
		found = true
		return scanRecord(rows, &r)
	})
	if err != nil {
		return storage.PushRecord{}, false, t.fail("get push result", "", err)
	}
	if !found {
		if t.absent == nil {
			t.absent = map[idemKey]bool{}
		}
		t.absent[key] = true
		return storage.PushRecord{}, false, nil
	}
	return r, true, nil
}

// IdempotencyPut implements storage.Tx. A key the locked re-check found
// absent is inserted in the queue, without a conflict clause, so that a
// broken assumption fails loudly; any other key is inserted at once with
// ON CONFLICT DO NOTHING and the stored record read back.
func (t *tx) IdempotencyPut(ctx context.Context, r storage.PushRecord) (storage.PushRecord, error) {
	if err := t.check(); err != nil {
		return storage.PushRecord{}, err
	}
	if r.Status != storage.PushApplied && r.Status != storage.PushRejected {
		return storage.PushRecord{}, fmt.Errorf("put push result: status %d is neither applied nor rejected", r.Status)
	}
	key := idemKey{r.ClientID, r.ClientCommitID}
	if stored, ok := t.put[key]; ok {
		return stored, nil
	}
	r.Result = bytes.Clone(r.Result)
	if r.Result == nil {
		r.Result = []byte{}
	}
	var actor *string
	if r.ActorID != "" {
		actor = &r.ActorID
	}
	args := []any{t.locked.ID, r.ClientID, r.ClientCommitID, int16(r.Status), r.CommitSeq, r.Result, r.CreatedAtMs, actor}
	if t.absent[key] {
		t.queue(qIdempotencyInsert, args...)
	} else {
		stored := r
		inserted := false
		err := t.query(ctx, qIdempotencyInsert+` ON CONFLICT DO NOTHING RETURNING 1`, args, func(rows pgx.Rows) error {
			inserted = rows.Next()
			return nil
		})
		if err == nil && !inserted {
			found := false
			err = t.query(ctx, qIdempotencyGet, []any{t.locked.ID, r.ClientID, r.ClientCommitID}, func(rows pgx.Rows) error {
				if found = rows.Next(); found {
					return scanRecord(rows, &stored)
				}
				return nil
			})
			if err == nil && !found {
				err = errors.New("record vanished after a conflicting insert")
			}
		}
		if err != nil {
			return storage.PushRecord{}, t.fail("put push result", "", err)
		}
		r = stored
	}
	t.s.analyzer.wrote("sync_idempotency", 1)
	t.s.hints.drop(t.locked.ID, key)
	delete(t.pre, key)
	delete(t.absent, key)
	if t.put == nil {
		t.put = map[idemKey]storage.PushRecord{}
	}
	t.put[key] = r
	return r, nil
}

const clientCols = `actor_id, wire_version, cursor, updated_at_ms, subscriptions`

// ClientGet implements storage.Store.
func (s *Store) ClientGet(ctx context.Context, partition, clientID string) (storage.Client, bool, error) {
	cl, ok, err := scanClient(s.pool.QueryRow(ctx, `SELECT `+clientCols+` FROM sync_clients WHERE partition = $1 AND client_id = $2`,
		partition, clientID), partition, clientID)
	if err != nil {
		return storage.Client{}, false, fmt.Errorf("get client: %w", err)
	}
	return cl, ok, nil
}

func scanClient(row pgx.Row, partition, clientID string) (storage.Client, bool, error) {
	cl := storage.Client{Partition: partition, ClientID: clientID}
	var (
		wire int32
		subs *string
	)
	err := row.Scan(&cl.ActorID, &wire, &cl.Cursor, &cl.UpdatedAtMs, &subs)
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.Client{}, false, nil
	}
	if err != nil {
		return storage.Client{}, false, err
	}
	cl.WireVersion = uint16(wire)
	if subs != nil {
		cl.Subscriptions = []byte(*subs)
	}
	return cl, true, nil
}

// ClientList implements storage.Admin.
func (s *Store) ClientList(ctx context.Context, p storage.ClientListParams) ([]storage.Client, error) {
	if err := admincore.CheckClientListLimit(p.Limit); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT client_id, `+clientCols+` FROM sync_clients
		WHERE partition = $1 AND client_id COLLATE "C" > $2 ORDER BY client_id COLLATE "C" LIMIT $3`, p.Partition, p.AfterClientID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list clients: %w", err)
	}
	defer rows.Close()
	out := make([]storage.Client, 0, min(p.Limit, 1024))
	for rows.Next() {
		cl := storage.Client{Partition: p.Partition}
		var (
			wire int32
			subs *string
		)
		if err := rows.Scan(&cl.ClientID, &cl.ActorID, &wire, &cl.Cursor, &cl.UpdatedAtMs, &subs); err != nil {
			return nil, fmt.Errorf("list clients: %w", err)
		}
		cl.WireVersion = uint16(wire)
		if subs != nil {
			cl.Subscriptions = []byte(*subs)
		}
		out = append(out, cl)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list clients: %w", err)
	}
	return out, nil
}

func subscriptions(cl storage.Client) *string {
	if cl.Subscriptions == nil {
		return nil
	}
	v := string(cl.Subscriptions)
	return &v
}

// ClientBind implements storage.Store: an insert that does nothing on a
// conflict, and on a conflict the stored record read in a statement of
// its own (whose snapshot sees a concurrent binder's committed row).
func (s *Store) ClientBind(ctx context.Context, cl storage.Client) (_ storage.Client, err error) {
	gen := s.cache.Gen()
	var stored storage.Client
	defer func() {
		if err != nil {
			s.cache.DropClient(cl.Partition, cl.ClientID)
		} else {
			s.cache.SetClient(gen, stored)
		}
	}()
	stored, ok, err := scanClient(s.pool.QueryRow(ctx, `INSERT INTO sync_clients (partition, client_id, `+clientCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (partition, client_id) DO NOTHING RETURNING `+clientCols,
		cl.Partition, cl.ClientID, cl.ActorID, int32(cl.WireVersion), cl.Cursor, cl.UpdatedAtMs, subscriptions(cl)), cl.Partition, cl.ClientID)
	if err == nil && ok {
		s.analyzer.wrote("sync_clients", 1)
		return stored, nil
	}
	if err == nil {
		stored, ok, err = s.ClientGet(ctx, cl.Partition, cl.ClientID)
		if err == nil && !ok {
			err = errors.New("record vanished after a conflicting insert")
		}
	}
	if err != nil {
		return storage.Client{}, fmt.Errorf("bind client: %w", err)
	}
	return stored, nil
}

// ClientPut implements storage.Store. The update applies only to a record
// of the same actor; a put that changes no row found another actor's.
func (s *Store) ClientPut(ctx context.Context, cl storage.Client) (err error) {
	gen := s.cache.Gen()
	defer func() {
		if err != nil {
			s.cache.DropClient(cl.Partition, cl.ClientID)
		} else {
			s.cache.SetClient(gen, cl)
		}
	}()
	s.advances.supersede(cl.Partition, cl.ClientID)
	tag, err := s.pool.Exec(ctx, `INSERT INTO sync_clients (partition, client_id, `+clientCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (partition, client_id) DO UPDATE SET
			wire_version = EXCLUDED.wire_version, cursor = EXCLUDED.cursor,
			updated_at_ms = EXCLUDED.updated_at_ms, subscriptions = EXCLUDED.subscriptions
		WHERE sync_clients.actor_id = EXCLUDED.actor_id`,
		cl.Partition, cl.ClientID, cl.ActorID, int32(cl.WireVersion), cl.Cursor, cl.UpdatedAtMs, subscriptions(cl))
	if err != nil {
		return fmt.Errorf("put client: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ssp2.Errorf(ssp2.CodeInvalidClientID, "put client: client id is bound to another actor")
	}
	s.analyzer.wrote("sync_clients", 1)
	// A write of the store carries the pending cursor advances.
	s.flushAdvances()
	return nil
}

// ClientAck implements storage.Store with one conditional UPDATE: the
// record, its actor and the partition's current epoch are checked by the
// statement that raises the cursor. A concurrent epoch rotation deletes
// the record under its lock; the UPDATE then finds no row.
func (s *Store) ClientAck(ctx context.Context, p storage.ClientAckParams) (bool, error) {
	// The statement sets updated_at_ms as given, which the cache's
	// Advance would not: the next start reads the record.
	defer s.cache.DropClient(p.Partition, p.ClientID)
	tag, err := s.pool.Exec(ctx, `UPDATE sync_clients SET cursor = greatest(cursor, $1), updated_at_ms = $2
		WHERE partition = $3 AND client_id = $4 AND actor_id = $5
		AND EXISTS (SELECT 1 FROM sync_partitions WHERE id = $3 AND log_epoch = $6)`,
		p.Cursor, p.NowMs, p.Partition, p.ClientID, p.ActorID, p.LogEpoch)
	if err != nil {
		return false, fmt.Errorf("ack client: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Prune implements storage.Store under the partition row lock.
func (s *Store) Prune(ctx context.Context, p storage.PruneParams) (storage.PruneResult, error) {
	defer s.cache.Drop(p.Partition)
	p, err := commitlog.NormalizePrune(p)
	if err != nil {
		return storage.PruneResult{}, err
	}
	var res storage.PruneResult
	err = s.writeTx(ctx, p.Partition, func(t *tx) error {
		part := t.locked
		target, err := commitlog.PruneTarget(ctx, p, part, pruneReader{t})
		if err != nil {
			return err
		}
		res.HorizonSeq = target
		if target <= part.HorizonSeq {
			return nil
		}
		from, through := part.HorizonSeq, target
		// The scope index is keyed for reads, so its rows are found
		// through the changes they were derived from, before those go.
		t.queue(`DELETE FROM sync_scope_index s USING (
				SELECT DISTINCT ch.tbl, j.key, j.value, ch.seq
				FROM sync_changes ch CROSS JOIN LATERAL jsonb_each_text(ch.scopes::jsonb) j
				WHERE ch.partition = $1 AND ch.seq > $2 AND ch.seq <= $3) d
			WHERE s.partition = $1 AND s.tbl = d.tbl AND s.variable = d.key AND s.value = d.value AND s.seq = d.seq`,
			p.Partition, from, through)
		t.queue(`DELETE FROM sync_changes WHERE partition = $1 AND seq > $2 AND seq <= $3`, p.Partition, from, through)
		// Past the horizon a delete no longer beats an unversioned upsert
		// (SPEC.md §4.6).
		t.queue(`DELETE FROM sync_tombstones WHERE partition = $1 AND commit_seq <= $2`, p.Partition, through)
		t.queue(`UPDATE sync_partitions SET horizon_seq = $2 WHERE id = $1`, p.Partition, target)
		tag, err := t.exec(ctx, `DELETE FROM sync_commits WHERE partition = $1 AND seq > $2 AND seq <= $3`, p.Partition, from, through)
		if err != nil {
			return err
		}
		res.RemovedCommits = tag.RowsAffected()
		return nil
	})
	if err != nil {
		return storage.PruneResult{}, fmt.Errorf("prune: %w", err)
	}
	return res, nil
}

type pruneReader struct{ t *tx }

func (r pruneReader) MinActiveCursor(ctx context.Context, sinceMs int64) (int64, bool, error) {
	var cur *int64
	_, err := r.t.queryRow(ctx, `SELECT min(cursor) FROM sync_clients WHERE partition = $1 AND updated_at_ms >= $2 AND cursor >= 0`,
		[]any{r.t.locked.ID, sinceMs}, &cur)
	if err != nil || cur == nil {
		return 0, false, err
	}
	return *cur, true, nil
}

func (r pruneReader) FirstCommitAtOrAfter(ctx context.Context, afterSeq, throughSeq, ms int64) (int64, bool, error) {
	var seq int64
	ok, err := r.t.queryRow(ctx, `SELECT seq FROM sync_commits WHERE partition = $1 AND seq > $2 AND seq <= $3 AND created_at_ms >= $4
		ORDER BY seq LIMIT 1`, []any{r.t.locked.ID, afterSeq, throughSeq, ms}, &seq)
	return seq, ok, err
}
