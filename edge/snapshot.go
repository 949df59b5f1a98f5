package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// A replica whose edge pruned commits it never applied cannot be paged
// from its log: the hub rebuilds it from a snapshot of the edge's rows.
//
// The snapshot is paged table by table over syncnode.edge.<edge>.rows
// while the edge keeps writing, so its pages are read at different seqs:
// each reply carries the edge's max seq read before the page, the first
// one is the snapshot's floor S0 and the largest the ceiling S1. Every
// row a page holds is at least as new as S0 and, for a row no commit in
// (S0, S1] touched, exactly as it is at S1. The hub then pages those
// commits and writes their rows in order (each change carries the whole
// row and its version), which brings every row touched in the window to
// its state at S1 too. The replica is then the edge's state at S1: its
// log is rebased to start after S1 (horizon S1) under the edge's epoch,
// and replication continues from the log with the usual checks.
//
// Until that rebase the replica's registry row carries a placeholder
// epoch that no edge has (placeholderPrefix): the partition is not
// served, the relay finds no commits to publish, and a hub that stops
// half-way finds an epoch that is not the edge's when it restarts and
// starts over. Row versions are the edge's (storage.RowWrite.Version).

// placeholderPrefix starts the epoch of a replica being rebuilt from a
// snapshot; edge epochs are lowercase hex.
const placeholderPrefix = "~snapshot~"

// snapshotPageRows is the rows asked per snapshot request; a page that
// exceeds max_payload is halved by the edge.
const snapshotPageRows = 1000

func (h *Home) rows(ctx context.Context, body []byte) any {
	var req rowsRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return rowsReply{Error: errorToWire(ssp2.Errorf(ssp2.CodeInvalidRequest, "rows request: %v", err))}
	}
	if h.homes.Of(req.Partition) != h.cfg.Name {
		return rowsReply{Error: errorToWire(ssp2.Errorf(ssp2.CodeForbidden, "partition is not homed at edge %s", h.cfg.Name))}
	}
	// The partition row first: every row read after it is at least as
	// new as its max seq.
	p, err := h.cfg.Store.PartitionGet(ctx, req.Partition)
	if err != nil {
		return rowsReply{Error: errorToWire(err)}
	}
	limit := min(max(req.Limit, 1), storage.MaxScanLimit)
	rows, err := h.cfg.Store.RowList(ctx, storage.RowListParams{Partition: req.Partition, Table: req.Table, AfterRowID: req.AfterRowID, Limit: limit})
	if err != nil {
		return rowsReply{Error: errorToWire(err)}
	}
	for {
		r := rowsReply{LogEpoch: p.LogEpoch, MaxCommitSeq: p.MaxCommitSeq, HorizonSeq: p.HorizonSeq, Rows: make([]wireRow, len(rows))}
		for i, row := range rows {
			r.Rows[i] = wireRow{RowID: row.RowID, Version: row.ServerVersion, Scopes: row.Scopes, Row: row.Payload, ColumnVersions: row.ColumnVersions}
		}
		if len(rows) <= 1 || h.fits(r) {
			return r
		}
		rows = rows[:len(rows)/2]
	}
}

