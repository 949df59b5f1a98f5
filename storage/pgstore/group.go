package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/storage"
)

// Write groups: group commit for one partition.
//
// Every push of a partition takes the partition's row lock and holds it
// until its COMMIT has flushed the WAL, so one partition commits at most
// once per WAL flush plus a few round trips. Concurrent WriteTx calls on
// one partition therefore share a transaction: the first (the leader)
// begins it and takes the lock; the calls that arrive meanwhile queue in
// memory and, after the leader's fn, each runs its fn in turn on the same
// transaction, inside a savepoint of its own; one COMMIT ends them all.
//
// Each member keeps the contract of a WriteTx of its own: a member whose
// fn fails, or leaves the transaction aborted, is rolled back to its
// savepoint and gets its error at once, changing nothing; the others'
// writes stay. The queued statements of a member (a commit append, a push
// result) are sent with the release of its savepoint, so their errors are
// its own. A member sees the earlier members' writes as it would have seen
// them committed, and every member's WriteTx returns after the one COMMIT
// is durable; if that COMMIT fails, every kept member gets its error, and
// nothing of the group was written.
//
// The leader's own fn runs without a savepoint: if it fails, the whole
// transaction rolls back and the queued members start over.

// maxGroupSize bounds the WriteTx calls one transaction carries, so a
// steady stream of arrivals cannot postpone the leader's commit forever.
const maxGroupSize = 32

// groupSavepoint is the savepoint around a non-leading member's fn.
const groupSavepoint = "write_group_member"

type writeGroup struct {
	waiting []*groupMember
	size    int  // members so far, the leader included
	closed  bool // committing: no more members
}

type groupMember struct {
	ctx context.Context
	fn  func(t *tx) error
	// rows are read ahead, before the member's turn (ahead.go).
	rows []storage.RowRef
	// noDefer: fn sends every write at once (rows.go).
	noDefer bool
	// turn hands the member the group's transaction; nil means the
	// group broke up before it ran, and it starts over.
	turn chan *tx
	// ran carries the member's outcome back to the leader: nil when its
	// writes are kept, awaiting the commit.
	ran chan error
	// done carries the commit's outcome to a kept member.
	done chan error
}

// writeGroups holds the open write group of each partition.
type writeGroups struct {
	mu sync.Mutex
	m  map[string]*writeGroup
}

// groupWrite runs fn as a member of the partition's open write group, or
// leads a new one.
func (s *Store) groupWrite(ctx context.Context, partition string, rows []storage.RowRef, fn func(t *tx) error) error {
	// deferOK turns false when a deferred write of a leading fn failed
	// (rows.go): fn runs again, sending every write at once.
	deferOK := true
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("write transaction: %w", err)
		}
		gs := &s.groups
		gs.mu.Lock()
		if g := gs.m[partition]; g != nil && !g.closed && g.size < maxGroupSize {
			m := &groupMember{ctx: ctx, fn: fn, rows: rows, noDefer: !deferOK, turn: make(chan *tx, 1), ran: make(chan error, 1), done: make(chan error, 1)}
			g.waiting = append(g.waiting, m)
			g.size++
			gs.mu.Unlock()
			again, err := s.follow(partition, g, m)
			if again {
				continue
			}
			return err
		}
		g := &writeGroup{size: 1}
		if gs.m == nil {
			gs.m = map[string]*writeGroup{}
		}
		// A closed or full group is committing; its successor queues
		// behind it on the row lock, and later arrivals join the
		// successor.
		gs.m[partition] = g
		gs.mu.Unlock()
		err := s.lead(ctx, partition, g, rows, fn, deferOK)
		if errors.Is(err, errDeferredFailed) && deferOK {
			deferOK = false
			continue
		}
		return err
	}
}

// next hands out the group's next waiting member, or closes the group
// when none waits.
func (s *Store) next(partition string, g *writeGroup) *groupMember {
	gs := &s.groups
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if len(g.waiting) == 0 {
		s.closeLocked(partition, g)
		return nil
	}
	m := g.waiting[0]
	g.waiting = g.waiting[1:]
	return m
}

func (s *Store) closeLocked(partition string, g *writeGroup) {
	g.closed = true
	if s.groups.m[partition] == g {
		delete(s.groups.m, partition)
	}
}

// disband closes the group and sends its waiting members to start over.
func (s *Store) disband(partition string, g *writeGroup) {
	s.groups.mu.Lock()
	s.closeLocked(partition, g)
	waiting := g.waiting
	g.waiting = nil
	s.groups.mu.Unlock()
	for _, m := range waiting {
		m.turn <- nil
	}
}

