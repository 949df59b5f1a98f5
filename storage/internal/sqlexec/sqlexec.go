// Package sqlexec is the seam between the dialect-neutral parts of the
// stores (gatecore, segcore) and the two SQL stores: a store runs their
// statements on its connections (Conn) and in its transactions (Runner);
// the statements themselves are the store's.
package sqlexec

import "context"

// Conn runs statements on one connection or transaction of a store.
type Conn interface {
	// Exec runs a statement and returns the number of rows it changed.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	// Query runs a statement and calls row for each result row, with a
	// scan of that row; an error of row stops the iteration.
	Query(ctx context.Context, sql string, args []any, row func(scan func(dest ...any) error) error) error
	// QueryRow runs a statement and scans its first row into dest; found
	// is false when there is none.
	QueryRow(ctx context.Context, sql string, args []any, dest ...any) (found bool, err error)
}

// Runner runs an operation's statements the way its store runs them.
type Runner interface {
	// Write runs fn in one write transaction; fn's error rolls it back.
	Write(ctx context.Context, fn func(c Conn) error) error
	// Read runs fn on a read connection, outside a transaction.
	Read(ctx context.Context, fn func(c Conn) error) error
	// Snapshot runs fn in one read-only transaction: every statement sees
	// the same snapshot.
	Snapshot(ctx context.Context, fn func(c Conn) error) error
}

// Exec runs q on c unless it is empty: a statement a dialect does not
// need (a lock its connection already holds, say).
func Exec(ctx context.Context, c Conn, q string, args ...any) error {
	if q == "" {
		return nil
	}
	_, err := c.Exec(ctx, q, args...)
	return err
}