// snapshot rebuilds the replica of p from the edge's rows (see above).
// Only the link's loop calls it, under lease; on failure the next poll
// starts over.
//
// The placeholder epoch is also the rebuild's fencing token across a hub
// cluster: every write of the rebuild runs only while the partition
// (read under its write lock) still carries this rebuild's placeholder,
// and the final rebase is a compare-and-set from it. A node deposed
// mid-rebuild — its lease lost, perhaps before it noticed, and the new
// holder started a rebuild of its own — writes nothing more, and can
// never rebase the new holder's partial replica into a served one.
func (h *Hub) snapshot(l *link, s *replicaState, p partitionStatus, lease <-chan struct{}) error {
	ctx := h.ctx
	if err := h.unchanged(l, s, p.ID, lease); err != nil {
		return err
	}
	placeholder := placeholderPrefix + strconv.FormatInt(time.Now().UnixNano(), 36)
	l.mu.Lock()
	s.rebuilding, s.rebuildTo, s.err = true, p.MaxCommitSeq, nil
	l.mu.Unlock()
	h.log.Info("edge: the edge pruned commits the replica has not applied; rebuilding it from a snapshot of the edge's rows",
		"edge", l.edge, "partition", p.ID, "replica_seq", s.applied, "edge_horizon", p.HorizonSeq, "edge_seq", p.MaxCommitSeq)
	if err := h.reregister(ctx, l, s, p.ID, placeholder); err != nil {
		return err
	}
	l.mu.Lock()
	s.epoch, s.applied = placeholder, 0
	l.mu.Unlock()

	floor, ceiling := int64(-1), int64(0)
	for _, t := range h.cfg.Schema.Tables {
		after := ""
		for {
			if err := leaseHeld(lease); err != nil {
				return err
			}
			var page rowsReply
			if err := h.request(bus.EdgeRowsSubject(l.edge), rowsRequest{Partition: p.ID, Table: t.Name, AfterRowID: after, Limit: snapshotPageRows}, &page); err != nil {
				return fmt.Errorf("snapshot %s: %w", t.Name, err)
			}
			if page.Error != nil {
				return fmt.Errorf("snapshot %s: %w", t.Name, page.Error.err())
			}
			if page.LogEpoch != p.LogEpoch {
				return fmt.Errorf("snapshot: %w: edge %s, snapshot of %s", ErrEpochChanged, page.LogEpoch, p.LogEpoch)
			}
			if floor < 0 {
				floor = page.MaxCommitSeq
			}
			ceiling = max(ceiling, page.MaxCommitSeq)
			var ids []string
			var err error
			for _, r := range page.Rows {
				if ids, err = h.rowBlobs(s, t.Name, r.Row, ids); err != nil {
					return fmt.Errorf("snapshot %s: %w", t.Name, err)
				}
			}
			if err := h.fetchBlobs(l, p.ID, ids); err != nil {
				return fmt.Errorf("snapshot %s: %w", t.Name, err)
			}
			if err := h.fencedWrite(p.ID, placeholder, lease, func(tx storage.Tx) error {
				for _, r := range page.Rows {
					if err := h.putRow(ctx, tx, s, t.Name, r.RowID, r.Version, r.Scopes, r.Row, r.ColumnVersions); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return fmt.Errorf("snapshot %s: %w", t.Name, err)
			}
			// A short page is not the table's last when the edge halved
			// it to fit max_payload: the table ends at an empty page.
			if len(page.Rows) == 0 {
				break
			}
			after = page.Rows[len(page.Rows)-1].RowID
		}
	}
	if err := h.replayWindow(l, s, p, placeholder, lease, floor, ceiling); err != nil {
		return err
	}
	if err := h.rebase(l, s, p.ID, placeholder, p.LogEpoch, ceiling, lease); err != nil {
		return err
	}
	h.metrics.Snapshots.Add(1)
	l.mu.Lock()
	s.epoch, s.applied, s.edgeMax, s.lastSync = p.LogEpoch, ceiling, max(p.MaxCommitSeq, ceiling), time.Now()
	s.rebuilding = ceiling < s.rebuildTo
	close(l.progress)
	l.progress = make(chan struct{})
	l.mu.Unlock()
	if h.cfg.OnReset != nil {
		h.cfg.OnReset(ctx, p.ID)
	}
	return nil
}

// replayWindow writes the rows of the edge's commits in (floor,
// ceiling], in order, as the edge stored them: the rows the snapshot
// read while those commits were being made end at their state at
// ceiling. The commits themselves are not appended: the rebased log
// starts after ceiling.
func (h *Hub) replayWindow(l *link, s *replicaState, p partitionStatus, placeholder string, lease <-chan struct{}, floor, ceiling int64) error {
	for at := floor; at < ceiling; {
		var page commitsReply
		if err := h.request(bus.EdgeCommitsSubject(l.edge), commitsRequest{Partition: p.ID, AfterSeq: at, Limit: h.cfg.PageCommits}, &page); err != nil {
			return fmt.Errorf("snapshot window: %w", err)
		}
		if page.Error != nil {
			return fmt.Errorf("snapshot window: %w", page.Error.err())
		}
		if page.LogEpoch != p.LogEpoch {
			return fmt.Errorf("snapshot window: %w: edge %s, snapshot of %s", ErrEpochChanged, page.LogEpoch, p.LogEpoch)
		}
		if page.HorizonSeq > floor || len(page.Commits) == 0 || page.Commits[0].Seq != at+1 {
			return fmt.Errorf("snapshot window: %w: the edge pruned through %d while the snapshot was read from %d", ErrPruned, page.HorizonSeq, floor)
		}
		ids, err := h.commitBlobs(s, page.Commits)
		if err == nil {
			err = h.fetchBlobs(l, p.ID, ids)
		}
		if err != nil {
			return fmt.Errorf("snapshot window: %w", err)
		}
		err = h.fencedWrite(p.ID, placeholder, lease, func(tx storage.Tx) error {
			for _, c := range page.Commits {
				if c.Seq > ceiling {
					break
				}
				for _, ch := range c.Changes {
					if ch.Op == storage.OpDelete {
						if _, err := tx.RowDelete(h.ctx, ch.Table, ch.RowID); err != nil {
							return err
						}
						continue
					}
					if err := h.putRow(h.ctx, tx, s, ch.Table, ch.RowID, ch.RowVersion, ch.Scopes, ch.Row, nil); err != nil {
						return fmt.Errorf("commit %d: %w", c.Seq, err)
					}
				}
				at = c.Seq
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("snapshot window: %w", err)
		}
	}
	return nil
}

// rebase makes the rebuilt replica the edge's log after ceiling, from
// this rebuild's placeholder only (errFenced when another node's rebuild
// replaced it).
func (h *Hub) rebase(l *link, s *replicaState, partition, placeholder, epoch string, ceiling int64, lease <-chan struct{}) error {
	if err := leaseHeld(lease); err != nil {
		return err
	}
	if _, err := h.cfg.Store.PartitionRebase(h.ctx, partition, placeholder, epoch, ceiling); err != nil {
		if ssp2.CodeOf(err) == ssp2.CodeStoragePruneEpochMismatch {
			l.reload(s)
			return fmt.Errorf("snapshot: %w: %w", errFenced, err)
		}
		return l.fail(s, fmt.Errorf("snapshot: %w", err))
	}
	return nil
}

// fencedWrite runs fn in a write transaction of partition while this
// node holds lease and the partition, read under its write lock, still
// carries epoch (a rebuild's placeholder): errFenced otherwise, and
// nothing is written.
func (h *Hub) fencedWrite(partition, epoch string, lease <-chan struct{}, fn func(tx storage.Tx) error) error {
	if err := leaseHeld(lease); err != nil {
		return err
	}
	return h.cfg.Store.WriteTx(h.ctx, partition, func(tx storage.Tx) error {
		if got := tx.Locked().LogEpoch; got != epoch {
			return fmt.Errorf("%w: the replica's epoch is %s, this rebuild's %s", errFenced, got, epoch)
		}
		return fn(tx)
	})
}

// putRow writes one of the edge's rows at the edge's version.
func (h *Hub) putRow(ctx context.Context, tx storage.Tx, s *replicaState, table, rowID string, version int64, scopes map[string]string, row, colVersions []byte) error {
	t, ok := h.cfg.Schema.Table(table)
	if !ok {
		return ssp2.Errorf(ssp2.CodeUnknownTable, "the edge's table %q is not in the hub's schema", table)
	}
	vals, err := t.Codec.DecodeRow(row, s.buf[:0])
	if err != nil {
		return fmt.Errorf("row %q: %w", rowID, err)
	}
	s.buf = vals
	_, err = tx.RowUpsert(ctx, t.Name, storage.RowWrite{RowID: rowID, Values: vals, Scopes: scopes, Payload: row, ColumnVersions: colVersions, Version: version})
	return err
}

// reregister drops the partition's replica and registers it afresh
// under epoch. The wipe is fenced in its own transaction on the replica
// this node last saw (s's epoch and position, PartitionWipeFrom): a node
// that lost the replica to another — the lease lost before it noticed,
// between unchanged's read and here — wipes nothing of the other's, and
// reloads instead (errFenced). A request that passed Ready just before
// the wipe may register the partition under an epoch of the hub's (a
// touch) before the adopt; the wipe is then repeated, fenced on that.
func (h *Hub) reregister(ctx context.Context, l *link, s *replicaState, partition, epoch string) error {
	l.mu.Lock()
	fromEpoch, fromSeq := s.epoch, s.applied
	l.mu.Unlock()
	for try := 0; try < maxRebuildTries; try++ {
		if err := h.cfg.Store.PartitionWipeFrom(ctx, partition, fromEpoch, fromSeq); err != nil {
			if ssp2.CodeOf(err) == ssp2.CodeStoragePruneEpochMismatch {
				l.reload(s)
				return fmt.Errorf("drop replica: %w: %w", errFenced, err)
			}
			return l.fail(s, fmt.Errorf("drop replica: %w", err))
		}
		got, err := h.cfg.Store.PartitionAdopt(ctx, partition, epoch, time.Now().UnixMilli())
		if err != nil {
			return l.fail(s, fmt.Errorf("drop replica: %w", err))
		}
		if got.LogEpoch == epoch && got.MaxCommitSeq == 0 {
			return nil
		}
		fromEpoch, fromSeq = got.LogEpoch, got.MaxCommitSeq
	}
	return l.fail(s, fmt.Errorf("drop replica: the partition was re-registered under another epoch %d times", maxRebuildTries))
}

// isPlaceholder reports an epoch of a replica being rebuilt from a
// snapshot.
func isPlaceholder(epoch string) bool { return strings.HasPrefix(epoch, placeholderPrefix) }
