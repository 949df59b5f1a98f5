package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncnode/syncnode/storage"
)

var _ storage.TxQuerier = (*tx)(nil)

// errViewsNotBuilt is returned by TxQuery before the query views of the
// transaction's schema exist. Building them takes the schema lock on
// another connection, which could wait on this very transaction, so a
// write transaction never builds them: PrepareQuery (Registry.Prepare at
// start) does.
var errViewsNotBuilt = errors.New("registered query in a transaction: the query views are not built for the installed schema (PrepareQuery builds them)")

// txQuerySavepoint brackets a registered query inside a write
// transaction. Rolling back to it (never releasing it) undoes the
// transaction-local settings of the query — search_path and the
// partition and scope values — and, after a failed statement, the
// aborted state, so the push's own statements see the transaction as it
// was.
const txQuerySavepoint = "op_query"

// TxQuery implements storage.TxQuerier: SAVEPOINT, the query's settings,
// its statement over the <schema>__ops views, ROLLBACK TO and RELEASE, in
// one pipeline with whatever the transaction had queued. The views read
// the base tables in this transaction's snapshot, so they see its writes.
// The savepoint's end is in the same pipeline, not queued for later: pgx
// parses a pipeline's new statements before running any, so a push
// statement parsed while the query's search_path is in effect would not
// find its table.
func (t *tx) TxQuery(ctx context.Context, p storage.QueryParams) (storage.QueryResult, error) {
	if err := t.check(); err != nil {
		return storage.QueryResult{}, err
	}
	if t.snapshot || p.Partition != t.locked.ID {
		return storage.QueryResult{}, storage.ErrTxQueryPartition
	}
	t.s.ops.mu.Lock()
	built := t.s.ops.built == t.inst
	t.s.ops.mu.Unlock()
	if !built {
		return storage.QueryResult{}, errViewsNotBuilt
	}
	sqlText, err := numbered(p.SQL)
	if err != nil {
		return storage.QueryResult{}, &storage.QueryError{Err: err}
	}
	settings, sargs, err := t.s.querySettings(&p)
	if err != nil {
		return storage.QueryResult{}, err
	}
	rollback, release := "ROLLBACK TO SAVEPOINT "+txQuerySavepoint, "RELEASE SAVEPOINT "+txQuerySavepoint
	t.queue("SAVEPOINT " + txQuerySavepoint)
	// ready: everything before the statement ran, so a failure after it
	// is the statement's own.
	ready := false
	t.queue(settings, sargs...)
	t.pending.QueuedQueries[t.pending.Len()-1].Exec(func(pgconn.CommandTag) error { ready = true; return nil })
	var out storage.QueryResult
	t.queueQuery(func(rows pgx.Rows) error { return readQueryRows(rows, &p, &out) }, sqlText, p.Args...)
	t.queue(rollback)
	t.queue(release)
	err = t.send(ctx, nil)
	if err == nil {
		out.MaxCommitSeq = t.maxSeq
		return out, nil
	}
	if !ready {
		// The transaction's queued statements, the savepoint or the
		// settings failed: PostgreSQL has aborted the transaction.
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

// readQueryRows reads a registered query's rows into out: at most
// p.Limit, each normalized to the declared columns.
func readQueryRows(rows pgx.Rows, p *storage.QueryParams, out *storage.QueryResult) error {
	var (
		idx []int
		err error
	)
	for len(out.Rows) < p.Limit && rows.Next() {
		if idx == nil {
			fds := rows.FieldDescriptions()
			names := make([]string, len(fds))
			for i, f := range fds {
				names[i] = f.Name
			}
			if idx, err = resultIndex(names, p.Columns); err != nil {
				return err
			}
		}
		vals, err := rows.Values()
		if err != nil {
			return &storage.QueryError{Err: err}
		}
		row := make([]any, len(p.Columns))
		for i, col := range p.Columns {
			if row[i], err = storage.NormalizeQueryValue(col, numeric(vals[idx[i]])); err != nil {
				return err
			}
		}
		out.Rows = append(out.Rows, row)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return &storage.QueryError{Err: err}
	}
	return nil
}
