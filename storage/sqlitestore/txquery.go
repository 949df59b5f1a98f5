package sqlitestore

import (
	"context"
	"errors"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/syncnode/syncnode/storage"
)

var _ storage.TxQuerier = (*tx)(nil)

// TxQuery implements storage.TxQuerier: the registered query behind its
// partition-bound relations, as Query runs it but with its LIMIT
// maxRows + 1 in SQL (the writer's temporary storage is memory), on the write
// transaction's own connection, so it reads the transaction's
// uncommitted writes and never waits for the writer it is. A SELECT that
// fails in SQL (an error of the statement itself) leaves the transaction
// as it was; one that fails in the engine (I/O, memory, a full disk, an
// interruption — SQLite may have rolled the transaction back) aborts it.
func (t *tx) TxQuery(ctx context.Context, p storage.QueryParams) (storage.QueryResult, error) {
	if err := t.check(); err != nil {
		return storage.QueryResult{}, err
	}
	if t.readOnly || p.Partition != t.locked.ID {
		return storage.QueryResult{}, storage.ErrTxQueryPartition
	}
	text, args, err := opStatement(t.inst, &p, true)
	if err != nil {
		return storage.QueryResult{}, err
	}
	rows, err := t.c.queryRows(ctx, text, args, &p, t.queryFailed)
	if err != nil {
		return storage.QueryResult{}, err
	}
	return storage.QueryResult{Rows: rows, MaxCommitSeq: t.maxSeq}, nil
}

// queryFailed classifies a registered query's failure inside a write
// transaction: a statement error is the query's (*storage.QueryError);
// anything else aborts the transaction.
func (t *tx) queryFailed(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_ERROR, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH, sqlite3.SQLITE_RANGE:
			return &storage.QueryError{Err: err}
		}
	}
	return t.fail("registered query", "", err)
}
