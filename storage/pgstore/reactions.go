package pgstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/storage"
)

// Durable reactions (storage.ReactionStore). Each change is one
// statement that both chooses rows and rewrites them. A claim picks its
// rows with FOR UPDATE SKIP LOCKED: a row another claim has locked is
// skipped, and one it has already leased no longer matches when its lock
// is released (PostgreSQL re-checks the condition on the row's new
// version), so claims from any number of nodes are disjoint. Batches
// travel as arrays (unnest).

const reactionCols = `partition, idempotency_key, type, version, payload, source_client_id, source_client_commit_id,
	source_commit_seq, created_at_ms, available_at_ms, status, attempts, max_attempts, lease_owner,
	lease_expires_at_ms, completed_at_ms, failure_code, failure_at_ms, failure_details`

const (
	qReactionInsert = `INSERT INTO sync_reactions (partition, idempotency_key, type, version, payload, source_client_id,
			source_client_commit_id, source_commit_seq, created_at_ms, available_at_ms, status, attempts, max_attempts)
		SELECT $1::text, k, ty, v, pl, $2::text, $3::text, $4::bigint, $5::bigint, $5::bigint, 'pending', 0, ma
		FROM unnest($6::text[], $7::text[], $8::int[], $9::text[], $10::int[]) AS u(k, ty, v, pl, ma)
		ON CONFLICT DO NOTHING`
	// Complete and extend lock their rows first, in key order, so two
	// batches over overlapping rows (a runner's heartbeat and its
	// completions) wait for each other instead of deadlocking. A row
	// whose lease moved while the lock was awaited drops out: the join
	// and status conditions are re-checked on the locked version.
	qReactionLeased = `WITH l AS (SELECT r.partition, r.idempotency_key FROM sync_reactions r
			JOIN unnest($2::text[], $3::text[], $4::text[]) AS u(p, k, o)
				ON r.partition = u.p AND r.idempotency_key = u.k AND r.lease_owner = u.o
			WHERE r.status = 'leased'
			ORDER BY r.partition, r.idempotency_key
			FOR UPDATE OF r)
		UPDATE sync_reactions r SET `
	qReactionLeasedWhere = `
		FROM l WHERE r.partition = l.partition AND r.idempotency_key = l.idempotency_key
		RETURNING r.partition, r.idempotency_key`
	qReactionComplete = qReactionLeased + `status = 'completed', completed_at_ms = $1, lease_owner = NULL, lease_expires_at_ms = NULL` + qReactionLeasedWhere
	qReactionExtend   = qReactionLeased + `lease_expires_at_ms = $1` + qReactionLeasedWhere
	// A failure ends the reaction when asked to or when its attempts are
	// exhausted; either way the lease is released.
	qReactionFail = `UPDATE sync_reactions
		SET status = CASE WHEN $1::boolean OR attempts >= max_attempts THEN 'dead-letter' ELSE 'pending' END,
			available_at_ms = CASE WHEN $1::boolean OR attempts >= max_attempts THEN $2::bigint ELSE $3::bigint END,
			failure_code = $4, failure_at_ms = $2::bigint, failure_details = $5, lease_owner = NULL, lease_expires_at_ms = NULL
		WHERE partition = $6 AND idempotency_key = $7 AND status = 'leased' AND lease_owner = $8
		RETURNING status`
	qReactionRetry = `UPDATE sync_reactions SET status = 'pending', attempts = 0, available_at_ms = $1,
			failure_code = NULL, failure_at_ms = NULL, failure_details = NULL, completed_at_ms = NULL,
			lease_owner = NULL, lease_expires_at_ms = NULL
		WHERE partition = $2 AND idempotency_key = $3 AND status = 'dead-letter'`
	qReactionGet    = `SELECT ` + reactionCols + ` FROM sync_reactions WHERE partition = $1 AND idempotency_key = $2`
	qReactionCounts = `SELECT status, count(*) FROM sync_reactions GROUP BY status`
)

// reactionFilter is the SQL of the optional partition and type filters,
// numbered from $next, with their arguments.
func reactionFilter(partition string, all bool, types []string, next int) (sql string, args []any) {
	if !all {
		sql += ` AND partition = $` + strconv.Itoa(next)
		args = append(args, partition)
		next++
	}
	if types != nil {
		sql += ` AND type = ANY($` + strconv.Itoa(next) + `::text[])`
		args = append(args, types)
	}
	return sql, args
}

