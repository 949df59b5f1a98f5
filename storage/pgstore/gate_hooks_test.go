package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/storagetest"
)

// The gate tests' hooks: raw writes as an older build or an operator
// would make them.

var _ storagetest.GateHooks = (*Store)(nil)

func (s *Store) HookRawCommit(ctx context.Context, partition string, seq int64, writerVersion *int32) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, schema_version, writer_version)
		VALUES ($1, $2, 0, 'old', 'old', $3, 1, $4)`, partition, seq, "raw-"+partition, writerVersion)
	return translate(err, "")
}

func (s *Store) HookWriterVersion(ctx context.Context, partition string, seq int64) (*int32, error) {
	var v *int32
	err := s.pool.QueryRow(ctx, `SELECT writer_version FROM sync_commits WHERE partition = $1 AND seq = $2`, partition, seq).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return v, err
}

func (s *Store) HookRawCheckpoint(ctx context.Context, cp storage.Checkpoint) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO sync_backfill_checkpoints (`+checkpointCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		cp.Partition, cp.SchemaVersion, cp.Name, string(cp.State), cp.Watermark, cp.OwnerEpoch, cp.ObservedRows, cp.UpdatedAtMs)
	return err
}

func (s *Store) HookSetFence(ctx context.Context, partition string, required int32) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO sync_writer_fence (partition, required_writer_version) VALUES ($1, $2)
		ON CONFLICT (partition) DO UPDATE SET required_writer_version = EXCLUDED.required_writer_version`, partition, required)
	return err
}
