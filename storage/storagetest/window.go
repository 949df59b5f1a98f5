package storagetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

var windowTests = []test{
	{"LimitNeverSplits", testWindowLimit},
	{"OversizedCommitAlone", testWindowOversized},
	{"TwoVariables", testWindowTwoVariables},
	{"FalsePositivesAcrossBatches", testWindowFalsePositives},
	{"Refusals", testWindowRefusals},
	{"LastScopeSeq", testLastScopeSeq},
}

// ch describes one change of a window fixture.
type ch struct {
	table, id, project string
	owner              int64
}

// appendLog appends one commit per element of commits and returns the
// partition.
func appendLog(t *testing.T, s storage.Store, sc *schema.Schema, commits [][]ch) storage.Partition {
	t.Helper()
	p := partition(t, s)
	ctx := t.Context()
	notes := table(t, sc, "notes")
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		for i, cs := range commits {
			var changes []storage.Change
			for _, c := range cs {
				switch c.table {
				case "notes":
					changes = append(changes, change(rowWrite(t, notes, values{"id": c.owner, "project_id": c.project, "archived": false}), "notes", 1))
				default:
					changes = append(changes, change(task(t, sc, c.id, c.project, c.owner, nil), "tasks", 1))
				}
			}
			if _, err := tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: int64(i), ActorID: "a", ClientID: "c",
				ClientCommitID: fmt.Sprint(i), SchemaVersion: 1, Changes: changes}); err != nil {
				return err
			}
		}
		return nil
	})
	return p
}

// window reads a window and renders it as seq → row ids.
func window(t *testing.T, s storage.Store, p storage.WindowParams) (storage.Window, [][]string) {
	t.Helper()
	var w storage.Window
	check(t, s.ReadTx(t.Context(), func(tx storage.ReadTx) (err error) {
		w, err = tx.CommitWindow(t.Context(), p)
		return err
	}))
	var got [][]string
	for _, c := range w.Commits {
		ids := []string{fmt.Sprint(c.CommitSeq)}
		for _, x := range c.Changes {
			if x.Table != p.Table {
				t.Fatalf("window of %s carries a change of %s", p.Table, x.Table)
			}
			ids = append(ids, x.RowID)
		}
		got = append(got, ids)
	}
	return w, got
}

func equalRendered(a, b [][]string) bool {
	return slices.EqualFunc(a, b, func(x, y []string) bool { return slices.Equal(x, y) })
}

