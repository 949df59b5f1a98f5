package gate

import (
	"context"
	"errors"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/storage"
)

// The transitions: each runs in SQL first, then rewrites the partition's
// token in KV and publishes its control event. A token that cannot be
// written is logged and counted, and repaired by the next Reconcile; the
// SQL transition stands and is what every node's checks read.

// Key is the checkpoint key of name in partition at the running version.
func (g *Gate) Key(partition, name string) storage.CheckpointKey {
	return storage.CheckpointKey{Partition: partition, Name: name, SchemaVersion: g.build}
}

// Declare declares a checkpoint of the running schema version for this
// process: from now on the partition is served only by processes that
// declared it, until it activates. The process's own declaration is
// recorded before the SQL transition, so it never refuses itself.
func (g *Gate) Declare(ctx context.Context, partition, name string) (storage.Checkpoint, error) {
	return g.declareCheckpoint(ctx, partition, name, true)
}

// DeclareExternal declares a checkpoint of the running schema version on
// behalf of someone else (an operator through the admin API, fixing data
// by hand: declare, fix, activate): this process does not join the
// declarers, so every node, this one included, refuses the partition
// until the checkpoint activates.
func (g *Gate) DeclareExternal(ctx context.Context, partition, name string) (storage.Checkpoint, error) {
	return g.declareCheckpoint(ctx, partition, name, false)
}

func (g *Gate) declareCheckpoint(ctx context.Context, partition, name string, own bool) (storage.Checkpoint, error) {
	key := g.Key(partition, name)
	added := own && g.declare(key)
	cp, err := g.cfg.Store.CheckpointDeclare(ctx, key, g.nowMs())
	if err != nil {
		if added {
			g.undeclare(key)
		}
		return cp, err
	}
	g.published(ctx, partition)
	g.event(ctx, &partition, bus.EventCheckpointDeclared, name, checkpointData(cp))
	return cp, nil
}

// Claim makes the caller the checkpoint's owner (a new owner epoch).
func (g *Gate) Claim(ctx context.Context, key storage.CheckpointKey) (storage.Checkpoint, error) {
	cp, err := g.cfg.Store.CheckpointClaim(ctx, key, g.nowMs())
	if err != nil {
		return cp, err
	}
	g.event(ctx, &key.Partition, bus.EventCheckpointClaimed, key.Name, checkpointData(cp))
	return cp, nil
}

// Advanced announces progress that a backfill batch committed (the
// advance itself runs inside the batch's transaction).
func (g *Gate) Advanced(ctx context.Context, p storage.CheckpointAdvanceParams) {
	g.event(ctx, &p.Partition, bus.EventCheckpointAdvanced, p.Name, map[string]any{
		"name": p.Name, "schemaVersion": p.SchemaVersion, "ownerEpoch": p.OwnerEpoch,
		"watermark": p.Watermark, "observedRows": p.ObservedRows,
	})
}

// Activate activates a checkpoint (storage.GateStore.CheckpointActivate)
// and announces the outcome; an activation reopens the partition on every
// node.
func (g *Gate) Activate(ctx context.Context, p storage.CheckpointActivateParams) (storage.ActivateOutcome, error) {
	if p.NowMs == 0 {
		p.NowMs = g.nowMs()
	}
	out, err := g.cfg.Store.CheckpointActivate(ctx, p)
	if err != nil {
		return out, err
	}
	name := map[storage.ActivateOutcome]string{
		storage.ActivateActivated:    bus.EventCheckpointActivated,
		storage.ActivateStale:        bus.EventCheckpointStale,
		storage.ActivateUnverifiable: bus.EventCheckpointUnverifiable,
	}[out]
	if out == storage.ActivateActivated {
		g.published(ctx, p.Partition)
	}
	g.event(ctx, &p.Partition, name, p.Name, map[string]any{
		"name": p.Name, "schemaVersion": p.SchemaVersion, "ownerEpoch": p.OwnerEpoch,
		"watermark": p.Watermark, "sources": p.Sources, "outcome": out,
	})
	return out, nil
}

// RotateEpoch gives the partition a new log epoch (after a backup
// restore) and announces it; requests in flight on the old epoch are
// refused.
func (g *Gate) RotateEpoch(ctx context.Context, partition string) (storage.Partition, error) {
	p, err := g.cfg.Store.PartitionRotateEpoch(ctx, partition, g.nowMs())
	if err != nil {
		return p, err
	}
	g.published(ctx, partition)
	g.event(ctx, &partition, bus.EventEpochRotated, "", map[string]any{"logEpoch": p.LogEpoch})
	return p, nil
}

// published rewrites a partition's token after a transition.
func (g *Gate) published(ctx context.Context, partition string) {
	if g.cfg.JetStream == nil {
		return
	}
	if err := g.Publish(ctx, partition); err != nil {
		level := "serve-gate token not written; the next resync repairs it"
		if errors.Is(err, ErrNoBus) {
			level = "serve-gate bucket not bound yet; the token is written when it is"
		}
		g.log.Warn(level, "partition", partition, "err", err)
	}
}

func checkpointData(cp storage.Checkpoint) map[string]any {
	return map[string]any{
		"name": cp.Name, "schemaVersion": cp.SchemaVersion, "state": cp.State,
		"ownerEpoch": cp.OwnerEpoch, "watermark": cp.Watermark, "observedRows": cp.ObservedRows,
		"updatedAtMs": cp.UpdatedAtMs,
	}
}

// nowMs is the gate's clock in Unix milliseconds.
func (g *Gate) nowMs() int64 { return g.cfg.Clock.Now().UnixMilli() }
