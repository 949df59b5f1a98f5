package sqlitestore

import (
	"context"
	"fmt"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// The segment index (storage.SegmentIndex). Reads run on the reader
// connections; writes are members of the writer's group transactions and
// take no partition lock.

const segPubCols = `segment_id, partition, log_epoch, tbl, schema_version, media_type, scope_digest,
	as_of_commit_seq, row_cursor, page_rows, next_row_cursor, row_count, byte_length, created_at_ms, expires_at_ms`

// segPubKeyCols is the primary key of a publication row.
const segPubKeyCols = `segment_id, partition, log_epoch, tbl, schema_version, media_type, scope_digest,
	as_of_commit_seq, row_cursor, page_rows`

const segPubKeyOrder = `ORDER BY partition, log_epoch, tbl, schema_version, media_type, scope_digest,
	as_of_commit_seq, row_cursor, page_rows, expires_at_ms`

const (
	qSegmentInsert = `INSERT INTO sync_segments (segment_id, byte_length, created_at_ms) VALUES (?, ?, ?)
		ON CONFLICT (segment_id) DO NOTHING`
	qSegmentLength = `SELECT byte_length FROM sync_segments WHERE segment_id = ?`
	qSegPubUpsert  = `INSERT INTO sync_segment_publications (` + segPubCols + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (` + segPubKeyCols + `) DO UPDATE SET expires_at_ms = max(expires_at_ms, excluded.expires_at_ms)
		RETURNING ` + segPubCols
	qSegPubFind = `SELECT ` + segPubCols + ` FROM sync_segment_publications
		WHERE partition = ? AND log_epoch = ? AND tbl = ? AND schema_version = ? AND media_type = ?
		AND scope_digest = ? AND as_of_commit_seq = ? AND row_cursor = ? AND page_rows = ? AND expires_at_ms > ?
		ORDER BY expires_at_ms DESC LIMIT 1`
	qSegmentGet = `SELECT segment_id, byte_length, created_at_ms FROM sync_segments WHERE segment_id = ?`
	qSegPubsOf  = `SELECT ` + segPubCols + ` FROM sync_segment_publications WHERE segment_id = ? ` + segPubKeyOrder
	qSegPubsIn  = `SELECT ` + segPubCols + ` FROM sync_segment_publications WHERE segment_id = ? AND partition = ? AND log_epoch = ? ` + segPubKeyOrder
	qSegExpire  = `DELETE FROM sync_segment_publications WHERE (` + segPubKeyCols + `) IN (
		SELECT ` + segPubKeyCols + ` FROM sync_segment_publications WHERE expires_at_ms <= ? LIMIT ?)`
	qSegOrphans = `SELECT segment_id, byte_length, created_at_ms FROM sync_segments s
		WHERE NOT EXISTS (SELECT 1 FROM sync_segment_publications p WHERE p.segment_id = s.segment_id)
		ORDER BY created_at_ms, segment_id LIMIT ?`
	qSegmentDelete = `DELETE FROM sync_segments WHERE segment_id = ?
		AND NOT EXISTS (SELECT 1 FROM sync_segment_publications WHERE segment_id = ?)`
	qSegStats = `SELECT (SELECT count(*) FROM sync_segments), (SELECT coalesce(sum(byte_length), 0) FROM sync_segments),
		(SELECT count(*) FROM sync_segment_publications)`
)

func segPubArgs(p storage.SegmentPublication) []any {
	return []any{p.SegmentID, p.Partition, p.LogEpoch, p.Table, p.SchemaVersion, int64(p.MediaType), p.ScopeDigest,
		p.AsOfCommitSeq, p.RowCursor, p.PageRows, p.NextRowCursor, p.RowCount, p.ByteLength, p.CreatedAtMs, p.ExpiresAtMs}
}

func scanSegPub(r *rows) (storage.SegmentPublication, error) {
	var (
		p  storage.SegmentPublication
		mt int64
	)
	err := r.Scan(&p.SegmentID, &p.Partition, &p.LogEpoch, &p.Table, &p.SchemaVersion, &mt, &p.ScopeDigest,
		&p.AsOfCommitSeq, &p.RowCursor, &p.PageRows, &p.NextRowCursor, &p.RowCount, &p.ByteLength, &p.CreatedAtMs, &p.ExpiresAtMs)
	p.MediaType = ssp2.MediaType(mt)
	return p, err
}

func querySegPubs(ctx context.Context, c *conn, q string, args ...any) ([]storage.SegmentPublication, error) {
	r, err := c.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []storage.SegmentPublication
	for r.Next() {
		p, err := scanSegPub(r)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, r.Err()
}

// SegmentPublish implements storage.SegmentIndex.
func (s *Store) SegmentPublish(ctx context.Context, p storage.SegmentPublication) (storage.SegmentPublication, error) {
	if err := storage.ValidateSegmentPublication(p); err != nil {
		return storage.SegmentPublication{}, err
	}
	var stored storage.SegmentPublication
	err := s.write(ctx, func(c *conn) error {
		if _, err := c.exec(ctx, qSegmentInsert, p.SegmentID, p.ByteLength, p.CreatedAtMs); err != nil {
			return err
		}
		var have int64
		if _, err := c.queryRow(ctx, qSegmentLength, []any{p.SegmentID}, &have); err != nil {
			return err
		}
		if have != p.ByteLength {
			return storage.SegmentCollision(p.SegmentID, have, p.ByteLength)
		}
		pubs, err := querySegPubs(ctx, c, qSegPubUpsert, segPubArgs(p)...)
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
	var pubs []storage.SegmentPublication
	err := s.withReader(ctx, func(c *conn) (err error) {
		pubs, err = querySegPubs(ctx, c, qSegPubFind, k.Partition, k.LogEpoch, k.Table, k.SchemaVersion, int64(k.MediaType),
			k.ScopeDigest, k.AsOfCommitSeq, k.RowCursor, k.PageRows, nowMs)
		return err
	})
	if err != nil {
		return storage.SegmentPublication{}, false, fmt.Errorf("find segment: %w", err)
	}
	if len(pubs) == 0 {
		return storage.SegmentPublication{}, false, nil
	}
	return pubs[0], true, nil
}

// SegmentGet implements storage.SegmentIndex: the address row and its
// publications come from one read snapshot.
func (s *Store) SegmentGet(ctx context.Context, segmentID string) (storage.Segment, bool, error) {
	var (
		seg storage.Segment
		ok  bool
	)
	err := s.withReader(ctx, func(c *conn) error {
		return readTx(ctx, c, func() (err error) {
			ok, err = c.queryRow(ctx, qSegmentGet, []any{segmentID}, &seg.ID, &seg.ByteLength, &seg.CreatedAtMs)
			if err != nil || !ok {
				return err
			}
			seg.Publications, err = querySegPubs(ctx, c, qSegPubsOf, segmentID)
			return err
		})
	})
	if err != nil {
		return storage.Segment{}, false, fmt.Errorf("get segment: %w", err)
	}
	return seg, ok, nil
}

// SegmentPublications implements storage.SegmentIndex.
func (s *Store) SegmentPublications(ctx context.Context, segmentID, partition, logEpoch string) ([]storage.SegmentPublication, error) {
	var pubs []storage.SegmentPublication
	err := s.withReader(ctx, func(c *conn) (err error) {
		pubs, err = querySegPubs(ctx, c, qSegPubsIn, segmentID, partition, logEpoch)
		return err
	})
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
	var n int64
	err := s.write(ctx, func(c *conn) (err error) {
		n, err = c.exec(ctx, qSegExpire, nowMs, limit)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("expire segment publications: %w", err)
	}
	return n, nil
}

// SegmentUnpublished implements storage.SegmentIndex.
func (s *Store) SegmentUnpublished(ctx context.Context, limit int) ([]storage.Segment, error) {
	if err := storage.CheckSegmentListLimit(limit); err != nil {
		return nil, err
	}
	var out []storage.Segment
	err := s.withReader(ctx, func(c *conn) error {
		r, err := c.query(ctx, qSegOrphans, limit)
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			var seg storage.Segment
			if err := r.Scan(&seg.ID, &seg.ByteLength, &seg.CreatedAtMs); err != nil {
				return err
			}
			out = append(out, seg)
		}
		return r.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list unpublished segments: %w", err)
	}
	return out, nil
}

// SegmentDelete implements storage.SegmentIndex.
func (s *Store) SegmentDelete(ctx context.Context, segmentID string) (bool, error) {
	var n int64
	err := s.write(ctx, func(c *conn) (err error) {
		n, err = c.exec(ctx, qSegmentDelete, segmentID, segmentID)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("delete segment: %w", err)
	}
	return n == 1, nil
}

// SegmentStats implements storage.SegmentIndex.
func (s *Store) SegmentStats(ctx context.Context) (storage.SegmentStats, error) {
	var st storage.SegmentStats
	err := s.withReader(ctx, func(c *conn) error {
		return readTx(ctx, c, func() error {
			_, err := c.queryRow(ctx, qSegStats, nil, &st.Segments, &st.Bytes, &st.Publications)
			return err
		})
	})
	if err != nil {
		return storage.SegmentStats{}, fmt.Errorf("segment stats: %w", err)
	}
	return st, nil
}
