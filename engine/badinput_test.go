package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// onBothStores runs f on a harness over SQLite and over PostgreSQL
// (skipped without SYNCNODE_TEST_POSTGRES_URL unless CI requires it).
func onBothStores(t *testing.T, f func(t *testing.T, h *harness)) {
	forStores(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		f(t, newHarnessOn(t, open(t), taskSchema, nil))
	})
}

// Strings a store cannot hold (U+0000: PostgreSQL text refuses it) and ids
// the bus cannot carry are refused alike on both stores, each with its
// typed error at the level SPEC.md §1.7 puts it — never an internal
// error, and a rejected commit is a persisted rejection, not a retryable
// failure that would block the client's outbox.
func TestUnstorableStringsAreRefused(t *testing.T) { onBothStores(t, testUnstorableStrings) }

func testUnstorableStrings(t *testing.T, h *harness) {
	alice := Identity{Partition: "p", ActorID: "alice", Scopes: StaticScopes{"project_id": {Wildcard}}}
	ep := h.epoch(alice)
	h.sync(alice, 2, hdr("c", ep), commit("base", upsert("t1", h.row("t1", "p1", "first"))))
	ctx := context.Background()
	long := strings.Repeat("x", 1025)
	pull := &ssp2.PullHeader{Accept: 3}
	token := json.RawMessage(`{"asOfCommitSeq":1,"tables":["tasks"],"tableIndex":0,"rowCursor":"\u0000"}`)

	requestLevel := []struct {
		name   string
		who    Identity
		frames []ssp2.Frame
		code   ssp2.Code
	}{
		{"clientId with NUL", alice, []ssp2.Frame{hdr("c\x00", ep), commit("k", upsert("t2", h.row("t2", "p1", "x")))}, ssp2.CodeInvalidClientID},
		{"clientId too long", alice, []ssp2.Frame{hdr(long, ep), commit("k", upsert("t2", h.row("t2", "p1", "x")))}, ssp2.CodeInvalidClientID},
		{"requested scope with NUL", alice, []ssp2.Frame{hdr("c", ep), pull, sub("s", -1, "p\x00")}, ssp2.CodeInvalidSubscription},
		{"partition with NUL", Identity{Partition: "p\x00", ActorID: "alice", Scopes: alice.Scopes}, []ssp2.Frame{hdr("c", ep), pull, sub("s", -1, "p1")}, ssp2.CodeInvalidRequest},
		{"partition too long", Identity{Partition: long, ActorID: "alice", Scopes: alice.Scopes}, []ssp2.Frame{hdr("c", ep), pull, sub("s", -1, "p1")}, ssp2.CodeInvalidRequest},
		{"actor with NUL", Identity{Partition: "p", ActorID: "al\x00ice", Scopes: alice.Scopes}, []ssp2.Frame{hdr("c2", ep), commit("k", upsert("t2", h.row("t2", "p1", "x")))}, ssp2.CodeInvalidRequest},
		{"actor too long", Identity{Partition: "p", ActorID: long, Scopes: alice.Scopes}, []ssp2.Frame{hdr("c2", ep), commit("k", upsert("t2", h.row("t2", "p1", "x")))}, ssp2.CodeInvalidRequest},
	}
	for _, tc := range requestLevel {
		_, err := h.try(tc.who, 2, tc.frames...)
		if ssp2.CodeOf(err) != tc.code {
			t.Errorf("%s: error %v, want %s", tc.name, err, tc.code)
		}
		h.unchanged(t, tc.name, 1)
	}

	commitLevel := []struct {
		name      string
		c         *ssp2.PushCommit
		persisted bool
	}{
		{"clientCommitId with NUL", commit("k\x00", upsert("t2", h.row("t2", "p1", "x"))), false},
		{"clientCommitId too long", commit(long, upsert("t2", h.row("t2", "p1", "x"))), false},
		{"rowId with NUL", commit("k-row", upsert("t\x00", h.row("t\x00", "p1", "x"))), true},
		{"delete rowId with NUL", commit("k-del", del("t\x00")), true},
		{"string value with NUL", commit("k-val", upsert("t2", h.row("t2", "p1", "a\x00b"))), true},
		{"scope value with NUL", commit("k-scope", upsert("t3", h.row("t3", "p\x00", "x"))), true},
	}
	for _, tc := range commitLevel {
		for attempt := range 2 { // the second attempt is answered from the stored rejection
			m, err := h.try(alice, 2, hdr("c", ep), tc.c)
			if err != nil {
				t.Fatalf("%s: request failed: %v", tc.name, err)
			}
			res := frames[*ssp2.PushResult](m)
			if len(res) != 1 || res[0].Status != ssp2.PushRejected || len(res[0].Results) != 1 ||
				res[0].Results[0].Code != string(ssp2.CodeInvalidRequest) || res[0].Results[0].Retryable {
				t.Fatalf("%s (attempt %d): push result %+v, want a non-retryable %s rejection", tc.name, attempt, res, ssp2.CodeInvalidRequest)
			}
		}
		if tc.persisted {
			if _, ok, err := h.store.IdempotencyGet(ctx, "p", "c", tc.c.ClientCommitID); err != nil || !ok {
				t.Errorf("%s: rejection not persisted (%v, %v)", tc.name, ok, err)
			}
		}
		h.unchanged(t, tc.name, 1)
	}

	// An unusable resume token restarts the bootstrap (SPEC.md §4.7);
	// a subscription id is only echoed and stored, NUL or not.
	s := sub("s\x00", 1, "p1")
	s.BootstrapState = token
	m := h.sync(alice, 2, hdr("c", ep), pull, s)
	if st := frames[*ssp2.SubStart](m); len(st) != 1 || st[0].Status != ssp2.SubActive || !st[0].Bootstrap || st[0].ID != "s\x00" {
		t.Fatalf("resume with an unusable token = %+v, want a restarted bootstrap", st)
	}
	h.unchanged(t, "an unusable resume token", 1)
}

// unchanged fails t unless the partition still holds exactly its first
// commit and row t1, no other partition appeared, and a plain pull works.
func (h *harness) unchanged(t *testing.T, what string, maxSeq int64) {
	t.Helper()
	ctx := context.Background()
	if seq, err := h.store.CommitMaxSeq(ctx, "p"); err != nil || seq != maxSeq {
		t.Fatalf("%s: max seq %d (%v), want %d", what, seq, err, maxSeq)
	}
	parts, err := h.store.Partitions(ctx)
	if err != nil || len(parts) != 1 {
		t.Fatalf("%s: partitions %+v (%v), want only p", what, parts, err)
	}
	m := h.sync(id("bob", "p1"), 2, hdr("probe", parts[0].LogEpoch), &ssp2.PullHeader{Accept: 3}, sub("s", -1, "p1"))
	if n := len(frames[*ssp2.SegmentInline](m)); n != 1 {
		t.Fatalf("%s: probe pull delivered %d segments, want 1", what, n)
	}
}
