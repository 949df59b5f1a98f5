// Package blobcore is storage.BlobIndex written once, with the rule of the
// reference index (which ids a row references): what a blob row must
// satisfy, how a re-upload keeps the first object, the keyset pages and the
// sweep's delete. A store supplies its dialect's statements (SQL) and runs
// them (sqlexec.Runner); RowUpsert and RowDelete of each store write the
// references with RefIDs.
package blobcore

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/commitlog"
	"github.com/syncnode/syncnode/storage/internal/sqlexec"
)

// SQL is one dialect's statements of the blob index. Parameters are
// numbered in the order given; blob rows are read as BlobCols.
type SQL struct {
	// Insert inserts a blob row BlobCols ($1…$6) unless (partition,
	// blob id) exists.
	Insert string
	// Touch raises the upload time of blob ($1 partition, $2 blob id) to
	// $3 and returns the row.
	Touch string
	// Get reads blob ($1 partition, $2 blob id).
	Get string
	// Refs lists up to $5 references (tbl, row_id, scopes) of blob ($1
	// partition, $2 blob id) after ($3 tbl, $4 row id), in that order.
	Refs string
	// Orphans lists up to $2 unreferenced blobs uploaded before $1,
	// oldest first.
	Orphans string
	// Delete deletes blob ($1 partition, $2 blob id) if unreferenced and
	// uploaded before $3.
	Delete string
	// Stats counts the blob rows, their bytes and the references.
	Stats string
	// ObjectHeld selects a row naming object $1.
	ObjectHeld string
	// DeleteRacedFunc reports whether an error of Delete is a reference
	// committed since its check, so nothing was deleted; nil when the
	// dialect's writes cannot interleave.
	DeleteRacedFunc func(error) bool
}

// BlobCols are the columns a blob row is written and read as.
const BlobCols = `partition, blob_id, byte_length, media_type, object, uploaded_at_ms`

// Index is one store's blob index: storage.BlobIndex.
type Index struct {
	sql *SQL
	run sqlexec.Runner
}

// New returns the index over a store's statements and runner.
func New(sql *SQL, run sqlexec.Runner) *Index { return &Index{sql: sql, run: run} }

func scanBlob(scan func(...any) error, b *storage.Blob) error {
	return scan(&b.Partition, &b.ID, &b.ByteLength, &b.MediaType, &b.Object, &b.UploadedAtMs)
}

func dest(b *storage.Blob) []any {
	return []any{&b.Partition, &b.ID, &b.ByteLength, &b.MediaType, &b.Object, &b.UploadedAtMs}
}

// BlobPut implements storage.BlobIndex.
func (x *Index) BlobPut(ctx context.Context, b storage.Blob) (stored storage.Blob, created bool, err error) {
	if err := validate(b); err != nil {
		return storage.Blob{}, false, err
	}
	err = x.run.Write(ctx, func(c sqlexec.Conn) error {
		n, err := c.Exec(ctx, x.sql.Insert, b.Partition, b.ID, b.ByteLength, b.MediaType, b.Object, b.UploadedAtMs)
		if err != nil {
			return err
		}
		if created = n == 1; created {
			stored = b
			return nil
		}
		found, err := c.QueryRow(ctx, x.sql.Touch, []any{b.Partition, b.ID, b.UploadedAtMs}, dest(&stored)...)
		if err == nil && !found {
			// A concurrent BlobDelete removed it after the insert saw it;
			// the caller retries.
			err = fmt.Errorf("blob %s was deleted concurrently", b.ID)
		}
		return err
	})
	if err != nil {
		return storage.Blob{}, false, fmt.Errorf("put blob: %w", err)
	}
	return stored, created, nil
}

// BlobTouch implements storage.BlobIndex.
func (x *Index) BlobTouch(ctx context.Context, partition, blobID string, nowMs int64) (b storage.Blob, ok bool, err error) {
	err = x.run.Write(ctx, func(c sqlexec.Conn) (err error) {
		ok, err = c.QueryRow(ctx, x.sql.Touch, []any{partition, blobID, nowMs}, dest(&b)...)
		return err
	})
	if err != nil {
		return storage.Blob{}, false, fmt.Errorf("touch blob: %w", err)
	}
	return b, ok, nil
}

// BlobGet implements storage.BlobIndex.
func (x *Index) BlobGet(ctx context.Context, partition, blobID string) (b storage.Blob, ok bool, err error) {
	err = x.run.Read(ctx, func(c sqlexec.Conn) (err error) {
		ok, err = c.QueryRow(ctx, x.sql.Get, []any{partition, blobID}, dest(&b)...)
		return err
	})
	if err != nil {
		return storage.Blob{}, false, fmt.Errorf("get blob: %w", err)
	}
	return b, ok, nil
}

