package gatecore

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

func TestParsePending(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []storage.PendingCheckpoint
	}{
		{"", nil},
		{"a declared", []storage.PendingCheckpoint{{Name: "a", State: storage.CheckpointDeclared}}},
		// SQLite's group_concat has no order: the list comes back sorted.
		{"b.x declared,a-1 backfilling", []storage.PendingCheckpoint{
			{Name: "a-1", State: storage.CheckpointBackfilling}, {Name: "b.x", State: storage.CheckpointDeclared}}},
	} {
		if got := parsePending(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parsePending(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestCheckDeclared(t *testing.T) {
	a := storage.CheckpointKey{Partition: "p", Name: "a", SchemaVersion: 2}
	b := storage.CheckpointKey{Partition: "q", Name: "b", SchemaVersion: 2}
	open := []storage.Checkpoint{{CheckpointKey: a, State: storage.CheckpointDeclared}, {CheckpointKey: b, State: storage.CheckpointBackfilling}}
	if err := checkDeclared(open, []storage.CheckpointKey{b, a}); err != nil {
		t.Fatalf("all declared: %v", err)
	}
	if err := checkDeclared(nil, nil); err != nil {
		t.Fatalf("nothing open: %v", err)
	}
	err := checkDeclared(open, []storage.CheckpointKey{a})
	var e *ssp2.Error
	if !errors.As(err, &e) || e.Code != ssp2.CodeStorageCheckpointIncomplete {
		t.Fatalf("b undeclared: got %v, want %s", err, ssp2.CodeStorageCheckpointIncomplete)
	}
	var d storage.IncompleteDetails
	if err := json.Unmarshal(e.Details, &d); err != nil {
		t.Fatal(err)
	}
	want := []storage.IncompleteCheckpoint{{Partition: "q", Name: "b", SchemaVersion: 2, State: "backfilling"}}
	if !reflect.DeepEqual(d.Missing, want) {
		t.Fatalf("missing = %+v, want %+v", d.Missing, want)
	}
}

func TestChecksRefuseWithInvalidCheckpoint(t *testing.T) {
	key := storage.CheckpointKey{Partition: "p", Name: "n", SchemaVersion: 2}
	layouts := []schema.TableLayout{{Name: "tasks"}}
	for _, tc := range []struct {
		name string
		err  error
		ok   bool
	}{
		{"declarations at v", CheckDeclarations([]storage.CheckpointKey{key}, 2), true},
		{"declaration at another version", CheckDeclarations([]storage.CheckpointKey{key}, 3), false},
		{"declaration with a bad name", CheckDeclarations([]storage.CheckpointKey{{Partition: "p", Name: "a b", SchemaVersion: 2}}, 2), false},
		{"advance", CheckAdvance(&storage.CheckpointAdvanceParams{CheckpointKey: key, Watermark: 3, ObservedRows: 1}), true},
		{"advance with a negative watermark", CheckAdvance(&storage.CheckpointAdvanceParams{CheckpointKey: key, Watermark: -1}), false},
		{"advance with negative rows", CheckAdvance(&storage.CheckpointAdvanceParams{CheckpointKey: key, ObservedRows: -1}), false},
		{"activation", checkActivation(&storage.CheckpointActivateParams{CheckpointKey: key}), true},
		{"activation with a negative watermark", checkActivation(&storage.CheckpointActivateParams{CheckpointKey: key, Watermark: -1}), false},
		{"activation with a bad key", checkActivation(&storage.CheckpointActivateParams{}), false},
		{"stored source", checkSources(layouts, []string{"tasks"}), true},
		{"unknown source", checkSources(layouts, []string{"tasks", "notes"}), false},
	} {
		switch {
		case tc.ok && tc.err != nil:
			t.Errorf("%s: %v", tc.name, tc.err)
		case !tc.ok && ssp2.CodeOf(tc.err) != ssp2.CodeStorageInvalidCheckpoint:
			t.Errorf("%s: got %v, want %s", tc.name, tc.err, ssp2.CodeStorageInvalidCheckpoint)
		}
	}
}

func TestPrefetchAnswersOnlyItsRead(t *testing.T) {
	st := storage.GateState{HasMarker: true, SchemaVersion: 2, Registered: true, LogEpoch: "e"}
	var none *Prefetch
	if _, ok := none.Get("p", 2); ok {
		t.Fatal("a nil prefetch answered")
	}
	pre := NewPrefetch("p", 2, st)
	if got, ok := pre.Get("p", 2); !ok || !got.SameToken(st) {
		t.Fatalf("Get(p, 2) = %+v, %v; want the kept state", got, ok)
	}
	if _, ok := pre.Get("q", 2); ok {
		t.Fatal("answered for another partition")
	}
	if _, ok := pre.Get("p", 3); ok {
		t.Fatal("answered for another running version")
	}
}
