// Package segcore is storage.SegmentIndex written once: what a publication
// must satisfy, how publishing reuses an address and refuses a collision,
// and the reads and expiry of the index. A store supplies its dialect's
// statements (SQL) and runs them (sqlexec.Runner).
package segcore

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/sqlexec"
)

// SQL is one dialect's statements of the segment index. Parameters are
// numbered in the order given. Publications are read as PublicationCols,
// addresses as (segment id, byte length, created at).
type SQL struct {
	// AddressInsert inserts address ($1 id, $2 byte length, $3 created
	// at) unless it exists; AddressLength reads $1's byte length, holding
	// the row against a concurrent delete until commit where the dialect
	// needs that.
	AddressInsert, AddressLength string
	// PublicationUpsert inserts publication PublicationCols ($1…$15), or
	// raises the existing one's expiry to the later of the two, and
	// returns the stored row.
	PublicationUpsert string
	// Find returns the live publication of a key ($1 partition, $2 log
	// epoch, $3 table, $4 schema version, $5 media type, $6 scope digest,
	// $7 as-of commitSeq, $8 row cursor, $9 page rows) that expires last
	// after $10.
	Find string
	// Address reads address $1; PublicationsOf its publications,
	// PublicationsIn those in partition $2 and log epoch $3, both ordered
	// by key and expiry.
	Address, PublicationsOf, PublicationsIn string
	// Expire deletes up to $2 publications expired at $1.
	Expire string
	// Unpublished lists up to $1 addresses without a publication, oldest
	// first.
	Unpublished string
	// AddressDelete deletes address $1 if it has no publication.
	AddressDelete string
	// Stats counts the addresses, their bytes and the publications.
	Stats string
	// DeleteRacedFunc reports whether an error of AddressDelete is a
	// publication committed since its check, so nothing was deleted; nil
	// when the dialect's writes cannot interleave.
	DeleteRacedFunc func(error) bool
}

// PublicationCols are the columns a publication is written and read as.
const PublicationCols = `segment_id, partition, log_epoch, tbl, schema_version, media_type, scope_digest,
	as_of_commit_seq, row_cursor, page_rows, next_row_cursor, row_count, byte_length, created_at_ms, expires_at_ms`

// Index is one store's segment index: storage.SegmentIndex.
type Index struct {
	sql *SQL
	run sqlexec.Runner
}

// New returns the index over a store's statements and runner.
func New(sql *SQL, run sqlexec.Runner) *Index { return &Index{sql: sql, run: run} }