func scanReactions(rows pgx.Rows) ([]storage.Reaction, error) {
	defer rows.Close()
	var out []storage.Reaction
	for rows.Next() {
		var (
			x                      storage.Reaction
			status, payload        string
			owner, code, details   *string
			leaseExp, done, failAt *int64
		)
		if err := rows.Scan(&x.Partition, &x.IdempotencyKey, &x.Type, &x.Version, &payload, &x.SourceClientID,
			&x.SourceClientCommitID, &x.SourceCommitSeq, &x.CreatedAtMs, &x.AvailableAtMs, &status, &x.Attempts,
			&x.MaxAttempts, &owner, &leaseExp, &done, &code, &failAt, &details); err != nil {
			return nil, err
		}
		x.Payload, x.Status = []byte(payload), storage.ReactionStatus(status)
		if owner != nil {
			x.LeaseOwner = *owner
		}
		if leaseExp != nil {
			x.LeaseExpiresAtMs = *leaseExp
		}
		if done != nil {
			x.CompletedAtMs = *done
		}
		if code != nil {
			x.Failure = &storage.ReactionFailure{Code: *code}
			if failAt != nil {
				x.Failure.AtMs = *failAt
			}
			if details != nil {
				x.Failure.Details = []byte(*details)
			}
		}
		out = append(out, x)
	}
	return out, rows.Err()
}

// ReactionEnqueue implements storage.Tx: one INSERT, queued to go with
// the next statement (the push result) in one round trip.
func (t *tx) ReactionEnqueue(ctx context.Context, p storage.ReactionEnqueueParams) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("enqueue reactions: %w", err)
	}
	if len(p.Reactions) == 0 {
		return nil
	}
	n := len(p.Reactions)
	keys, types, payloads := make([]string, n), make([]string, n), make([]string, n)
	versions, attempts := make([]int32, n), make([]int32, n)
	for i, r := range p.Reactions {
		keys[i], types[i], versions[i], payloads[i], attempts[i] = r.IdempotencyKey, r.Type, r.Version, string(r.Payload), r.MaxAttempts
	}
	t.queue(qReactionInsert, t.locked.ID, p.SourceClientID, p.SourceClientCommitID, p.SourceCommitSeq, p.CreatedAtMs,
		keys, types, versions, payloads, attempts)
	return nil
}

// ReactionClaim implements storage.Store: the final-attempt expiry and
// the claim go in one round trip. Each of the claim's two scans (due
// rows, expired leases) locks at most Limit rows of its own index; the
// rows the final LIMIT leaves out are unlocked when the statement ends.
func (s *Store) ReactionClaim(ctx context.Context, p storage.ReactionClaimParams) (storage.ReactionClaimResult, error) {
	var res storage.ReactionClaimResult
	if err := p.Validate(); err != nil {
		return res, err
	}
	efilter, eargs := reactionFilter(p.Partition, p.AllPartitions, p.Types, 2)
	expire := `UPDATE sync_reactions SET status = 'dead-letter', available_at_ms = $1, failure_code = '` + storage.ReactionCodeLeaseExpired + `',
			failure_at_ms = $1, failure_details = NULL, lease_owner = NULL, lease_expires_at_ms = NULL
		WHERE (partition, idempotency_key) IN (SELECT partition, idempotency_key FROM sync_reactions
			WHERE status = 'leased' AND lease_expires_at_ms <= $1 AND attempts >= max_attempts` + efilter + `
			FOR UPDATE SKIP LOCKED)
		RETURNING ` + reactionCols
	cfilter, cargs := reactionFilter(p.Partition, p.AllPartitions, p.Types, 5)
	claim := `WITH due AS (SELECT partition, idempotency_key, available_at_ms AS at FROM sync_reactions
				WHERE status = 'pending' AND available_at_ms <= $3` + cfilter + `
				ORDER BY available_at_ms LIMIT $4 FOR UPDATE SKIP LOCKED),
			expired AS (SELECT partition, idempotency_key, lease_expires_at_ms AS at FROM sync_reactions
				WHERE status = 'leased' AND lease_expires_at_ms <= $3 AND attempts < max_attempts` + cfilter + `
				ORDER BY lease_expires_at_ms LIMIT $4 FOR UPDATE SKIP LOCKED),
			picked AS (SELECT partition, idempotency_key FROM (SELECT * FROM due UNION ALL SELECT * FROM expired) c
				ORDER BY at LIMIT $4)
		UPDATE sync_reactions r SET status = 'leased', attempts = r.attempts + 1, lease_owner = $1, lease_expires_at_ms = $2
		FROM picked WHERE r.partition = picked.partition AND r.idempotency_key = picked.idempotency_key
		RETURNING ` + prefixed("r.", reactionCols)
	b := &pgx.Batch{}
	b.Queue(expire, append([]any{p.NowMs}, eargs...)...)
	b.Queue(claim, append([]any{p.Owner, p.NowMs + p.LeaseMs, p.NowMs, int64(p.Limit)}, cargs...)...)
	br := s.pool.SendBatch(ctx, b)
	err := func() (err error) {
		defer func() {
			if cerr := br.Close(); err == nil {
				err = cerr
			}
		}()
		rows, err := br.Query()
		if err != nil {
			return err
		}
		if res.DeadLettered, err = scanReactions(rows); err != nil {
			return err
		}
		if rows, err = br.Query(); err != nil {
			return err
		}
		res.Claimed, err = scanReactions(rows)
		return err
	}()
	if err != nil {
		return storage.ReactionClaimResult{}, fmt.Errorf("claim reactions: %w", err)
	}
	slices.SortFunc(res.Claimed, func(a, b storage.Reaction) int {
		return cmp.Or(cmp.Compare(a.AvailableAtMs, b.AvailableAtMs), cmp.Compare(a.CreatedAtMs, b.CreatedAtMs),
			strings.Compare(a.Partition, b.Partition), strings.Compare(a.IdempotencyKey, b.IdempotencyKey))
	})
	return res, nil
}

