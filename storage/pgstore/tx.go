package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/gatecore"
)

// tx implements storage.Tx and storage.ReadTx on one pooled connection.
//
// Round trips dominate a push on PostgreSQL, so statements whose result
// the caller does not need (BEGIN, SAVEPOINT, RELEASE, a commit append, a
// push result the locked re-check proved absent) are queued and sent in
// one pipeline with the next statement that returns something, or with
// COMMIT. An error of a queued statement therefore surfaces from the call
// that sent it; the transaction is aborted either way.
type tx struct {
	// snap is the partition row a read transaction (one snapshot) last
	// read; CommitWindow reuses it instead of reading it again.
	snap   *storage.Partition
	s      *Store
	c      *pgxpool.Conn
	inst   *installed
	locked storage.Partition
	// maxSeq is the partition's max commitSeq including this
	// transaction's appends.
	maxSeq     int64
	aborted    bool
	pending    *pgx.Batch
	savepoints []*savepoint
	// absent holds the idempotency keys the locked re-check found absent;
	// put the records this transaction stored.
	absent map[idemKey]bool
	put    map[idemKey]storage.PushRecord
	// pre holds the push results read with the lock for the keys whose
	// optimistic lookup had just missed (hints.go): a record, or nil for
	// none. A key this transaction puts leaves it.
	pre map[idemKey]*storage.PushRecord
	// gate is the serve-gate state last read with a partition (gate.go);
	// snapshot is set on read transactions, which see one snapshot.
	gate     *gatecore.Prefetch
	snapshot bool
	// detach: the statements of a group's transaction ignore the
	// cancellation of the member that sends them, which would break the
	// connection and fail every member (group.go).
	detach bool
	// broken is set when a member's writes could not be rolled back: the
	// group's transaction cannot commit.
	broken error
	// committed: COMMIT succeeded, so end does not roll back.
	committed bool
	// A read transaction's planned window (plan.go): trail is sent behind
	// the next statement (the planned window's first read and COMMIT);
	// spent says that pipeline ended the transaction, missed that a read
	// came that it did not cover; noPlan that fn runs again, unplanned.
	plan          *plannedWindow
	trail         *pgx.Batch
	spent, missed bool
	noPlan        bool
	// ahead holds the rows read ahead (ahead.go); nextRows, in a write
	// group, names the next member's.
	ahead    map[rowKey]rowAhead
	nextRows func() []storage.RowRef
	// fresh: the last statement queued is a group member's SAVEPOINT, so
	// a Savepoint now would mark the same state (group.go).
	fresh bool
	// Deferred writes (rows.go): known holds the server version (0 for
	// none) of the locked partition's rows as this transaction read or
	// wrote them; deferOK is set while a group member's fn runs, which
	// can be undone and run again; deferred says the queue holds a write
	// whose reply was predicted, deferFailed that a pipeline carrying one
	// failed.
	known                          map[rowKey]int64
	deferOK, deferred, deferFailed bool
}

type idemKey struct{ clientID, clientCommitID string }

var (
	_ storage.Tx     = (*tx)(nil)
	_ storage.ReadTx = (*tx)(nil)
)

func (t *tx) queue(sql string, args ...any) {
	t.fresh = false
	if t.pending == nil {
		t.pending = &pgx.Batch{}
	}
	t.pending.Queue(sql, args...)
}

// queueQuery queues a statement whose rows fn reads when the queue is
// sent.
func (t *tx) queueQuery(fn func(rows pgx.Rows) error, sql string, args ...any) {
	t.fresh = false
	if t.pending == nil {
		t.pending = &pgx.Batch{}
	}
	t.pending.Queue(sql, args...).Query(fn)
}

