package sqlitestore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/syncnode/syncnode/storage"
)

// Durable reactions (storage.ReactionStore). Every change is one member
// of the writer's group transactions, so a claim is one transaction on
// the only writer connection: two claims can never see the same row as
// claimable. A claim first asks a reader whether anything is due at all. Each change is a single UPDATE … RETURNING (or DELETE …
// RETURNING) that both chooses rows and rewrites them.

const reactionCols = `partition, idempotency_key, type, version, payload, source_client_id, source_client_commit_id,
	source_commit_seq, created_at_ms, available_at_ms, status, attempts, max_attempts, lease_owner,
	lease_expires_at_ms, completed_at_ms, failure_code, failure_at_ms, failure_details`

const (
	qReactionInsert = `INSERT INTO sync_reactions (partition, idempotency_key, type, version, payload, source_client_id,
		source_client_commit_id, source_commit_seq, created_at_ms, available_at_ms, status, attempts, max_attempts)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?) ON CONFLICT DO NOTHING`
	qReactionComplete = `UPDATE sync_reactions SET status = 'completed', completed_at_ms = ?, lease_owner = NULL, lease_expires_at_ms = NULL
		WHERE partition = ? AND idempotency_key = ? AND status = 'leased' AND lease_owner = ?`
	qReactionExtend = `UPDATE sync_reactions SET lease_expires_at_ms = ?
		WHERE partition = ? AND idempotency_key = ? AND status = 'leased' AND lease_owner = ?`
	// A failure ends the reaction when asked to or when its attempts are
	// exhausted; either way the lease is released.
	qReactionFail = `UPDATE sync_reactions
		SET status = CASE WHEN ?1 OR attempts >= max_attempts THEN 'dead-letter' ELSE 'pending' END,
			available_at_ms = CASE WHEN ?1 OR attempts >= max_attempts THEN ?2 ELSE ?3 END,
			failure_code = ?4, failure_at_ms = ?2, failure_details = ?5, lease_owner = NULL, lease_expires_at_ms = NULL
		WHERE partition = ?6 AND idempotency_key = ?7 AND status = 'leased' AND lease_owner = ?8
		RETURNING status`
	qReactionRetry = `UPDATE sync_reactions SET status = 'pending', attempts = 0, available_at_ms = ?,
			failure_code = NULL, failure_at_ms = NULL, failure_details = NULL, completed_at_ms = NULL,
			lease_owner = NULL, lease_expires_at_ms = NULL
		WHERE partition = ? AND idempotency_key = ? AND status = 'dead-letter'`
	qReactionGet    = `SELECT ` + reactionCols + ` FROM sync_reactions WHERE partition = ? AND idempotency_key = ?`
	qReactionCounts = `SELECT status, count(*) FROM sync_reactions GROUP BY status`
)

// reactionFilter is the SQL of the optional partition and type filters,
// with their arguments; types travel as one JSON array.
func reactionFilter(partition string, all bool, types []string) (sql string, args []any) {
	if !all {
		sql += ` AND partition = ?`
		args = append(args, partition)
	}
	if types != nil {
		b, _ := json.Marshal(types)
		sql += ` AND type IN (SELECT value FROM json_each(?))`
		args = append(args, string(b))
	}
	return sql, args
}

func scanReaction(r *rows) (storage.Reaction, error) {
	var (
		x                             storage.Reaction
		status                        string
		payload, owner, code, details []byte
		leaseExp, done, failAt        *int64
	)
	err := r.Scan(&x.Partition, &x.IdempotencyKey, &x.Type, &x.Version, &payload, &x.SourceClientID, &x.SourceClientCommitID,
		&x.SourceCommitSeq, &x.CreatedAtMs, &x.AvailableAtMs, &status, &x.Attempts, &x.MaxAttempts, &owner,
		&leaseExp, &done, &code, &failAt, &details)
	if err != nil {
		return x, err
	}
	x.Payload, x.Status, x.LeaseOwner = payload, storage.ReactionStatus(status), string(owner)
	if leaseExp != nil {
		x.LeaseExpiresAtMs = *leaseExp
	}
	if done != nil {
		x.CompletedAtMs = *done
	}
	if code != nil {
		x.Failure = &storage.ReactionFailure{Code: string(code), Details: details}
		if failAt != nil {
			x.Failure.AtMs = *failAt
		}
	}
	return x, nil
}

