package sqlitestore

import (
	"context"
	"sync"
)

// The start cache (startcache.Cache, start.go) must see every commit of
// another process, or of another Store on the same file, before it
// serves a request. SQLite's PRAGMA data_version on a connection changes
// exactly when a connection other than that one committed; on the
// writer connection, through which this store makes all of its own
// writes, it therefore changes only for commits from outside. The
// coordinator reads it after each BEGIN IMMEDIATE (holding the database
// write lock, so nothing from outside commits until the group's COMMIT)
// and, between groups, when a request asks (peek); a change clears the
// cache. A request served from the cache first waits for one of the two,
// begun after it started: a group already holding the lock (free), or a
// peek.

// freshness is what the coordinator tells requests about the writer
// connection.
type freshness struct {
	mu sync.Mutex
	// locked: a group transaction holds the write lock and its check
	// ran; nothing from outside can commit until it ends.
	locked bool
	// wake is closed when locked turns true, and replaced when it turns
	// false.
	wake chan struct{}
	// peeks asks the idle coordinator to check data_version; it closes
	// the channel sent once the check (and any clearing) is done.
	peeks chan chan struct{}

	// Coordinator only: the writer's last data_version, once read.
	version int64
	known   bool
}

func newFreshness() freshness {
	return freshness{wake: make(chan struct{}), peeks: make(chan chan struct{})}
}

// checkForeign reads the writer's data_version and clears the start
// cache when another connection committed since the last read (or when
// it cannot tell). The coordinator calls it, on c, the writer.
func (s *Store) checkForeign(c *conn) {
	var v int64
	ok, err := c.queryRow(stmtCtx, "PRAGMA data_version", nil, &v)
	f := &s.fresh
	if err != nil || !ok || !f.known || v != f.version {
		s.cache.Clear()
	}
	f.version, f.known = v, err == nil && ok
}

// setLocked records that a group holds the write lock, its check done
// (true), or is about to release it (false, before COMMIT or ROLLBACK).
func (s *Store) setLocked(locked bool) {
	f := &s.fresh
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.locked == locked {
		return
	}
	f.locked = locked
	if locked {
		close(f.wake)
	} else {
		f.wake = make(chan struct{})
	}
}

// current returns once every commit from outside that came before the
// call has cleared the start cache.
func (s *Store) current(ctx context.Context) error {
	f := &s.fresh
	f.mu.Lock()
	if f.locked {
		f.mu.Unlock()
		return nil
	}
	wake := f.wake
	f.mu.Unlock()
	done := make(chan struct{})
	select {
	case f.peeks <- done:
		<-done
		return nil
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closed:
		return ErrClosed
	}
}
