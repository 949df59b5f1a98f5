package sqlitestore

import (
	"context"
	"fmt"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/admincore"
	"github.com/syncnode/syncnode/storage/internal/commitlog"
)

var qIdempotencyGet = `SELECT ` + unnamed("status", "commit_seq", "result", "created_at_ms", "coalesce(actor_id, '')") + ` FROM sync_idempotency
	WHERE partition = ? AND client_id = ? AND client_commit_id = ?`

const (
	qIdempotencyPut = `INSERT INTO sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, created_at_ms, actor_id)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`
)

func idempotencyGet(ctx context.Context, c *conn, partition, clientID, clientCommitID string) (storage.PushRecord, bool, error) {
	r := storage.PushRecord{ClientID: clientID, ClientCommitID: clientCommitID}
	var status int64
	ok, err := c.queryRow(ctx, qIdempotencyGet, []any{partition, clientID, clientCommitID},
		&status, &r.CommitSeq, &r.Result, &r.CreatedAtMs, &r.ActorID)
	if err != nil || !ok {
		return storage.PushRecord{}, false, err
	}
	r.Status = storage.PushStatus(status)
	return r, true, nil
}

// IdempotencyGet implements storage.Store (the optimistic lookup).
func (s *Store) IdempotencyGet(ctx context.Context, partition, clientID, clientCommitID string) (r storage.PushRecord, ok bool, err error) {
	err = s.withReader(ctx, func(c *conn) error {
		r, ok, err = idempotencyGet(ctx, c, partition, clientID, clientCommitID)
		return err
	})
	if err != nil {
		return r, false, fmt.Errorf("get push result: %w", err)
	}
	return r, ok, nil
}

// IdempotencyGet implements storage.Tx (the locked re-check).
func (t *tx) IdempotencyGet(ctx context.Context, clientID, clientCommitID string) (storage.PushRecord, bool, error) {
	if err := t.check(); err != nil {
		return storage.PushRecord{}, false, err
	}
	r, ok, err := idempotencyGet(ctx, t.c, t.locked.ID, clientID, clientCommitID)
	if err != nil {
		return r, false, t.fail("get push result", "", err)
	}
	return r, ok, nil
}

// IdempotencyPut implements storage.Tx: the insert does nothing on a
// conflict, and then the stored (first) record is read back.
func (t *tx) IdempotencyPut(ctx context.Context, r storage.PushRecord) (storage.PushRecord, error) {
	if err := t.check(); err != nil {
		return storage.PushRecord{}, err
	}
	if r.Status != storage.PushApplied && r.Status != storage.PushRejected {
		return storage.PushRecord{}, fmt.Errorf("put push result: status %d is neither applied nor rejected", r.Status)
	}
	result := r.Result
	if result == nil {
		result = []byte{}
	}
	n, err := t.c.exec(ctx, qIdempotencyPut, t.locked.ID, r.ClientID, r.ClientCommitID, int64(r.Status), r.CommitSeq, result, r.CreatedAtMs, nullable(r.ActorID))
	if err != nil {
		return storage.PushRecord{}, t.fail("put push result", "", err)
	}
	if n == 1 {
		r.Result = result
		return r, nil
	}
	stored, ok, err := idempotencyGet(ctx, t.c, t.locked.ID, r.ClientID, r.ClientCommitID)
	if err == nil && !ok {
		err = fmt.Errorf("record vanished after a conflicting insert")
	}
	if err != nil {
		return storage.PushRecord{}, t.fail("put push result", "", err)
	}
	return stored, nil
}

const clientCols = `actor_id, wire_version, cursor, updated_at_ms, subscriptions`

// ClientGet implements storage.Store.
func (s *Store) ClientGet(ctx context.Context, partition, clientID string) (storage.Client, bool, error) {
	var (
		cl storage.Client
		ok bool
	)
	err := s.withReader(ctx, func(c *conn) (err error) {
		cl, ok, err = clientGet(ctx, c, partition, clientID)
		return err
	})
	if err != nil {
		return storage.Client{}, false, fmt.Errorf("get client: %w", err)
	}
	return cl, ok, nil
}

