package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
)

// The serve gate's SQL (storage.GateStore). Writes that must serialize
// with pushes lock the partition's registry row first, like WriteTx.

const checkpointCols = `partition, schema_version, name, state, watermark, owner_epoch, observed_rows, updated_at_ms`

const (
	qCheckpointGet = `SELECT ` + checkpointCols + ` FROM sync_backfill_checkpoints
		WHERE partition = $1 AND schema_version = $2 AND name = $3`
	qCheckpointInsert = `INSERT INTO sync_backfill_checkpoints (partition, schema_version, name, state, updated_at_ms)
		VALUES ($1, $2, $3, 'declared', $4) ON CONFLICT DO NOTHING`
	qFenceRaise = `INSERT INTO sync_writer_fence (partition, required_writer_version) VALUES ($1, $2)
		ON CONFLICT (partition) DO UPDATE SET required_writer_version =
			greatest(sync_writer_fence.required_writer_version, EXCLUDED.required_writer_version)`
	qFenceRaiseAll = `INSERT INTO sync_writer_fence (partition, required_writer_version) SELECT id, $1 FROM sync_partitions
		ON CONFLICT (partition) DO UPDATE SET required_writer_version =
			greatest(sync_writer_fence.required_writer_version, EXCLUDED.required_writer_version)`
	qFenceGet      = `SELECT required_writer_version FROM sync_writer_fence WHERE partition = $1`
	qMarkerVersion = `SELECT schema_version FROM sync_schema_marker WHERE id = 1`
	qClaim         = `UPDATE sync_backfill_checkpoints SET owner_epoch = owner_epoch + 1, state = 'backfilling', updated_at_ms = $1
		WHERE partition = $2 AND schema_version = $3 AND name = $4 AND state <> 'activated'
		RETURNING ` + checkpointCols
	qAdvance = `UPDATE sync_backfill_checkpoints SET watermark = $1, observed_rows = $2, updated_at_ms = $3
		WHERE partition = $4 AND schema_version = $5 AND name = $6 AND owner_epoch = $7 AND state = 'backfilling'`
	qActivate = `UPDATE sync_backfill_checkpoints SET state = 'activated', watermark = $1, updated_at_ms = $2
		WHERE partition = $3 AND schema_version = $4 AND name = $5 AND owner_epoch = $6 AND state <> 'activated'`
	qUnactivatedAt = `SELECT ` + checkpointCols + ` FROM sync_backfill_checkpoints
		WHERE schema_version = $1 AND state <> 'activated' ORDER BY partition, name`
	qSourceAbove = `SELECT EXISTS (SELECT 1 FROM sync_changes
		WHERE partition = $1 AND seq > $2 AND tbl = ANY($3::text[]))`
	qSourceAboveExcept = `SELECT EXISTS (SELECT 1 FROM sync_changes ch
		WHERE ch.partition = $1 AND ch.seq > $2 AND ch.tbl = ANY($3::text[])
		AND NOT EXISTS (SELECT 1 FROM sync_commits c WHERE c.partition = ch.partition AND c.seq = ch.seq AND c.client_id = $4))`
	qSourceCoverage = `SELECT seq FROM sync_changes
		WHERE partition = $1 AND tbl = ANY($2::text[]) ORDER BY seq DESC LIMIT 1`
)

// qGateRead is the serve-gate read: one row whatever exists.
const qGateRead = `SELECT m.schema_version IS NOT NULL, coalesce(m.schema_version, 0), coalesce(m.gate_revision, 0),
	p.id IS NOT NULL, coalesce(p.log_epoch, ''), coalesce(p.gate_revision, 0),
	coalesce((SELECT string_agg(c.name || ' ' || c.state, ',' ORDER BY c.name) FROM sync_backfill_checkpoints c
		WHERE c.partition = $1 AND c.schema_version = $2 AND c.state <> 'activated'), '')
	FROM (SELECT 1) AS one
	LEFT JOIN sync_schema_marker m ON m.id = 1
	LEFT JOIN sync_partitions p ON p.id = $1`

// dbtx is what the gate's statements run on: a pgx.Tx or the pool.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func scanCheckpoint(row pgx.Row, cp *storage.Checkpoint) error {
	var state string
	if err := row.Scan(&cp.Partition, &cp.SchemaVersion, &cp.Name, &state, &cp.Watermark, &cp.OwnerEpoch, &cp.ObservedRows, &cp.UpdatedAtMs); err != nil {
		return err
	}
	cp.State = storage.CheckpointState(state)
	return nil
}

