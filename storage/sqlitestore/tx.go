package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/commitlog"
	"github.com/syncnode/syncnode/storage/internal/gatecore"
)

// tx implements storage.Tx and storage.ReadTx on one connection.
type tx struct {
	s      *Store
	c      *conn
	inst   *installed
	locked storage.Partition
	// maxSeq is the partition's max commitSeq including this
	// transaction's appends.
	maxSeq int64
	// rowChanged marks a write transaction whose fn wrote more of the
	// partition row than its commits (rawTx).
	rowChanged bool
	aborted    bool
	savepoints []savepoint
	scratch    txScratch
	// gate is the serve-gate state last read with a partition (gate.go).
	gate *gatecore.Prefetch
	// readOnly marks a ReadTx. snap is the partition row it last read:
	// its snapshot cannot change, so CommitWindow reuses it.
	readOnly bool
	snap     *storage.Partition
	// The partition cache (partcache.go), in a read transaction whose
	// fn planned its window: planned is the window's partition; ran0 the
	// connection's statement count when fn began; fromCache marks a
	// partition row served from cachedFrom, taken at state d0 with sig0
	// significant commits; windowRan counts the statements of its
	// planned windows.
	planned    string
	after      int64 // the planned window's cursor
	ran0       uint64
	fromCache  bool
	cachedFrom partEntry
	d0, sig0   uint64
	windowRan  uint64
}

// txScratch holds buffers reused across calls of one transaction.
type txScratch struct {
	args       []any
	entries    []commitlog.IndexEntry
	tombstones []commitlog.Tombstone
	scopes     []byte
	blobIDs    []string
}

var (
	_ storage.Tx     = (*tx)(nil)
	_ storage.ReadTx = (*tx)(nil)
)

// WriteTx implements storage.Store. fn runs as one member of a group
// transaction on the writer connection (writer.go): the writer is the
// partition write lock (it serializes every partition in this process),
// and the group's BEGIN IMMEDIATE holds SQLite's database write lock
// against other processes before fn's first read. WriteTx returns after
// the group's COMMIT.
func (s *Store) WriteTx(ctx context.Context, partition string, fn func(tx storage.Tx) error) error {
	// fn writes partition's rows only, and through the Tx methods only
	// its max commitSeq of the partition row, unless it used rawTx
	// (partcache.go).
	out := &partWrite{}
	return s.writeTouching(ctx, touch{partition: partition, out: out}, func(c *conn) error {
		inst := s.schema.Load()
		p, gate, ok, err := s.lockedPartition(ctx, c, partition, inst)
		if err != nil {
			return err
		}
		if !ok {
			return unregistered("write transaction", partition)
		}
		t := &tx{s: s, c: c, inst: inst, locked: p, maxSeq: p.MaxCommitSeq, gate: gate}
		if err := fn(t); err != nil {
			return err
		}
		if t.aborted {
			return storage.ErrTxAborted
		}
		*out = partWrite{set: true, rowChanged: t.rowChanged, maxSeq: t.maxSeq}
		return nil
	})
}

// ReadTx implements storage.Store on a reader connection: a deferred
// transaction whose WAL snapshot is fixed by its first read.
func (s *Store) ReadTx(ctx context.Context, fn func(tx storage.ReadTx) error) error {
	return s.withReader(ctx, func(c *conn) error {
		return readTx(ctx, c, func() error {
			inst := s.schema.Load()
			t := &tx{s: s, c: c, inst: inst, readOnly: true, ran0: c.ran}
			err := fn(t)
			if t.fromCache {
				// Whatever fn made of the cached row, it stands only if
				// the snapshot holds that row (partcache.go).
				same, cerr := s.checkCached(ctx, t)
				if cerr != nil {
					return cerr
				}
				if !same {
					t = &tx{s: s, c: c, inst: inst, readOnly: true, ran0: c.ran, planned: "-"}
					err = fn(t)
				}
			}
			if err != nil {
				return err
			}
			if t.aborted {
				return storage.ErrTxAborted
			}
			return nil
		})
	})
}

// PlanWindow implements storage.WindowPlanner. SQLite has no round trips
// to save; a planned section may take its partition row from the
// partition cache (partcache.go), since its fn may run twice.
func (t *tx) PlanWindow(p storage.WindowParams) {
	if t.readOnly && t.planned == "" && t.c.ran == t.ran0 {
		t.planned, t.after = p.Partition, p.AfterSeq
	}
}

func unregistered(op, partition string) error {
	e := ssp2.Errorf(ssp2.CodeStoragePartitionUnregistered, "partition %q is not registered", partition)
	e.Op = op
	return e
}

// check refuses calls on an aborted transaction.
func (t *tx) check() error {
	if t.aborted {
		return storage.ErrTxAborted
	}
	return nil
}

