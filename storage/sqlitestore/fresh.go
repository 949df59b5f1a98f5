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
// writes, it therefore changes only for commits from outside, and it is
// cheap there: the writer's page cache survives its own commits, so the
// read transaction the pragma starts finds nothing to drop (on a reader,
// every commit of the writer would make it drop its cache and change the
// value). The coordinator reads it after each BEGIN IMMEDIATE, holding
// the database write lock, so nothing from outside commits until the
// group's COMMIT; between groups a request reads it itself, on the
// writer connection, which the coordinator does not use then. A change
// clears the cache. A request served from the cache first makes one of
// the two happen after it started.

// Writer states, as freshness.state.
const (
	writerIdle    = iota // between groups: a request may read data_version on it
	writerLocked         // in a group, holding the write lock, checked
	writerBusy           // beginning or committing a group: nobody may use it
	writerStopped        // the coordinator exited
)

// freshness is what the coordinator tells requests about the writer
// connection.
type freshness struct {
	mu    sync.Mutex
	state int
	// changed is closed at every change of state, and replaced.
	changed chan struct{}
	w       *conn // the writer connection
	// The writer's last data_version, once read (under mu).
	version int64
	known   bool
}

func newFreshness() freshness { return freshness{state: writerBusy, changed: make(chan struct{})} }

// setWriter moves the writer to state; a move to writerLocked first
// checks data_version.
func (s *Store) setWriter(state int) {
	f := &s.fresh
	f.mu.Lock()
	defer f.mu.Unlock()
	if state == writerLocked {
		s.checkForeign()
	}
	f.state = state
	close(f.changed)
	f.changed = make(chan struct{})
}

// checkForeign reads the writer's data_version and clears the start
// cache when another connection committed since the last read (or when
// it cannot tell). The caller holds fresh.mu, and the writer connection
// is its to use: the coordinator's, between BEGIN IMMEDIATE and its
// first member, or idle.
func (s *Store) checkForeign() {
	f := &s.fresh
	var v int64
	ok, err := f.w.queryRow(stmtCtx, "PRAGMA data_version", nil, &v)
	if err != nil || !ok || !f.known || v != f.version {
		s.cache.Clear()
		s.parts.foreign()
	}
	f.version, f.known = v, err == nil && ok
}

// current reports whether every commit from outside that came before the
// call has cleared the start cache. While the coordinator begins or
// commits a group, it waits for that to end when wait is set, and
// otherwise reports false at once (the caller reads the database).
func (s *Store) current(ctx context.Context, wait bool) (bool, error) {
	f := &s.fresh
	for {
		f.mu.Lock()
		switch f.state {
		case writerLocked:
			f.mu.Unlock()
			return true, nil
		case writerIdle:
			s.checkForeign()
			f.mu.Unlock()
			return true, nil
		case writerStopped:
			f.mu.Unlock()
			return false, ErrClosed
		}
		changed := f.changed
		f.mu.Unlock()
		if !wait {
			return false, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false, ctx.Err()
		case <-s.closed:
			return false, ErrClosed
		}
	}
}
