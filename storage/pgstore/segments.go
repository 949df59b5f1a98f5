package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// The segment index (storage.SegmentIndex). No method takes a partition
// lock: the address row is the only shared row, and the foreign key from
// publications to it keeps a publication from outliving its address
// whatever the interleaving.

const segPubCols = `segment_id, partition, log_epoch, tbl, schema_version, media_type, scope_digest,
	as_of_commit_seq, row_cursor, page_rows, next_row_cursor, row_count, byte_length, created_at_ms, expires_at_ms`

// segPubKeyCols is the primary key of a publication row.
const segPubKeyCols = `segment_id, partition, log_epoch, tbl, schema_version, media_type, scope_digest,
	as_of_commit_seq, row_cursor, page_rows`

const segPubKeyOrder = `ORDER BY partition, log_epoch, tbl, schema_version, media_type, scope_digest,
	as_of_commit_seq, row_cursor, page_rows, expires_at_ms`

const (
	qSegmentInsert = `INSERT INTO sync_segments (segment_id, byte_length, created_at_ms) VALUES ($1, $2, $3)
		ON CONFLICT (segment_id) DO NOTHING`
	// FOR KEY SHARE holds the address row until commit, so a concurrent
	// SegmentDelete waits for this publication and then finds it.
	qSegmentLength = `SELECT byte_length FROM sync_segments WHERE segment_id = $1 FOR KEY SHARE`
	qSegPubUpsert  = `INSERT INTO sync_segment_publications (` + segPubCols + `)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
		ON CONFLICT (` + segPubKeyCols + `) DO UPDATE
		SET expires_at_ms = greatest(sync_segment_publications.expires_at_ms, EXCLUDED.expires_at_ms)
		RETURNING ` + segPubCols
	qSegPubFind = `SELECT ` + segPubCols + ` FROM sync_segment_publications
		WHERE partition = $1 AND log_epoch = $2 AND tbl = $3 AND schema_version = $4 AND media_type = $5
		AND scope_digest = $6 AND as_of_commit_seq = $7 AND row_cursor = $8 AND page_rows = $9 AND expires_at_ms > $10
		ORDER BY expires_at_ms DESC LIMIT 1`
	qSegmentGet = `SELECT segment_id, byte_length, created_at_ms FROM sync_segments WHERE segment_id = $1`
	qSegPubsOf  = `SELECT ` + segPubCols + ` FROM sync_segment_publications WHERE segment_id = $1 ` + segPubKeyOrder
	qSegPubsIn  = `SELECT ` + segPubCols + ` FROM sync_segment_publications
		WHERE segment_id = $1 AND partition = $2 AND log_epoch = $3 ` + segPubKeyOrder
	qSegExpire = `DELETE FROM sync_segment_publications WHERE (` + segPubKeyCols + `) IN (
		SELECT ` + segPubKeyCols + ` FROM sync_segment_publications WHERE expires_at_ms <= $1 LIMIT $2)`
	qSegOrphans = `SELECT segment_id, byte_length, created_at_ms FROM sync_segments s
		WHERE NOT EXISTS (SELECT 1 FROM sync_segment_publications p WHERE p.segment_id = s.segment_id)
		ORDER BY created_at_ms, segment_id LIMIT $1`
	qSegmentDelete = `DELETE FROM sync_segments WHERE segment_id = $1
		AND NOT EXISTS (SELECT 1 FROM sync_segment_publications WHERE segment_id = $1)`
	qSegStats = `SELECT (SELECT count(*) FROM sync_segments), (SELECT coalesce(sum(byte_length), 0)::bigint FROM sync_segments),
		(SELECT count(*) FROM sync_segment_publications)`
)

func scanSegPubs(rows pgx.Rows) ([]storage.SegmentPublication, error) {
	defer rows.Close()
	var out []storage.SegmentPublication
	for rows.Next() {
		var (
			p  storage.SegmentPublication
			mt int16
		)
		if err := rows.Scan(&p.SegmentID, &p.Partition, &p.LogEpoch, &p.Table, &p.SchemaVersion, &mt, &p.ScopeDigest,
			&p.AsOfCommitSeq, &p.RowCursor, &p.PageRows, &p.NextRowCursor, &p.RowCount, &p.ByteLength,
			&p.CreatedAtMs, &p.ExpiresAtMs); err != nil {
			return nil, err
		}
		p.MediaType = ssp2.MediaType(mt)
		out = append(out, p)
	}
	return out, rows.Err()
}

