package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
)

// The serve gate's SQL (storage.GateStore). Every write runs on the writer
// connection, which is the partition write lock; reads run on readers.

const checkpointCols = `partition, schema_version, name, state, watermark, owner_epoch, observed_rows, updated_at_ms`

const (
	qCheckpointGet = `SELECT ` + checkpointCols + ` FROM sync_backfill_checkpoints
		WHERE partition = ? AND schema_version = ? AND name = ?`
	qCheckpointInsert = `INSERT INTO sync_backfill_checkpoints (partition, schema_version, name, state, updated_at_ms)
		VALUES (?, ?, ?, 'declared', ?) ON CONFLICT DO NOTHING`
	qFenceRaise = `INSERT INTO sync_writer_fence (partition, required_writer_version) VALUES (?, ?)
		ON CONFLICT (partition) DO UPDATE SET required_writer_version = max(required_writer_version, excluded.required_writer_version)`
	qFenceRaiseAll = `INSERT INTO sync_writer_fence (partition, required_writer_version) SELECT id, ? FROM sync_partitions WHERE true
		ON CONFLICT (partition) DO UPDATE SET required_writer_version = max(required_writer_version, excluded.required_writer_version)`
	qFenceGet      = `SELECT required_writer_version FROM sync_writer_fence WHERE partition = ?`
	qMarkerVersion = `SELECT schema_version FROM sync_schema_marker WHERE id = 1`
	qClaim         = `UPDATE sync_backfill_checkpoints SET owner_epoch = owner_epoch + 1, state = 'backfilling', updated_at_ms = ?
		WHERE partition = ? AND schema_version = ? AND name = ? AND state <> 'activated'
		RETURNING ` + checkpointCols
	qAdvance = `UPDATE sync_backfill_checkpoints SET watermark = ?, observed_rows = ?, updated_at_ms = ?
		WHERE partition = ? AND schema_version = ? AND name = ? AND owner_epoch = ? AND state = 'backfilling'`
	qActivate = `UPDATE sync_backfill_checkpoints SET state = 'activated', watermark = ?, updated_at_ms = ?
		WHERE partition = ? AND schema_version = ? AND name = ? AND owner_epoch = ? AND state <> 'activated'`
	qUnactivatedAt = `SELECT ` + checkpointCols + ` FROM sync_backfill_checkpoints
		WHERE schema_version = ? AND state <> 'activated' ORDER BY partition, name`
	qSourceAbove = `SELECT 1 FROM sync_changes
		WHERE partition = ? AND seq > ? AND tbl IN (SELECT value FROM json_each(?)) LIMIT 1`
	qSourceAboveExcept = `SELECT 1 FROM sync_changes ch
		WHERE ch.partition = ? AND ch.seq > ? AND ch.tbl IN (SELECT value FROM json_each(?))
		AND NOT EXISTS (SELECT 1 FROM sync_commits c WHERE c.partition = ch.partition AND c.seq = ch.seq AND c.client_id = ?)
		LIMIT 1`
	qSourceCoverage = `SELECT seq FROM sync_changes
		WHERE partition = ? AND tbl IN (SELECT value FROM json_each(?)) ORDER BY seq DESC LIMIT 1`
)

// qGateRead is the serve-gate read: one row whatever exists, numbered
// parameters (?1 partition, ?2 running schema version).
const qGateRead = `SELECT m.schema_version IS NOT NULL, coalesce(m.schema_version, 0), coalesce(m.gate_revision, 0),
	p.id IS NOT NULL, coalesce(p.log_epoch, ''), coalesce(p.gate_revision, 0),
	coalesce((SELECT group_concat(c.name || ' ' || c.state, ',') FROM sync_backfill_checkpoints c
		WHERE c.partition = ?1 AND c.schema_version = ?2 AND c.state <> 'activated'), '')
	FROM (SELECT 1) AS one
	LEFT JOIN sync_schema_marker m ON m.id = 1
	LEFT JOIN sync_partitions p ON p.id = ?1`