func testWindowLimit(t *testing.T, e *env) {
	s, sc := e.store()
	p := appendLog(t, s, sc, [][]ch{
		{{"tasks", "a1", "p1", 1}, {"tasks", "a2", "p1", 1}, {"tasks", "x", "p2", 1}, {"notes", "", "p1", 1}},
		{{"tasks", "b1", "p1", 1}, {"tasks", "b2", "p1", 1}},
		{{"tasks", "c1", "p1", 1}, {"tasks", "c2", "p1", 1}},
		{{"tasks", "d1", "p2", 1}},
	})
	c1, c2, c3 := []string{"1", "a1", "a2"}, []string{"2", "b1", "b2"}, []string{"3", "c1", "c2"}
	cases := []struct {
		after    int64
		limit    int
		want     [][]string
		complete bool
		next     int64
	}{
		{0, 1, [][]string{c1}, false, 1}, // oversized first commit alone
		{0, 2, [][]string{c1}, false, 1}, // exactly full, more match
		{0, 3, [][]string{c1}, false, 1},
		{0, 4, [][]string{c1, c2}, false, 2},
		{0, 5, [][]string{c1, c2}, false, 2},
		{0, 6, [][]string{c1, c2, c3}, true, 4},
		{0, 1000, [][]string{c1, c2, c3}, true, 4},
		{1, 4, [][]string{c2, c3}, true, 4},
		{2, 2, [][]string{c3}, true, 4},
		{3, 10, nil, true, 4},
		{4, 10, nil, true, 4},
	}
	for _, tc := range cases {
		w, got := window(t, s, storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1"}}, AfterSeq: tc.after, Limit: tc.limit})
		if !equalRendered(got, tc.want) || w.Complete != tc.complete || w.MaxSeq != 4 || w.HorizonSeq != 0 || w.NextCursor(tc.after) != tc.next {
			t.Errorf("window after %d limit %d = %v complete %v max %d next %d; want %v complete %v next %d",
				tc.after, tc.limit, got, w.Complete, w.MaxSeq, w.NextCursor(tc.after), tc.want, tc.complete, tc.next)
		}
	}
	// Whole commits carry their metadata.
	w, _ := window(t, s, storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p2"}}, Limit: 10})
	if len(w.Commits) != 2 || w.Commits[0].CommitSeq != 1 || w.Commits[0].ClientCommitID != "0" || w.Commits[1].CreatedAtMs != 3 ||
		w.Commits[0].Changes[0].RowVersion != 1 || w.Commits[0].Changes[0].Op != storage.OpUpsert || len(w.Commits[0].Changes[0].Row) == 0 ||
		w.Commits[0].Changes[0].Scopes["project"] != "p2" {
		t.Fatalf("p2 window = %+v", w)
	}
	// The notes table sees only its own change.
	_, got := window(t, s, storage.WindowParams{Partition: p.ID, Table: "notes", Scopes: map[string][]string{"project": {"p1"}}, Limit: 10})
	if !equalRendered(got, [][]string{{"1", "1"}}) {
		t.Fatalf("notes window = %v", got)
	}
}

func testWindowOversized(t *testing.T, e *env) {
	s, sc := e.store()
	big := []ch{}
	for i := range 5 {
		big = append(big, ch{"tasks", fmt.Sprint("big", i), "p1", 1})
	}
	p := appendLog(t, s, sc, [][]ch{big, {{"tasks", "other", "p9", 1}}, big[:1]})
	w, got := window(t, s, storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1"}}, Limit: 3})
	if len(got) != 1 || len(got[0]) != 6 || w.Complete {
		t.Fatalf("oversized window = %v complete %v; want commit 1 alone, incomplete", got, w.Complete)
	}
	w, got = window(t, s, storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1"}}, AfterSeq: 1, Limit: 3})
	if !equalRendered(got, [][]string{{"3", "big0"}}) || !w.Complete || w.NextCursor(1) != 3 {
		t.Fatalf("window after 1 = %v complete %v", got, w.Complete)
	}
	// An oversized last commit completes the window.
	p2 := appendLog(t, s, sc, [][]ch{big})
	w, got = window(t, s, storage.WindowParams{Partition: p2.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1"}}, Limit: 2})
	if len(got) != 1 || !w.Complete || w.NextCursor(0) != 1 {
		t.Fatalf("oversized last commit = %v complete %v", got, w.Complete)
	}
}

func testWindowTwoVariables(t *testing.T, e *env) {
	s, sc := e.store()
	p := appendLog(t, s, sc, [][]ch{
		{{"tasks", "a", "p1", 1}},
		{{"tasks", "b", "p1", 2}},
		// Both variables' values occur, on different changes: an index
		// candidate that matches nothing.
		{{"tasks", "c", "p1", 2}, {"tasks", "d", "p2", 1}},
		{{"tasks", "e", "p2", 1}, {"tasks", "f", "p1", 1}, {"tasks", "g", "p3", 1}},
		{{"tasks", "h", "p3", 3}},
	})
	cases := []struct {
		scopes map[string][]string
		want   [][]string
	}{
		{map[string][]string{"project": {"p1"}, "owner": {"1"}}, [][]string{{"1", "a"}, {"4", "f"}}},
		{map[string][]string{"project": {"p1", "p2"}, "owner": {"1"}}, [][]string{{"1", "a"}, {"3", "d"}, {"4", "e", "f"}}},
		{map[string][]string{"owner": {"2"}, "project": {"p1", "p3"}}, [][]string{{"2", "b"}, {"3", "c"}}},
		{map[string][]string{"owner": {"3", "1"}}, [][]string{{"1", "a"}, {"3", "d"}, {"4", "e", "f", "g"}, {"5", "h"}}},
		{map[string][]string{"owner": {"9"}}, nil},
		{map[string][]string{"owner": {"1"}, "project": {}}, nil},
		{map[string][]string{"owner": {"1"}, "undeclared": {"x"}}, nil},
	}
	for _, tc := range cases {
		w, got := window(t, s, storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: tc.scopes, Limit: 100})
		if !equalRendered(got, tc.want) || !w.Complete || w.NextCursor(0) != 5 {
			t.Errorf("window %v = %v complete %v; want %v complete", tc.scopes, got, w.Complete, tc.want)
		}
	}
}

func testWindowFalsePositives(t *testing.T, e *env) {
	s, sc := e.store()
	var commits [][]ch
	for i := range 30 {
		commits = append(commits, []ch{{"tasks", fmt.Sprint("fp", i, "a"), "p1", 2}, {"tasks", fmt.Sprint("fp", i, "b"), "p2", 1}})
	}
	commits = append(commits, []ch{{"tasks", "hit", "p1", 1}}, []ch{{"tasks", "hit2", "p1", 1}})
	p := appendLog(t, s, sc, commits)
	w, got := window(t, s, storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1"}, "owner": {"1"}}, Limit: 1})
	if !equalRendered(got, [][]string{{"31", "hit"}}) || w.Complete || w.NextCursor(0) != 31 {
		t.Fatalf("window = %v complete %v", got, w.Complete)
	}
	w, got = window(t, s, storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1"}, "owner": {"1"}}, AfterSeq: 31, Limit: 1})
	if !equalRendered(got, [][]string{{"32", "hit2"}}) || !w.Complete {
		t.Fatalf("window after 31 = %v complete %v", got, w.Complete)
	}
}

func testWindowRefusals(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s)
	ctx := t.Context()
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
		_, err := tx.CommitWindow(ctx, storage.WindowParams{Partition: p.ID, Table: "tasks", Limit: 10})
		wantCode(t, err, ssp2.CodeStorageScanRequiresScope)
		for _, limit := range []int{0, storage.MaxWindowLimit + 1} {
			_, err = tx.CommitWindow(ctx, storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p"}}, Limit: limit})
			wantCode(t, err, ssp2.CodeStorageInvalidLimit)
		}
		_, err = tx.CommitWindow(ctx, storage.WindowParams{Partition: "nobody", Table: "tasks", Scopes: map[string][]string{"project": {"p"}}, Limit: 1})
		wantCode(t, err, ssp2.CodeStoragePartitionUnregistered)
		w, err := tx.CommitWindow(ctx, storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p"}}, Limit: 1})
		if err != nil || !w.Complete || w.MaxSeq != 0 || len(w.Commits) != 0 {
			t.Fatalf("empty log window = %+v, %v", w, err)
		}
		return nil
	}))
}

// testLastScopeSeq: the newest commit with a change to the table under
// one of the values, whatever else later commits touch.
func testLastScopeSeq(t *testing.T, e *env) {
	s, sc := e.store()
	p := appendLog(t, s, sc, [][]ch{
		{{"tasks", "a", "p1", 1}},
		{{"tasks", "b", "p2", 2}},
		{{"tasks", "c", "p1", 2}, {"tasks", "d", "p3", 1}},
		{{"notes", "", "p1", 7}},
		{{"tasks", "e", "p2", 1}},
	})
	cases := []struct {
		table, variable string
		values          []string
		want            int64
	}{
		{"tasks", "project", []string{"p1"}, 3},
		{"tasks", "project", []string{"p1", "p2"}, 5},
		{"tasks", "project", []string{"p3", "p1"}, 3},
		{"tasks", "owner", []string{"2"}, 3},
		{"tasks", "project", []string{"p9"}, 0},
		{"tasks", "project", nil, 0},
		{"tasks", "undeclared", []string{"p1"}, 0},
		{"notes", "project", []string{"p1"}, 4},
		{"notes", "project", []string{"p2"}, 0},
	}
	check(t, s.ReadTx(t.Context(), func(tx storage.ReadTx) error {
		for _, tc := range cases {
			got, err := tx.LastScopeSeq(t.Context(), p.ID, tc.table, tc.variable, tc.values)
			if err != nil || got != tc.want {
				t.Errorf("LastScopeSeq(%s, %s, %v) = %d, %v; want %d", tc.table, tc.variable, tc.values, got, err, tc.want)
			}
		}
		got, err := tx.LastScopeSeq(t.Context(), "nobody", "tasks", "project", []string{"p1"})
		if err != nil || got != 0 {
			t.Errorf("LastScopeSeq of an unknown partition = %d, %v", got, err)
		}
		return nil
	}))
}