func queryReactions(ctx context.Context, c *conn, q string, args ...any) ([]storage.Reaction, error) {
	r, err := c.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []storage.Reaction
	for r.Next() {
		x, err := scanReaction(r)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, r.Err()
}

// ReactionEnqueue implements storage.Tx.
func (t *tx) ReactionEnqueue(ctx context.Context, p storage.ReactionEnqueueParams) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("enqueue reactions: %w", err)
	}
	for _, r := range p.Reactions {
		if _, err := t.c.exec(ctx, qReactionInsert, t.locked.ID, r.IdempotencyKey, r.Type, r.Version, string(r.Payload),
			p.SourceClientID, p.SourceClientCommitID, p.SourceCommitSeq, p.CreatedAtMs, p.CreatedAtMs, r.MaxAttempts); err != nil {
			return t.fail("enqueue reactions", "sync_reactions", err)
		}
	}
	return nil
}

// ReactionClaim implements storage.Store.
func (s *Store) ReactionClaim(ctx context.Context, p storage.ReactionClaimParams) (storage.ReactionClaimResult, error) {
	var res storage.ReactionClaimResult
	if err := p.Validate(); err != nil {
		return res, err
	}
	filter, fargs := reactionFilter(p.Partition, p.AllPartitions, p.Types)
	expire := `UPDATE sync_reactions SET status = 'dead-letter', available_at_ms = ?1, failure_code = '` + storage.ReactionCodeLeaseExpired + `',
			failure_at_ms = ?1, failure_details = NULL, lease_owner = NULL, lease_expires_at_ms = NULL
		WHERE status = 'leased' AND lease_expires_at_ms <= ?1 AND attempts >= max_attempts` + numbered(filter, 2) + `
		RETURNING ` + reactionCols
	claim := `UPDATE sync_reactions SET status = 'leased', attempts = attempts + 1, lease_owner = ?1, lease_expires_at_ms = ?2
		WHERE (partition, idempotency_key) IN (SELECT p, k FROM (
			SELECT partition AS p, idempotency_key AS k, available_at_ms AS due FROM sync_reactions
				WHERE status = 'pending' AND available_at_ms <= ?3` + numbered(filter, 5) + `
			UNION ALL
			SELECT partition, idempotency_key, lease_expires_at_ms FROM sync_reactions
				WHERE status = 'leased' AND lease_expires_at_ms <= ?3` + numbered(filter, 5) + `
			) ORDER BY due LIMIT +?4)
		RETURNING ` + reactionCols
	// Most claims are wake-ups for commits that planned nothing: a reader
	// answers those without taking the writer from the pushes.
	due := `SELECT EXISTS (SELECT 1 FROM sync_reactions WHERE status = 'pending' AND available_at_ms <= ?1` + numbered(filter, 2) + `)
		OR EXISTS (SELECT 1 FROM sync_reactions WHERE status = 'leased' AND lease_expires_at_ms <= ?1` + numbered(filter, 2) + `)`
	var found bool
	err := s.withReader(ctx, func(c *conn) error {
		_, err := c.queryRow(ctx, due, append([]any{p.NowMs}, fargs...), &found)
		return err
	})
	if err != nil || !found {
		if err != nil {
			err = fmt.Errorf("claim reactions: %w", err)
		}
		return res, err
	}
	err = s.write(ctx, func(c *conn) (err error) {
		if res.DeadLettered, err = queryReactions(ctx, c, expire, append([]any{p.NowMs}, fargs...)...); err != nil {
			return err
		}
		args := append([]any{p.Owner, p.NowMs + p.LeaseMs, p.NowMs, int64(p.Limit)}, fargs...)
		res.Claimed, err = queryReactions(ctx, c, claim, args...)
		return err
	})
	if err != nil {
		return storage.ReactionClaimResult{}, fmt.Errorf("claim reactions: %w", err)
	}
	sortDue(res.Claimed)
	return res, nil
}

