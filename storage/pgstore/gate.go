package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/gatecore"
)

// The serve gate (storage.GateStore): its SQL and locks here, its
// decisions in gatecore. A write that must serialize with pushes locks the
// partition's registry row first, as WriteTx does.

const checkpointCols = gatecore.CheckpointCols

// gatePending is the last gate column: the pending checkpoints of the
// partition in column or parameter id ($2: the running version).
func gatePending(id string) string {
	return `coalesce((SELECT string_agg(c.name || ' ' || c.state, ',' ORDER BY c.name) FROM sync_backfill_checkpoints c
	WHERE c.partition = ` + id + ` AND c.schema_version = $2 AND c.state <> 'activated'), '')`
}

const fenceUpsert = `INSERT INTO sync_writer_fence (partition, required_writer_version) `

const fenceRaised = ` ON CONFLICT (partition) DO UPDATE SET required_writer_version =
	greatest(sync_writer_fence.required_writer_version, EXCLUDED.required_writer_version)`

var gateSQL = &gatecore.SQL{
	// The partition locks are the registry rows (an unregistered
	// partition has none, and no commits to serialize with). Raising
	// every fence locks the whole registry against pushes; EXCLUSIVE
	// still lets plain reads through.
	Lock:    `SELECT 1 FROM sync_partitions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`,
	LockAll: `LOCK TABLE sync_partitions IN EXCLUSIVE MODE`,

	Partition: qPartition,
	PartitionGate: `SELECT ` + partitionCols + `, m.schema_version IS NOT NULL, coalesce(m.schema_version, 0),
		coalesce(m.gate_revision, 0), p.gate_revision, ` + gatePending("p.id") + `
		FROM sync_partitions p LEFT JOIN sync_schema_marker m ON m.id = 1 WHERE p.id = $1`,
	GateRead: `SELECT m.schema_version IS NOT NULL, coalesce(m.schema_version, 0), coalesce(m.gate_revision, 0),
		p.id IS NOT NULL, coalesce(p.log_epoch, ''), coalesce(p.gate_revision, 0), ` + gatePending("$1") + `
		FROM (SELECT 1) AS one LEFT JOIN sync_schema_marker m ON m.id = 1 LEFT JOIN sync_partitions p ON p.id = $1`,
	Marker: `SELECT schema_version, layouts FROM sync_schema_marker WHERE id = 1`,

	Checkpoint: `SELECT ` + checkpointCols + ` FROM sync_backfill_checkpoints
		WHERE partition = $1 AND schema_version = $2 AND name = $3`,
	Checkpoints: `SELECT ` + checkpointCols + ` FROM sync_backfill_checkpoints ORDER BY partition, schema_version, name`,
	CheckpointsOf: `SELECT ` + checkpointCols + ` FROM sync_backfill_checkpoints
		WHERE partition = ANY($1::text[]) ORDER BY partition, schema_version, name`,
	Unactivated: `SELECT ` + checkpointCols + ` FROM sync_backfill_checkpoints
		WHERE schema_version = $1 AND state <> 'activated' ORDER BY partition, name`,
	CheckpointInsert: `INSERT INTO sync_backfill_checkpoints (partition, schema_version, name, state, updated_at_ms)
		VALUES ($1, $2, $3, 'declared', $4) ON CONFLICT DO NOTHING`,
	Claim: `UPDATE sync_backfill_checkpoints SET owner_epoch = owner_epoch + 1, state = 'backfilling', updated_at_ms = $1
		WHERE partition = $2 AND schema_version = $3 AND name = $4 AND state <> 'activated' RETURNING ` + checkpointCols,
	Advance: `UPDATE sync_backfill_checkpoints SET watermark = $1, observed_rows = $2, updated_at_ms = $3
		WHERE partition = $4 AND schema_version = $5 AND name = $6 AND owner_epoch = $7 AND state = 'backfilling'`,
	Activate: `UPDATE sync_backfill_checkpoints SET state = 'activated', watermark = $1, updated_at_ms = $2
		WHERE partition = $3 AND schema_version = $4 AND name = $5 AND owner_epoch = $6 AND state <> 'activated'`,

	FenceRaise:    fenceUpsert + `VALUES ($1, $2)` + fenceRaised,
	FenceRaiseAll: fenceUpsert + `SELECT id, $1 FROM sync_partitions` + fenceRaised,
	Fence:         `SELECT required_writer_version FROM sync_writer_fence WHERE partition = $1`,

	SourceAbove: `SELECT 1 FROM sync_changes WHERE partition = $1 AND seq > $2 AND tbl = ANY($3::text[]) LIMIT 1`,
	SourceAboveExcept: `SELECT 1 FROM sync_changes ch
		WHERE ch.partition = $1 AND ch.seq > $2 AND ch.tbl = ANY($3::text[])
		AND NOT EXISTS (SELECT 1 FROM sync_commits c WHERE c.partition = ch.partition AND c.seq = ch.seq AND c.client_id = $4)
		LIMIT 1`,
	SourceCoverage: `SELECT seq FROM sync_changes
		WHERE partition = $1 AND tbl = ANY($2::text[]) ORDER BY seq DESC LIMIT 1`,

	ListArgFunc: func(vs []string) any { return vs },
}

