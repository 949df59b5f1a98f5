package sqlitestore

import (
	"context"
	"fmt"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/commitlog"
)

// partitionCols reads a registry row of p; the max commitSeq comes from the
// log itself, by one seek to the partition's last commit.
// Its columns are unnamed (see unnamed).
var partitionCols = unnamed("p.id", "p.log_epoch", "p.epoch_required", "p.created_at_ms", "p.last_seen_ms",
	"coalesce((SELECT c.seq FROM sync_commits c WHERE c.partition = p.id ORDER BY c.seq DESC LIMIT 1), p.horizon_seq)",
	"p.horizon_seq")

var qPartition = `SELECT ` + partitionCols + ` FROM sync_partitions p WHERE p.id = ?`

func readPartition(ctx context.Context, c *conn, id string) (storage.Partition, bool, error) {
	var p storage.Partition
	ok, err := c.queryRow(ctx, qPartition, []any{id},
		&p.ID, &p.LogEpoch, &p.EpochRequired, &p.CreatedAtMs, &p.LastSeenMs, &p.MaxCommitSeq, &p.HorizonSeq)
	if err != nil {
		return p, false, fmt.Errorf("read partition: %w", err)
	}
	return p, ok, nil
}

// qPartitionClient reads a partition row and one client record of it in
// one statement; the client columns are defaults when it has none.
var qPartitionClient = `SELECT ` + partitionCols + `, ` + unnamed("c.client_id IS NOT NULL", "coalesce(c.actor_id, '')",
	"coalesce(c.wire_version, 0)", "coalesce(c.cursor, -1)", "coalesce(c.updated_at_ms, 0)", "c.subscriptions") + `
	FROM sync_partitions p LEFT JOIN sync_clients c ON c.partition = p.id AND c.client_id = ? WHERE p.id = ?`

// PartitionTouch implements storage.Store. The common case is one read on
// a reader connection; the writer is taken only to create the row or to
// refresh a last-seen time older than TouchGranularityMs.
func (s *Store) PartitionTouch(ctx context.Context, partition string, nowMs int64) (storage.Partition, error) {
	var (
		p  storage.Partition
		ok bool
	)
	err := s.withReader(ctx, func(c *conn) (err error) {
		p, ok, err = readPartition(ctx, c, partition)
		return err
	})
	if err != nil {
		return p, fmt.Errorf("touch partition: %w", err)
	}
	return s.touched(ctx, partition, nowMs, p, ok)
}

// PartitionTouchClient implements storage.Store like PartitionTouch, the
// client record read in the partition row's statement.
func (s *Store) PartitionTouchClient(ctx context.Context, partition, clientID string, nowMs int64) (storage.Partition, storage.Client, bool, error) {
	var (
		p         storage.Partition
		cl        = storage.Client{Partition: partition, ClientID: clientID}
		ok, hasCl bool
	)
	err := s.withReader(ctx, func(c *conn) (err error) {
		var subs []byte
		ok, err = c.queryRow(ctx, qPartitionClient, []any{clientID, partition},
			&p.ID, &p.LogEpoch, &p.EpochRequired, &p.CreatedAtMs, &p.LastSeenMs, &p.MaxCommitSeq, &p.HorizonSeq,
			&hasCl, &cl.ActorID, &cl.WireVersion, &cl.Cursor, &cl.UpdatedAtMs, &subs)
		if subs != nil {
			cl.Subscriptions = subs
		}
		return err
	})
	if err != nil {
		return p, storage.Client{}, false, fmt.Errorf("touch partition: %w", err)
	}
	if !hasCl {
		cl = storage.Client{}
	}
	p, err = s.touched(ctx, partition, nowMs, p, ok)
	if err != nil {
		return p, storage.Client{}, false, err
	}
	return p, cl, hasCl, nil
}

// touched completes a touch after the read of p (ok: the row exists): it
// creates the row, or refreshes a stale last-seen time, on the writer.
func (s *Store) touched(ctx context.Context, partition string, nowMs int64, p storage.Partition, ok bool) (storage.Partition, error) {
	if ok && p.LastSeenMs >= nowMs-storage.TouchGranularityMs {
		return p, nil
	}
	var gen uint64
	err := s.writeTouching(ctx, touchOf(partition), func(c *conn) error {
		gen = s.cache.Gen()
		if !ok {
			// First touch: the first creator's epoch wins.
			if _, err := c.exec(ctx, `INSERT INTO sync_partitions (id, log_epoch, created_at_ms, last_seen_ms)
				VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`, partition, commitlog.NewEpoch(), nowMs, nowMs); err != nil {
				return err
			}
		}
		if _, err := c.exec(ctx, `UPDATE sync_partitions SET last_seen_ms = ? WHERE id = ? AND last_seen_ms < ?`,
			nowMs, partition, nowMs-storage.TouchGranularityMs); err != nil {
			return err
		}
		var err error
		p, ok, err = readPartition(ctx, c, partition)
		return err
	})
	if err != nil {
		return p, fmt.Errorf("touch partition: %w", err)
	}
	if ok {
		s.cache.SetPartition(gen, p)
	}
	return p, nil
}

