package storage

import (
	"context"
	"io"
)

// BlobIndex is the SQL side of blobs (SPEC.md §5.9; package blobs keeps
// the bytes in the Object Store): one row per blob a partition holds,
// naming the object its bytes are in, and the reference index — the
// (table, rowId) rows of the partition whose blob_ref columns reference
// it, with their stored scopes (§5.9.4).
//
// The reference index is written by Tx.RowUpsert and Tx.RowDelete in the
// transaction of the row write; a reference requires its blob row (a
// foreign key), so "referenced ⇒ present" holds in SQL whatever the
// caller checked. None of these methods takes a partition lock.
type BlobIndex interface {
	// BlobPut records b unless the partition already holds b.ID, in which
	// case the stored row keeps its object and its upload time is raised
	// to b's. It returns the stored row and whether b was inserted.
	BlobPut(ctx context.Context, b Blob) (stored Blob, created bool, err error)

	// BlobTouch raises the upload time of a held blob to nowMs (an
	// idempotent re-upload restarts the orphan grace period) and returns
	// the row; ok=false when the partition does not hold the blob.
	BlobTouch(ctx context.Context, partition, blobID string, nowMs int64) (b Blob, ok bool, err error)

	// BlobGet returns the partition's row of a blob.
	BlobGet(ctx context.Context, partition, blobID string) (b Blob, ok bool, err error)

	// BlobReferences returns a keyset page of the reference index of one
	// blob in one partition, ordered by (table, rowId) bytewise, after
	// p.After (exclusive), at most p.Limit (1..MaxBlobListLimit,
	// CodeStorageInvalidLimit otherwise).
	BlobReferences(ctx context.Context, p BlobRefParams) ([]BlobRef, error)

	// BlobOrphans lists up to limit blobs, in every partition, that no row
	// references and that were uploaded before uploadedBeforeMs, oldest
	// first.
	BlobOrphans(ctx context.Context, uploadedBeforeMs int64, limit int) ([]Blob, error)

	// BlobDelete deletes a blob row if no row references it and it was
	// uploaded before uploadedBeforeMs, and reports whether it did. A
	// reference committed concurrently wins: the row stays.
	BlobDelete(ctx context.Context, partition, blobID string, uploadedBeforeMs int64) (bool, error)

	// BlobStats counts the blob rows, their bytes and the references.
	BlobStats(ctx context.Context) (BlobStats, error)

	// BlobObjectHeld reports whether some blob row, in any partition,
	// names the Object Store object: the sweep collects the objects none
	// does (an upload whose node died before its row was written).
	BlobObjectHeld(ctx context.Context, object string) (bool, error)
}

// BlobChecker is the push-time existence check (SPEC.md §5.9.6), part of
// Tx.
type BlobChecker interface {
	// BlobHeld reports whether the locked partition holds the blob. Where
	// writers interleave it holds the blob row until the transaction ends,
	// so a concurrent BlobDelete cannot remove a blob the transaction is
	// about to reference.
	BlobHeld(ctx context.Context, blobID string) (bool, error)
}

// BlobUpload is one upload of a blob into a partition, as package
// blobs stores it (blobs.Store.Put).
type BlobUpload struct {
	Partition, BlobID string
	// MediaType is the advisory type the upload declared ("" for none).
	MediaType string
	// Declared is the body's declared length, -1 when unknown.
	Declared int64
	// Limit, when set, caps the body below the store's MaxBytes (a
	// presigned grant's byteLength).
	Limit *int64
	// Body is the decoded bytes.
	Body io.Reader
}

// Blob is a blob held by a partition.
type Blob struct {
	Partition  string
	ID         string // "sha256:<64 hex>" of the bytes
	ByteLength int64
	// MediaType is the advisory type the upload declared ("" when none).
	MediaType string
	// Object names the Object Store object holding the bytes.
	Object       string
	UploadedAtMs int64
}

// BlobRef is one row referencing a blob.
type BlobRef struct {
	Table  string
	RowID  string
	Scopes map[string]string // the row's stored scopes
}

// BlobRefParams selects a page of a blob's references.
type BlobRefParams struct {
	Partition string
	BlobID    string
	// After is the exclusive (Table, RowID) start; zero starts at the
	// beginning.
	AfterTable, AfterRowID string
	Limit                  int
}

// BlobStats counts the blob index.
type BlobStats struct {
	Blobs      int64
	Bytes      int64
	References int64
}

// MaxBlobListLimit bounds BlobReferences and BlobOrphans pages.
const MaxBlobListLimit = 10_000
