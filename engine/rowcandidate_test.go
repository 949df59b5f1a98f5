package engine

import (
	"context"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

// TestRowValidatorCandidate: a row validator's candidate reader sees the
// stored rows with the commit's earlier operations applied, not the
// operation it judges: a row titled "after-prior" needs "<id>-prior" to
// exist already, and an insert does not find itself.
func TestRowValidatorCandidate(t *testing.T) {
	var selfSeen []bool
	h := newHarness(t, func(c *Config) {
		c.Validators = map[string]RowValidator{"tasks": func(ctx context.Context, v RowValidation) error {
			if v.Row == nil || v.Row["title"] != "after-prior" {
				return nil
			}
			_, _, self, err := v.Candidate.GetRow(ctx, "tasks", v.RowID)
			if err != nil {
				return err
			}
			selfSeen = append(selfSeen, self)
			_, _, ok, err := v.Candidate.GetRow(ctx, "tasks", v.RowID+"-prior")
			if err != nil {
				return err
			}
			if !ok {
				return Reject("app.prior_missing", "the prior row comes first")
			}
			return nil
		}}
	})
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	m := h.sync(alice, 2, hdr("c", ep), commit("k1", upsert("a", h.row("a", "p1", "after-prior")), upsert("a-prior", h.row("a-prior", "p1", "x"))))
	if r := frames[*ssp2.PushResult](m)[0]; r.Status != ssp2.PushRejected || r.Results[0].OpIndex != 0 || r.Results[0].Code != "app.prior_missing" {
		t.Fatalf("prior after the row = %+v", r)
	}
	m = h.sync(alice, 2, hdr("c", ep), commit("k2", upsert("a-prior", h.row("a-prior", "p1", "x")), upsert("a", h.row("a", "p1", "after-prior"))))
	if r := frames[*ssp2.PushResult](m)[0]; r.Status != ssp2.PushApplied {
		t.Fatalf("prior first = %+v", r)
	}
	if len(selfSeen) != 2 || selfSeen[0] || selfSeen[1] {
		t.Fatalf("an insert's validator found its own row: %v", selfSeen)
	}
}
