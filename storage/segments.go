package storage

import (
	"context"

	"github.com/syncnode/syncnode/ssp2"
)

// SegmentIndex is the SQL index of bootstrap segments (package segments
// keeps the bytes in the Object Store): one row per content address, and
// one row per publication of it — a grant of the same bytes under one key
// (partition, log epoch, table, schema version, media type, scope digest,
// pin, page window), with its own expiry (SPEC.md §5.1, §5.5).
//
// None of these methods takes a partition lock. Reads run on the readers
// (never on SQLite's writer), so reusing a publication costs no write.
type SegmentIndex interface {
	// SegmentPublish records p in one transaction: the address row is
	// created if absent, then the publication is inserted, or, when one
	// with the same segment id and key exists, its expiry is raised to the
	// later of the two (the rest of the stored row is kept). It returns
	// the stored publication. An address already recorded with another
	// byte length is refused (CodeStorageContentCollision), changing
	// nothing.
	SegmentPublish(ctx context.Context, p SegmentPublication) (SegmentPublication, error)

	// SegmentFind returns the publication of key that expires last, among
	// those still live at nowMs (ExpiresAtMs > nowMs): the reuse lookup.
	SegmentFind(ctx context.Context, key SegmentKey, nowMs int64) (SegmentPublication, bool, error)

	// SegmentGet returns an address row with all its publications,
	// expired ones included, ordered by key and expiry.
	SegmentGet(ctx context.Context, segmentID string) (Segment, bool, error)

	// SegmentPublications lists the publications of segmentID in one
	// partition and log epoch, expired ones included, ordered as by
	// SegmentGet: what a download is authorized against.
	SegmentPublications(ctx context.Context, segmentID, partition, logEpoch string) ([]SegmentPublication, error)

	// SegmentExpire deletes up to limit publications expired at nowMs
	// (ExpiresAtMs <= nowMs) and reports how many it deleted. Address rows
	// stay: SegmentUnpublished finds those left without a publication.
	SegmentExpire(ctx context.Context, nowMs int64, limit int) (int64, error)

	// SegmentUnpublished lists up to limit address rows that have no
	// publication, oldest first.
	SegmentUnpublished(ctx context.Context, limit int) ([]Segment, error)

	// SegmentDelete deletes an address row if it has no publication, and
	// reports whether it did.
	SegmentDelete(ctx context.Context, segmentID string) (bool, error)

	// SegmentStats counts the address rows, their bytes, and the
	// publications.
	SegmentStats(ctx context.Context) (SegmentStats, error)
}

// SegmentKey is what a publication is reused by.
type SegmentKey struct {
	Partition     string
	LogEpoch      string
	Table         string
	SchemaVersion int32
	MediaType     ssp2.MediaType
	ScopeDigest   string
	AsOfCommitSeq int64
	// RowCursor is the page start ("" for the first page).
	RowCursor string
	// PageRows is the page size the page was cut with.
	PageRows int
}

// SegmentPublication is one grant of a segment's bytes.
type SegmentPublication struct {
	SegmentID string
	SegmentKey
	NextRowCursor string
	RowCount      int64
	ByteLength    int64
	CreatedAtMs   int64
	ExpiresAtMs   int64
}

// Segment is one content address and its publications.
type Segment struct {
	ID           string
	ByteLength   int64
	CreatedAtMs  int64
	Publications []SegmentPublication
}

// SegmentStats counts the segment index.
type SegmentStats struct {
	Segments     int64
	Bytes        int64
	Publications int64
}

// MaxSegmentListLimit bounds the limit of SegmentExpire and
// SegmentUnpublished.
const MaxSegmentListLimit = 10_000