// numbered rewrites the filter's ? placeholders as ?from, ?from+1, … so
// that one argument list serves every use of the filter.
func numbered(filter string, from int) string {
	var b strings.Builder
	n := from
	for _, r := range filter {
		if r == '?' {
			fmt.Fprintf(&b, "?%d", n)
			n++
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// sortDue orders claimed rows oldest due first, as the claim chose them.
func sortDue(rs []storage.Reaction) {
	slices.SortFunc(rs, func(a, b storage.Reaction) int {
		return cmp.Or(cmp.Compare(a.AvailableAtMs, b.AvailableAtMs), cmp.Compare(a.CreatedAtMs, b.CreatedAtMs),
			strings.Compare(a.Partition, b.Partition), strings.Compare(a.IdempotencyKey, b.IdempotencyKey))
	})
}

// leaseUpdate runs q (args: value, partition, key, owner) for every lease
// in one transaction and reports which changed a row.
func (s *Store) leaseUpdate(ctx context.Context, op, q string, value int64, ls []storage.ReactionLease) ([]bool, error) {
	ok := make([]bool, len(ls))
	if len(ls) == 0 {
		return ok, nil
	}
	err := s.write(ctx, func(c *conn) error {
		for i, l := range ls {
			n, err := c.exec(ctx, q, value, l.Partition, l.IdempotencyKey, l.Owner)
			if err != nil {
				return err
			}
			ok[i] = n == 1
		}
		return nil
	})
	if err != nil {
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
	var details any
	if p.Failure.Details != nil {
		details = string(p.Failure.Details)
	}
	var (
		status string
		ok     bool
	)
	err := s.write(ctx, func(c *conn) (err error) {
		ok, err = c.queryRow(ctx, qReactionFail, []any{p.DeadLetter, p.Failure.AtMs, p.RetryAtMs, p.Failure.Code, details,
			p.Partition, p.IdempotencyKey, p.Owner}, &status)
		return err
	})
	if err != nil {
		return "", false, fmt.Errorf("fail reaction: %w", err)
	}
	return storage.ReactionStatus(status), ok, nil
}

// ReactionRetry implements storage.Store.
func (s *Store) ReactionRetry(ctx context.Context, key storage.ReactionKey, nowMs int64) (bool, error) {
	var n int64
	err := s.write(ctx, func(c *conn) (err error) {
		n, err = c.exec(ctx, qReactionRetry, nowMs, key.Partition, key.IdempotencyKey)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("retry reaction: %w", err)
	}
	return n == 1, nil
}

// ReactionGet implements storage.Store.
func (s *Store) ReactionGet(ctx context.Context, key storage.ReactionKey) (storage.Reaction, bool, error) {
	var rs []storage.Reaction
	err := s.withReader(ctx, func(c *conn) (err error) {
		rs, err = queryReactions(ctx, c, qReactionGet, key.Partition, key.IdempotencyKey)
		return err
	})
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
	filter, args := reactionFilter(p.Partition, p.AllPartitions, p.Types)
	if p.Statuses != nil {
		b, _ := json.Marshal(p.Statuses)
		filter += ` AND status IN (SELECT value FROM json_each(?))`
		args = append(args, string(b))
	}
	q := `SELECT ` + reactionCols + ` FROM sync_reactions WHERE 1` + filter +
		` ORDER BY created_at_ms DESC, partition DESC, idempotency_key DESC LIMIT +?`
	args = append(args, int64(p.Limit))
	var out []storage.Reaction
	err := s.withReader(ctx, func(c *conn) (err error) {
		out, err = queryReactions(ctx, c, q, args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list reactions: %w", err)
	}
	return out, nil
}

// ReactionPrune implements storage.Store: one DELETE … RETURNING over
// the oldest aged terminal rows. Retries are writes too, so a retry and a
// prune of the same dead letter run one after the other.
func (s *Store) ReactionPrune(ctx context.Context, p storage.ReactionPruneParams) (storage.ReactionPruneResult, error) {
	var res storage.ReactionPruneResult
	if err := p.Validate(); err != nil {
		return res, err
	}
	filter, fargs := reactionFilter(p.Partition, p.AllPartitions, nil)
	q := `DELETE FROM sync_reactions WHERE (partition, idempotency_key) IN (SELECT p, k FROM (
			SELECT partition AS p, idempotency_key AS k, completed_at_ms AS at FROM sync_reactions
				WHERE status = 'completed' AND completed_at_ms < ?1` + numbered(filter, 4) + `
			UNION ALL
			SELECT partition, idempotency_key, failure_at_ms FROM sync_reactions
				WHERE status = 'dead-letter' AND failure_at_ms < ?2` + numbered(filter, 4) + `
		) ORDER BY at LIMIT +?3)
		RETURNING status`
	args := append([]any{p.CompletedBeforeMs, p.DeadLetterBeforeMs, int64(p.Limit)}, fargs...)
	err := s.write(ctx, func(c *conn) error {
		r, err := c.query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			var st string
			if err := r.Scan(&st); err != nil {
				return err
			}
			if storage.ReactionStatus(st) == storage.ReactionCompleted {
				res.Completed++
			} else {
				res.DeadLetter++
			}
		}
		return r.Err()
	})
	if err != nil {
		return storage.ReactionPruneResult{}, fmt.Errorf("prune reactions: %w", err)
	}
	res.MayHaveMore = res.Completed+res.DeadLetter == int64(p.Limit)
	return res, nil
}

// ReactionCounts implements storage.Store.
func (s *Store) ReactionCounts(ctx context.Context) (storage.ReactionCounts, error) {
	var out storage.ReactionCounts
	err := s.withReader(ctx, func(c *conn) error {
		r, err := c.query(ctx, qReactionCounts)
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			var (
				st string
				n  int64
			)
			if err := r.Scan(&st, &n); err != nil {
				return err
			}
			out.Add(storage.ReactionStatus(st), n)
		}
		return r.Err()
	})
	if err != nil {
		return storage.ReactionCounts{}, fmt.Errorf("count reactions: %w", err)
	}
	return out, nil
}
