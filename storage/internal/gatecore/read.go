package gatecore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/sqlexec"
)

// Prefetch is a gate state a transaction read for a partition and a
// running schema version. A store keeps it for the rest of the
// transaction when nothing can change that state under it (see
// storage.GateReader), and answers GateRead from it.
type Prefetch struct {
	partition string
	running   int32
	state     storage.GateState
}

// NewPrefetch records state as read for partition and running.
func NewPrefetch(partition string, running int32, state storage.GateState) *Prefetch {
	return &Prefetch{partition: partition, running: running, state: state}
}

// Get returns the kept state if it was read for partition and running.
func (p *Prefetch) Get(partition string, running int32) (storage.GateState, bool) {
	if p == nil || p.partition != partition || p.running != running {
		return storage.GateState{}, false
	}
	return p.state, true
}

// GateRead implements storage.GateStore, on a read connection.
func (g *Gate) GateRead(ctx context.Context, partition string, running int32) (storage.GateState, error) {
	var st storage.GateState
	err := g.run.Read(ctx, func(c sqlexec.Conn) (err error) {
		st, err = g.sql.ReadOn(ctx, c, partition, running)
		return err
	})
	return st, err
}

// ReadOn is the serve-gate read on c, in the caller's transaction.
func (d *SQL) ReadOn(ctx context.Context, c sqlexec.Conn, partition string, running int32) (storage.GateState, error) {
	var row gateRow
	found, err := c.QueryRow(ctx, d.GateRead, []any{partition, running}, row.dest()...)
	if err == nil && !found {
		err = errors.New("no row")
	}
	if err != nil {
		return storage.GateState{}, fmt.Errorf("gate read: %w", err)
	}
	return row.state(), nil
}

// ReadPartition reads a partition row and, in the same statement, its gate
// state for running; ok is false for an unregistered partition. It runs
// on every WriteTx: one allocation of the kept state, none per column.
func (d *SQL) ReadPartition(ctx context.Context, c sqlexec.Conn, partition string, running int32) (p storage.Partition, pre *Prefetch, ok bool, err error) {
	pre = &Prefetch{partition: partition, running: running}
	st := &pre.state
	var pending string
	ok, err = c.QueryRow(ctx, d.PartitionGate, []any{partition, running},
		&p.ID, &p.LogEpoch, &p.EpochRequired, &p.CreatedAtMs, &p.LastSeenMs, &p.MaxCommitSeq, &p.HorizonSeq,
		&st.HasMarker, &st.SchemaVersion, &st.SchemaRevision, &st.Revision, &pending)
	if err != nil || !ok {
		return p, nil, false, err
	}
	st.Registered, st.LogEpoch, st.Pending = true, p.LogEpoch, parsePending(pending)
	return p, pre, true, nil
}

// gateRow scans the gate columns (see SQL).
type gateRow struct {
	st      storage.GateState
	pending string
}

func (r *gateRow) dest() []any {
	return []any{&r.st.HasMarker, &r.st.SchemaVersion, &r.st.SchemaRevision, &r.st.Registered, &r.st.LogEpoch, &r.st.Revision, &r.pending}
}

func (r *gateRow) state() storage.GateState {
	st := r.st
	st.Pending = parsePending(r.pending)
	return st
}

// parsePending decodes the pending list the stores aggregate in SQL:
// "name state" entries joined by ','. Names cannot hold either separator
// (storage.CheckpointKey.Check).
func parsePending(s string) []storage.PendingCheckpoint {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	out := make([]storage.PendingCheckpoint, 0, len(parts))
	for _, p := range parts {
		name, state, _ := strings.Cut(p, " ")
		out = append(out, storage.PendingCheckpoint{Name: name, State: storage.CheckpointState(state)})
	}
	slices.SortFunc(out, func(a, b storage.PendingCheckpoint) int { return strings.Compare(a.Name, b.Name) })
	return out
}
