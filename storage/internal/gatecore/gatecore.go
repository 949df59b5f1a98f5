// Package gatecore is the serve gate of storage.GateStore written once:
// the checkpoint lifecycle (declare, claim, advance, activate), the
// declarations EnsureSchema installs, and the serve-gate read. A store
// supplies its dialect's statements (SQL) and its transactions and
// connections (sqlexec.Runner); every decision about what to read, what to refuse
// and what to write is made here.
package gatecore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/sqlexec"
)

// SQL is one dialect's statements of the gate. Parameters are numbered in
// the order given; a list parameter is bound as ListArgFunc makes it. Its
// methods run the gate's steps on a connection inside a transaction the
// store holds (a schema installation, a push's WriteTx, a ReadTx).
// Checkpoint rows are read as CheckpointCols, partition rows as the
// store's partition columns (id, log epoch, epoch required, created at,
// last seen, max commitSeq, horizon), and gate states as the gate
// columns: schema marker present, stored schema version (0 without),
// schema revision (0 without), partition registered, its log epoch (""
// without), its gate revision (0 without), and its unactivated
// checkpoints at the running version as "name state" entries joined by
// ','.
type SQL struct {
	// Lock takes the write locks of the partitions in list $1, in one
	// order, for the rest of the transaction; "" when a write
	// transaction already holds every partition's lock.
	Lock string
	// LockAll locks the partition registry against every push before
	// FenceRaiseAll; "" as for Lock.
	LockAll string

	// Partition reads partition $1.
	Partition string
	// PartitionGate reads partition $1 followed by its gate columns for
	// running version $2 but registered and log epoch, which the
	// partition row gives.
	PartitionGate string
	// GateRead reads the gate columns of partition $1 for running version
	// $2: one row, whether or not the marker or the partition exists.
	GateRead string
	// Marker reads the stored schema version and layouts (JSON).
	Marker string

	// Checkpoint reads checkpoint ($1 partition, $2 schema version, $3
	// name); Checkpoints every checkpoint and CheckpointsOf those of the
	// partitions in list $1, both ordered by partition, schema version
	// and name; Unactivated those of schema version $1 not activated,
	// ordered by partition and name.
	Checkpoint, Checkpoints, CheckpointsOf, Unactivated string
	// CheckpointInsert inserts ($1 partition, $2 schema version, $3 name)
	// as declared at $4 unless it exists.
	CheckpointInsert string
	// Claim increments the owner epoch of checkpoint ($2, $3, $4) unless
	// it is activated, moves it to backfilling at $1, and returns it.
	Claim string
	// Advance sets watermark $1 and observed rows $2 at $3 of checkpoint
	// ($4, $5, $6) if it is backfilling with owner epoch $7.
	Advance string
	// Activate activates checkpoint ($3, $4, $5) with watermark $1 at $2
	// if its owner epoch is $6 and it is not activated.
	Activate string

	// FenceRaise raises partition $1's writer fence to $2 (creating it);
	// FenceRaiseAll every registered partition's to $1.
	FenceRaise, FenceRaiseAll string
	// Fence reads partition $1's required writer version.
	Fence string

	// SourceAbove returns a row when partition $1 has a change above
	// commitSeq $2 to a table in list $3; SourceAboveExcept likewise,
	// leaving out the changes of commits by client id $4.
	SourceAbove, SourceAboveExcept string
	// SourceCoverage returns the highest commitSeq of partition $1 whose
	// changes touch a table in list $2, or no row.
	SourceCoverage string

	// ListArgFunc makes a list parameter.
	ListArgFunc func([]string) any
}

// CheckpointCols are the columns a checkpoint row is read as.
const CheckpointCols = `partition, schema_version, name, state, watermark, owner_epoch, observed_rows, updated_at_ms`

// Gate is one store's serve gate: storage.GateStore but for
// EnsureSchemaWithCheckpoints, whose transaction is the store's (see
// SQL.Install). Each method runs its statements in its own transaction or
// on a read connection, as run gives them.
type Gate struct {
	sql *SQL
	run sqlexec.Runner
}

// New returns the gate over a store's statements and runner.
func New(sql *SQL, run sqlexec.Runner) *Gate { return &Gate{sql: sql, run: run} }

func (d *SQL) list(ids []string) any { return d.ListArgFunc(ids) }

