package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncnode/syncnode/storage"
)

var _ storage.TxQuerier = (*tx)(nil)

// txQuerySavepoint brackets a registered query inside a write
// transaction. Rolling back to it (never releasing it alone) undoes the
// query's transaction-local search_path and, after a failed statement,
// the aborted state, so the push's own statements see the transaction as
// it was.
const txQuerySavepoint = "op_query"

// qQueryFence is the query's search_path fence (the query pool's
// sessions have it for Query): pg_catalog alone while the statement runs.
const qQueryFence = "SELECT set_config('search_path', 'pg_catalog', true)"

// TxQuery implements storage.TxQuerier: SAVEPOINT, the search_path fence,
// the statement Query runs (opStatement: the registered query behind its
// partition-bound relations), ROLLBACK TO and RELEASE, in one pipeline
// with whatever the transaction had queued. The relations read the base
// tables in this transaction's snapshot, so they see its writes.
//
// The savepoint's end is in the same pipeline, not queued for later: pgx
// parses a pipeline's new statements before running any, so a push
// statement parsed while the fence is in effect would not find its table.
// The statement itself is parsed before the fence runs too, under the
// push's search_path; PostgreSQL analyses a cached statement again when it
// runs under another search_path, so the fence holds as it does in Query.
func (t *tx) TxQuery(ctx context.Context, p storage.QueryParams) (storage.QueryResult, error) {
	if err := t.check(); err != nil {
		return storage.QueryResult{}, err
	}
	if t.snapshot || p.Partition != t.locked.ID {
		return storage.QueryResult{}, storage.ErrTxQueryPartition
	}
	text, args, err := t.s.opStatement(&p)
	if err != nil {
		return storage.QueryResult{}, err
	}
	rollback, release := "ROLLBACK TO SAVEPOINT "+txQuerySavepoint, "RELEASE SAVEPOINT "+txQuerySavepoint
	t.queue("SAVEPOINT " + txQuerySavepoint)
	// ready: everything before the statement ran, so a failure after it
	// is the statement's own.
	ready := false
	t.queue(qQueryFence)
	t.pending.QueuedQueries[t.pending.Len()-1].Exec(func(pgconn.CommandTag) error { ready = true; return nil })
	var out storage.QueryResult
	t.queueQuery(func(rows pgx.Rows) (err error) { out.Rows, err = readQueryRows(rows, &p); return err }, text, args...)
	t.queue(rollback)
	t.queue(release)
	err = t.send(ctx, nil)
	if err == nil {
		out.MaxCommitSeq = t.maxSeq
		return out, nil
	}
	if !ready {
		// The transaction's queued statements, the savepoint or the fence
		// failed: PostgreSQL has aborted the transaction.
		return storage.QueryResult{}, t.fail("registered query", "", err)
	}
	if t.c.Conn().PgConn().TxStatus() == 'E' {
		// The statement failed and the server skipped the savepoint's end.
		// End it now, with the simple protocol: pgx dropped the pipeline's
		// statements from its cache and deallocates them only outside a
		// failed transaction, before the next pipeline prepares them again.
		if _, rerr := t.exec(ctx, rollback+"; "+release, pgx.QueryExecModeSimpleProtocol); rerr != nil {
			return storage.QueryResult{}, t.fail("registered query: roll back", "", rerr)
		}
	}
	var qe *storage.QueryError
	if !errors.As(err, &qe) {
		err = &storage.QueryError{Err: err}
	}
	return storage.QueryResult{}, err
}
