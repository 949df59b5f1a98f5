package edge

import (
	"fmt"
	"time"
)

// maxRebuildTries bounds the wipe-and-adopt retries of a rebuild: a
// request that passed Ready just before the wipe may register the
// partition under an epoch of the hub's before the adopt (a touch), and
// the wipe is repeated.
const maxRebuildTries = 5

// rebuild drops the replica of a partition whose edge log epoch is no
// longer the replica's and registers it afresh under the edge's new
// epoch, for catchUp to re-page from the edge's first retained commit.
// The edge rotates its epoch after a restore (SPEC.md §2.1): its log may
// be shorter than the replica's, and its seqs are reused, so nothing of
// the old replica can be kept. The hub's clients of the partition are
// told to reset as the edge's are: a request carrying the old epoch gets
// resetRequired, and OnReset wakes the realtime sessions with
// reset-required. The partition is not served until the replica holds
// what the edge held when the rebuild started.
func (h *Hub) rebuild(l *link, s *replicaState, p partitionStatus) error {
	old := s.epoch
	l.mu.Lock()
	s.rebuilding, s.rebuildTo, s.err = true, p.MaxCommitSeq, nil
	l.mu.Unlock()
	h.log.Info("edge: log epoch changed at the edge; rebuilding the replica",
		"edge", l.edge, "partition", p.ID, "replica_epoch", old, "edge_epoch", p.LogEpoch, "edge_seq", p.MaxCommitSeq)
	ctx := h.ctx
	for try := 0; ; try++ {
		if try == maxRebuildTries {
			return l.fail(s, fmt.Errorf("rebuild: the partition was re-registered under another epoch %d times", try))
		}
		if err := h.cfg.Store.PartitionWipe(ctx, p.ID); err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
		got, err := h.cfg.Store.PartitionAdopt(ctx, p.ID, p.LogEpoch, time.Now().UnixMilli())
		if err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
		if got.LogEpoch == p.LogEpoch && got.MaxCommitSeq == 0 {
			break
		}
	}
	h.metrics.Rebuilds.Add(1)
	l.mu.Lock()
	s.epoch, s.applied, s.edgeMax = p.LogEpoch, 0, p.MaxCommitSeq
	close(l.progress)
	l.progress = make(chan struct{})
	l.mu.Unlock()
	if h.cfg.OnReset != nil {
		h.cfg.OnReset(ctx, p.ID)
	}
	if p.MaxCommitSeq == 0 {
		l.mu.Lock()
		s.rebuilding = false
		l.mu.Unlock()
	}
	return nil
}