func clientGet(ctx context.Context, c *conn, partition, clientID string) (storage.Client, bool, error) {
	cl := storage.Client{Partition: partition, ClientID: clientID}
	var subs []byte
	ok, err := c.queryRow(ctx, `SELECT `+clientCols+` FROM sync_clients WHERE partition = ? AND client_id = ?`,
		[]any{partition, clientID}, &cl.ActorID, &cl.WireVersion, &cl.Cursor, &cl.UpdatedAtMs, &subs)
	if err != nil || !ok {
		return storage.Client{}, false, err
	}
	if subs != nil {
		cl.Subscriptions = subs
	}
	return cl, true, nil
}

// ClientList implements storage.Admin on a reader connection.
func (s *Store) ClientList(ctx context.Context, p storage.ClientListParams) ([]storage.Client, error) {
	if err := admincore.CheckClientListLimit(p.Limit); err != nil {
		return nil, err
	}
	out := make([]storage.Client, 0, min(p.Limit, 1024))
	err := s.withReader(ctx, func(c *conn) error {
		rows, err := c.query(ctx, `SELECT client_id, `+clientCols+` FROM sync_clients
			WHERE partition = ? AND client_id > ? ORDER BY client_id LIMIT +?`, p.Partition, p.AfterClientID, p.Limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			cl := storage.Client{Partition: p.Partition}
			var subs []byte
			if err := rows.Scan(&cl.ClientID, &cl.ActorID, &cl.WireVersion, &cl.Cursor, &cl.UpdatedAtMs, &subs); err != nil {
				return err
			}
			if subs != nil {
				cl.Subscriptions = subs
			}
			out = append(out, cl)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list clients: %w", err)
	}
	return out, nil
}

// ClientBind implements storage.Store: an insert that does nothing on a
// conflict, then the stored record read back, on the writer connection.
func (s *Store) ClientBind(ctx context.Context, cl storage.Client) (storage.Client, error) {
	var (
		stored storage.Client
		gen    uint64
	)
	err := s.writeTouching(ctx, touchNone, func(c *conn) error {
		gen = s.cache.Gen()
		if _, err := c.exec(ctx, `INSERT INTO sync_clients (partition, client_id, `+clientCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (partition, client_id) DO NOTHING`,
			cl.Partition, cl.ClientID, cl.ActorID, int64(cl.WireVersion), cl.Cursor, cl.UpdatedAtMs, subscriptions(cl)); err != nil {
			return err
		}
		var ok bool
		var err error
		stored, ok, err = clientGet(ctx, c, cl.Partition, cl.ClientID)
		if err == nil && !ok {
			err = fmt.Errorf("record vanished after a conflicting insert")
		}
		return err
	})
	if err != nil {
		s.cache.DropClient(cl.Partition, cl.ClientID)
		return storage.Client{}, fmt.Errorf("bind client: %w", err)
	}
	s.cache.SetClient(gen, stored)
	return stored, nil
}

// ClientPut implements storage.Store. The update applies only to a record
// of the same actor; a put that changes no row found another actor's.
func (s *Store) ClientPut(ctx context.Context, cl storage.Client) error {
	var (
		n   int64
		gen uint64
	)
	err := s.writeTouching(ctx, touchNone, func(c *conn) (err error) {
		gen = s.cache.Gen()
		s.advances.Supersede(cl.Partition, cl.ClientID)
		n, err = c.exec(ctx, `INSERT INTO sync_clients (partition, client_id, `+clientCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (partition, client_id) DO UPDATE SET
				wire_version = excluded.wire_version, cursor = excluded.cursor,
				updated_at_ms = excluded.updated_at_ms, subscriptions = excluded.subscriptions
			WHERE sync_clients.actor_id = excluded.actor_id`,
			cl.Partition, cl.ClientID, cl.ActorID, int64(cl.WireVersion), cl.Cursor, cl.UpdatedAtMs, subscriptions(cl))
		return err
	})
	if err != nil || n == 0 {
		s.cache.DropClient(cl.Partition, cl.ClientID)
	}
	if err != nil {
		return fmt.Errorf("put client: %w", err)
	}
	if n == 0 {
		return ssp2.Errorf(ssp2.CodeInvalidClientID, "put client: client id is bound to another actor")
	}
	s.cache.SetClient(gen, cl)
	return nil
}

func subscriptions(cl storage.Client) any {
	if cl.Subscriptions == nil {
		return nil
	}
	return string(cl.Subscriptions)
}

// ClientAck implements storage.Store with one conditional UPDATE: the
// record, its actor and the partition's current epoch are checked by the
// same statement that raises the cursor.
func (s *Store) ClientAck(ctx context.Context, p storage.ClientAckParams) (bool, error) {
	var n int64
	err := s.writeTouching(ctx, touchNone, func(c *conn) error {
		var err error
		n, err = c.exec(ctx, `UPDATE sync_clients SET cursor = max(cursor, ?), updated_at_ms = ?
			WHERE partition = ? AND client_id = ? AND actor_id = ?
			AND EXISTS (SELECT 1 FROM sync_partitions WHERE id = ? AND log_epoch = ?)`,
			p.Cursor, p.NowMs, p.Partition, p.ClientID, p.ActorID, p.Partition, p.LogEpoch)
		return err
	})
	if err != nil || n != 1 {
		s.cache.DropClient(p.Partition, p.ClientID)
	} else {
		s.cache.Advance(p)
	}
	if err != nil {
		return false, fmt.Errorf("ack client: %w", err)
	}
	return n == 1, nil
}

// Prune implements storage.Store under the partition write lock.
func (s *Store) Prune(ctx context.Context, p storage.PruneParams) (storage.PruneResult, error) {
	p, err := commitlog.NormalizePrune(p)
	if err != nil {
		return storage.PruneResult{}, err
	}
	// The horizon moves: the cached row's would be behind, which every
	// transaction that serves reads again, but a prune is rare enough.
	defer s.cache.Drop(p.Partition)
	var res storage.PruneResult
	err = s.WriteTx(ctx, p.Partition, func(stx storage.Tx) error {
		t := rawTx(stx)
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
		if _, err := t.c.exec(ctx, `DELETE FROM sync_scope_index WHERE (partition, tbl, variable, value, seq) IN (
				SELECT ch.partition, ch.tbl, j.key, j.value, ch.seq
				FROM sync_changes ch, json_each(ch.scopes) j
				WHERE ch.partition = ? AND ch.seq > ? AND ch.seq <= ?)`, p.Partition, from, through); err != nil {
			return err
		}
		if _, err := t.c.exec(ctx, `DELETE FROM sync_changes WHERE partition = ? AND seq > ? AND seq <= ?`, p.Partition, from, through); err != nil {
			return err
		}
		if res.RemovedCommits, err = t.c.exec(ctx, `DELETE FROM sync_commits WHERE partition = ? AND seq > ? AND seq <= ?`, p.Partition, from, through); err != nil {
			return err
		}
		// Past the horizon a delete no longer beats an unversioned upsert
		// (SPEC.md §4.6).
		if _, err := t.c.exec(ctx, `DELETE FROM sync_tombstones WHERE partition = ? AND commit_seq <= ?`, p.Partition, through); err != nil {
			return err
		}
		_, err = t.c.exec(ctx, `UPDATE sync_partitions SET horizon_seq = ? WHERE id = ?`, target, p.Partition)
		return err
	})
	if err != nil {
		return storage.PruneResult{}, fmt.Errorf("prune: %w", err)
	}
	return res, nil
}

type pruneReader struct{ t *tx }

func (r pruneReader) MinActiveCursor(ctx context.Context, sinceMs int64) (int64, bool, error) {
	var cur *int64
	_, err := r.t.c.queryRow(ctx, `SELECT min(cursor) FROM sync_clients WHERE partition = ? AND updated_at_ms >= ? AND cursor >= 0`,
		[]any{r.t.locked.ID, sinceMs}, &cur)
	if err != nil || cur == nil {
		return 0, false, err
	}
	return *cur, true, nil
}

func (r pruneReader) FirstCommitAtOrAfter(ctx context.Context, afterSeq, throughSeq, ms int64) (int64, bool, error) {
	var seq int64
	ok, err := r.t.c.queryRow(ctx, `SELECT seq FROM sync_commits WHERE partition = ? AND seq > ? AND seq <= ? AND created_at_ms >= ?
		ORDER BY seq LIMIT 1`, []any{r.t.locked.ID, afterSeq, throughSeq, ms}, &seq)
	return seq, ok, err
}

// nullable stores "" as NULL.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
