package storage

import (
	"context"
	"errors"
)

// TxQuerier is implemented by a store's write transaction (the Tx of
// WriteTx) when it runs registered authoritative queries (REMOTE.md §2)
// over its own state: the committed rows of the locked partition with
// this transaction's writes so far applied — the candidate state a push's
// validators and reaction planner judge. It is what a host reads through
// inside a push: a second read of the store from the push's goroutine
// would wait on the SQLite writer the push holds, or read a snapshot
// without the push's writes.
//
// The query runs over the same partition-filtered relations as
// Querier.Query, on the transaction's connection; it writes nothing, and a
// failing query leaves the transaction usable (PostgreSQL runs it inside
// a savepoint of its own).
type TxQuerier interface {
	// TxQuery runs p, whose Partition must be the locked partition, and
	// returns at most p.Limit rows normalized to the declared columns.
	// MaxCommitSeq is the partition's max commitSeq as this transaction
	// sees it (its own appends included; the commit being judged has no
	// seq yet). A database failure of the statement or a value that does
	// not fit its declared column is a *QueryError, and the transaction
	// remains usable.
	TxQuery(ctx context.Context, p QueryParams) (QueryResult, error)
}

// ErrTxQueryPartition is returned by TxQuery for a partition other than
// the transaction's locked one.
var ErrTxQueryPartition = errors.New("a transaction's registered query reads only its locked partition")
