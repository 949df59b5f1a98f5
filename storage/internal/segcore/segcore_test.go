package segcore

import (
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

func TestValidate(t *testing.T) {
	ok := storage.SegmentPublication{SegmentID: "s", ByteLength: 10, RowCount: 2, CreatedAtMs: 1, ExpiresAtMs: 2}
	if err := validate(ok); err != nil {
		t.Fatalf("valid publication: %v", err)
	}
	for name, mutate := range map[string]func(p *storage.SegmentPublication){
		"empty id":          func(p *storage.SegmentPublication) { p.SegmentID = "" },
		"negative length":   func(p *storage.SegmentPublication) { p.ByteLength = -1 },
		"negative rows":     func(p *storage.SegmentPublication) { p.RowCount = -1 },
		"negative page":     func(p *storage.SegmentPublication) { p.PageRows = -1 },
		"negative as-of":    func(p *storage.SegmentPublication) { p.AsOfCommitSeq = -1 },
		"expiry at created": func(p *storage.SegmentPublication) { p.ExpiresAtMs = p.CreatedAtMs },
	} {
		p := ok
		mutate(&p)
		if err := validate(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCheckListLimit(t *testing.T) {
	for _, limit := range []int{1, storage.MaxSegmentListLimit} {
		if err := checkListLimit(limit); err != nil {
			t.Errorf("limit %d: %v", limit, err)
		}
	}
	for _, limit := range []int{0, -1, storage.MaxSegmentListLimit + 1} {
		if got := ssp2.CodeOf(checkListLimit(limit)); got != ssp2.CodeStorageInvalidLimit {
			t.Errorf("limit %d: code %q, want %q", limit, got, ssp2.CodeStorageInvalidLimit)
		}
	}
}