// Install is the gate's part of EnsureSchemaWithCheckpoints, on c inside
// the store's schema transaction: install installs, verifies or migrates
// the schema; then decls are created and their fences raised, every
// registered partition's fence too when the stored version was older, and
// an unactivated checkpoint at version v that decls does not name refuses
// it all. decls were checked with CheckDeclarations.
func (d *SQL) Install(ctx context.Context, c sqlexec.Conn, v int32, decls []storage.CheckpointKey, install func() error) error {
	before, had, _, err := d.marker(ctx, c)
	if err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	if err := install(); err != nil {
		return err
	}
	if err := d.ensureCheckpoints(ctx, c, v, decls, had && before < v); err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	return nil
}

func (d *SQL) ensureCheckpoints(ctx context.Context, c sqlexec.Conn, v int32, decls []storage.CheckpointKey, migrated bool) error {
	if migrated {
		if err := sqlexec.Exec(ctx, c, d.LockAll); err != nil {
			return err
		}
		if err := sqlexec.Exec(ctx, c, d.FenceRaiseAll, v); err != nil {
			return err
		}
	}
	if len(decls) > 0 {
		ids := make([]string, len(decls))
		for i, k := range decls {
			ids[i] = k.Partition
		}
		if err := sqlexec.Exec(ctx, c, d.Lock, d.list(ids)); err != nil {
			return err
		}
	}
	now := time.Now().UnixMilli()
	for _, k := range decls {
		if err := d.declare(ctx, c, k, now); err != nil {
			return err
		}
	}
	open, err := d.checkpoints(ctx, c, d.Unactivated, v)
	if err != nil {
		return err
	}
	return checkDeclared(open, decls)
}

// declare inserts key as declared unless it exists and raises its
// partition's fence to its schema version.
func (d *SQL) declare(ctx context.Context, c sqlexec.Conn, key storage.CheckpointKey, nowMs int64) error {
	if err := sqlexec.Exec(ctx, c, d.CheckpointInsert, key.Partition, key.SchemaVersion, key.Name, nowMs); err != nil {
		return err
	}
	return sqlexec.Exec(ctx, c, d.FenceRaise, key.Partition, key.SchemaVersion)
}

