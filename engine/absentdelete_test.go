package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

// Deleting absent rows is applied with no authorization check and no
// emitted change (SPEC.md §6.2), so an actor whose grants cover nothing
// can send any number of such commits: they must not grow the log. Each
// is answered applied with the partition's head seq, and replays cached.
func TestAbsentRowDeletesAppendNothing(t *testing.T) {
	h := newHarness(t, nil)
	alice, nobody := id("alice", "p1"), id("nobody")
	ep := h.epoch(alice)
	ctx := context.Background()
	h.sync(alice, 2, hdr("a", ep), commit("k1", upsert("t1", h.row("t1", "p1", "x"))))
	h.commits = 0

	for i := range 20 {
		m := h.sync(nobody, 2, hdr("n", ep), commit(fmt.Sprint("d", i), del(fmt.Sprint("gone-", i)), del("t-absent")))
		res := frames[*ssp2.PushResult](m)
		if len(res) != 1 || res[0].Status != ssp2.PushApplied || res[0].CommitSeq == nil || *res[0].CommitSeq != 1 || len(res[0].Results) != 2 {
			t.Fatalf("absent delete %d = %+v, want applied at the head seq 1", i, res)
		}
	}
	if seq, err := h.store.CommitMaxSeq(ctx, "p"); err != nil || seq != 1 {
		t.Fatalf("max seq after absent deletes = %d, %v; want 1", seq, err)
	}
	if h.commits != 0 {
		t.Fatalf("OnCommit called %d times for commits that appended nothing", h.commits)
	}
	m := h.sync(nobody, 2, hdr("n", ep), commit("d0", del("gone-0")))
	if res := frames[*ssp2.PushResult](m); len(res) != 1 || res[0].Status != ssp2.PushCached || *res[0].CommitSeq != 1 {
		t.Fatalf("replay = %+v, want cached at 1", res)
	}

	// A later commit gets the next seq, and a puller from the head sees
	// only it.
	m = h.sync(alice, 2, hdr("a", ep), commit("k2", upsert("t2", h.row("t2", "p1", "y"))), &ssp2.PullHeader{Accept: 3}, sub("s", 1, "p1"))
	if res := frames[*ssp2.PushResult](m); *res[0].CommitSeq != 2 {
		t.Fatalf("next commit = %+v, want seq 2", res)
	}
	if cs := frames[*ssp2.Commit](m); len(cs) != 1 || cs[0].CommitSeq != 2 {
		t.Fatalf("pull from the head = %+v", cs)
	}

	// A delete of an existing row still commits; mixed with absent ones
	// too.
	m = h.sync(alice, 2, hdr("a", ep), commit("k3", del("nope"), del("t1")))
	if res := frames[*ssp2.PushResult](m); res[0].Status != ssp2.PushApplied || *res[0].CommitSeq != 3 {
		t.Fatalf("mixed delete = %+v, want applied at 3", res)
	}
}

// On an empty log there is no head seq to report (commitSeq is ≥ 1,
// SPEC.md §2.1): the first such commit appends, once.
func TestAbsentRowDeleteOnEmptyLog(t *testing.T) {
	h := newHarness(t, nil)
	nobody := id("nobody")
	ep := h.epoch(nobody)
	for i := range 3 {
		m := h.sync(nobody, 2, hdr("n", ep), commit(fmt.Sprint("d", i), del("gone")))
		if res := frames[*ssp2.PushResult](m); res[0].Status != ssp2.PushApplied || *res[0].CommitSeq != 1 {
			t.Fatalf("absent delete %d on an empty log = %+v, want applied at 1", i, res)
		}
	}
	if seq, _ := h.store.CommitMaxSeq(context.Background(), "p"); seq != 1 {
		t.Fatalf("max seq = %d, want 1", seq)
	}
}
