package storagetest

import (
	"fmt"
	"reflect"
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
	{"PlannedReadsPast", testWindowPlannedReadsPast},
	{"PlannedSeesWrites", testWindowPlannedSeesWrites},
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

// window reads a window and renders it as seq → row ids. It reads it
// again planned, as a pull section does, and wants the same window.
func window(t *testing.T, s storage.Store, p storage.WindowParams) (storage.Window, [][]string) {
	t.Helper()
	var w storage.Window
	check(t, s.ReadTx(t.Context(), func(tx storage.ReadTx) (err error) {
		w, err = tx.CommitWindow(t.Context(), p)
		return err
	}))
	if pw := plannedWindow(t, s, p); !reflect.DeepEqual(pw, w) {
		t.Fatalf("planned window = %+v, want %+v", pw, w)
	}
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

// plannedWindow reads p as a pull section does: planned (when the store
// plans, storage.WindowPlanner), after the partition row. A store may run
// fn twice, never more.
func plannedWindow(t *testing.T, s storage.Store, p storage.WindowParams) storage.Window {
	t.Helper()
	var w storage.Window
	runs := 0
	check(t, s.ReadTx(t.Context(), func(tx storage.ReadTx) (err error) {
		runs++
		if wp, ok := tx.(storage.WindowPlanner); ok {
			wp.PlanWindow(p)
		}
		if _, err := tx.Partition(t.Context(), p.Partition); err != nil {
			return err
		}
		w, err = tx.CommitWindow(t.Context(), p)
		return err
	}))
	if runs > 2 {
		t.Fatalf("a planned read transaction ran fn %d times, want at most 2", runs)
	}
	return w
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

// testWindowPlannedReadsPast: a read transaction that planned its window
// and then reads something else — another window, a row, the window
// without the partition row first, another partition's row — gets what an
// unplanned one gets, in one snapshot; fn runs at most twice.
func testWindowPlannedReadsPast(t *testing.T, e *env) {
	s, sc := e.store()
	var commits [][]ch
	for i := range 20 { // more than a store reads with the partition row
		commits = append(commits, []ch{{"tasks", fmt.Sprint("t", i), "p1", 1}})
	}
	commits = append(commits, []ch{{"tasks", "q", "p2", 1}})
	p := appendLog(t, s, sc, commits)
	other := partition(t, s)
	ctx := t.Context()
	p1 := storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1"}}, AfterSeq: 2, Limit: 100}
	p2 := storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p2"}}, Limit: 100}
	_, want1 := window(t, s, p1)
	_, want2 := window(t, s, p2)
	if len(want1) != 18 || len(want2) != 1 {
		t.Fatalf("fixture windows: %v, %v", want1, want2)
	}
	render := func(w storage.Window) (out [][]string) {
		for _, c := range w.Commits {
			ids := []string{fmt.Sprint(c.CommitSeq)}
			for _, x := range c.Changes {
				ids = append(ids, x.RowID)
			}
			out = append(out, ids)
		}
		return out
	}
	cases := []struct {
		name string
		fn   func(tx storage.ReadTx) error
	}{
		{"another window", func(tx storage.ReadTx) error {
			if _, err := tx.Partition(ctx, p.ID); err != nil {
				return err
			}
			w, err := tx.CommitWindow(ctx, p2)
			if err == nil && !equalRendered(render(w), want2) {
				t.Errorf("another window = %v, want %v", render(w), want2)
			}
			return err
		}},
		{"a row after the window", func(tx storage.ReadTx) error {
			if _, err := tx.Partition(ctx, p.ID); err != nil {
				return err
			}
			w, err := tx.CommitWindow(ctx, p1)
			if err != nil {
				return err
			}
			if !equalRendered(render(w), want1) {
				t.Errorf("window = %v, want %v", render(w), want1)
			}
			// appendLog writes the log only: the row is not stored.
			r, ok, err := tx.RowGet(ctx, p.ID, "tasks", "t3")
			if err == nil && ok {
				t.Errorf("row = %+v, want none", r)
			}
			return err
		}},
		{"no partition row first", func(tx storage.ReadTx) error {
			w, err := tx.CommitWindow(ctx, p1)
			if err == nil && !equalRendered(render(w), want1) {
				t.Errorf("window = %v, want %v", render(w), want1)
			}
			return err
		}},
		{"another partition's row", func(tx storage.ReadTx) error {
			got, err := tx.Partition(ctx, other.ID)
			if err == nil && got.ID != other.ID {
				t.Errorf("partition = %+v, want %s", got, other.ID)
			}
			return err
		}},
	}
	for _, c := range cases {
		runs := 0
		err := s.ReadTx(ctx, func(tx storage.ReadTx) error {
			runs++
			if wp, ok := tx.(storage.WindowPlanner); ok {
				wp.PlanWindow(p1)
			}
			return c.fn(tx)
		})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if runs > 2 {
			t.Fatalf("%s: fn ran %d times, want at most 2", c.name, runs)
		}
	}
}

// testWindowPlannedSeesWrites: a planned section's partition row, gate
// state and window are those of its own snapshot after writes that move
// the max commitSeq (a push), the horizon (a prune) and the epoch (a
// rotation, which also moves the gate revision), made by the store and by
// another store on the same database (Twinner). Every read is made twice:
// a store may serve the second from what the first read (sqlitestore's
// partition cache), and must have seen every write in between.
func testWindowPlannedSeesWrites(t *testing.T, e *env) {
	s, sc := e.store()
	stores := []storage.Store{s}
	if tw, ok := s.(Twinner); ok {
		if twin := tw.HookTwin(t); twin != nil {
			check(t, twin.EnsureSchema(t.Context(), sc))
			stores = append(stores, twin)
		}
	}
	ctx := t.Context()
	p := partition(t, s)
	wp := storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1"}}, Limit: 100}
	read := func(what string) (storage.Partition, storage.GateState, storage.Window) {
		t.Helper()
		var (
			part storage.Partition
			gate storage.GateState
			w    storage.Window
		)
		for range 2 {
			check(t, s.ReadTx(ctx, func(tx storage.ReadTx) (err error) {
				if pl, ok := tx.(storage.WindowPlanner); ok {
					pl.PlanWindow(wp)
				}
				if part, err = tx.Partition(ctx, p.ID); err != nil {
					return err
				}
				if gr, ok := tx.(storage.GateReader); ok {
					if gate, err = gr.GateRead(ctx, p.ID, 1); err != nil {
						return err
					}
				} else {
					gate = storage.GateState{Registered: true, LogEpoch: part.LogEpoch}
				}
				w, err = tx.CommitWindow(ctx, wp)
				return err
			}))
		}
		if gate.LogEpoch != part.LogEpoch {
			t.Fatalf("%s: gate state of epoch %q, partition row of %q", what, gate.LogEpoch, part.LogEpoch)
		}
		return part, gate, w
	}
	read("first")
	for i, w := range stores {
		name := fmt.Sprintf("store %d: ", i)
		_, _, seq, err := push(ctx, w, p.ID, task(t, sc, fmt.Sprintf("t%d", i), "p1", 1, "x"), fmt.Sprintf("k%d", i))
		check(t, err)
		part, gate, win := read(name + "push")
		if part.MaxCommitSeq != seq || win.NextCursor(0) != seq || len(win.Commits) == 0 || win.Commits[len(win.Commits)-1].CommitSeq != seq {
			t.Fatalf("%spush of commit %d: row %+v, window to %d with %d commits", name, seq, part, win.NextCursor(0), len(win.Commits))
		}
		res, err := w.Prune(ctx, storage.PruneParams{Partition: p.ID, LogEpoch: part.LogEpoch, ThroughSeq: seq, NowMs: 1 << 40, Literal: true})
		check(t, err)
		if res.HorizonSeq != seq {
			t.Fatalf("%sprune through %d: horizon %d", name, seq, res.HorizonSeq)
		}
		if part, _, win = read(name + "prune"); part.HorizonSeq != seq || win.HorizonSeq != seq {
			t.Fatalf("%sprune through %d: row %+v, window horizon %d", name, seq, part, win.HorizonSeq)
		}
		rotated, err := w.PartitionRotateEpoch(ctx, p.ID, 2_000_000)
		check(t, err)
		after, gateAfter, _ := read(name + "rotate")
		if after.LogEpoch != rotated.LogEpoch || after.LogEpoch == part.LogEpoch || !after.EpochRequired {
			t.Fatalf("%srotate: row %+v, want epoch %q", name, after, rotated.LogEpoch)
		}
		if _, ok := s.(storage.GateReader); ok && gateAfter.Revision == gate.Revision {
			t.Fatalf("%srotate: gate revision still %d", name, gate.Revision)
		}
	}
}