// fail marks the transaction aborted after a database error and returns
// the error, translated for table and wrapped with op.
func (t *tx) fail(op, table string, err error) error {
	t.aborted = true
	return fmt.Errorf("%s: %w", op, translate(err, table))
}

// rawTx is the store's own transaction behind stx, for a WriteTx fn of
// this package that runs its own statements on the connection: those may
// change the partition row and its gate state, so the partition cache
// drops the row's entry when the group commits (partcache.go). Every
// such fn must get its transaction this way.
func rawTx(stx storage.Tx) *tx {
	t := stx.(*tx)
	t.rowChanged = true
	return t
}

// Locked implements storage.Tx.
func (t *tx) Locked() storage.Partition { return t.locked }

// Partition implements storage.ReadTx.
func (t *tx) Partition(ctx context.Context, partition string) (storage.Partition, error) {
	if err := t.check(); err != nil {
		return storage.Partition{}, err
	}
	// The planned partition, as the transaction's first read, may come
	// from the partition cache, or fill it.
	first := t.planned == partition && t.c.ran == t.ran0 && t.inst != nil
	var d0 uint64
	if first {
		e, at, sig, ok := t.s.parts.get(partition)
		// A cursor past the entry's max commitSeq was served from a
		// snapshot that held a commit still under way: read.
		ok = ok && t.after <= e.p.MaxCommitSeq
		if _, gok := e.gate.Get(partition, t.inst.schema.Version); ok && gok {
			t.fromCache, t.cachedFrom, t.d0, t.sig0 = true, e, at, sig
			t.gate = e.gate
			p := e.p
			t.snap = &p
			return p, nil
		}
		d0 = t.s.parts.state()
	}
	p, gate, ok, err := readPartitionGate(ctx, t.c, partition, t.inst)
	if err != nil {
		t.aborted = true
		return p, err
	}
	if !ok {
		return p, unregistered("read partition", partition)
	}
	if gate != nil {
		t.gate = gate
	}
	if t.readOnly {
		t.snap = &p
	}
	if first && gate != nil {
		t.s.parts.fill(d0, partEntry{p: p, gate: gate})
	}
	return p, nil
}

type savepoint struct {
	t      *tx
	sql    *savepointSQL
	maxSeq int64
	done   bool
}

// savepointSQL is a savepoint's name and its statements.
type savepointSQL struct{ name, begin, rollback, release string }

// savepointSQLs are those of the savepoints a push nests (one per commit,
// rarely deeper), built once instead of on every commit.
var savepointSQLs = func() (s [4]savepointSQL) {
	for i := range s {
		s[i] = newSavepointSQL(i + 1)
	}
	return s
}()

func newSavepointSQL(depth int) savepointSQL {
	name := "sp" + strconv.Itoa(depth)
	return savepointSQL{name: name, begin: "SAVEPOINT " + name, rollback: "ROLLBACK TO " + name, release: "RELEASE " + name}
}

// Savepoint implements storage.Tx.
func (t *tx) Savepoint(ctx context.Context) (storage.Savepoint, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	var q *savepointSQL
	if depth := len(t.savepoints) + 1; depth <= len(savepointSQLs) {
		q = &savepointSQLs[depth-1]
	} else {
		s := newSavepointSQL(depth)
		q = &s
	}
	if _, err := t.c.exec(ctx, q.begin); err != nil {
		return nil, t.fail("savepoint", "", err)
	}
	sp := &savepoint{t: t, sql: q, maxSeq: t.maxSeq}
	t.savepoints = append(t.savepoints, *sp)
	return sp, nil
}

var errSavepointOrder = errors.New("savepoint: not the innermost open savepoint")

func (sp *savepoint) end(ctx context.Context, rollback bool) error {
	t := sp.t
	if sp.done {
		return errors.New("savepoint: already released or rolled back")
	}
	if n := len(t.savepoints); n == 0 || t.savepoints[n-1].sql.name != sp.sql.name {
		return errSavepointOrder
	}
	if rollback {
		if _, err := t.c.exec(ctx, sp.sql.rollback); err != nil {
			t.aborted = true
			return fmt.Errorf("savepoint rollback: %w", err)
		}
		t.maxSeq = sp.maxSeq
		t.aborted = false
	} else if t.aborted {
		return storage.ErrTxAborted
	}
	if _, err := t.c.exec(ctx, sp.sql.release); err != nil {
		t.aborted = true
		return fmt.Errorf("savepoint release: %w", err)
	}
	t.savepoints = t.savepoints[:len(t.savepoints)-1]
	sp.done = true
	return nil
}

func (sp *savepoint) Rollback(ctx context.Context) error { return sp.end(ctx, true) }
func (sp *savepoint) Release(ctx context.Context) error  { return sp.end(ctx, false) }
