package sqlitestore

import (
	"context"
	"errors"
	"fmt"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/gatecore"
)

// The serve gate (storage.GateStore): its SQL here, its decisions in
// gatecore. Every write runs on the writer connection, which is the write
// lock of every partition, so the gate takes no lock of its own; reads run
// on readers.

const checkpointCols = gatecore.CheckpointCols

// gatePending is the last gate column: the pending checkpoints of the
// partition in column or parameter id (?2: the running version).
func gatePending(id string) string {
	return `coalesce((SELECT group_concat(c.name || ' ' || c.state, ',') FROM sync_backfill_checkpoints c
	WHERE c.partition = ` + id + ` AND c.schema_version = ?2 AND c.state <> 'activated'), '')`
}

const fenceUpsert = `INSERT INTO sync_writer_fence (partition, required_writer_version) `

const fenceRaised = ` ON CONFLICT (partition) DO UPDATE SET required_writer_version = max(required_writer_version, excluded.required_writer_version)`

var gateSQL = &gatecore.SQL{
	Partition: qPartition,
	PartitionGate: `SELECT ` + partitionCols + `, ` + unnamed("m.schema_version IS NOT NULL", "coalesce(m.schema_version, 0)",
		"coalesce(m.gate_revision, 0)", "p.gate_revision", gatePending("p.id")) + `
		FROM sync_partitions p LEFT JOIN sync_schema_marker m ON m.id = 1 WHERE p.id = ?1`,
	GateRead: `SELECT ` + unnamed("m.schema_version IS NOT NULL", "coalesce(m.schema_version, 0)", "coalesce(m.gate_revision, 0)",
		"p.id IS NOT NULL", "coalesce(p.log_epoch, '')", "coalesce(p.gate_revision, 0)", gatePending("?1")) + `
		FROM (SELECT 1) AS one LEFT JOIN sync_schema_marker m ON m.id = 1 LEFT JOIN sync_partitions p ON p.id = ?1`,
	Marker: `SELECT schema_version, layouts FROM sync_schema_marker WHERE id = 1`,

	Checkpoint: `SELECT ` + checkpointCols + ` FROM sync_backfill_checkpoints
		WHERE partition = ? AND schema_version = ? AND name = ?`,
	Checkpoints: `SELECT ` + checkpointCols + ` FROM sync_backfill_checkpoints ORDER BY partition, schema_version, name`,
	CheckpointsOf: `SELECT ` + checkpointCols + ` FROM sync_backfill_checkpoints
		WHERE partition IN (SELECT value FROM json_each(?)) ORDER BY partition, schema_version, name`,
	Unactivated: `SELECT ` + checkpointCols + ` FROM sync_backfill_checkpoints
		WHERE schema_version = ? AND state <> 'activated' ORDER BY partition, name`,
	CheckpointInsert: `INSERT INTO sync_backfill_checkpoints (partition, schema_version, name, state, updated_at_ms)
		VALUES (?, ?, ?, 'declared', ?) ON CONFLICT DO NOTHING`,
	Claim: `UPDATE sync_backfill_checkpoints SET owner_epoch = owner_epoch + 1, state = 'backfilling', updated_at_ms = ?
		WHERE partition = ? AND schema_version = ? AND name = ? AND state <> 'activated' RETURNING ` + checkpointCols,
	Advance: `UPDATE sync_backfill_checkpoints SET watermark = ?, observed_rows = ?, updated_at_ms = ?
		WHERE partition = ? AND schema_version = ? AND name = ? AND owner_epoch = ? AND state = 'backfilling'`,
	Activate: `UPDATE sync_backfill_checkpoints SET state = 'activated', watermark = ?, updated_at_ms = ?
		WHERE partition = ? AND schema_version = ? AND name = ? AND owner_epoch = ? AND state <> 'activated'`,

	FenceRaise:    fenceUpsert + `VALUES (?, ?)` + fenceRaised,
	FenceRaiseAll: fenceUpsert + `SELECT id, ? FROM sync_partitions WHERE true` + fenceRaised,
	Fence:         `SELECT required_writer_version FROM sync_writer_fence WHERE partition = ?`,

	SourceAbove: `SELECT 1 FROM sync_changes
		WHERE partition = ? AND seq > ? AND tbl IN (SELECT value FROM json_each(?)) LIMIT 1`,
	SourceAboveExcept: `SELECT 1 FROM sync_changes ch
		WHERE ch.partition = ? AND ch.seq > ? AND ch.tbl IN (SELECT value FROM json_each(?))
		AND NOT EXISTS (SELECT 1 FROM sync_commits c WHERE c.partition = ch.partition AND c.seq = ch.seq AND c.client_id = ?)
		LIMIT 1`,
	SourceCoverage: `SELECT seq FROM sync_changes
		WHERE partition = ? AND tbl IN (SELECT value FROM json_each(?)) ORDER BY seq DESC LIMIT 1`,

	ListArgFunc: func(vs []string) any { return jsonStrings(vs) },
}

