package edge

import (
	"fmt"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// maxRebuildTries bounds the wipe-and-adopt retries of a rebuild
// (reregister).
const maxRebuildTries = 5

// rebuild drops the replica of a partition whose edge log epoch is no
// longer the replica's and registers it afresh under the edge's new
// epoch, for catchUp to re-page from the edge's first commit — or, when
// the edge no longer retains it, rebuilds it from a snapshot of the
// edge's rows (snapshot.go). The edge rotates its epoch after a restore
// (SPEC.md §2.1): its log may be shorter than the replica's and its seqs
// are reused, so nothing of the old replica can be kept. The hub's
// clients of the partition are told to reset as the edge's are: a
// request carrying the old epoch gets resetRequired, and OnReset wakes
// the realtime sessions with reset-required. The partition is not served
// until the replica holds what the edge held when the rebuild started.
func (h *Hub) rebuild(l *link, s *replicaState, p partitionStatus, lease <-chan struct{}) error {
	h.log.Info("edge: log epoch changed at the edge; rebuilding the replica",
		"edge", l.edge, "partition", p.ID, "replica_epoch", s.epoch, "edge_epoch", p.LogEpoch, "edge_seq", p.MaxCommitSeq)
	if p.HorizonSeq > 0 {
		if err := h.snapshot(l, s, p, lease); err != nil {
			return err
		}
		h.metrics.Rebuilds.Add(1)
		return nil
	}
	if err := h.unchanged(l, s, p.ID, lease); err != nil {
		return err
	}
	l.mu.Lock()
	s.rebuilding, s.rebuildTo, s.err = true, p.MaxCommitSeq, nil
	l.mu.Unlock()
	if err := h.reregister(h.ctx, l, s, p.ID, p.LogEpoch); err != nil {
		return err
	}
	h.metrics.Rebuilds.Add(1)
	l.mu.Lock()
	s.epoch, s.applied, s.edgeMax = p.LogEpoch, 0, p.MaxCommitSeq
	s.rebuilding = p.MaxCommitSeq > 0
	close(l.progress)
	l.progress = make(chan struct{})
	l.mu.Unlock()
	if h.cfg.OnReset != nil {
		h.cfg.OnReset(h.ctx, p.ID)
	}
	return nil
}

// unchanged is the early check before a rebuild drops the replica: this
// node must still hold lease, and the replica in SQL must be the one it
// last saw. A node that lost the lease before noticing, while the new
// holder rebuilt the replica, gets errFenced and reloads the replica
// before it starts; the wipe itself is fenced on the same condition in
// its own transaction (reregister), so the instant between this read
// and the wipe can harm nothing either.
func (h *Hub) unchanged(l *link, s *replicaState, partition string, lease <-chan struct{}) error {
	if err := leaseHeld(lease); err != nil {
		return err
	}
	p, err := h.cfg.Store.PartitionGet(h.ctx, partition)
	switch {
	case err == nil:
	case ssp2.CodeOf(err) == ssp2.CodeStoragePartitionUnregistered:
		p = storage.Partition{}
	default:
		return err
	}
	if p.LogEpoch != s.epoch || p.MaxCommitSeq < s.applied {
		l.reload(s)
		return fmt.Errorf("%w: the replica is at %s@%d, this node last saw %s@%d", errFenced, p.LogEpoch, p.MaxCommitSeq, s.epoch, s.applied)
	}
	return nil
}