// CheckpointDeclare implements storage.GateStore in one write transaction
// that takes the partition write lock first.
func (g *Gate) CheckpointDeclare(ctx context.Context, key storage.CheckpointKey, nowMs int64) (storage.Checkpoint, error) {
	if err := key.Check(); err != nil {
		return storage.Checkpoint{}, err
	}
	var cp storage.Checkpoint
	err := g.run.Write(ctx, func(c sqlexec.Conn) error {
		if err := sqlexec.Exec(ctx, c, g.sql.Lock, g.sql.list([]string{key.Partition})); err != nil {
			return err
		}
		v, ok, _, err := g.sql.marker(ctx, c)
		if err != nil {
			return err
		}
		if !ok || v != key.SchemaVersion {
			return invalidSchemaVersion(key, v, ok)
		}
		if err := g.sql.declare(ctx, c, key, nowMs); err != nil {
			return err
		}
		cp, ok, err = g.sql.checkpoint(ctx, c, key)
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

// CheckpointClaim implements storage.GateStore: one UPDATE … RETURNING, so
// racing claims take turns and each gets its own epoch.
func (g *Gate) CheckpointClaim(ctx context.Context, key storage.CheckpointKey, nowMs int64) (storage.Checkpoint, error) {
	if err := key.Check(); err != nil {
		return storage.Checkpoint{}, err
	}
	var cp storage.Checkpoint
	err := g.run.Write(ctx, func(c sqlexec.Conn) error {
		found, err := c.QueryRow(ctx, g.sql.Claim, []any{nowMs, key.Partition, key.SchemaVersion, key.Name}, checkpointDest(&cp)...)
		if err != nil || found {
			return err
		}
		existing, ok, err := g.sql.checkpoint(ctx, c, key)
		if err != nil {
			return err
		}
		return notDeclared(key, ok && existing.State == storage.CheckpointActivated)
	})
	if err != nil {
		return storage.Checkpoint{}, fmt.Errorf("claim checkpoint: %w", err)
	}
	return cp, nil
}

// CheckpointAdvance implements storage.GateStore, in its own write
// transaction.
func (g *Gate) CheckpointAdvance(ctx context.Context, p storage.CheckpointAdvanceParams) (bool, error) {
	if err := CheckAdvance(&p); err != nil {
		return false, err
	}
	var ok bool
	err := g.run.Write(ctx, func(c sqlexec.Conn) (err error) {
		ok, err = g.sql.AdvanceOn(ctx, c, &p)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("advance checkpoint: %w", err)
	}
	return ok, nil
}

// AdvanceOn records p (checked with CheckAdvance) on c, inside the
// caller's write transaction: storage.CheckpointAdvancer.
func (d *SQL) AdvanceOn(ctx context.Context, c sqlexec.Conn, p *storage.CheckpointAdvanceParams) (bool, error) {
	n, err := c.Exec(ctx, d.Advance, p.Watermark, p.ObservedRows, p.NowMs, p.Partition, p.SchemaVersion, p.Name, p.OwnerEpoch)
	return n == 1, err
}

// CheckpointActivate implements storage.GateStore: the checks, the
// source read and the update run under the partition write lock, and the
// partition is read after the lock is taken, so it sees every commit that
// held it.
func (g *Gate) CheckpointActivate(ctx context.Context, p storage.CheckpointActivateParams) (storage.ActivateOutcome, error) {
	if err := checkActivation(&p); err != nil {
		return "", err
	}
	var out storage.ActivateOutcome
	err := g.run.Write(ctx, func(c sqlexec.Conn) (err error) {
		out, err = g.sql.activate(ctx, c, &p)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("activate checkpoint: %w", err)
	}
	return out, nil
}

func (d *SQL) activate(ctx context.Context, c sqlexec.Conn, p *storage.CheckpointActivateParams) (storage.ActivateOutcome, error) {
	if err := sqlexec.Exec(ctx, c, d.Lock, d.list([]string{p.Partition})); err != nil {
		return "", err
	}
	cp, ok, err := d.checkpoint(ctx, c, p.CheckpointKey)
	if err != nil {
		return "", err
	}
	if !ok || cp.State == storage.CheckpointActivated {
		return "", notDeclared(p.CheckpointKey, ok)
	}
	if cp.OwnerEpoch != p.OwnerEpoch {
		return "", superseded(p.CheckpointKey, p.OwnerEpoch, cp.OwnerEpoch)
	}
	_, _, layouts, err := d.marker(ctx, c)
	if err != nil {
		return "", err
	}
	stored, err := schema.UnmarshalLayouts([]byte(layouts))
	if err != nil {
		return "", fmt.Errorf("read schema marker: %w", err)
	}
	if err := checkSources(stored, p.Sources); err != nil {
		return "", err
	}
	part, _, err := d.partition(ctx, c, p.Partition)
	if err != nil {
		return "", err
	}
	if p.Watermark > part.MaxCommitSeq {
		return "", invalidWatermark(p.Watermark, part.MaxCommitSeq)
	}
	required, fenced, err := d.fence(ctx, c, p.Partition)
	if err != nil {
		return "", err
	}
	if !fenced || required < p.SchemaVersion {
		return "", fenceMissing(p.CheckpointKey, required, fenced)
	}
	switch ch, err := d.sourceChangesAbove(ctx, c, p.Partition, part.HorizonSeq, p.Sources, p.Watermark, p.OwnClientID); {
	case err != nil:
		return "", err
	case ch == storage.SourceChanged:
		return storage.ActivateStale, nil
	case ch == storage.SourceUnverifiable:
		return storage.ActivateUnverifiable, nil
	}
	n, err := c.Exec(ctx, d.Activate, p.Watermark, p.NowMs, p.Partition, p.SchemaVersion, p.Name, p.OwnerEpoch)
	if err != nil {
		return "", err
	}
	if n != 1 {
		return "", errors.New("checkpoint changed under the partition write lock")
	}
	return storage.ActivateActivated, nil
}

// Checkpoints implements storage.GateStore.
func (g *Gate) Checkpoints(ctx context.Context, partitions ...string) ([]storage.Checkpoint, error) {
	q, args := g.sql.Checkpoints, []any(nil)
	if len(partitions) > 0 {
		q, args = g.sql.CheckpointsOf, []any{g.sql.list(partitions)}
	}
	var out []storage.Checkpoint
	err := g.run.Read(ctx, func(c sqlexec.Conn) (err error) {
		out, err = g.sql.checkpoints(ctx, c, q, args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	return out, nil
}

// SourceCoverage implements storage.GateStore.
func (g *Gate) SourceCoverage(ctx context.Context, partition string, tables []string) (int64, error) {
	if len(tables) == 0 {
		return 0, nil
	}
	var seq int64
	err := g.run.Read(ctx, func(c sqlexec.Conn) error {
		_, err := c.QueryRow(ctx, g.sql.SourceCoverage, []any{partition, g.sql.list(tables)}, &seq)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("source coverage: %w", err)
	}
	return seq, nil
}

// SourceChangesAbove implements storage.GateStore; the horizon
// and the log are read in one snapshot.
func (g *Gate) SourceChangesAbove(ctx context.Context, partition string, tables []string, seq int64) (storage.SourceChange, error) {
	var out storage.SourceChange
	err := g.run.Snapshot(ctx, func(c sqlexec.Conn) error {
		p, _, err := g.sql.partition(ctx, c, partition)
		if err != nil {
			return err
		}
		out, err = g.sql.sourceChangesAbove(ctx, c, partition, p.HorizonSeq, tables, seq, "")
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
func (d *SQL) sourceChangesAbove(ctx context.Context, c sqlexec.Conn, partition string, horizon int64, tables []string, seq int64, ownClientID string) (storage.SourceChange, error) {
	if len(tables) == 0 {
		return storage.SourceClean, nil
	}
	if horizon > seq {
		return storage.SourceUnverifiable, nil
	}
	q, args := d.SourceAbove, []any{partition, seq, d.list(tables)}
	if ownClientID != "" {
		q, args = d.SourceAboveExcept, append(args, ownClientID)
	}
	var one int64
	found, err := c.QueryRow(ctx, q, args, &one)
	if err != nil {
		return "", err
	}
	if found {
		return storage.SourceChanged, nil
	}
	return storage.SourceClean, nil
}

// WriterFence implements storage.GateStore.
func (g *Gate) WriterFence(ctx context.Context, partition string) (required int32, ok bool, err error) {
	err = g.run.Read(ctx, func(c sqlexec.Conn) (err error) {
		required, ok, err = g.sql.fence(ctx, c, partition)
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("writer fence: %w", err)
	}
	return required, ok, nil
}

func (d *SQL) marker(ctx context.Context, c sqlexec.Conn) (v int32, ok bool, layouts string, err error) {
	ok, err = c.QueryRow(ctx, d.Marker, nil, &v, &layouts)
	return v, ok, layouts, err
}

func (d *SQL) partition(ctx context.Context, c sqlexec.Conn, id string) (p storage.Partition, ok bool, err error) {
	ok, err = c.QueryRow(ctx, d.Partition, []any{id}, partitionDest(&p)...)
	return p, ok, err
}

func (d *SQL) fence(ctx context.Context, c sqlexec.Conn, partition string) (required int32, ok bool, err error) {
	ok, err = c.QueryRow(ctx, d.Fence, []any{partition}, &required)
	return required, ok, err
}

func (d *SQL) checkpoint(ctx context.Context, c sqlexec.Conn, key storage.CheckpointKey) (cp storage.Checkpoint, ok bool, err error) {
	ok, err = c.QueryRow(ctx, d.Checkpoint, []any{key.Partition, key.SchemaVersion, key.Name}, checkpointDest(&cp)...)
	return cp, ok, err
}

func (d *SQL) checkpoints(ctx context.Context, c sqlexec.Conn, q string, args ...any) ([]storage.Checkpoint, error) {
	var out []storage.Checkpoint
	err := c.Query(ctx, q, args, func(scan func(...any) error) error {
		var cp storage.Checkpoint
		if err := scan(checkpointDest(&cp)...); err != nil {
			return err
		}
		out = append(out, cp)
		return nil
	})
	return out, err
}

func checkpointDest(cp *storage.Checkpoint) []any {
	return []any{&cp.Partition, &cp.SchemaVersion, &cp.Name, (*string)(&cp.State), &cp.Watermark, &cp.OwnerEpoch, &cp.ObservedRows, &cp.UpdatedAtMs}
}

func partitionDest(p *storage.Partition) []any {
	return []any{&p.ID, &p.LogEpoch, &p.EpochRequired, &p.CreatedAtMs, &p.LastSeenMs, &p.MaxCommitSeq, &p.HorizonSeq}
}