// send sends the queued statements in one pipeline, and the trail behind
// them. last, when not nil, reads the result of the last queued statement;
// the others are plain executions or read by their own Fn.
func (t *tx) send(ctx context.Context, last func(br pgx.BatchResults) error) error {
	if err := t.live(); err != nil {
		return err
	}
	t.fresh = false
	b, trail := t.pending, t.trail
	t.pending, t.trail = nil, nil
	if b == nil || b.Len() == 0 {
		return nil
	}
	n := b.Len()
	if last != nil {
		n--
	}
	var after []*pgx.QueuedQuery
	if trail != nil {
		after = trail.QueuedQueries
		b.QueuedQueries = append(b.QueuedQueries, after...)
	}
	br := t.c.SendBatch(t.stmtCtx(ctx), b)
	var err error
	each := func(qs []*pgx.QueuedQuery) {
		for _, qq := range qs {
			var e error
			if qq.Fn != nil {
				e = qq.Fn(br)
			} else {
				_, e = br.Exec()
			}
			if e != nil && err == nil {
				err = e
			}
		}
	}
	each(b.QueuedQueries[:n])
	if err == nil && last != nil {
		err = last(br)
	}
	if err == nil {
		each(after)
	}
	if e := br.Close(); e != nil && err == nil {
		err = e
	}
	if t.deferred {
		t.deferred = false
		t.deferFailed = t.deferFailed || err != nil
	}
	return err
}

// exec runs sql after the queued statements, in one round trip.
func (t *tx) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.live(); err != nil {
		return pgconn.CommandTag{}, err
	}
	t.fresh = false
	if t.pending == nil {
		return t.c.Exec(t.stmtCtx(ctx), sql, args...)
	}
	t.queue(sql, args...)
	var tag pgconn.CommandTag
	err := t.send(ctx, func(br pgx.BatchResults) (err error) {
		tag, err = br.Exec()
		return err
	})
	return tag, err
}

// query runs sql after the queued statements, in one round trip, and
// hands its rows to fn.
func (t *tx) query(ctx context.Context, sql string, args []any, fn func(rows pgx.Rows) error) error {
	read := func(rows pgx.Rows) error {
		defer rows.Close()
		if err := fn(rows); err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	}
	if err := t.live(); err != nil {
		return err
	}
	t.fresh = false
	if t.pending == nil {
		rows, err := t.c.Query(t.stmtCtx(ctx), sql, args...)
		if err != nil {
			return err
		}
		return read(rows)
	}
	t.queue(sql, args...)
	return t.send(ctx, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		return read(rows)
	})
}

// queryRow runs sql and scans its only row into dest; ok=false when there
// is none.
func (t *tx) queryRow(ctx context.Context, sql string, args []any, dest ...any) (ok bool, err error) {
	err = t.query(ctx, sql, args, func(rows pgx.Rows) error {
		if !rows.Next() {
			return nil
		}
		ok = true
		return rows.Scan(dest...)
	})
	return ok, err
}

