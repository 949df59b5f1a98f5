package sqlitestore

import (
	"context"
	"fmt"

	"github.com/syncnode/syncnode/storage"
)

var _ storage.RequestStarter = (*Store)(nil)

// qRequestStart is qPartitionClient with the stored result of one commit
// (?3, of client ?4: a server command's key is not its caller's id)
// joined: the start of a one-commit request in one statement.
var qRequestStart = `SELECT ` + partitionCols + `, ` + unnamed("c.client_id IS NOT NULL", "coalesce(c.actor_id, '')",
	"coalesce(c.wire_version, 0)", "coalesce(c.cursor, -1)", "coalesce(c.updated_at_ms, 0)", "c.subscriptions",
	"i.status IS NOT NULL", "coalesce(i.status, 0)", "coalesce(i.commit_seq, 0)", "i.result", "coalesce(i.created_at_ms, 0)", "coalesce(i.actor_id, '')") + `
	FROM sync_partitions p
	LEFT JOIN sync_clients c ON c.partition = p.id AND c.client_id = ?1
	LEFT JOIN sync_idempotency i ON i.partition = p.id AND i.client_id = ?4 AND i.client_commit_id = ?3
	WHERE p.id = ?2`

// qIdempotencyMany reads the stored results of a list of commit ids.
const qIdempotencyMany = `SELECT client_commit_id, status, commit_seq, result, created_at_ms, coalesce(actor_id, '') FROM sync_idempotency
	WHERE partition = ? AND client_id = ? AND client_commit_id IN (SELECT value FROM json_each(?))`

// RequestStart implements storage.RequestStarter. A partition row and
// client record in the start cache are served from it once it is current
// (fresh.go), without the commits' stored results (the write
// transaction reads them under the lock). Otherwise the partition row,
// the client record and the first commit's stored result come in one
// statement, the other commits' results (a request of several commits)
// in a second one on the same reader, and fill the cache. Then the
// touch's rule for last-seen.
func (s *Store) RequestStart(ctx context.Context, q storage.RequestStartParams) (storage.RequestStart, error) {
	if !q.Fresh && s.cache.Has(q.Partition, q.ClientID) {
		// A request that pushes waits out a COMMIT under way: its push
		// waits for the writer anyway.
		cur, err := s.current(ctx, len(q.CommitIDs) > 0)
		if err != nil {
			return storage.RequestStart{}, fmt.Errorf("start request: %w", err)
		}
		if p, cl, ok := s.cache.Get(q.Partition, q.ClientID); cur && ok {
			p, err := s.touched(ctx, q.Partition, q.NowMs, p, true)
			if err != nil {
				return storage.RequestStart{}, err
			}
			return storage.RequestStart{Partition: p, Client: cl, HasClient: true, Cached: true}, nil
		}
	}
	var (
		st  = storage.RequestStart{Client: storage.Client{Partition: q.Partition, ClientID: q.ClientID}}
		ok  bool
		gen = s.cache.Gen()
	)
	first := ""
	if len(q.CommitIDs) > 0 {
		first = q.CommitIDs[0]
	}
	pushClient := q.PushClientID
	if pushClient == "" {
		pushClient = q.ClientID
	}
	err := s.withReader(ctx, func(c *conn) (err error) {
		var (
			p      = &st.Partition
			cl     = &st.Client
			subs   []byte
			hasRec bool
			status int64
			rec    = storage.PushRecord{ClientID: pushClient, ClientCommitID: first}
		)
		ok, err = c.queryRow(ctx, qRequestStart, []any{q.ClientID, q.Partition, first, pushClient},
			&p.ID, &p.LogEpoch, &p.EpochRequired, &p.CreatedAtMs, &p.LastSeenMs, &p.MaxCommitSeq, &p.HorizonSeq,
			&st.HasClient, &cl.ActorID, &cl.WireVersion, &cl.Cursor, &cl.UpdatedAtMs, &subs,
			&hasRec, &status, &rec.CommitSeq, &rec.Result, &rec.CreatedAtMs, &rec.ActorID)
		if err != nil || !ok {
			return err
		}
		if subs != nil {
			cl.Subscriptions = subs
		}
		if hasRec && len(q.CommitIDs) > 0 {
			rec.Status = storage.PushStatus(status)
			st.Pushes = map[string]storage.PushRecord{first: rec}
		}
		if len(q.CommitIDs) < 2 {
			return nil
		}
		return readPushes(ctx, c, q.Partition, pushClient, q.CommitIDs[1:], &st.Pushes)
	})
	if err != nil {
		return storage.RequestStart{}, fmt.Errorf("start request: %w", err)
	}
	if !st.HasClient {
		st.Client = storage.Client{}
	}
	if ok {
		s.cache.Fill(gen, st.Partition, st.Client, st.HasClient)
	}
	if st.Partition, err = s.touched(ctx, q.Partition, q.NowMs, st.Partition, ok); err != nil {
		return storage.RequestStart{}, err
	}
	return st, nil
}

// readPushes adds the stored results of ids to *into.
func readPushes(ctx context.Context, c *conn, partition, clientID string, ids []string, into *map[string]storage.PushRecord) error {
	rows, err := c.query(ctx, qIdempotencyMany, partition, clientID, jsonStrings(ids))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		r := storage.PushRecord{ClientID: clientID}
		var status int64
		if err := rows.Scan(&r.ClientCommitID, &status, &r.CommitSeq, &r.Result, &r.CreatedAtMs, &r.ActorID); err != nil {
			return err
		}
		r.Status = storage.PushStatus(status)
		if *into == nil {
			*into = map[string]storage.PushRecord{}
		}
		(*into)[r.ClientCommitID] = r
	}
	return rows.Err()
}