func getCheckpoint(ctx context.Context, q dbtx, key storage.CheckpointKey) (cp storage.Checkpoint, ok bool, err error) {
	err = scanCheckpoint(q.QueryRow(ctx, qCheckpointGet, key.Partition, key.SchemaVersion, key.Name), &cp)
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, false, nil
	}
	return cp, err == nil, err
}

func markerVersion(ctx context.Context, q dbtx) (v int32, ok bool, err error) {
	err = q.QueryRow(ctx, qMarkerVersion).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return v, err == nil, err
}

// lockPartition takes the partition write lock in tx (SELECT … FOR
// UPDATE, as WriteTx does); an unregistered partition has no row to lock
// and no commits to serialize with.
func lockPartition(ctx context.Context, tx pgx.Tx, partition string) error {
	_, err := tx.Exec(ctx, qLockPartition, partition)
	return err
}

// EnsureSchemaWithCheckpoints implements storage.GateStore: the schema and
// the declarations in one transaction under the schema's advisory lock.
func (s *Store) EnsureSchemaWithCheckpoints(ctx context.Context, sc *schema.Schema, decls []storage.CheckpointKey) error {
	if err := storage.CheckDeclarations(decls, sc.Version); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := applyMigrations(ctx, tx, s.migrations); err != nil {
			return err
		}
		before, had, err := markerVersion(ctx, tx)
		if err != nil {
			return fmt.Errorf("ensure schema: %w", err)
		}
		if err := ensureSchema(ctx, tx, sc); err != nil {
			return err
		}
		if err := ensureCheckpoints(ctx, tx, sc.Version, decls, had && before < sc.Version); err != nil {
			return fmt.Errorf("ensure schema: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.schema.Store(newInstalled(sc))
	return nil
}

// ensureCheckpoints installs declarations and raises fences inside
// EnsureSchema's transaction, then refuses undeclared unactivated
// checkpoints of version v. Fences are raised under the partition locks:
// a migration locks the registry against every push (EXCLUSIVE still lets
// plain reads through), declarations lock their partitions' rows.
func ensureCheckpoints(ctx context.Context, tx pgx.Tx, v int32, decls []storage.CheckpointKey, migrated bool) error {
	if migrated {
		if _, err := tx.Exec(ctx, `LOCK TABLE sync_partitions IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, qFenceRaiseAll, v); err != nil {
			return err
		}
	}
	if len(decls) > 0 {
		ids := make([]string, len(decls))
		for i, d := range decls {
			ids[i] = d.Partition
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM sync_partitions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`, ids); err != nil {
			return err
		}
	}
	now := time.Now().UnixMilli()
	for _, d := range decls {
		if _, err := tx.Exec(ctx, qCheckpointInsert, d.Partition, d.SchemaVersion, d.Name, now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, qFenceRaise, d.Partition, d.SchemaVersion); err != nil {
			return err
		}
	}
	rows, err := tx.Query(ctx, qUnactivatedAt, v)
	if err != nil {
		return err
	}
	open, err := collectCheckpoints(rows)
	if err != nil {
		return err
	}
	return storage.CheckDeclared(open, decls)
}

func collectCheckpoints(rows pgx.Rows) ([]storage.Checkpoint, error) {
	defer rows.Close()
	var out []storage.Checkpoint
	for rows.Next() {
		var cp storage.Checkpoint
		if err := scanCheckpoint(rows, &cp); err != nil {
			return nil, err
		}
		out = append(out, cp)
	}
	return out, rows.Err()
}

// CheckpointDeclare implements storage.GateStore under the partition lock.
func (s *Store) CheckpointDeclare(ctx context.Context, key storage.CheckpointKey, nowMs int64) (storage.Checkpoint, error) {
	if err := key.Check(); err != nil {
		return storage.Checkpoint{}, err
	}
	var cp storage.Checkpoint
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockPartition(ctx, tx, key.Partition); err != nil {
			return err
		}
		v, ok, err := markerVersion(ctx, tx)
		if err != nil {
			return err
		}
		if !ok || v != key.SchemaVersion {
			return storage.InvalidSchemaVersion(key, v, ok)
		}
		if _, err := tx.Exec(ctx, qCheckpointInsert, key.Partition, key.SchemaVersion, key.Name, nowMs); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, qFenceRaise, key.Partition, key.SchemaVersion); err != nil {
			return err
		}
		cp, ok, err = getCheckpoint(ctx, tx, key)
		if err == nil && !ok {
			err = errors.New("checkpoint vanished after insert")
		}
		return err
	})
	if err != nil {
		return storage.Checkpoint{}, fmt.Errorf("declare checkpoint: %w", err)
	}
	return cp, nil
}

