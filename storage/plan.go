package storage

import "context"

// WindowPlanner is implemented by the ReadTx of a store that can read a
// commit window with the transaction's first read, in one round trip with
// its begin and its end (PostgreSQL). It is optional; a store without it
// reads as asked.
//
// PlanWindow, called before the transaction's first read, names the
// CommitWindow that fn expects to make after reading p.Partition's row
// (ReadTx.Partition). The store may then read the row, its gate state and
// the window's first commits, and end the transaction, at once. When fn
// goes on to read anything the plan did not cover (another window, a
// bootstrap's reads, a window longer than the first read), the store runs
// fn again from the start in a fresh transaction, without the plan: a fn
// that plans must be safe to run twice, assigning what it reads and
// nothing else.
type WindowPlanner interface {
	PlanWindow(p WindowParams)
}

// RowRef names one row of an application table.
type RowRef struct{ Table, RowID string }

// RowPrefetcher is implemented by a Store whose write transactions can
// read rows ahead (PostgreSQL, where every read under the partition lock
// is a round trip that the next writer of the partition waits for). It is
// optional; the engine calls WriteTx on a store without it.
//
// WriteTxRows is WriteTx told the rows of the partition that fn will
// probably read (Tx.RowGet): the store may read them with an earlier
// round trip of the transaction, so that fn's reads of them cost none.
// What fn reads is the same either way.
type RowPrefetcher interface {
	WriteTxRows(ctx context.Context, partition string, rows []RowRef, fn func(tx Tx) error) error
}

// TxRowPrefetcher is implemented by the write Tx of a store that reads
// several rows in one round trip (PostgreSQL). It is optional. A server
// command learns the rows it writes only once it ran under the lock, too
// late for WriteTxRows; PrefetchRows reads them then, all at once.
//
// PrefetchRows reads the named rows of the locked partition now, so that
// the transaction's next RowGet of each costs no round trip. What RowGet
// returns is the same either way.
type TxRowPrefetcher interface {
	PrefetchRows(ctx context.Context, rows []RowRef) error
}
