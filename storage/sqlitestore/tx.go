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
	maxSeq     int64
	aborted    bool
	savepoints []savepoint
	scratch    txScratch
	// gate is the serve-gate state last read with a partition (gate.go).
	gate *gatecore.Prefetch
	// readOnly marks a ReadTx. snap is the partition row it last read:
	// its snapshot cannot change, so CommitWindow reuses it.
	readOnly bool
	snap     *storage.Partition
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
	return s.write(ctx, func(c *conn) error {
		inst := s.schema.Load()
		p, gate, ok, err := readPartitionGate(ctx, c, partition, inst)
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
		return nil
	})
}

// ReadTx implements storage.Store on a reader connection: a deferred
// transaction whose WAL snapshot is fixed by its first read.
func (s *Store) ReadTx(ctx context.Context, fn func(tx storage.ReadTx) error) error {
	return s.withReader(ctx, func(c *conn) error {
		t := &tx{s: s, c: c, inst: s.schema.Load(), readOnly: true}
		return readTx(ctx, c, func() error {
			if err := fn(t); err != nil {
				return err
			}
			if t.aborted {
				return storage.ErrTxAborted
			}
			return nil
		})
	})
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

// Locked implements storage.Tx.
func (t *tx) Locked() storage.Partition { return t.locked }

// Partition implements storage.ReadTx.
func (t *tx) Partition(ctx context.Context, partition string) (storage.Partition, error) {
	if err := t.check(); err != nil {
		return storage.Partition{}, err
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
	return p, nil
}

type savepoint struct {
	t      *tx
	name   string
	maxSeq int64
	done   bool
}

// Savepoint implements storage.Tx.
func (t *tx) Savepoint(ctx context.Context) (storage.Savepoint, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	name := "sp" + strconv.Itoa(len(t.savepoints)+1)
	if _, err := t.c.exec(ctx, "SAVEPOINT "+name); err != nil {
		return nil, t.fail("savepoint", "", err)
	}
	sp := &savepoint{t: t, name: name, maxSeq: t.maxSeq}
	t.savepoints = append(t.savepoints, *sp)
	return sp, nil
}

var errSavepointOrder = errors.New("savepoint: not the innermost open savepoint")

func (sp *savepoint) end(ctx context.Context, rollback bool) error {
	t := sp.t
	if sp.done {
		return errors.New("savepoint: already released or rolled back")
	}
	if n := len(t.savepoints); n == 0 || t.savepoints[n-1].name != sp.name {
		return errSavepointOrder
	}
	if rollback {
		if _, err := t.c.exec(ctx, "ROLLBACK TO "+sp.name); err != nil {
			t.aborted = true
			return fmt.Errorf("savepoint rollback: %w", err)
		}
		t.maxSeq = sp.maxSeq
		t.aborted = false
	} else if t.aborted {
		return storage.ErrTxAborted
	}
	if _, err := t.c.exec(ctx, "RELEASE "+sp.name); err != nil {
		t.aborted = true
		return fmt.Errorf("savepoint release: %w", err)
	}
	t.savepoints = t.savepoints[:len(t.savepoints)-1]
	sp.done = true
	return nil
}

func (sp *savepoint) Rollback(ctx context.Context) error { return sp.end(ctx, true) }
func (sp *savepoint) Release(ctx context.Context) error  { return sp.end(ctx, false) }
