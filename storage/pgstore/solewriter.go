package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// The sole writer (Config.SoleWriter) and its start cache.
//
// SQLite tells a store when another process wrote (PRAGMA data_version,
// read locally); PostgreSQL cannot without a round trip, and a round
// trip is what the cache is for saving. A store may therefore cache the
// start of a request only while it knows that no other store writes its
// schema, and that is what a session advisory lock on the schema
// (lockKeyWriters, hashtext(schema)) says:
//
//   - a sole writer takes it exclusively at open, on a connection of its
//     own (the guard), and caches while the guard holds it;
//   - every other connection of every store of this package, a sole
//     writer's that lost its guard included, takes it shared when it
//     connects (afterConnect) and fails to connect while a sole writer
//     holds it. So no other store writes while the lock is held, and a
//     store that opened first keeps a later sole writer from caching.
//
// The store's own writes keep its cache current (startcache's rules);
// the lock keeps everyone else's out. When the guard connection fails
// the store stops caching at once, for good, and its pool reconnects
// under the shared lock.

// lockKeyWriters is the advisory lock key of the writers of a schema.
const lockKeyWriters = 0x77726974 // "writ"

// ErrSoleWriterHeld is the error of a connection (and so of Open and of
// every call) of a store whose schema a sole writer holds.
var ErrSoleWriterHeld = errors.New("pgstore: the schema is held by a store configured as its sole writer")

// soleWriter is a store's side of the writers' lock.
type soleWriter struct {
	// caching: the guard holds the lock exclusively; the start cache
	// may answer.
	caching atomic.Bool
	guard   *pgx.Conn
	stop    context.CancelFunc
	done    chan struct{}
}

// takeSole connects the guard and tries the exclusive lock; on success
// the store caches until the guard fails or the store closes.
func (s *Store) takeSole(ctx context.Context, cc *pgx.ConnConfig) error {
	g, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("pgstore: sole writer: %w", err)
	}
	var ok bool
	if err := g.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, hashtext($2))", lockKeyWriters, s.cfg.Schema).Scan(&ok); err != nil {
		_ = g.Close(ctx)
		return fmt.Errorf("pgstore: sole writer: %w", err)
	}
	if !ok {
		// Another store holds the schema: no cache, and the pool's
		// connections take the lock shared like everyone's.
		_ = g.Close(ctx)
		return nil
	}
	wctx, stop := context.WithCancel(context.Background())
	s.sole.guard, s.sole.stop, s.sole.done = g, stop, make(chan struct{})
	s.sole.caching.Store(true)
	go s.watchGuard(wctx)
	return nil
}

// watchGuard waits on the guard connection, which does nothing else, and
// stops the cache when it fails: the lock may be gone with it.
func (s *Store) watchGuard(ctx context.Context) {
	defer close(s.sole.done)
	for {
		err := s.sole.guard.PgConn().WaitForNotification(ctx)
		if err == nil {
			continue
		}
		if ctx.Err() == nil {
			s.stopCaching()
		}
		return
	}
}

// stopCaching ends the cache for good. The pool's connections, which
// took no lock while the guard held it, are replaced by ones that take
// it shared.
func (s *Store) stopCaching() {
	if !s.sole.caching.Swap(false) {
		return
	}
	s.cache.Clear()
	s.pool.Reset()
}

// caching reports whether the start cache may answer.
func (s *Store) caching() bool { return s.sole.caching.Load() }

// closeSole releases the guard.
func (s *Store) closeSole() {
	if s.sole.guard == nil {
		return
	}
	s.sole.caching.Store(false)
	s.sole.stop()
	<-s.sole.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Release the lock while the session still lives: a closed
	// connection's backend drops its locks only when it exits, after
	// Close has returned, and a store opened right after would find the
	// schema still held. When the guard already failed there is nothing
	// to release.
	if !s.sole.guard.IsClosed() {
		_, _ = s.sole.guard.Exec(ctx, "SELECT pg_advisory_unlock($1, hashtext($2))", lockKeyWriters, s.cfg.Schema)
	}
	_ = s.sole.guard.Close(ctx)
}

// afterConnect takes the writers' lock shared on a new connection of a
// store that is not caching.
func (s *Store) afterConnect(ctx context.Context, c *pgx.Conn) error {
	if s.caching() {
		return nil
	}
	var ok bool
	if err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock_shared($1, hashtext($2))", lockKeyWriters, s.cfg.Schema).Scan(&ok); err != nil {
		return fmt.Errorf("pgstore: take the writers' lock: %w", err)
	}
	if !ok {
		return fmt.Errorf("%w (schema %s)", ErrSoleWriterHeld, s.cfg.Schema)
	}
	return nil
}