// SegmentPublish implements storage.SegmentIndex.
func (s *Store) SegmentPublish(ctx context.Context, p storage.SegmentPublication) (storage.SegmentPublication, error) {
	if err := storage.ValidateSegmentPublication(p); err != nil {
		return storage.SegmentPublication{}, err
	}
	var stored storage.SegmentPublication
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, qSegmentInsert, p.SegmentID, p.ByteLength, p.CreatedAtMs); err != nil {
			return err
		}
		var have int64
		if err := tx.QueryRow(ctx, qSegmentLength, p.SegmentID).Scan(&have); err != nil {
			// No row: a concurrent SegmentDelete removed it after the
			// insert saw it; the caller retries.
			return err
		}
		if have != p.ByteLength {
			return storage.SegmentCollision(p.SegmentID, have, p.ByteLength)
		}
		rows, err := tx.Query(ctx, qSegPubUpsert, p.SegmentID, p.Partition, p.LogEpoch, p.Table, p.SchemaVersion,
			int16(p.MediaType), p.ScopeDigest, p.AsOfCommitSeq, p.RowCursor, p.PageRows, p.NextRowCursor,
			p.RowCount, p.ByteLength, p.CreatedAtMs, p.ExpiresAtMs)
		if err != nil {
			return err
		}
		pubs, err := scanSegPubs(rows)
		if err != nil {
			return err
		}
		if len(pubs) != 1 {
			return fmt.Errorf("upsert returned %d rows", len(pubs))
		}
		stored = pubs[0]
		return nil
	})
	if err != nil {
		return storage.SegmentPublication{}, fmt.Errorf("publish segment: %w", err)
	}
	return stored, nil
}

// SegmentFind implements storage.SegmentIndex.
func (s *Store) SegmentFind(ctx context.Context, k storage.SegmentKey, nowMs int64) (storage.SegmentPublication, bool, error) {
	rows, err := s.pool.Query(ctx, qSegPubFind, k.Partition, k.LogEpoch, k.Table, k.SchemaVersion, int16(k.MediaType),
		k.ScopeDigest, k.AsOfCommitSeq, k.RowCursor, k.PageRows, nowMs)
	if err != nil {
		return storage.SegmentPublication{}, false, fmt.Errorf("find segment: %w", err)
	}
	pubs, err := scanSegPubs(rows)
	if err != nil {
		return storage.SegmentPublication{}, false, fmt.Errorf("find segment: %w", err)
	}
	if len(pubs) == 0 {
		return storage.SegmentPublication{}, false, nil
	}
	return pubs[0], true, nil
}

// SegmentGet implements storage.SegmentIndex: the address row and its
// publications come from one snapshot.
func (s *Store) SegmentGet(ctx context.Context, segmentID string) (storage.Segment, bool, error) {
	var (
		seg storage.Segment
		ok  bool
	)
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, qSegmentGet, segmentID).Scan(&seg.ID, &seg.ByteLength, &seg.CreatedAtMs)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		ok = true
		rows, err := tx.Query(ctx, qSegPubsOf, segmentID)
		if err != nil {
			return err
		}
		seg.Publications, err = scanSegPubs(rows)
		return err
	})
	if err != nil {
		return storage.Segment{}, false, fmt.Errorf("get segment: %w", err)
	}
	return seg, ok, nil
}

// SegmentPublications implements storage.SegmentIndex.
func (s *Store) SegmentPublications(ctx context.Context, segmentID, partition, logEpoch string) ([]storage.SegmentPublication, error) {
	rows, err := s.pool.Query(ctx, qSegPubsIn, segmentID, partition, logEpoch)
	if err != nil {
		return nil, fmt.Errorf("list segment publications: %w", err)
	}
	pubs, err := scanSegPubs(rows)
	if err != nil {
		return nil, fmt.Errorf("list segment publications: %w", err)
	}
	return pubs, nil
}

// SegmentExpire implements storage.SegmentIndex.
func (s *Store) SegmentExpire(ctx context.Context, nowMs int64, limit int) (int64, error) {
	if err := storage.CheckSegmentListLimit(limit); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, qSegExpire, nowMs, limit)
	if err != nil {
		return 0, fmt.Errorf("expire segment publications: %w", err)
	}
	return tag.RowsAffected(), nil
}

// SegmentUnpublished implements storage.SegmentIndex.
func (s *Store) SegmentUnpublished(ctx context.Context, limit int) ([]storage.Segment, error) {
	if err := storage.CheckSegmentListLimit(limit); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, qSegOrphans, limit)
	if err != nil {
		return nil, fmt.Errorf("list unpublished segments: %w", err)
	}
	defer rows.Close()
	var out []storage.Segment
	for rows.Next() {
		var seg storage.Segment
		if err := rows.Scan(&seg.ID, &seg.ByteLength, &seg.CreatedAtMs); err != nil {
			return nil, fmt.Errorf("list unpublished segments: %w", err)
		}
		out = append(out, seg)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list unpublished segments: %w", err)
	}
	return out, nil
}

// SegmentDelete implements storage.SegmentIndex. A publication committed
// between the NOT EXISTS check and the delete makes the foreign key refuse
// the delete; that is reported as not deleted.
func (s *Store) SegmentDelete(ctx context.Context, segmentID string) (bool, error) {
	tag, err := s.pool.Exec(ctx, qSegmentDelete, segmentID)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" { // foreign_key_violation
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete segment: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// SegmentStats implements storage.SegmentIndex.
func (s *Store) SegmentStats(ctx context.Context) (storage.SegmentStats, error) {
	var st storage.SegmentStats
	if err := s.pool.QueryRow(ctx, qSegStats).Scan(&st.Segments, &st.Bytes, &st.Publications); err != nil {
		return storage.SegmentStats{}, fmt.Errorf("segment stats: %w", err)
	}
	return st, nil
}
