package sqlitestore

import (
	"context"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/storagetest"
)

// The gate tests' hooks: raw writes as an older build or an operator
// would make them.

var _ storagetest.GateHooks = (*Store)(nil)

func (s *Store) HookRawCommit(ctx context.Context, partition string, seq int64, writerVersion *int32) error {
	var wv any
	if writerVersion != nil {
		wv = *writerVersion
	}
	return s.write(ctx, func(c *conn) error {
		_, err := c.exec(ctx, `INSERT INTO sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, schema_version, writer_version)
			VALUES (?, ?, 0, 'old', 'old', ?, 1, ?)`, partition, seq, "raw-"+partition, wv)
		return translate(err, "")
	})
}

func (s *Store) HookWriterVersion(ctx context.Context, partition string, seq int64) (*int32, error) {
	var v *int64
	err := s.withReader(ctx, func(c *conn) error {
		_, err := c.queryRow(ctx, `SELECT writer_version FROM sync_commits WHERE partition = ? AND seq = ?`, []any{partition, seq}, &v)
		return err
	})
	if err != nil || v == nil {
		return nil, err
	}
	w := int32(*v)
	return &w, nil
}

func (s *Store) HookRawCheckpoint(ctx context.Context, cp storage.Checkpoint) error {
	return s.write(ctx, func(c *conn) error {
		_, err := c.exec(ctx, `INSERT INTO sync_backfill_checkpoints (`+checkpointCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			cp.Partition, cp.SchemaVersion, cp.Name, string(cp.State), cp.Watermark, cp.OwnerEpoch, cp.ObservedRows, cp.UpdatedAtMs)
		return err
	})
}

func (s *Store) HookSetFence(ctx context.Context, partition string, required int32) error {
	return s.write(ctx, func(c *conn) error {
		_, err := c.exec(ctx, `INSERT INTO sync_writer_fence (partition, required_writer_version) VALUES (?, ?)
			ON CONFLICT (partition) DO UPDATE SET required_writer_version = excluded.required_writer_version`, partition, required)
		return err
	})
}
