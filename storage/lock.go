package storage

import "context"

// Locker is implemented by a store that several nodes share (PostgreSQL):
// named locks that at most one session of the database holds at a time,
// across every node on it. A store only one node opens (SQLite) has no
// need of it. The edge hub holds one per edge, so that of the hub nodes
// on one database only one replicates a given edge.
type Locker interface {
	// Lock waits until it holds the lock name, or ctx ends (its error is
	// returned). A waiter gets the lock as soon as the holder's session
	// ends. The name is scoped to the store (its PostgreSQL schema), so
	// stores in other schemas never contend.
	Lock(ctx context.Context, name string) (Lock, error)
}

// Lock is a held lock. It is held by a database session of its own: when
// that session ends — the node died, the connection broke, the server
// terminated it — the database releases the lock for another node at
// once, and Lost is closed on this side as soon as the loss is seen.
type Lock interface {
	// Lost is closed when the lock is no longer held: released, or its
	// session gone (noticed within the store's check interval).
	Lost() <-chan struct{}
	// Release gives the lock up and ends its session; it is idempotent.
	Release(ctx context.Context) error
}
