package segments

import (
	"context"
	"io"

	"github.com/syncnode/syncnode/ssp2"
)

// Key identifies one bootstrap page: a publication is reusable by every
// request with the same key (SPEC.md §5.1, §5.5; the log epoch is part of
// the key, SPEC.md §2.1).
type Key struct {
	Partition     string
	LogEpoch      string
	Table         string
	SchemaVersion int32
	MediaType     ssp2.MediaType
	ScopeDigest   string
	AsOfCommitSeq int64
	// RowCursor is the page start (exclusive row id); "" is the first page.
	RowCursor string
	// PageRows is the page size the page was cut with: pages cut with
	// different sizes are different windows.
	PageRows int
}

// Publication is one grant of a segment's bytes: the key it was published
// under, what the page holds, and when the grant expires. One content
// address may carry many publications.
type Publication struct {
	SegmentID string // "sha256:<hex>" of the uncompressed bytes
	Key
	// NextRowCursor continues the table after this page; "" on the last.
	NextRowCursor string
	RowCount      int64
	ByteLength    int64
	CreatedAtMs   int64
	ExpiresAtMs   int64
}

// BuildFunc writes one page's SSG2 segment to w and reports its row count
// and the continuation cursor ("" when the page is the table's last).
type BuildFunc func(ctx context.Context, w io.Writer) (rowCount int64, nextRowCursor string, err error)