// PartitionAdopt implements storage.Store on the writer.
func (s *Store) PartitionAdopt(ctx context.Context, partition, logEpoch string, nowMs int64) (storage.Partition, error) {
	if err := commitlog.CheckEpoch(logEpoch); err != nil {
		return storage.Partition{}, err
	}
	defer s.cache.Drop(partition)
	var p storage.Partition
	err := s.writeTouching(ctx, touchOf(partition), func(c *conn) error {
		if _, err := c.exec(ctx, `INSERT INTO sync_partitions (id, log_epoch, created_at_ms, last_seen_ms)
			VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`, partition, logEpoch, nowMs, nowMs); err != nil {
			return err
		}
		var (
			ok  bool
			err error
		)
		if p, ok, err = readPartition(ctx, c, partition); err == nil && !ok {
			err = fmt.Errorf("partition %q vanished after insert", partition)
		}
		return err
	})
	if err != nil {
		return storage.Partition{}, fmt.Errorf("adopt partition: %w", err)
	}
	return p, nil
}

// PartitionRebase implements storage.Store.
func (s *Store) PartitionRebase(ctx context.Context, partition, fromEpoch, logEpoch string, seq int64) (storage.Partition, error) {
	if err := commitlog.CheckEpoch(logEpoch); err != nil {
		return storage.Partition{}, err
	}
	defer s.cache.Drop(partition)
	var p storage.Partition
	err := s.WriteTx(ctx, partition, func(stx storage.Tx) error {
		t := rawTx(stx)
		horizon, err := commitlog.RebaseHorizon(t.locked, fromEpoch, seq)
		if err != nil {
			return err
		}
		if _, err := t.c.exec(ctx, `UPDATE sync_partitions SET log_epoch = ?, horizon_seq = ? WHERE id = ?`, logEpoch, horizon, partition); err != nil {
			return t.fail("rebase partition", "sync_partitions", err)
		}
		p = t.locked
		p.LogEpoch, p.HorizonSeq, p.MaxCommitSeq = logEpoch, horizon, seq
		return nil
	})
	if err != nil {
		return storage.Partition{}, fmt.Errorf("rebase partition: %w", err)
	}
	return p, nil
}

// PartitionGet implements storage.Store.
func (s *Store) PartitionGet(ctx context.Context, partition string) (storage.Partition, error) {
	var (
		p  storage.Partition
		ok bool
	)
	err := s.withReader(ctx, func(c *conn) (err error) {
		p, ok, err = readPartition(ctx, c, partition)
		return err
	})
	if err != nil {
		return p, err
	}
	if !ok {
		return p, unregistered("get partition", partition)
	}
	return p, nil
}

// Partitions implements storage.Store.
func (s *Store) Partitions(ctx context.Context) ([]storage.Partition, error) {
	var out []storage.Partition
	err := s.withReader(ctx, func(c *conn) error {
		rows, err := c.query(ctx, `SELECT `+partitionCols+` FROM sync_partitions p ORDER BY p.id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p storage.Partition
			if err := rows.Scan(&p.ID, &p.LogEpoch, &p.EpochRequired, &p.CreatedAtMs, &p.LastSeenMs, &p.MaxCommitSeq, &p.HorizonSeq); err != nil {
				return err
			}
			out = append(out, p)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	return out, nil
}

// PartitionRotateEpoch implements storage.Store under the partition write
// lock, so it serializes with pushes and pruning.
func (s *Store) PartitionRotateEpoch(ctx context.Context, partition string, nowMs int64) (storage.Partition, error) {
	defer s.cache.Drop(partition)
	var p storage.Partition
	err := s.WriteTx(ctx, partition, func(stx storage.Tx) error {
		t := rawTx(stx)
		epoch := commitlog.NewEpoch()
		if _, err := t.c.exec(ctx, `UPDATE sync_partitions SET log_epoch = ?, epoch_required = 1, last_seen_ms = max(last_seen_ms, ?) WHERE id = ?`,
			epoch, nowMs, partition); err != nil {
			return err
		}
		if _, err := t.c.exec(ctx, `DELETE FROM sync_clients WHERE partition = ?`, partition); err != nil {
			return err
		}
		var ok bool
		var err error
		p, ok, err = readPartition(ctx, t.c, partition)
		if err == nil && !ok {
			err = fmt.Errorf("partition %q vanished under the lock", partition)
		}
		return err
	})
	if err != nil {
		return storage.Partition{}, fmt.Errorf("rotate epoch: %w", err)
	}
	return p, nil
}