// CheckpointClaim implements storage.GateStore: one UPDATE … RETURNING,
// whose row lock makes racing claims take turns and count up.
func (s *Store) CheckpointClaim(ctx context.Context, key storage.CheckpointKey, nowMs int64) (storage.Checkpoint, error) {
	if err := key.Check(); err != nil {
		return storage.Checkpoint{}, err
	}
	var cp storage.Checkpoint
	err := scanCheckpoint(s.pool.QueryRow(ctx, qClaim, nowMs, key.Partition, key.SchemaVersion, key.Name), &cp)
	if errors.Is(err, pgx.ErrNoRows) {
		existing, ok, gerr := getCheckpoint(ctx, s.pool, key)
		if gerr != nil {
			err = gerr
		} else {
			return storage.Checkpoint{}, storage.NotDeclared(key, ok && existing.State == storage.CheckpointActivated)
		}
	}
	if err != nil {
		return storage.Checkpoint{}, fmt.Errorf("claim checkpoint: %w", err)
	}
	return cp, nil
}

// CheckpointAdvance implements storage.GateStore in its own statement.
func (s *Store) CheckpointAdvance(ctx context.Context, p storage.CheckpointAdvanceParams) (bool, error) {
	if err := storage.CheckAdvance(&p); err != nil {
		return false, err
	}
	tag, err := s.pool.Exec(ctx, qAdvance, advanceArgs(&p)...)
	if err != nil {
		return false, fmt.Errorf("advance checkpoint: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

func advanceArgs(p *storage.CheckpointAdvanceParams) []any {
	return []any{p.Watermark, p.ObservedRows, p.NowMs, p.Partition, p.SchemaVersion, p.Name, p.OwnerEpoch}
}

// CheckpointAdvance implements storage.CheckpointAdvancer inside the
// caller's write transaction (after its queued statements, in one round
// trip).
func (t *tx) CheckpointAdvance(ctx context.Context, p storage.CheckpointAdvanceParams) (bool, error) {
	if err := t.check(); err != nil {
		return false, err
	}
	if err := storage.CheckAdvance(&p); err != nil {
		return false, err
	}
	tag, err := t.exec(ctx, qAdvance, advanceArgs(&p)...)
	if err != nil {
		return false, t.fail("advance checkpoint", "", err)
	}
	return tag.RowsAffected() == 1, nil
}

// CheckpointActivate implements storage.GateStore under the partition
// lock; the partition is read by a statement after the lock, so it sees
// every commit that held it.
func (s *Store) CheckpointActivate(ctx context.Context, p storage.CheckpointActivateParams) (storage.ActivateOutcome, error) {
	if err := storage.CheckActivation(&p); err != nil {
		return "", err
	}
	var out storage.ActivateOutcome
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockPartition(ctx, tx, p.Partition); err != nil {
			return err
		}
		cp, ok, err := getCheckpoint(ctx, tx, p.CheckpointKey)
		if err != nil {
			return err
		}
		if !ok || cp.State == storage.CheckpointActivated {
			return storage.NotDeclared(p.CheckpointKey, ok)
		}
		if cp.OwnerEpoch != p.OwnerEpoch {
			return storage.Superseded(p.CheckpointKey, p.OwnerEpoch, cp.OwnerEpoch)
		}
		marker, _, err := readMarker(ctx, tx)
		if err != nil {
			return err
		}
		if err := storage.CheckSources(marker.Layouts, p.Sources); err != nil {
			return err
		}
		var part storage.Partition
		rows, err := tx.Query(ctx, qPartition, p.Partition)
		if err != nil {
			return err
		}
		if rows.Next() {
			err = scanPartition(rows, &part)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err != nil {
			return err
		}
		if p.Watermark > part.MaxCommitSeq {
			return storage.InvalidWatermark(p.Watermark, part.MaxCommitSeq)
		}
		var required int32
		err = tx.QueryRow(ctx, qFenceGet, p.Partition).Scan(&required)
		fenced := err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if !fenced || required < p.SchemaVersion {
			return storage.FenceMissing(p.CheckpointKey, required, fenced)
		}
		switch ch, err := sourceChangesAbove(ctx, tx, p.Partition, part.HorizonSeq, p.Sources, p.Watermark, p.OwnClientID); {
		case err != nil:
			return err
		case ch == storage.SourceChanged:
			out = storage.ActivateStale
			return nil
		case ch == storage.SourceUnverifiable:
			out = storage.ActivateUnverifiable
			return nil
		}
		tag, err := tx.Exec(ctx, qActivate, p.Watermark, p.NowMs, p.Partition, p.SchemaVersion, p.Name, p.OwnerEpoch)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return errors.New("checkpoint changed under the partition lock")
		}
		out = storage.ActivateActivated
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("activate checkpoint: %w", err)
	}
	return out, nil
}

// Checkpoints implements storage.GateStore.
func (s *Store) Checkpoints(ctx context.Context, partitions ...string) ([]storage.Checkpoint, error) {
	q := `SELECT ` + checkpointCols + ` FROM sync_backfill_checkpoints`
	var args []any
	if len(partitions) > 0 {
		q += ` WHERE partition = ANY($1::text[])`
		args = append(args, partitions)
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY partition, schema_version, name`, args...)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	out, err := collectCheckpoints(rows)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	return out, nil
}

// SourceCoverage implements storage.GateStore: a backward walk of the
// partition's log to the newest change of a source table.
func (s *Store) SourceCoverage(ctx context.Context, partition string, tables []string) (int64, error) {
	if len(tables) == 0 {
		return 0, nil
	}
	var seq int64
	err := s.pool.QueryRow(ctx, qSourceCoverage, partition, tables).Scan(&seq)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("source coverage: %w", err)
	}
	return seq, nil
}

// SourceChangesAbove implements storage.GateStore; the horizon and the log
// are read in one snapshot.
func (s *Store) SourceChangesAbove(ctx context.Context, partition string, tables []string, seq int64) (storage.SourceChange, error) {
	var out storage.SourceChange
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var horizon int64
		err := tx.QueryRow(ctx, `SELECT horizon_seq FROM sync_partitions WHERE id = $1`, partition).Scan(&horizon)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		out, err = sourceChangesAbove(ctx, tx, partition, horizon, tables, seq, "")
		return err
	})
	if err != nil {
		return "", fmt.Errorf("source changes: %w", err)
	}
	return out, nil
}

// sourceChangesAbove reads the log forward from seq: only the changes
// committed since the watermark. Changes of commits by ownClientID ("":
// none) do not count.
func sourceChangesAbove(ctx context.Context, q dbtx, partition string, horizon int64, tables []string, seq int64, ownClientID string) (storage.SourceChange, error) {
	if len(tables) == 0 {
		return storage.SourceClean, nil
	}
	if horizon > seq {
		return storage.SourceUnverifiable, nil
	}
	sql, args := qSourceAbove, []any{partition, seq, tables}
	if ownClientID != "" {
		sql, args = qSourceAboveExcept, append(args, ownClientID)
	}
	var found bool
	if err := q.QueryRow(ctx, sql, args...).Scan(&found); err != nil {
		return "", err
	}
	if found {
		return storage.SourceChanged, nil
	}
	return storage.SourceClean, nil
}

// WriterFence implements storage.GateStore.
func (s *Store) WriterFence(ctx context.Context, partition string) (int32, bool, error) {
	var required int32
	err := s.pool.QueryRow(ctx, qFenceGet, partition).Scan(&required)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("writer fence: %w", err)
	}
	return required, true, nil
}

func scanGate(row pgx.Row) (storage.GateState, error) {
	var (
		g       storage.GateState
		pending string
	)
	err := row.Scan(&g.HasMarker, &g.SchemaVersion, &g.SchemaRevision, &g.Registered, &g.LogEpoch, &g.Revision, &pending)
	if err != nil {
		return g, fmt.Errorf("gate read: %w", err)
	}
	g.Pending = storage.ParsePending(pending)
	return g, nil
}

// GateRead implements storage.GateStore on a pooled connection.
func (s *Store) GateRead(ctx context.Context, partition string, running int32) (storage.GateState, error) {
	return scanGate(s.pool.QueryRow(ctx, qGateRead, partition, running))
}

// gatePrefetch is a gate state read in a transaction together with a
// partition row (Partition, or the lock of a write transaction), for the
// installed schema version, in the same statement and round trip. A read
// transaction is one snapshot. A write transaction cannot see its locked
// partition's state change: an epoch rotation, a declaration and an
// activation take the partition lock, a schema migration locks the whole
// registry. GateRead answers from it without a round trip.
type gatePrefetch struct {
	partition string
	running   int32
	state     storage.GateState
}

// qPartitionGate is qPartition with the gate read's columns ($2: the
// running schema version).
const qPartitionGate = `SELECT ` + partitionCols + `,
	m.schema_version IS NOT NULL, coalesce(m.schema_version, 0), coalesce(m.gate_revision, 0), p.gate_revision,
	coalesce((SELECT string_agg(c.name || ' ' || c.state, ',' ORDER BY c.name) FROM sync_backfill_checkpoints c
		WHERE c.partition = p.id AND c.schema_version = $2 AND c.state <> 'activated'), '')
	FROM sync_partitions p LEFT JOIN sync_schema_marker m ON m.id = 1 WHERE p.id = $1`

// readPartitionGate reads a partition row and, with an installed schema,
// its gate state in the same statement; keep says the transaction cannot
// see that state change (see gatePrefetch), so GateRead may answer from
// it.
func (t *tx) readPartitionGate(ctx context.Context, partition string, keep bool) (p storage.Partition, ok bool, err error) {
	if t.inst == nil {
		return t.readPartition(ctx, partition)
	}
	g := &gatePrefetch{partition: partition, running: t.inst.schema.Version}
	var pending string
	err = t.query(ctx, qPartitionGate, []any{partition, g.running}, func(rows pgx.Rows) error {
		if !rows.Next() {
			return nil
		}
		ok = true
		return rows.Scan(&p.ID, &p.LogEpoch, &p.EpochRequired, &p.CreatedAtMs, &p.LastSeenMs, &p.MaxCommitSeq, &p.HorizonSeq,
			&g.state.HasMarker, &g.state.SchemaVersion, &g.state.SchemaRevision, &g.state.Revision, &pending)
	})
	if err != nil || !ok {
		return p, ok, err
	}
	g.state.Registered, g.state.LogEpoch = true, p.LogEpoch
	g.state.Pending = storage.ParsePending(pending)
	if keep {
		t.gate = g
	}
	return p, true, nil
}

// GateRead implements storage.GateReader in the transaction, after its
// queued statements, in one round trip; from the state read with the
// partition when there is one.
func (t *tx) GateRead(ctx context.Context, partition string, running int32) (storage.GateState, error) {
	if err := t.check(); err != nil {
		return storage.GateState{}, err
	}
	if g := t.gate; g != nil && g.running == running && g.partition == partition {
		return g.state, nil
	}
	var (
		g   storage.GateState
		got bool
	)
	err := t.query(ctx, qGateRead, []any{partition, running}, func(rows pgx.Rows) error {
		if !rows.Next() {
			return nil
		}
		var err error
		g, err = scanGate(rows)
		got = err == nil
		return err
	})
	if err == nil && !got {
		err = errors.New("gate read returned no row")
	}
	if err != nil {
		return storage.GateState{}, t.fail("gate read", "", err)
	}
	if t.snapshot || partition == t.locked.ID {
		t.gate = &gatePrefetch{partition: partition, running: running, state: g}
	}
	return g, nil
}

// fenceError classifies the writer fence's refusal by its SQLSTATE,
// raised by the sync_commits trigger (migration 003).
func fenceError(pe *pgconn.PgError, err error) (error, bool) {
	if pe.Code == sqlstateFenceRejected {
		return storage.FenceRejected(err), true
	}
	return nil, false
}

// sqlstateFenceRejected is the SQLSTATE the writer fence trigger raises.
const sqlstateFenceRejected = "SNWFR"
