package httpapi

import (
	"net/http"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

// TestStatusCoversCatalog: every catalog code has an HTTP error status,
// the map names no code outside the catalog, and unknown codes are 500s.
func TestStatusCoversCatalog(t *testing.T) {
	codes := ssp2.Codes()
	inCatalog := map[ssp2.Code]bool{}
	for _, c := range codes {
		inCatalog[c] = true
		s, ok := statuses[c]
		if !ok {
			t.Errorf("%s has no HTTP status", c)
			continue
		}
		if s < 400 || s > 599 || http.StatusText(s) == "" {
			t.Errorf("%s: status %d is not an HTTP error status", c, s)
		}
		// 429 and 503 tell a client to come back: a client error sent
		// with one must be retryable (node-side failures are internal).
		if info, _ := c.Info(); (s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable) &&
			!info.Retryable && info.Category != ssp2.CategoryInternal {
			t.Errorf("%s: status %d for a client error that is not retryable", c, s)
		}
	}
	for c := range statuses {
		if !inCatalog[c] {
			t.Errorf("status map names %q, which is not in the catalog", c)
		}
	}
	for c, want := range map[ssp2.Code]int{
		ssp2.CodeAuthRequired:   http.StatusUnauthorized,
		ssp2.CodeSchemaNotReady: http.StatusServiceUnavailable,
		ssp2.CodeRateLimited:    http.StatusTooManyRequests,
		"host.custom":           http.StatusInternalServerError,
		"":                      http.StatusInternalServerError,
	} {
		if got := Status(c); got != want {
			t.Errorf("Status(%q) = %d, want %d", c, got, want)
		}
	}
}