// stmtCtx is the context a statement of the transaction runs with.
func (t *tx) stmtCtx(ctx context.Context) context.Context {
	if t.detach {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

func (t *tx) check() error {
	if t.aborted {
		return storage.ErrTxAborted
	}
	return nil
}

// fail marks the transaction aborted after a database error (PostgreSQL
// has aborted it) and returns the error, translated for table and wrapped
// with op.
func (t *tx) fail(op, table string, err error) error {
	t.aborted = true
	return fmt.Errorf("%s: %w", op, translate(err, table))
}

// rollback ends the transaction, dropping anything queued. A connection
// that cannot roll back is not in the idle state, and the pool closes it
// on release.
func (t *tx) rollback(ctx context.Context) {
	t.pending = nil
	_, _ = t.c.Exec(context.WithoutCancel(ctx), "ROLLBACK", pgx.QueryExecModeSimpleProtocol)
}

const (
	partitionCols = `p.id, p.log_epoch, p.epoch_required, p.created_at_ms, p.last_seen_ms,
	coalesce((SELECT c.seq FROM sync_commits c WHERE c.partition = p.id ORDER BY c.seq DESC LIMIT 1), p.horizon_seq),
	p.horizon_seq`
	qPartition     = `SELECT ` + partitionCols + ` FROM sync_partitions p WHERE p.id = $1`
	qLockPartition = `SELECT 1 FROM sync_partitions WHERE id = $1 FOR UPDATE`
)

func scanPartition(rows pgx.Rows, p *storage.Partition) error {
	return rows.Scan(&p.ID, &p.LogEpoch, &p.EpochRequired, &p.CreatedAtMs, &p.LastSeenMs, &p.MaxCommitSeq, &p.HorizonSeq)
}

func (t *tx) readPartition(ctx context.Context, partition string) (p storage.Partition, ok bool, err error) {
	err = t.query(ctx, qPartition, []any{partition}, func(rows pgx.Rows) error {
		if !rows.Next() {
			return nil
		}
		ok = true
		return scanPartition(rows, &p)
	})
	return p, ok, err
}

// WriteTx implements storage.Store through a write group (group.go):
// concurrent WriteTx calls on one partition share one PostgreSQL
// transaction, one partition lock and one commit.
func (s *Store) WriteTx(ctx context.Context, partition string, fn func(tx storage.Tx) error) error {
	return s.groupWrite(ctx, partition, nil, func(t *tx) error { return fn(t) })
}

// writeTx runs fn alone in a write transaction: the maintenance writes
// (seeding, wiping, epoch rotation, pruning) that change the partition row
// or the whole partition, which a group's later members would not see in
// their Locked row.
func (s *Store) writeTx(ctx context.Context, partition string, fn func(t *tx) error) error {
	t, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer t.end(ctx)
	if err := t.lock(ctx, partition, nil); err != nil {
		return err
	}
	if err := t.run(fn); err != nil {
		return err
	}
	return t.commit(ctx)
}

// beginWrite takes a pooled connection for a write transaction, which
// t.lock then begins. The caller defers t.end.
func (s *Store) beginWrite(ctx context.Context) (*tx, error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("write transaction: %w", err)
	}
	return &tx{s: s, c: c, inst: s.schema.Load()}, nil
}

// end rolls a write transaction back unless it committed, and returns
// its connection to the pool.
func (t *tx) end(ctx context.Context) {
	if !t.committed {
		t.rollback(ctx)
	}
	t.c.Release()
}

// run runs fn on the transaction; a fn that returns nil but left the
// transaction aborted fails with storage.ErrTxAborted.
func (t *tx) run(fn func(t *tx) error) error {
	if err := fn(t); err != nil {
		return err
	}
	if t.aborted {
		return storage.ErrTxAborted
	}
	return nil
}

// lock begins the write transaction: BEGIN, the row lock, the reads of
// the rows named ahead and the read of the locked partition go in one
// pipeline; the reads are statements of their own so that, in READ
// COMMITTED, their snapshots are taken after the lock is granted and see
// the commits of the transaction that held it.
func (t *tx) lock(ctx context.Context, partition string, rows []storage.RowRef) error {
	t.queue("BEGIN")
	t.queue(qLockPartition, partition)
	t.queuePrefetch(partition)
	t.queueRows(partition, rows)
	p, ok, err := t.readPartitionGate(ctx, partition, true)
	if err != nil {
		return fmt.Errorf("write transaction: lock partition: %w", err)
	}
	if !ok {
		return unregistered("write transaction", partition)
	}
	t.locked, t.maxSeq = p, p.MaxCommitSeq
	return nil
}

// commit sends COMMIT after the queued statements.
func (t *tx) commit(ctx context.Context) error {
	t.queue("COMMIT")
	if err := t.send(ctx, nil); err != nil {
		return fmt.Errorf("commit: %w", translate(err, ""))
	}
	t.committed = true
	return nil
}

// ReadTx implements storage.Store: a REPEATABLE READ READ ONLY
// transaction, whose snapshot is taken by its first statement. BEGIN goes
// in one pipeline with that statement, and so does COMMIT when fn planned
// its window (plan.go); fn runs again, unplanned, when it read past the
// plan.
func (s *Store) ReadTx(ctx context.Context, fn func(tx storage.ReadTx) error) error {
	missed, err := s.readTx(ctx, fn, false)
	if missed {
		_, err = s.readTx(ctx, fn, true)
	}
	return err
}

func (s *Store) readTx(ctx context.Context, fn func(tx storage.ReadTx) error, noPlan bool) (missed bool, err error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("read transaction: %w", err)
	}
	defer c.Release()
	t := &tx{s: s, c: c, inst: s.schema.Load(), snapshot: true, noPlan: noPlan}
	t.queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	done := false
	defer func() {
		if !done && !t.spent {
			t.rollback(ctx)
		}
	}()
	err = fn(t)
	if t.missed {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if t.aborted {
		return false, storage.ErrTxAborted
	}
	if t.pending != nil || t.spent {
		// fn ran no statement, and nothing began; or its planned
		// pipeline ended the transaction.
		done = true
		return false, nil
	}
	if _, err := c.Exec(ctx, "COMMIT"); err != nil {
		return false, fmt.Errorf("read transaction: %w", err)
	}
	done = true
	return false, nil
}

func unregistered(op, partition string) error {
	e := ssp2.Errorf(ssp2.CodeStoragePartitionUnregistered, "partition %q is not registered", partition)
	e.Op = op
	return e
}

// Locked implements storage.Tx.
func (t *tx) Locked() storage.Partition { return t.locked }

// Partition implements storage.ReadTx.
func (t *tx) Partition(ctx context.Context, partition string) (storage.Partition, error) {
	if err := t.check(); err != nil {
		return storage.Partition{}, err
	}
	planned := t.queuePlan(partition)
	p, ok, err := t.readPartitionGate(ctx, partition, t.snapshot || partition == t.locked.ID)
	if errors.Is(err, errPlanMissed) {
		return p, err
	}
	if err != nil {
		return p, t.fail("read partition", "", err)
	}
	if planned {
		t.spent, t.plan.read = true, true
	}
	if !ok {
		return p, unregistered("read partition", partition)
	}
	if t.snapshot {
		t.snap = &p
	}
	return p, nil
}

type savepoint struct {
	t      *tx
	name   string
	maxSeq int64
	done   bool
	// member: the savepoint is the group member's own, which marks the
	// same state; it is rolled back to and never released here.
	member bool
}

// Savepoint implements storage.Tx; the SAVEPOINT is queued. Right after
// a group member's own savepoint it takes that one instead, saving a
// subtransaction and two statements (SAVEPOINT, RELEASE): rolling back to
// it undoes the same writes and keeps it, as any rollback to a savepoint
// does.
func (t *tx) Savepoint(ctx context.Context) (storage.Savepoint, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	sp := &savepoint{t: t, name: "sp" + strconv.Itoa(len(t.savepoints)+1), maxSeq: t.maxSeq}
	if t.fresh && len(t.savepoints) == 0 {
		sp.name, sp.member = groupSavepoint, true
	} else {
		t.queue("SAVEPOINT " + sp.name)
	}
	t.savepoints = append(t.savepoints, sp)
	return sp, nil
}

func (sp *savepoint) end(ctx context.Context, rollback bool) error {
	t := sp.t
	if sp.done {
		return errors.New("savepoint: already released or rolled back")
	}
	if n := len(t.savepoints); n == 0 || t.savepoints[n-1] != sp {
		return errors.New("savepoint: not the innermost open savepoint")
	}
	if rollback {
		// The queue is sent first so that the SAVEPOINT itself exists
		// (anything queued after it is undone anyway, and an error there
		// is what the rollback is for). ROLLBACK TO goes by the simple
		// protocol: an aborted transaction refuses to prepare statements.
		_ = t.send(ctx, nil)
		if _, err := t.c.Exec(t.stmtCtx(ctx), "ROLLBACK TO SAVEPOINT "+sp.name, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.aborted = true
			return fmt.Errorf("savepoint rollback: %w", err)
		}
		if !sp.member {
			t.queue("RELEASE SAVEPOINT " + sp.name)
		}
		t.aborted = false
		t.maxSeq = sp.maxSeq
		// Records put since the savepoint are gone; forget what the
		// re-check saw, too, and the rows read ahead or known.
		t.absent, t.put, t.ahead, t.known = nil, nil, nil, nil
	} else {
		if t.aborted {
			return storage.ErrTxAborted
		}
		if !sp.member {
			t.queue("RELEASE SAVEPOINT " + sp.name)
		}
	}
	t.savepoints = t.savepoints[:len(t.savepoints)-1]
	sp.done = true
	return nil
}

func (sp *savepoint) Rollback(ctx context.Context) error { return sp.end(ctx, true) }
func (sp *savepoint) Release(ctx context.Context) error  { return sp.end(ctx, false) }
