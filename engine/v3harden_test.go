package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// A version 3 push gets the checks of versions 1 and 2: strings the stores
// cannot hold are a persisted, non-retryable sync.invalid_request on both
// stores, and a commit that only deletes absent rows appends nothing.
func TestV3UnstorableStringsAreRefused(t *testing.T) {
	forStores(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		h := newV3(t, open, notesSchema, "notes", nil)
		alice := id("alice", "p1")
		tb := h.table
		h.applied(3, alice, "c", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "project_id": "p1", "title": "a", "body": nil, "n": nil, "doc": nil})))
		for name, o := range map[string]ssp2.Operation{
			"rowId with NUL":        op(tb, "n\x00", sparse(t, tb, map[string]any{"id": "n\x00", "project_id": "p1"})),
			"string value with NUL": op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "title": "a\x00b"})),
			"scope value with NUL":  op(tb, "n2", sparse(t, tb, map[string]any{"id": "n2", "project_id": "p\x00", "title": "x", "body": "y", "n": 1, "doc": nil})),
			"delete rowId with NUL": delOp(tb, "n\x00"),
		} {
			res := h.refused(ssp2.CodeInvalidRequest, 3, alice, "c", o)
			if res.Retryable {
				t.Errorf("%s: rejection is retryable", name)
			}
			key := h.n
			if _, ok, err := h.store.IdempotencyGet(context.Background(), "p", "c", fmt.Sprintf("c-%d", key)); err != nil || !ok {
				t.Errorf("%s: rejection not persisted (%v, %v)", name, ok, err)
			}
		}
		if seq, err := h.store.CommitMaxSeq(context.Background(), "p"); err != nil || seq != 1 {
			t.Fatalf("max seq %d, %v; want only the first commit", seq, err)
		}
	})
}

func TestV3AbsentRowDeletesAppendNothing(t *testing.T) {
	h := newV3(t, openSQLite, notesSchema, "notes", nil)
	tb := h.table
	alice, nobody := id("alice", "p1"), id("nobody")
	h.applied(3, alice, "a", op(tb, "n1", sparse(t, tb, map[string]any{"id": "n1", "project_id": "p1", "title": "a", "body": nil, "n": nil, "doc": nil})))
	h.commits = 0
	for range 5 {
		if seq := h.applied(3, nobody, "n", delOp(tb, "gone"), delOp(tb, "also-gone")); seq != 1 {
			t.Fatalf("absent delete applied at %d, want the head seq 1", seq)
		}
	}
	if seq, err := h.store.CommitMaxSeq(context.Background(), "p"); err != nil || seq != 1 || h.commits != 0 {
		t.Fatalf("max seq %d (%v), %d OnCommit calls; want 1 and none", seq, err, h.commits)
	}
	// No tombstone either: the row never existed, so an unversioned
	// insert of it still applies.
	if seq := h.applied(3, alice, "a", op(tb, "gone", sparse(t, tb, map[string]any{"id": "gone", "project_id": "p1", "title": "t", "body": "b", "n": 1, "doc": nil}))); seq != 2 {
		t.Fatalf("insert after absent deletes applied at %d, want 2", seq)
	}
}
