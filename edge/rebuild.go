package edge

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
func (h *Hub) rebuild(l *link, s *replicaState, p partitionStatus) error {
	h.log.Info("edge: log epoch changed at the edge; rebuilding the replica",
		"edge", l.edge, "partition", p.ID, "replica_epoch", s.epoch, "edge_epoch", p.LogEpoch, "edge_seq", p.MaxCommitSeq)
	if p.HorizonSeq > 0 {
		if err := h.snapshot(l, s, p); err != nil {
			return err
		}
		h.metrics.Rebuilds.Add(1)
		return nil
	}
	l.mu.Lock()
	s.rebuilding, s.rebuildTo, s.err = true, p.MaxCommitSeq, nil
	l.mu.Unlock()
	if err := h.reregister(h.ctx, p.ID, p.LogEpoch); err != nil {
		return l.fail(s, err)
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
