package engine

import (
	"context"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

// A push-only request binds its client id to its actor, so another actor
// can neither read the first one's stored push results (a conflict's
// serverRow discloses a row of a scope it does not hold) nor lock it out
// by pulling under the same id (SPEC.md §1.5).
func TestPushOnlyRequestBindsClientID(t *testing.T) {
	h := newHarness(t, nil)
	alice, mallory := id("alice", "p1"), id("mallory", "p2")
	ep := h.epoch(alice)

	h.sync(alice, 2, hdr("shared", ep), commit("k1", upsert("t1", h.row("t1", "p1", "secret"))))
	m := h.sync(alice, 2, hdr("shared", ep), commit("k2", upsert("t1", h.row("t1", "p1", "stale"), 7)))
	if res := frames[*ssp2.PushResult](m); len(res) != 1 || res[0].Status != ssp2.PushRejected || len(res[0].Results[0].ServerRow) == 0 {
		t.Fatalf("alice's conflicting push = %+v, want a rejection carrying the server row", res)
	}

	// Mallory replays alice's client and commit ids with her own writes.
	_, err := h.try(mallory, 2, hdr("shared", ep),
		commit("k1", upsert("m1", h.row("m1", "p2", "mine"))),
		commit("k2", upsert("m2", h.row("m2", "p2", "mine"))))
	wantCode(t, err, ssp2.CodeInvalidClientID)

	// A pull under the id does not take it over either.
	_, err = h.try(mallory, 2, hdr("shared", ep), &ssp2.PullHeader{Accept: 3}, sub("s", -1, "p2"))
	wantCode(t, err, ssp2.CodeInvalidClientID)

	// Alice keeps her id.
	m = h.sync(alice, 2, hdr("shared", ep), commit("k3", upsert("t3", h.row("t3", "p1", "x"))), &ssp2.PullHeader{Accept: 3}, sub("s", -1, "p1"))
	if res := frames[*ssp2.PushResult](m); len(res) != 1 || res[0].Status != ssp2.PushApplied {
		t.Fatalf("alice after the attempt = %+v", res)
	}
	c, ok, err := h.store.ClientGet(context.Background(), "p", "shared")
	if err != nil || !ok || c.ActorID != "alice" {
		t.Fatalf("client record = %+v, %v, %v; want bound to alice", c, ok, err)
	}
}

// A push-only request of a new client creates its record without a cursor
// and without subscriptions; one of a known client keeps the record's
// cursor, subscriptions and wire version.
func TestPushOnlyRequestKeepsClientRecord(t *testing.T) {
	h := newHarness(t, nil)
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	ctx := context.Background()

	h.sync(alice, 2, hdr("fresh", ep), commit("k1", upsert("t1", h.row("t1", "p1", "x"))))
	c, ok, err := h.store.ClientGet(ctx, "p", "fresh")
	if err != nil || !ok || c.ActorID != "alice" || c.Cursor != -1 || c.Subscriptions != nil {
		t.Fatalf("record after a first push-only request = %+v, %v, %v", c, ok, err)
	}

	h.sync(alice, 2, hdr("c", ep), &ssp2.PullHeader{Accept: 3}, sub("s", -1, "p1"))
	before, _, err := h.store.ClientGet(ctx, "p", "c")
	if err != nil {
		t.Fatal(err)
	}
	h.now += 10 * clientRefreshMs
	h.sync(alice, 2, hdr("c", ep), commit("k2", upsert("t2", h.row("t2", "p1", "y"))))
	after, _, err := h.store.ClientGet(ctx, "p", "c")
	if err != nil {
		t.Fatal(err)
	}
	if after.Cursor != before.Cursor || after.WireVersion != before.WireVersion || string(after.Subscriptions) != string(before.Subscriptions) {
		t.Fatalf("a push-only request changed the record: %+v → %+v", before, after)
	}
}

// A stored push result is never replayed to another actor, even when the
// client id is free again (an epoch rotation deletes client records but
// keeps idempotency results, SPEC.md §2.1).
func TestStoredPushResultStaysWithItsActor(t *testing.T) {
	h := newHarness(t, nil)
	alice, mallory := id("alice", "p1"), id("mallory", "p2")
	ep := h.epoch(alice)
	h.sync(alice, 2, hdr("c", ep), commit("k1", upsert("t1", h.row("t1", "p1", "secret"))))
	h.sync(alice, 2, hdr("c", ep), commit("k2", upsert("t1", h.row("t1", "p1", "stale"), 7)))

	part, err := h.store.PartitionRotateEpoch(context.Background(), "p", h.now)
	if err != nil {
		t.Fatal(err)
	}
	m := h.sync(mallory, 2, hdr("c", part.LogEpoch),
		commit("k1", upsert("m1", h.row("m1", "p2", "mine"))),
		commit("k2", upsert("m2", h.row("m2", "p2", "mine"))))
	res := frames[*ssp2.PushResult](m)
	if len(res) != 2 {
		t.Fatalf("push results = %+v", res)
	}
	for _, r := range res {
		if r.Status != ssp2.PushRejected || len(r.Results) != 1 || r.Results[0].Code != string(ssp2.CodeInvalidClientID) || len(r.Results[0].ServerRow) != 0 {
			t.Fatalf("mallory's commit %s = %+v, want a rejection with %s and no server row", r.ClientCommitID, r, ssp2.CodeInvalidClientID)
		}
	}
	// Alice's results are intact.
	rec, ok, err := h.store.IdempotencyGet(context.Background(), "p", "c", "k1")
	if err != nil || !ok || rec.ActorID != "alice" {
		t.Fatalf("alice's record = %+v, %v, %v", rec, ok, err)
	}
}
