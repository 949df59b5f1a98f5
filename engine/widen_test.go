package engine

import (
	"slices"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

// A subscription whose effective scopes widen since it was last served
// is reset (its cursor does not cover the rows already under the new
// value), again and again until it re-bootstraps; narrowing is not.
func TestWidenedScopesReset(t *testing.T) {
	h := newHarness(t, nil)
	bob := id("bob", "p1", "p2")
	ep := h.epoch(bob)
	h.sync(bob, 2, hdr("b", ep), commit("k1", upsert("t1", h.row("t1", "p1", "x")), upsert("t2", h.row("t2", "p2", "y"))))
	pull := &ssp2.PullHeader{Accept: 3}
	section := func(who Identity, cursor int64) (*ssp2.SubStart, int64) {
		t.Helper()
		m := h.sync(who, 2, hdr("a", ep), pull, sub("s", cursor, "p1", "p2"))
		return frames[*ssp2.SubStart](m)[0], frames[*ssp2.SubEnd](m)[0].NextCursor
	}

	st, next := section(id("alice", "p1"), -1)
	if st.Status != ssp2.SubActive || !slices.Equal(st.EffectiveScopes["project_id"], []string{"p1"}) {
		t.Fatalf("first pull = %+v", st)
	}
	wide := id("alice", "p1", "p2")
	for range 2 { // the second time as if the reset was lost
		if st, _ := section(wide, next); st.Status != ssp2.SubReset || st.ReasonCode != string(ssp2.CodeCursorExpired) {
			t.Fatalf("pull after widening = %+v, want a reset", st)
		}
	}
	st, next = section(wide, -1)
	if st.Status != ssp2.SubActive || !st.Bootstrap || len(st.EffectiveScopes["project_id"]) != 2 {
		t.Fatalf("re-bootstrap = %+v", st)
	}
	if st, _ := section(wide, next); st.Status != ssp2.SubActive || st.Bootstrap {
		t.Fatalf("incremental after the re-bootstrap = %+v", st)
	}
	if st, _ := section(id("alice", "p1"), next); st.Status != ssp2.SubActive || len(st.EffectiveScopes["project_id"]) != 1 {
		t.Fatalf("after narrowing = %+v, want active with p1", st)
	}
}
