package segments

import (
	"context"
	"errors"
	"io"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
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

// Segment is one content address with every publication of it.
type Segment struct {
	ID           string
	ByteLength   int64
	CreatedAtMs  int64
	Publications []Publication
}

const (
	idPrefix           = "sha256:"
	objectDigestPrefix = "SHA-256="
)

// ErrCorrupt matches a stored segment whose bytes do not match its
// address or its recorded digest, size or chunk count: it is detected on
// read, and the read fails rather than return the bytes.
var ErrCorrupt = errors.New("segments: stored segment is corrupt")

// parseID returns the 64 hex digits of a content address, or ok=false
// when id is not "sha256:" followed by 64 lowercase hex digits.
func parseID(id string) (hexDigest string, ok bool) {
	if len(id) != len(idPrefix)+64 || id[:len(idPrefix)] != idPrefix {
		return "", false
	}
	h := id[len(idPrefix):]
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", false
		}
	}
	return h, true
}

// notFound is the download path's error for an unknown segment.
func notFound() error { return ssp2.Errorf(ssp2.CodeNotFound, "unknown segment") }

// Live returns the publications still live at nowMs. With none at all it
// returns sync.not_found (an unknown segment, or one published only in
// another partition or log epoch when pubs was listed for one); with
// none live, sync.segment_expired (SPEC.md §5.5).
func Live(pubs []Publication, nowMs int64) ([]Publication, error) {
	if len(pubs) == 0 {
		return nil, notFound()
	}
	var live []Publication
	for _, p := range pubs {
		if p.ExpiresAtMs > nowMs {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return nil, ssp2.Errorf(ssp2.CodeSegmentExpired, "segment expired")
	}
	return live, nil
}

func storageKey(k Key) storage.SegmentKey { return storage.SegmentKey(k) }

func toStorage(p Publication) storage.SegmentPublication {
	return storage.SegmentPublication{
		SegmentID: p.SegmentID, SegmentKey: storage.SegmentKey(p.Key), NextRowCursor: p.NextRowCursor,
		RowCount: p.RowCount, ByteLength: p.ByteLength, CreatedAtMs: p.CreatedAtMs, ExpiresAtMs: p.ExpiresAtMs,
	}
}

func fromStorage(p storage.SegmentPublication) Publication {
	return Publication{
		SegmentID: p.SegmentID, Key: Key(p.SegmentKey), NextRowCursor: p.NextRowCursor,
		RowCount: p.RowCount, ByteLength: p.ByteLength, CreatedAtMs: p.CreatedAtMs, ExpiresAtMs: p.ExpiresAtMs,
	}
}

func fromStorageAll(ps []storage.SegmentPublication) []Publication {
	if len(ps) == 0 {
		return nil
	}
	out := make([]Publication, len(ps))
	for i, p := range ps {
		out[i] = fromStorage(p)
	}
	return out
}
