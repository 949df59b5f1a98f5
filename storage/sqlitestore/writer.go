package sqlitestore

import (
	"context"
	"errors"
	"fmt"
)

// The writer connection is driven by one coordinator goroutine that
// batches concurrent writes into shared transactions (group commit).
//
// Every write (a WriteTx callback, a client record update, a schema
// installation) is a member: it queues a request, the coordinator grants
// it the connection, and the member runs its callback on its own
// goroutine while the coordinator waits. Members run strictly one at a
// time, so the writer connection stays the partition write lock. When a
// member finishes and other requests are already queued, the coordinator
// grants the next one inside the same transaction instead of committing;
// once the queue is empty (or maxGroup members ran) it commits once and
// tells every member the outcome. A member's WriteTx returns only after
// that COMMIT, so nothing is acknowledged before it is durable, and one
// fsync covers the whole group.
//
// The first member of a group runs directly in the transaction; if it
// fails, the transaction is rolled back and the group ends. Later members
// run inside a savepoint, so a failure undoes only their own writes. A
// failure that leaves the transaction unusable (the savepoint cannot be
// rolled back) fails the whole group: none of its members was
// acknowledged, and each gets the error.

// maxGroup bounds the members of one group transaction.
const maxGroup = 64

type writeReq struct {
	touch  touch // what the member may change of partition rows and gate state
	grant  chan grant
	done   chan memberDone
	result chan error
}

type grant struct {
	c     *conn
	first bool
	err   error // the transaction could not begin
}

type memberDone struct {
	failed bool // the callback failed; its writes are undone (or, first, to be undone)
	broken bool // the transaction is unusable
	err    error
}

// runWriter is the coordinator loop; it owns c until Close.
func (s *Store) runWriter(c *conn) {
	defer close(s.writerDone)
	s.fresh.mu.Lock()
	s.fresh.w = c
	s.fresh.mu.Unlock()
	s.setWriter(writerIdle)
	for {
		var req *writeReq
		select {
		case req = <-s.requests:
		case <-s.closed:
			s.setWriter(writerStopped)
			s.writerConn = c
			return
		}
		s.runGroup(c, req)
	}
}

// runGroup runs one group transaction. Around its BEGIN and its COMMIT
// the writer is busy; in between it holds the write lock, data_version
// checked (fresh.go).
func (s *Store) runGroup(c *conn, first *writeReq) {
	s.setWriter(writerBusy)
	defer s.setWriter(writerIdle)
	if _, err := c.exec(stmtCtx, "BEGIN IMMEDIATE"); err != nil {
		first.grant <- grant{err: fmt.Errorf("begin: %w", err)}
		return
	}
	s.setWriter(writerLocked)
	// What the group's members changed so far, for the next member's
	// partition row (lockedPartition) and then for the partition cache.
	var touched groupTouches
	s.group = &touched
	first.grant <- grant{c: c, first: true}
	d := <-first.done
	if d.failed || d.broken {
		s.setWriter(writerBusy)
		rollback(c)
		return
	}
	members := []*writeReq{first}
	touched.add(first.touch)
	var groupErr error
collect:
	for len(members) < maxGroup {
		select {
		case req := <-s.requests:
			req.grant <- grant{c: c}
			d := <-req.done
			if d.broken {
				groupErr = fmt.Errorf("group transaction aborted by another write: %w", d.err)
				break collect
			}
			if !d.failed {
				members = append(members, req)
				touched.add(req.touch) // a failed member's writes are undone
			}
		default:
			break collect
		}
	}
	s.setWriter(writerBusy) // from COMMIT on, others may commit
	if groupErr == nil {
		s.applyAdvances(c)
		s.parts.begin(touched.significant()) // partcache.go
		if _, err := c.exec(stmtCtx, "COMMIT"); err != nil {
			groupErr = fmt.Errorf("commit: %w", err)
			s.parts.end(nil)
		} else {
			s.parts.end(&touched)
		}
	}
	if groupErr != nil {
		rollback(c)
	}
	for _, m := range members {
		m.result <- groupErr
	}
}

// rollback ends a failed transaction; it fails harmlessly when SQLite
// already rolled back.
func rollback(c *conn) { _, _ = c.exec(stmtCtx, "ROLLBACK") }

// write runs fn as a member of a group transaction on the writer
// connection and returns fn's error, or else the group's commit outcome.
func (s *Store) write(ctx context.Context, fn func(c *conn) error) error {
	return s.writeTouching(ctx, touchAll, fn)
}

// writeTouching is write for a member that changes of partition rows and
// gate state at most what t says (partcache.go).
func (s *Store) writeTouching(ctx context.Context, t touch, fn func(c *conn) error) error {
	req := &writeReq{touch: t, grant: make(chan grant, 1), done: make(chan memberDone, 1), result: make(chan error, 1)}
	select {
	case s.requests <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closed:
		return ErrClosed
	}
	// From here the coordinator waits for this member: it must finish.
	g := <-req.grant
	if g.err != nil {
		return g.err
	}
	if err := s.runMember(ctx, g, fn, req.done); err != nil {
		return err
	}
	return <-req.result
}

// runMember runs fn and always reports to the coordinator, also when fn
// panics or exits its goroutine.
func (s *Store) runMember(ctx context.Context, g grant, fn func(c *conn) error, done chan<- memberDone) (err error) {
	c := g.c
	reported := false
	report := func(d memberDone) {
		if !reported {
			reported = true
			done <- d
		}
	}
	defer func() {
		if !reported {
			// fn panicked or called runtime.Goexit: undo and let the
			// panic continue.
			report(s.undo(c, g.first, errors.New("write callback did not return")))
		}
	}()
	if !g.first {
		if _, err := c.exec(stmtCtx, "SAVEPOINT member"); err != nil {
			report(memberDone{failed: true, broken: true, err: err})
			return fmt.Errorf("savepoint: %w", err)
		}
	}
	if err := fn(c); err != nil {
		report(s.undo(c, g.first, err))
		return err
	}
	if !g.first {
		if _, err := c.exec(stmtCtx, "RELEASE member"); err != nil {
			report(memberDone{failed: true, broken: true, err: err})
			return fmt.Errorf("release savepoint: %w", err)
		}
	}
	report(memberDone{})
	return nil
}

// undo rolls back a failed member's writes: its savepoint, or for the
// first member the whole transaction (which the coordinator does).
func (s *Store) undo(c *conn, first bool, cause error) memberDone {
	if first {
		return memberDone{failed: true, err: cause}
	}
	if _, err := c.exec(stmtCtx, "ROLLBACK TO member"); err != nil {
		return memberDone{failed: true, broken: true, err: err}
	}
	if _, err := c.exec(stmtCtx, "RELEASE member"); err != nil {
		return memberDone{failed: true, broken: true, err: err}
	}
	return memberDone{failed: true, err: cause}
}