// BlobReferences implements storage.BlobIndex.
func (x *Index) BlobReferences(ctx context.Context, p storage.BlobRefParams) ([]storage.BlobRef, error) {
	if err := checkLimit(p.Limit); err != nil {
		return nil, err
	}
	var out []storage.BlobRef
	err := x.run.Read(ctx, func(c sqlexec.Conn) error {
		return c.Query(ctx, x.sql.Refs, []any{p.Partition, p.BlobID, p.AfterTable, p.AfterRowID, p.Limit},
			func(scan func(...any) error) error {
				var (
					r      storage.BlobRef
					scopes string
				)
				if err := scan(&r.Table, &r.RowID, &scopes); err != nil {
					return err
				}
				var err error
				if r.Scopes, err = commitlog.ParseScopesJSON([]byte(scopes)); err != nil {
					return err
				}
				out = append(out, r)
				return nil
			})
	})
	if err != nil {
		return nil, fmt.Errorf("list blob references: %w", err)
	}
	return out, nil
}

// BlobOrphans implements storage.BlobIndex.
func (x *Index) BlobOrphans(ctx context.Context, uploadedBeforeMs int64, limit int) ([]storage.Blob, error) {
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	var out []storage.Blob
	err := x.run.Read(ctx, func(c sqlexec.Conn) error {
		return c.Query(ctx, x.sql.Orphans, []any{uploadedBeforeMs, limit}, func(scan func(...any) error) error {
			var b storage.Blob
			if err := scanBlob(scan, &b); err != nil {
				return err
			}
			out = append(out, b)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list orphan blobs: %w", err)
	}
	return out, nil
}

// BlobDelete implements storage.BlobIndex.
func (x *Index) BlobDelete(ctx context.Context, partition, blobID string, uploadedBeforeMs int64) (bool, error) {
	var n int64
	err := x.run.Write(ctx, func(c sqlexec.Conn) (err error) {
		n, err = c.Exec(ctx, x.sql.Delete, partition, blobID, uploadedBeforeMs)
		return err
	})
	if err != nil && x.sql.DeleteRacedFunc != nil && x.sql.DeleteRacedFunc(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete blob: %w", err)
	}
	return n == 1, nil
}

// BlobStats implements storage.BlobIndex, in one statement.
func (x *Index) BlobStats(ctx context.Context) (st storage.BlobStats, err error) {
	err = x.run.Read(ctx, func(c sqlexec.Conn) error {
		_, err := c.QueryRow(ctx, x.sql.Stats, nil, &st.Blobs, &st.Bytes, &st.References)
		return err
	})
	if err != nil {
		return storage.BlobStats{}, fmt.Errorf("blob stats: %w", err)
	}
	return st, nil
}

// BlobObjectHeld implements storage.BlobIndex.
func (x *Index) BlobObjectHeld(ctx context.Context, object string) (held bool, err error) {
	err = x.run.Read(ctx, func(c sqlexec.Conn) (err error) {
		var one int64
		held, err = c.QueryRow(ctx, x.sql.ObjectHeld, []any{object}, &one)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("find blob object: %w", err)
	}
	return held, nil
}

// validate checks what every store requires of a blob row.
func validate(b storage.Blob) error {
	var errs []error
	if b.Partition == "" {
		errs = append(errs, errors.New("empty partition"))
	}
	if !ssp2.ValidBlobID(b.ID) {
		errs = append(errs, fmt.Errorf("blob id %q is not sha256:<64 hex>", b.ID))
	}
	if b.ByteLength < 0 {
		errs = append(errs, fmt.Errorf("negative byte length %d", b.ByteLength))
	}
	if b.Object == "" {
		errs = append(errs, errors.New("empty object name"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid blob: %w", errors.Join(errs...))
	}
	return nil
}

// checkLimit refuses a limit outside 1..MaxBlobListLimit.
func checkLimit(limit int) error {
	if limit < 1 || limit > storage.MaxBlobListLimit {
		return ssp2.Errorf(ssp2.CodeStorageInvalidLimit, "blob list limit %d outside 1..%d", limit, storage.MaxBlobListLimit)
	}
	return nil
}

// HasRefs reports whether t declares a blob_ref column: only such tables
// write the reference index.
func HasRefs(t *schema.Table) bool { return t.HasBlobRefs() }

// RefIDs appends to dst the distinct blob ids a row of t references
// (schema.Table.BlobRefIDs).
func RefIDs(t *schema.Table, vals []ssp2.Value, dst []string) []string {
	return t.BlobRefIDs(vals, dst)
}