// SegmentPublish implements storage.SegmentIndex.
func (x *Index) SegmentPublish(ctx context.Context, p storage.SegmentPublication) (storage.SegmentPublication, error) {
	if err := validate(p); err != nil {
		return storage.SegmentPublication{}, err
	}
	var stored storage.SegmentPublication
	err := x.run.Write(ctx, func(c sqlexec.Conn) error {
		if _, err := c.Exec(ctx, x.sql.AddressInsert, p.SegmentID, p.ByteLength, p.CreatedAtMs); err != nil {
			return err
		}
		var have int64
		found, err := c.QueryRow(ctx, x.sql.AddressLength, []any{p.SegmentID}, &have)
		switch {
		case err != nil:
			return err
		case !found:
			// A concurrent SegmentDelete removed it after the insert saw
			// it; the caller retries.
			return fmt.Errorf("segment %s was deleted concurrently", p.SegmentID)
		case have != p.ByteLength:
			return ssp2.Errorf(ssp2.CodeStorageContentCollision, "segment %s is recorded with %d bytes, not %d", p.SegmentID, have, p.ByteLength)
		}
		pubs, err := publications(ctx, c, x.sql.PublicationUpsert, p.SegmentID, p.Partition, p.LogEpoch, p.Table, p.SchemaVersion,
			int64(p.MediaType), p.ScopeDigest, p.AsOfCommitSeq, p.RowCursor, p.PageRows, p.NextRowCursor, p.RowCount,
			p.ByteLength, p.CreatedAtMs, p.ExpiresAtMs)
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
func (x *Index) SegmentFind(ctx context.Context, k storage.SegmentKey, nowMs int64) (storage.SegmentPublication, bool, error) {
	var pubs []storage.SegmentPublication
	err := x.run.Read(ctx, func(c sqlexec.Conn) (err error) {
		pubs, err = publications(ctx, c, x.sql.Find, k.Partition, k.LogEpoch, k.Table, k.SchemaVersion, int64(k.MediaType),
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
// publications come from one snapshot.
func (x *Index) SegmentGet(ctx context.Context, segmentID string) (seg storage.Segment, ok bool, err error) {
	err = x.run.Snapshot(ctx, func(c sqlexec.Conn) (err error) {
		ok, err = c.QueryRow(ctx, x.sql.Address, []any{segmentID}, &seg.ID, &seg.ByteLength, &seg.CreatedAtMs)
		if err != nil || !ok {
			return err
		}
		seg.Publications, err = publications(ctx, c, x.sql.PublicationsOf, segmentID)
		return err
	})
	if err != nil {
		return storage.Segment{}, false, fmt.Errorf("get segment: %w", err)
	}
	return seg, ok, nil
}

// SegmentPublications implements storage.SegmentIndex.
func (x *Index) SegmentPublications(ctx context.Context, segmentID, partition, logEpoch string) ([]storage.SegmentPublication, error) {
	var pubs []storage.SegmentPublication
	err := x.run.Read(ctx, func(c sqlexec.Conn) (err error) {
		pubs, err = publications(ctx, c, x.sql.PublicationsIn, segmentID, partition, logEpoch)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list segment publications: %w", err)
	}
	return pubs, nil
}

// SegmentExpire implements storage.SegmentIndex.
func (x *Index) SegmentExpire(ctx context.Context, nowMs int64, limit int) (int64, error) {
	if err := checkListLimit(limit); err != nil {
		return 0, err
	}
	var n int64
	err := x.run.Write(ctx, func(c sqlexec.Conn) (err error) {
		n, err = c.Exec(ctx, x.sql.Expire, nowMs, limit)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("expire segment publications: %w", err)
	}
	return n, nil
}

// SegmentUnpublished implements storage.SegmentIndex.
func (x *Index) SegmentUnpublished(ctx context.Context, limit int) ([]storage.Segment, error) {
	if err := checkListLimit(limit); err != nil {
		return nil, err
	}
	var out []storage.Segment
	err := x.run.Read(ctx, func(c sqlexec.Conn) error {
		return c.Query(ctx, x.sql.Unpublished, []any{limit}, func(scan func(...any) error) error {
			var seg storage.Segment
			if err := scan(&seg.ID, &seg.ByteLength, &seg.CreatedAtMs); err != nil {
				return err
			}
			out = append(out, seg)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list unpublished segments: %w", err)
	}
	return out, nil
}

// SegmentDelete implements storage.SegmentIndex.
func (x *Index) SegmentDelete(ctx context.Context, segmentID string) (bool, error) {
	var n int64
	err := x.run.Write(ctx, func(c sqlexec.Conn) (err error) {
		n, err = c.Exec(ctx, x.sql.AddressDelete, segmentID)
		return err
	})
	if err != nil && x.sql.DeleteRacedFunc != nil && x.sql.DeleteRacedFunc(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete segment: %w", err)
	}
	return n == 1, nil
}

// SegmentStats implements storage.SegmentIndex, in one statement.
func (x *Index) SegmentStats(ctx context.Context) (st storage.SegmentStats, err error) {
	err = x.run.Read(ctx, func(c sqlexec.Conn) error {
		_, err := c.QueryRow(ctx, x.sql.Stats, nil, &st.Segments, &st.Bytes, &st.Publications)
		return err
	})
	if err != nil {
		return storage.SegmentStats{}, fmt.Errorf("segment stats: %w", err)
	}
	return st, nil
}

func publications(ctx context.Context, c sqlexec.Conn, q string, args ...any) ([]storage.SegmentPublication, error) {
	var out []storage.SegmentPublication
	err := c.Query(ctx, q, args, func(scan func(...any) error) error {
		var (
			p  storage.SegmentPublication
			mt int64
		)
		if err := scan(&p.SegmentID, &p.Partition, &p.LogEpoch, &p.Table, &p.SchemaVersion, &mt, &p.ScopeDigest,
			&p.AsOfCommitSeq, &p.RowCursor, &p.PageRows, &p.NextRowCursor, &p.RowCount, &p.ByteLength,
			&p.CreatedAtMs, &p.ExpiresAtMs); err != nil {
			return err
		}
		p.MediaType = ssp2.MediaType(mt)
		out = append(out, p)
		return nil
	})
	return out, err
}

// validate checks what every store requires of a publication before
// writing it.
func validate(p storage.SegmentPublication) error {
	var errs []error
	if p.SegmentID == "" {
		errs = append(errs, errors.New("empty segment id"))
	}
	if p.ByteLength < 0 || p.RowCount < 0 || p.PageRows < 0 || p.AsOfCommitSeq < 0 {
		errs = append(errs, fmt.Errorf("negative byte length %d, row count %d, page rows %d or as-of %d",
			p.ByteLength, p.RowCount, p.PageRows, p.AsOfCommitSeq))
	}
	if p.ExpiresAtMs <= p.CreatedAtMs {
		errs = append(errs, fmt.Errorf("expiry %d not after creation %d", p.ExpiresAtMs, p.CreatedAtMs))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid segment publication: %w", errors.Join(errs...))
	}
	return nil
}

// checkListLimit refuses a limit outside 1..MaxSegmentListLimit.
func checkListLimit(limit int) error {
	if limit < 1 || limit > storage.MaxSegmentListLimit {
		return ssp2.Errorf(ssp2.CodeStorageInvalidLimit, "segment list limit %d outside 1..%d", limit, storage.MaxSegmentListLimit)
	}
	return nil
}