// EnsureSchemaWithCheckpoints implements storage.GateStore: the schema and
// the declarations in one write transaction, so a refusal rolls back both.
func (s *Store) EnsureSchemaWithCheckpoints(ctx context.Context, sc *schema.Schema, decls []storage.CheckpointKey) error {
	if err := gatecore.CheckDeclarations(decls, sc.Version); err != nil {
		return err
	}
	err := s.write(ctx, func(c *conn) error {
		if err := applyMigrations(ctx, c, s.migrations); err != nil {
			return err
		}
		return gateSQL.Install(ctx, sqlConn{c}, sc.Version, decls, func() error { return s.ensureSchema(ctx, c, sc) })
	})
	if err != nil {
		return err
	}
	s.schema.Store(newInstalled(sc))
	return nil
}

// CheckpointAdvance implements storage.CheckpointAdvancer inside the
// caller's write transaction.
func (t *tx) CheckpointAdvance(ctx context.Context, p storage.CheckpointAdvanceParams) (bool, error) {
	if err := t.check(); err != nil {
		return false, err
	}
	if err := gatecore.CheckAdvance(&p); err != nil {
		return false, err
	}
	ok, err := gateSQL.AdvanceOn(ctx, sqlConn{t.c}, &p)
	if err != nil {
		return false, t.fail("advance checkpoint", "", err)
	}
	return ok, nil
}

// readPartitionGate reads a partition row and, with an installed schema,
// its gate state in the same statement.
func readPartitionGate(ctx context.Context, c *conn, partition string, inst *installed) (storage.Partition, *gatecore.Prefetch, bool, error) {
	if inst == nil {
		p, ok, err := readPartition(ctx, c, partition)
		return p, nil, ok, err
	}
	p, pre, ok, err := gateSQL.ReadPartition(ctx, sqlConn{c}, partition, inst.schema.Version)
	if err != nil {
		return p, nil, false, fmt.Errorf("read partition: %w", err)
	}
	return p, pre, ok, nil
}

// GateRead implements storage.GateReader in the transaction's snapshot,
// from the state read with the partition when there is one. A
// transaction cannot see that state change: a read transaction is one
// snapshot, and a write transaction holds the writer, which is SQLite's
// database write lock.
func (t *tx) GateRead(ctx context.Context, partition string, running int32) (storage.GateState, error) {
	if err := t.check(); err != nil {
		return storage.GateState{}, err
	}
	if g, ok := t.gate.Get(partition, running); ok {
		return g, nil
	}
	g, err := gateSQL.ReadOn(ctx, sqlConn{t.c}, partition, running)
	if err != nil {
		t.aborted = true
		return g, err
	}
	t.gate = gatecore.NewPrefetch(partition, running, g)
	return g, nil
}

// fenceError classifies the writer fence's refusal: RAISE inside a
// trigger is SQLITE_CONSTRAINT_TRIGGER, and the fence is the only trigger
// syncnode installs that raises.
func fenceError(err error) (error, bool) {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_TRIGGER {
		return gatecore.FenceRejected(err), true
	}
	return nil, false
}
