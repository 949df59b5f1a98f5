package segments

import (
	"context"
	"errors"
	"io"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// BuildFunc writes one page's SSG2 segment to w and reports its row count
// and the continuation cursor ("" when the page is the table's last). It
// is an alias so that consumers declaring the store's interface (the
// engine) need not import this package.
type BuildFunc = func(ctx context.Context, w io.Writer) (rowCount int64, nextRowCursor string, err error)

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
func Live(pubs []storage.SegmentPublication, nowMs int64) ([]storage.SegmentPublication, error) {
	if len(pubs) == 0 {
		return nil, notFound()
	}
	var live []storage.SegmentPublication
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