// lead begins the group's transaction, runs fn, then the waiting members
// one by one, and commits.
// When a pipeline carrying one of the leader's deferred writes fails
// (rows.go), before any member ran, the transaction rolls back, the
// waiting members start over and lead returns errDeferredFailed.
func (s *Store) lead(ctx context.Context, partition string, g *writeGroup, rows []storage.RowRef, fn func(t *tx) error, deferOK bool) error {
	t, err := s.beginWrite(ctx)
	if err != nil {
		s.disband(partition, g)
		return err
	}
	defer t.end(ctx)
	// The lock wait honours ctx; once it is held, nothing a member's
	// cancellation does may break the shared connection.
	if err := t.lock(ctx, partition, rows); err != nil {
		s.disband(partition, g)
		return err
	}
	t.detach = true
	t.nextRows = func() []storage.RowRef { return s.nextRows(g) }
	var kept []*groupMember
	fail := func(err error) error {
		s.disband(partition, g)
		for _, m := range kept {
			m.done <- err
		}
		return err
	}
	settled := false
	defer func() {
		if !settled { // the leader's fn panicked: nobody may wait forever
			fail(errLeaderPanicked)
		}
	}()
	t.deferOK = deferOK
	err = t.run(fn)
	t.deferOK = false
	if t.deferFailed {
		err = errDeferredFailed
	}
	if err != nil {
		settled = true
		return fail(err)
	}
	for first := true; ; first = false {
		m := s.next(partition, g)
		if m == nil {
			break
		}
		if first {
			// The leader's queued writes go now, so that an error of
			// theirs is the leader's, not the next member's; with them
			// the results of the keys hinted since the lock, and the
			// member's rows.
			t.queuePrefetch(partition)
			t.queueRows(partition, m.rows)
			if err := t.send(ctx, nil); err != nil {
				m.turn <- nil
				settled = true
				if t.deferFailed {
					return fail(errDeferredFailed)
				}
				return fail(fmt.Errorf("commit: %w", translate(err, "")))
			}
		}
		m.turn <- t
		if err := <-m.ran; err == nil {
			kept = append(kept, m)
		}
		if t.broken != nil {
			settled = true
			return fail(fmt.Errorf("commit: %w", t.broken))
		}
	}
	settled = true
	err = t.commit(ctx)
	if err != nil && t.deferFailed && len(kept) == 0 {
		return errDeferredFailed // the leader's writes alone: it runs again
	}
	for _, m := range kept {
		m.done <- err
	}
	return err
}

// errMemberPanicked is a member's outcome when its fn panicked (the panic
// goes on in the member's goroutine).
var (
	errMemberPanicked = errors.New("write transaction: fn panicked")
	errLeaderPanicked = errors.New("write transaction: the leading fn of the write group panicked")
)

// follow waits for the member's turn, runs its fn and waits for the
// commit. again reports that the group broke up before the member ran.
func (s *Store) follow(partition string, g *writeGroup, m *groupMember) (again bool, err error) {
	var t *tx
	select {
	case t = <-m.turn:
	case <-m.ctx.Done():
		s.groups.mu.Lock()
		for i, w := range g.waiting {
			if w == m {
				g.waiting = append(g.waiting[:i:i], g.waiting[i+1:]...)
				s.groups.mu.Unlock()
				return false, fmt.Errorf("write transaction: %w", m.ctx.Err())
			}
		}
		s.groups.mu.Unlock()
		t = <-m.turn // handed out meanwhile: the leader waits for an answer
	}
	if t == nil {
		return true, nil
	}
	if err := m.ctx.Err(); err != nil {
		m.ran <- err
		return false, fmt.Errorf("write transaction: %w", err)
	}
	panicked := true
	defer func() {
		if panicked {
			m.ran <- errMemberPanicked
		}
	}()
	err = t.member(m.ctx, m.fn, !m.noDefer)
	panicked = false
	m.ran <- err
	if err != nil {
		return false, err
	}
	return false, <-m.done
}

// member runs a non-leading member's fn inside its savepoint and sends
// its queued writes with the release; on any failure (a panic included)
// it rolls back to the savepoint, leaving the transaction as the member
// found it. When a deferred write failed (rows.go), fn runs once more
// with every write sent at once.
func (t *tx) member(ctx context.Context, fn func(t *tx) error, deferOK bool) error {
	err := t.memberRun(ctx, fn, deferOK)
	if errors.Is(err, errDeferredFailed) && t.broken == nil {
		err = t.memberRun(ctx, fn, false)
	}
	return err
}

// errDeferredFailed is a member's outcome when a pipeline carrying one of
// its deferred writes failed: it is run again without deferring.
var errDeferredFailed = errors.New("write transaction: a deferred write failed")

func (t *tx) memberRun(ctx context.Context, fn func(t *tx) error, deferOK bool) (err error) {
	t.deferOK, t.deferFailed = deferOK, false
	defer func() { t.deferOK = false }()
	base := t.maxSeq
	t.locked.MaxCommitSeq = base
	t.queue("SAVEPOINT " + groupSavepoint)
	t.fresh = true
	ok := false
	defer func() {
		if !ok {
			t.undoMember(ctx, base)
		}
	}()
	err = t.run(fn)
	if t.deferFailed {
		return errDeferredFailed
	}
	if err != nil {
		return err
	}
	t.savepoints = nil
	t.queue("RELEASE SAVEPOINT " + groupSavepoint)
	// With the release go the reads of what the members after this one
	// will look up: the results of the keys hinted meanwhile, and the
	// next member's rows.
	t.queuePrefetch(t.locked.ID)
	if t.nextRows != nil {
		t.queueRows(t.locked.ID, t.nextRows())
	}
	if err := t.send(ctx, nil); err != nil {
		if t.deferFailed {
			return errDeferredFailed
		}
		return fmt.Errorf("commit: %w", translate(err, ""))
	}
	ok = true
	return nil
}

// undoMember rolls the transaction back to the member's savepoint. The
// queue is sent first so that the savepoint exists (an error there is
// what the rollback is for).
func (t *tx) undoMember(ctx context.Context, base int64) {
	_ = t.send(ctx, nil)
	if _, err := t.c.Exec(t.stmtCtx(ctx), "ROLLBACK TO SAVEPOINT "+groupSavepoint, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.broken = fmt.Errorf("roll back a member of the write group: %w", err)
		return
	}
	t.queue("RELEASE SAVEPOINT " + groupSavepoint)
	t.aborted = false
	t.maxSeq = base
	t.locked.MaxCommitSeq = base
	t.savepoints = nil
	t.absent, t.put, t.ahead, t.known = nil, nil, nil, nil
	t.deferred = false
}
