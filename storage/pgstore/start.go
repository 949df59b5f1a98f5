package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/storage"
)

var _ storage.RequestStarter = (*Store)(nil)

// qRequestStart is qPartitionClient with the stored result of one commit
// ($3, of client $4: a server command's key is not its caller's id)
// joined: the start of a one-commit request in one statement.
const qRequestStart = `SELECT ` + partitionCols + `, c.client_id IS NOT NULL, coalesce(c.actor_id, ''),
	coalesce(c.wire_version, 0), coalesce(c.cursor, -1), coalesce(c.updated_at_ms, 0), c.subscriptions,
	i.status IS NOT NULL, coalesce(i.status, 0), coalesce(i.commit_seq, 0), i.result, coalesce(i.created_at_ms, 0), coalesce(i.actor_id, '')
	FROM sync_partitions p
	LEFT JOIN sync_clients c ON c.partition = p.id AND c.client_id = $2
	LEFT JOIN sync_idempotency i ON i.partition = p.id AND i.client_id = $4 AND i.client_commit_id = $3
	WHERE p.id = $1`

// qIdempotencyMany reads the stored results of a list of commit ids.
const qIdempotencyMany = `SELECT client_commit_id, status, commit_seq, result, created_at_ms, coalesce(actor_id, '') FROM sync_idempotency
	WHERE partition = $1 AND client_id = $2 AND client_commit_id = ANY($3::text[])`

// RequestStart implements storage.RequestStarter. A sole writer
// (solewriter.go) serves a partition row and client record it holds from
// its start cache, without a round trip and without the commits' stored
// results (the write transaction reads them under the lock). Otherwise
// it is one round trip: the partition row, the client record and the
// first commit's stored result in one statement, the other commits'
// results (a request of several commits) in a second one of the same
// pipeline, which fill the cache of a sole writer; then the touch's rule
// for last-seen. A commit id found nowhere is hinted, as IdempotencyGet
// hints a miss, so the write transaction reads its result with the lock.
func (s *Store) RequestStart(ctx context.Context, q storage.RequestStartParams) (storage.RequestStart, error) {
	caching := s.caching()
	pushClient := q.PushClientID
	if pushClient == "" {
		pushClient = q.ClientID
	}
	if caching && !q.Fresh {
		if p, cl, ok := s.cache.Get(q.Partition, q.ClientID); ok {
			// Every commit counts as a miss of the optimistic lookup:
			// hinted, its result comes with the write lock.
			for _, id := range q.CommitIDs {
				s.hints.add(q.Partition, idemKey{pushClient, id})
			}
			p, err := s.touched(ctx, q.Partition, q.NowMs, p, true)
			if err != nil {
				return storage.RequestStart{}, err
			}
			return storage.RequestStart{Partition: p, Client: cl, HasClient: true, Cached: true}, nil
		}
	}
	var (
		gen    = s.cache.Gen()
		st     = storage.RequestStart{Client: storage.Client{Partition: q.Partition, ClientID: q.ClientID}}
		ok     bool
		first  string
		p      = &st.Partition
		cl     = &st.Client
		wire   int32
		subs   *string
		hasRec bool
		status int16
	)
	if len(q.CommitIDs) > 0 {
		first = q.CommitIDs[0]
	}
	rec := storage.PushRecord{ClientID: pushClient, ClientCommitID: first}
	b := &pgx.Batch{}
	b.Queue(qRequestStart, q.Partition, q.ClientID, first, pushClient).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&p.ID, &p.LogEpoch, &p.EpochRequired, &p.CreatedAtMs, &p.LastSeenMs, &p.MaxCommitSeq, &p.HorizonSeq,
			&st.HasClient, &cl.ActorID, &wire, &cl.Cursor, &cl.UpdatedAtMs, &subs,
			&hasRec, &status, &rec.CommitSeq, &rec.Result, &rec.CreatedAtMs, &rec.ActorID)
		ok = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if len(q.CommitIDs) > 1 {
		b.Queue(qIdempotencyMany, q.Partition, pushClient, q.CommitIDs[1:]).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				r := storage.PushRecord{ClientID: pushClient}
				var status int16
				if err := rows.Scan(&r.ClientCommitID, &status, &r.CommitSeq, &r.Result, &r.CreatedAtMs, &r.ActorID); err != nil {
					return err
				}
				r.Status = storage.PushStatus(status)
				if st.Pushes == nil {
					st.Pushes = map[string]storage.PushRecord{}
				}
				st.Pushes[r.ClientCommitID] = r
			}
			return rows.Err()
		})
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return storage.RequestStart{}, fmt.Errorf("start request: %w", err)
	}
	if !ok {
		// No partition row: nothing of it is stored yet.
		st = storage.RequestStart{}
	} else {
		if hasRec && first != "" {
			rec.Status = storage.PushStatus(status)
			if st.Pushes == nil {
				st.Pushes = map[string]storage.PushRecord{}
			}
			st.Pushes[first] = rec
		}
		if st.HasClient {
			cl.WireVersion = uint16(wire)
			if subs != nil {
				cl.Subscriptions = []byte(*subs)
			}
		} else {
			st.Client = storage.Client{}
		}
	}
	if ok && caching {
		s.cache.Fill(gen, st.Partition, st.Client, st.HasClient)
	}
	for _, id := range q.CommitIDs {
		if _, found := st.Pushes[id]; !found {
			s.hints.add(q.Partition, idemKey{pushClient, id})
		}
	}
	var err error
	if st.Partition, err = s.touched(ctx, q.Partition, q.NowMs, st.Partition, ok); err != nil {
		return storage.RequestStart{}, err
	}
	return st, nil
}