func scanCheckpoint(r *rows, cp *storage.Checkpoint) error {
	var state string
	if err := r.Scan(&cp.Partition, &cp.SchemaVersion, &cp.Name, &state, &cp.Watermark, &cp.OwnerEpoch, &cp.ObservedRows, &cp.UpdatedAtMs); err != nil {
		return err
	}
	cp.State = storage.CheckpointState(state)
	return nil
}

func getCheckpoint(ctx context.Context, c *conn, key storage.CheckpointKey) (cp storage.Checkpoint, ok bool, err error) {
	r, err := c.query(ctx, qCheckpointGet, key.Partition, key.SchemaVersion, key.Name)
	if err != nil {
		return cp, false, err
	}
	defer r.Close()
	if !r.Next() {
		return cp, false, r.Err()
	}
	if err := scanCheckpoint(r, &cp); err != nil {
		return cp, false, err
	}
	return cp, true, r.Close()
}

func markerVersion(ctx context.Context, c *conn) (v int32, ok bool, err error) {
	ok, err = c.queryRow(ctx, qMarkerVersion, nil, &v)
	return v, ok, err
}

// EnsureSchemaWithCheckpoints implements storage.GateStore: the schema and
// the declarations in one write transaction, so a refusal rolls back both.
func (s *Store) EnsureSchemaWithCheckpoints(ctx context.Context, sc *schema.Schema, decls []storage.CheckpointKey) error {
	if err := storage.CheckDeclarations(decls, sc.Version); err != nil {
		return err
	}
	err := s.write(ctx, func(c *conn) error {
		if err := applyMigrations(ctx, c, s.migrations); err != nil {
			return err
		}
		before, had, err := markerVersion(ctx, c)
		if err != nil {
			return fmt.Errorf("ensure schema: %w", err)
		}
		if err := s.ensureSchema(ctx, c, sc); err != nil {
			return err
		}
		if err := ensureCheckpoints(ctx, c, sc.Version, decls, had && before < sc.Version); err != nil {
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
// checkpoints of version v.
func ensureCheckpoints(ctx context.Context, c *conn, v int32, decls []storage.CheckpointKey, migrated bool) error {
	if migrated {
		if _, err := c.exec(ctx, qFenceRaiseAll, v); err != nil {
			return err
		}
	}
	now := time.Now().UnixMilli()
	for _, d := range decls {
		if _, err := c.exec(ctx, qCheckpointInsert, d.Partition, d.SchemaVersion, d.Name, now); err != nil {
			return err
		}
		if _, err := c.exec(ctx, qFenceRaise, d.Partition, d.SchemaVersion); err != nil {
			return err
		}
	}
	r, err := c.query(ctx, qUnactivatedAt, v)
	if err != nil {
		return err
	}
	var open []storage.Checkpoint
	for r.Next() {
		var cp storage.Checkpoint
		if err := scanCheckpoint(r, &cp); err != nil {
			r.Close()
			return err
		}
		open = append(open, cp)
	}
	if err := r.Err(); err != nil {
		return err
	}
	return storage.CheckDeclared(open, decls)
}

// CheckpointDeclare implements storage.GateStore on the writer, which is
// the partition write lock.
func (s *Store) CheckpointDeclare(ctx context.Context, key storage.CheckpointKey, nowMs int64) (storage.Checkpoint, error) {
	if err := key.Check(); err != nil {
		return storage.Checkpoint{}, err
	}
	var cp storage.Checkpoint
	err := s.write(ctx, func(c *conn) error {
		v, ok, err := markerVersion(ctx, c)
		if err != nil {
			return err
		}
		if !ok || v != key.SchemaVersion {
			return storage.InvalidSchemaVersion(key, v, ok)
		}
		if _, err := c.exec(ctx, qCheckpointInsert, key.Partition, key.SchemaVersion, key.Name, nowMs); err != nil {
			return err
		}
		if _, err := c.exec(ctx, qFenceRaise, key.Partition, key.SchemaVersion); err != nil {
			return err
		}
		cp, ok, err = getCheckpoint(ctx, c, key)
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

// CheckpointClaim implements storage.GateStore: one UPDATE … RETURNING on
// the writer, so claims are serialized and each gets its own epoch.
func (s *Store) CheckpointClaim(ctx context.Context, key storage.CheckpointKey, nowMs int64) (storage.Checkpoint, error) {
	if err := key.Check(); err != nil {
		return storage.Checkpoint{}, err
	}
	var cp storage.Checkpoint
	err := s.write(ctx, func(c *conn) error {
		r, err := c.query(ctx, qClaim, nowMs, key.Partition, key.SchemaVersion, key.Name)
		if err != nil {
			return err
		}
		found := r.Next()
		if found {
			err = scanCheckpoint(r, &cp)
		}
		r.Close()
		if err == nil {
			err = r.Err()
		}
		if err != nil || found {
			return err
		}
		existing, ok, err := getCheckpoint(ctx, c, key)
		if err != nil {
			return err
		}
		return storage.NotDeclared(key, ok && existing.State == storage.CheckpointActivated)
	})
	if err != nil {
		return storage.Checkpoint{}, fmt.Errorf("claim checkpoint: %w", err)
	}
	return cp, nil
}

// CheckpointAdvance implements storage.GateStore in its own write
// transaction.
func (s *Store) CheckpointAdvance(ctx context.Context, p storage.CheckpointAdvanceParams) (bool, error) {
	if err := storage.CheckAdvance(&p); err != nil {
		return false, err
	}
	var ok bool
	err := s.write(ctx, func(c *conn) (err error) {
		ok, err = advance(ctx, c, &p)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("advance checkpoint: %w", err)
	}
	return ok, nil
}

func advance(ctx context.Context, c *conn, p *storage.CheckpointAdvanceParams) (bool, error) {
	n, err := c.exec(ctx, qAdvance, p.Watermark, p.ObservedRows, p.NowMs, p.Partition, p.SchemaVersion, p.Name, p.OwnerEpoch)
	return n == 1, err
}

// CheckpointAdvance implements storage.CheckpointAdvancer inside the
// caller's write transaction.
func (t *tx) CheckpointAdvance(ctx context.Context, p storage.CheckpointAdvanceParams) (bool, error) {
	if err := t.check(); err != nil {
		return false, err
	}
	if err := storage.CheckAdvance(&p); err != nil {
		return false, err
	}
	ok, err := advance(ctx, t.c, &p)
	if err != nil {
		return false, t.fail("advance checkpoint", "", err)
	}
	return ok, nil
}

// CheckpointActivate implements storage.GateStore on the writer: the
// checks, the source read and the update see one locked state.
func (s *Store) CheckpointActivate(ctx context.Context, p storage.CheckpointActivateParams) (storage.ActivateOutcome, error) {
	if err := storage.CheckActivation(&p); err != nil {
		return "", err
	}
	var out storage.ActivateOutcome
	err := s.write(ctx, func(c *conn) error {
		cp, ok, err := getCheckpoint(ctx, c, p.CheckpointKey)
		if err != nil {
			return err
		}
		if !ok || cp.State == storage.CheckpointActivated {
			return storage.NotDeclared(p.CheckpointKey, ok)
		}
		if cp.OwnerEpoch != p.OwnerEpoch {
			return storage.Superseded(p.CheckpointKey, p.OwnerEpoch, cp.OwnerEpoch)
		}
		marker, _, err := readMarker(ctx, c)
		if err != nil {
			return err
		}
		if err := storage.CheckSources(marker.Layouts, p.Sources); err != nil {
			return err
		}
		part, _, err := readPartition(ctx, c, p.Partition)
		if err != nil {
			return err
		}
		if p.Watermark > part.MaxCommitSeq {
			return storage.InvalidWatermark(p.Watermark, part.MaxCommitSeq)
		}
		var required int32
		fenced, err := c.queryRow(ctx, qFenceGet, []any{p.Partition}, &required)
		if err != nil {
			return err
		}
		if !fenced || required < p.SchemaVersion {
			return storage.FenceMissing(p.CheckpointKey, required, fenced)
		}
		switch ch, err := sourceChangesAbove(ctx, c, p.Partition, part.HorizonSeq, p.Sources, p.Watermark, p.OwnClientID); {
		case err != nil:
			return err
		case ch == storage.SourceChanged:
			out = storage.ActivateStale
			return nil
		case ch == storage.SourceUnverifiable:
			out = storage.ActivateUnverifiable
			return nil
		}
		n, err := c.exec(ctx, qActivate, p.Watermark, p.NowMs, p.Partition, p.SchemaVersion, p.Name, p.OwnerEpoch)
		if err != nil {
			return err
		}
		if n != 1 {
			return errors.New("checkpoint changed under the write lock")
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
		q += ` WHERE partition IN (SELECT value FROM json_each(?))`
		args = append(args, jsonStrings(partitions))
	}
	q += ` ORDER BY partition, schema_version, name`
	var out []storage.Checkpoint
	err := s.withReader(ctx, func(c *conn) error {
		r, err := c.query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			var cp storage.Checkpoint
			if err := scanCheckpoint(r, &cp); err != nil {
				return err
			}
			out = append(out, cp)
		}
		return r.Err()
	})
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
	err := s.withReader(ctx, func(c *conn) error {
		_, err := c.queryRow(ctx, qSourceCoverage, []any{partition, jsonStrings(tables)}, &seq)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("source coverage: %w", err)
	}
	return seq, nil
}

// SourceChangesAbove implements storage.GateStore; the horizon and the log
// are read in one snapshot.
func (s *Store) SourceChangesAbove(ctx context.Context, partition string, tables []string, seq int64) (storage.SourceChange, error) {
	var out storage.SourceChange
	err := s.withReader(ctx, func(c *conn) error {
		return readTx(ctx, c, func() error {
			p, _, err := readPartition(ctx, c, partition)
			if err != nil {
				return err
			}
			out, err = sourceChangesAbove(ctx, c, partition, p.HorizonSeq, tables, seq, "")
			return err
		})
	})
	if err != nil {
		return "", fmt.Errorf("source changes: %w", err)
	}
	return out, nil
}

// sourceChangesAbove walks the log forward from seq: only the changes
// committed since the watermark are read. Changes of commits by
// ownClientID ("": none) do not count.
func sourceChangesAbove(ctx context.Context, c *conn, partition string, horizon int64, tables []string, seq int64, ownClientID string) (storage.SourceChange, error) {
	if len(tables) == 0 {
		return storage.SourceClean, nil
	}
	if horizon > seq {
		return storage.SourceUnverifiable, nil
	}
	q, args := qSourceAbove, []any{partition, seq, jsonStrings(tables)}
	if ownClientID != "" {
		q, args = qSourceAboveExcept, append(args, ownClientID)
	}
	var one int64
	found, err := c.queryRow(ctx, q, args, &one)
	if err != nil {
		return "", err
	}
	if found {
		return storage.SourceChanged, nil
	}
	return storage.SourceClean, nil
}

// WriterFence implements storage.GateStore.
func (s *Store) WriterFence(ctx context.Context, partition string) (required int32, ok bool, err error) {
	err = s.withReader(ctx, func(c *conn) error {
		ok, err = c.queryRow(ctx, qFenceGet, []any{partition}, &required)
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("writer fence: %w", err)
	}
	return required, ok, nil
}

func gateRead(ctx context.Context, c *conn, partition string, running int32) (storage.GateState, error) {
	var (
		g       storage.GateState
		pending string
	)
	_, err := c.queryRow(ctx, qGateRead, []any{partition, running},
		&g.HasMarker, &g.SchemaVersion, &g.SchemaRevision, &g.Registered, &g.LogEpoch, &g.Revision, &pending)
	if err != nil {
		return g, fmt.Errorf("gate read: %w", err)
	}
	g.Pending = storage.ParsePending(pending)
	return g, nil
}

// GateRead implements storage.GateStore on a reader connection.
func (s *Store) GateRead(ctx context.Context, partition string, running int32) (storage.GateState, error) {
	var g storage.GateState
	err := s.withReader(ctx, func(c *conn) (err error) {
		g, err = gateRead(ctx, c, partition, running)
		return err
	})
	return g, err
}

// gatePrefetch is a gate state read in a transaction together with a
// partition row (Partition, or the lock of a write transaction), for the
// installed schema version. A transaction cannot see it change: a read
// transaction is one snapshot, and a write transaction holds the writer,
// which is SQLite's database write lock. GateRead in the transaction
// answers from it without a statement.
type gatePrefetch struct {
	partition string
	running   int32
	state     storage.GateState
}

// qPartitionGate is qPartition with the gate read's columns (?2: the
// running schema version).
const qPartitionGate = `SELECT ` + partitionCols + `,
	m.schema_version IS NOT NULL, coalesce(m.schema_version, 0), coalesce(m.gate_revision, 0), p.gate_revision,
	coalesce((SELECT group_concat(c.name || ' ' || c.state, ',') FROM sync_backfill_checkpoints c
		WHERE c.partition = p.id AND c.schema_version = ?2 AND c.state <> 'activated'), '')
	FROM sync_partitions p LEFT JOIN sync_schema_marker m ON m.id = 1 WHERE p.id = ?1`

// readPartitionGate reads a partition row and, with an installed schema,
// its gate state in the same statement.
func readPartitionGate(ctx context.Context, c *conn, partition string, inst *installed) (storage.Partition, *gatePrefetch, bool, error) {
	if inst == nil {
		p, ok, err := readPartition(ctx, c, partition)
		return p, nil, ok, err
	}
	var (
		p       storage.Partition
		g       = &gatePrefetch{partition: partition, running: inst.schema.Version}
		pending string
	)
	ok, err := c.queryRow(ctx, qPartitionGate, []any{partition, g.running},
		&p.ID, &p.LogEpoch, &p.EpochRequired, &p.CreatedAtMs, &p.LastSeenMs, &p.MaxCommitSeq, &p.HorizonSeq,
		&g.state.HasMarker, &g.state.SchemaVersion, &g.state.SchemaRevision, &g.state.Revision, &pending)
	if err != nil {
		return p, nil, false, fmt.Errorf("read partition: %w", err)
	}
	if !ok {
		return p, nil, false, nil
	}
	g.state.Registered, g.state.LogEpoch = true, p.LogEpoch
	g.state.Pending = storage.ParsePending(pending)
	return p, g, true, nil
}

// GateRead implements storage.GateReader in the transaction's snapshot,
// from the state read with the partition when there is one.
func (t *tx) GateRead(ctx context.Context, partition string, running int32) (storage.GateState, error) {
	if err := t.check(); err != nil {
		return storage.GateState{}, err
	}
	if g := t.gate; g != nil && g.running == running && g.partition == partition {
		return g.state, nil
	}
	g, err := gateRead(ctx, t.c, partition, running)
	if err != nil {
		t.aborted = true
		return g, err
	}
	t.gate = &gatePrefetch{partition: partition, running: running, state: g}
	return g, nil
}

// fenceError classifies the writer fence's refusal: RAISE inside a
// trigger is SQLITE_CONSTRAINT_TRIGGER, and the fence is the only trigger
// syncnode installs that raises.
func fenceError(err error) (error, bool) {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_TRIGGER {
		return storage.FenceRejected(err), true
	}
	return nil, false
}
