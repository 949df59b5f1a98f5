package edge

import (
	"context"
	"slices"

	"github.com/syncnode/syncnode/storage"
)

// The serve gate follows the home. A schema migration of an edge
// partition runs at the edge: its checkpoint is declared, backfilled and
// activated in the edge's SQL under the edge's gate, and the backfill's
// batches are ordinary commits the replica applies. Between the
// declaration and the activation the edge refuses the partition; so must
// the hub, or its replica would serve a half-backfilled projection. The
// edge therefore reports, with each status and each page of commits, the
// partition's unactivated checkpoints of its running schema version
// (read after the page's commits: a page holding a batch is never
// reported without the checkpoint that the batch belongs to), and the
// hub refuses the replica while the last report names any
// (sync.schema_not_ready, reason home_checkpoint_pending).

// pendingAtHome lists the unactivated checkpoints of the running schema
// version by partition.
func (h *Home) pendingAtHome(ctx context.Context, partitions ...string) (map[string][]string, error) {
	cps, err := h.cfg.Store.Checkpoints(ctx, partitions...)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, c := range cps {
		if c.State != storage.CheckpointActivated && c.SchemaVersion == h.cfg.Schema.Version {
			out[c.Partition] = append(out[c.Partition], c.Name)
		}
	}
	return out, nil
}

// notePending records what the edge reported for a partition. A report
// naming checkpoints always applies (a migration started). An empty one
// clears the refusal only when it is final for the replica — the
// replica holds the commits up to the edge's max seq it was read with —
// because commits between the replica and that seq may still be the
// migration's batches. applied < 0: the caller does not know the
// replica's position (a hub node without the lease), which then reads it
// from SQL, only while a refusal is set.
func (h *Hub) notePending(ctx context.Context, l *link, partition string, pending []string, edgeMax, applied int64) {
	l.mu.Lock()
	s := l.parts[partition]
	if s == nil {
		s = &replicaState{}
		l.parts[partition] = s
	}
	had := len(s.homePending) > 0
	if len(pending) > 0 {
		s.homePending = slices.Clone(pending)
	}
	l.mu.Unlock()
	if len(pending) > 0 || !had {
		return
	}
	if applied < 0 {
		p, err := h.cfg.Store.PartitionGet(ctx, partition)
		if err != nil {
			return
		}
		applied = p.MaxCommitSeq
	}
	if applied >= edgeMax {
		l.mu.Lock()
		s.homePending = nil
		l.mu.Unlock()
	}
}

// homePending is the refusal of a replica whose home migrates it, or nil.
func (l *link) homePending(partition string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.parts[partition]; s != nil && len(s.homePending) > 0 {
		reason, msg := l.refusalLocked(s)
		return notReady(l.edge, reason, msg)
	}
	return nil
}