// prefixed qualifies every column of a column list with p.
func prefixed(p, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// leaseUpdate runs q (args: value, partitions, keys, owners) over every
// lease in one statement and reports which changed a row.
func (s *Store) leaseUpdate(ctx context.Context, op, q string, value int64, ls []storage.ReactionLease) ([]bool, error) {
	ok := make([]bool, len(ls))
	if len(ls) == 0 {
		return ok, nil
	}
	parts, keys, owners := make([]string, len(ls)), make([]string, len(ls)), make([]string, len(ls))
	index := make(map[storage.ReactionKey]int, len(ls))
	for i, l := range ls {
		parts[i], keys[i], owners[i] = l.Partition, l.IdempotencyKey, l.Owner
		index[l.ReactionKey] = i
	}
	rows, err := s.pool.Query(ctx, q, value, parts, keys, owners)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer rows.Close()
	for rows.Next() {
		var k storage.ReactionKey
		if err := rows.Scan(&k.Partition, &k.IdempotencyKey); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		if i, found := index[k]; found {
			ok[i] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return ok, nil
}

// ReactionComplete implements storage.Store.
func (s *Store) ReactionComplete(ctx context.Context, p storage.ReactionCompleteParams) ([]bool, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.leaseUpdate(ctx, "complete reactions", qReactionComplete, p.NowMs, p.Leases)
}

// ReactionExtend implements storage.Store.
func (s *Store) ReactionExtend(ctx context.Context, p storage.ReactionExtendParams) ([]bool, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.leaseUpdate(ctx, "extend reactions", qReactionExtend, p.UntilMs, p.Leases)
}

// ReactionFail implements storage.Store.
func (s *Store) ReactionFail(ctx context.Context, p storage.ReactionFailParams) (storage.ReactionStatus, bool, error) {
	if err := p.Validate(); err != nil {
		return "", false, err
	}
	var details *string
	if p.Failure.Details != nil {
		d := string(p.Failure.Details)
		details = &d
	}
	var status string
	err := s.pool.QueryRow(ctx, qReactionFail, p.DeadLetter, p.Failure.AtMs, p.RetryAtMs, p.Failure.Code, details,
		p.Partition, p.IdempotencyKey, p.Owner).Scan(&status)
	if err == pgx.ErrNoRows {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("fail reaction: %w", err)
	}
	return storage.ReactionStatus(status), true, nil
}

// ReactionRetry implements storage.Store.
func (s *Store) ReactionRetry(ctx context.Context, key storage.ReactionKey, nowMs int64) (bool, error) {
	tag, err := s.pool.Exec(ctx, qReactionRetry, nowMs, key.Partition, key.IdempotencyKey)
	if err != nil {
		return false, fmt.Errorf("retry reaction: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// ReactionGet implements storage.Store.
func (s *Store) ReactionGet(ctx context.Context, key storage.ReactionKey) (storage.Reaction, bool, error) {
	rows, err := s.pool.Query(ctx, qReactionGet, key.Partition, key.IdempotencyKey)
	if err != nil {
		return storage.Reaction{}, false, fmt.Errorf("get reaction: %w", err)
	}
	rs, err := scanReactions(rows)
	if err != nil {
		return storage.Reaction{}, false, fmt.Errorf("get reaction: %w", err)
	}
	if len(rs) == 0 {
		return storage.Reaction{}, false, nil
	}
	return rs[0], true, nil
}

// ReactionList implements storage.Store.
func (s *Store) ReactionList(ctx context.Context, p storage.ReactionListParams) ([]storage.Reaction, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	filter, args := reactionFilter(p.Partition, p.AllPartitions, p.Types, 2)
	if p.Statuses != nil {
		sts := make([]string, len(p.Statuses))
		for i, st := range p.Statuses {
			sts[i] = string(st)
		}
		filter += ` AND status = ANY($` + strconv.Itoa(len(args)+2) + `::text[])`
		args = append(args, sts)
	}
	q := `SELECT ` + reactionCols + ` FROM sync_reactions WHERE TRUE` + filter +
		` ORDER BY created_at_ms DESC, partition DESC, idempotency_key DESC LIMIT $1`
	rows, err := s.pool.Query(ctx, q, append([]any{int64(p.Limit)}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("list reactions: %w", err)
	}
	out, err := scanReactions(rows)
	if err != nil {
		return nil, fmt.Errorf("list reactions: %w", err)
	}
	return out, nil
}

// ReactionPrune implements storage.Store. The outer condition repeats
// the inner one: a dead letter that a concurrent retry made pending is
// re-checked on its new version once the retry commits, and kept.
func (s *Store) ReactionPrune(ctx context.Context, p storage.ReactionPruneParams) (storage.ReactionPruneResult, error) {
	var res storage.ReactionPruneResult
	if err := p.Validate(); err != nil {
		return res, err
	}
	filter, fargs := reactionFilter(p.Partition, p.AllPartitions, nil, 4)
	aged := `((status = 'completed' AND completed_at_ms < $1) OR (status = 'dead-letter' AND failure_at_ms < $2))`
	q := `DELETE FROM sync_reactions WHERE (partition, idempotency_key) IN (
			SELECT partition, idempotency_key FROM (
				(SELECT partition, idempotency_key, completed_at_ms AS at FROM sync_reactions
					WHERE status = 'completed' AND completed_at_ms < $1` + filter + ` ORDER BY completed_at_ms LIMIT $3)
				UNION ALL
				(SELECT partition, idempotency_key, failure_at_ms FROM sync_reactions
					WHERE status = 'dead-letter' AND failure_at_ms < $2` + filter + ` ORDER BY failure_at_ms LIMIT $3)
			) c ORDER BY at LIMIT $3)
		AND ` + aged + `
		RETURNING status`
	rows, err := s.pool.Query(ctx, q, append([]any{p.CompletedBeforeMs, p.DeadLetterBeforeMs, int64(p.Limit)}, fargs...)...)
	if err != nil {
		return res, fmt.Errorf("prune reactions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var st string
		if err := rows.Scan(&st); err != nil {
			return storage.ReactionPruneResult{}, fmt.Errorf("prune reactions: %w", err)
		}
		if storage.ReactionStatus(st) == storage.ReactionCompleted {
			res.Completed++
		} else {
			res.DeadLetter++
		}
	}
	if err := rows.Err(); err != nil {
		return storage.ReactionPruneResult{}, fmt.Errorf("prune reactions: %w", err)
	}
	res.MayHaveMore = res.Completed+res.DeadLetter == int64(p.Limit)
	return res, nil
}

// ReactionCounts implements storage.Store.
func (s *Store) ReactionCounts(ctx context.Context) (storage.ReactionCounts, error) {
	var out storage.ReactionCounts
	rows, err := s.pool.Query(ctx, qReactionCounts)
	if err != nil {
		return out, fmt.Errorf("count reactions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			st string
			n  int64
		)
		if err := rows.Scan(&st, &n); err != nil {
			return storage.ReactionCounts{}, fmt.Errorf("count reactions: %w", err)
		}
		out.Add(storage.ReactionStatus(st), n)
	}
	if err := rows.Err(); err != nil {
		return storage.ReactionCounts{}, fmt.Errorf("count reactions: %w", err)
	}
	return out, nil
}