// EnsureSchemaWithCheckpoints implements storage.GateStore: the schema and
// the declarations in one transaction under the schema's advisory lock.
func (s *Store) EnsureSchemaWithCheckpoints(ctx context.Context, sc *schema.Schema, decls []storage.CheckpointKey) error {
	if err := gatecore.CheckDeclarations(decls, sc.Version); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := applyMigrations(ctx, tx, s.migrations); err != nil {
			return err
		}
		return gateSQL.Install(ctx, poolConn{tx}, sc.Version, decls, func() error { return ensureSchema(ctx, tx, sc) })
	})
	if err != nil {
		return err
	}
	s.schema.Store(newInstalled(sc))
	return nil
}

// CheckpointAdvance implements storage.CheckpointAdvancer inside the
// caller's write transaction (after its queued statements, in one round
// trip).
func (t *tx) CheckpointAdvance(ctx context.Context, p storage.CheckpointAdvanceParams) (bool, error) {
	if err := t.check(); err != nil {
		return false, err
	}
	if err := gatecore.CheckAdvance(&p); err != nil {
		return false, err
	}
	ok, err := gateSQL.AdvanceOn(ctx, txConn{t}, &p)
	if err != nil {
		return false, t.fail("advance checkpoint", "", err)
	}
	return ok, nil
}

// readPartitionGate reads a partition row and, with an installed schema,
// its gate state in the same statement and round trip; keep says the
// transaction cannot see that state change, so GateRead may answer from
// it: a read transaction is one snapshot, and in a write transaction an
// epoch rotation, a declaration and an activation take the locked
// partition's lock, a schema migration locks the whole registry.
func (t *tx) readPartitionGate(ctx context.Context, partition string, keep bool) (storage.Partition, bool, error) {
	if t.inst == nil {
		return t.readPartition(ctx, partition)
	}
	p, pre, ok, err := gateSQL.ReadPartition(ctx, txConn{t}, partition, t.inst.schema.Version)
	if ok && keep {
		t.gate = pre
	}
	return p, ok, err
}

// GateRead implements storage.GateReader in the transaction, after its
// queued statements, in one round trip; from the state read with the
// partition when there is one.
func (t *tx) GateRead(ctx context.Context, partition string, running int32) (storage.GateState, error) {
	if err := t.check(); err != nil {
		return storage.GateState{}, err
	}
	if g, ok := t.gate.Get(partition, running); ok {
		return g, nil
	}
	g, err := gateSQL.ReadOn(ctx, txConn{t}, partition, running)
	if err != nil {
		return storage.GateState{}, t.fail("gate read", "", err)
	}
	if t.snapshot || partition == t.locked.ID {
		t.gate = gatecore.NewPrefetch(partition, running, g)
	}
	return g, nil
}

// fenceError classifies the writer fence's refusal by its SQLSTATE,
// raised by the sync_commits trigger (migration 003).
func fenceError(pe *pgconn.PgError, err error) (error, bool) {
	if pe.Code == sqlstateFenceRejected {
		return gatecore.FenceRejected(err), true
	}
	return nil, false
}

// sqlstateFenceRejected is the SQLSTATE the writer fence trigger raises.
const sqlstateFenceRejected = "SNWFR"
