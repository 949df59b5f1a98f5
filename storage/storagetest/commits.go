package storagetest

import (
	"bytes"
	"fmt"
	"maps"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

var commitTests = []test{
	{"AppendAndRange", testCommitAppendRange},
	{"AppendRefusals", testCommitAppendRefusals},
	{"ScopeIndexDeduplicated", testCommitIndexDedup},
}

func testCommitAppendRange(t *testing.T, e *env) {
	s, sc := e.store()
	p, q := partition(t, s), partition(t, s)
	ctx := t.Context()
	notes := table(t, sc, "notes")
	var want []storage.Commit
	for i := range 5 {
		c := storage.Commit{CommitSeq: int64(i + 1), CreatedAtMs: int64(1000 + i), ActorID: "actor", ClientID: "client",
			ClientCommitID: fmt.Sprint("cc", i), SchemaVersion: 1}
		for j := range i + 1 {
			rw := task(t, sc, fmt.Sprintf("t%d-%d", i, j), "p1", int64(j), nil)
			c.Changes = append(c.Changes, change(rw, "tasks", int64(j+1)))
		}
		nr := rowWrite(t, notes, values{"id": i, "project_id": "p1", "archived": false})
		c.Changes = append(c.Changes, storage.Change{Table: "notes", RowID: nr.RowID, Op: storage.OpDelete, Scopes: nr.Scopes})
		want = append(want, c)
	}
	// Commits 1-2 in one transaction, the rest one per transaction.
	appendCommits := func(cs []storage.Commit) {
		writeTx(t, s, p.ID, func(tx storage.Tx) error {
			for _, c := range cs {
				seq, err := tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: c.CreatedAtMs, ActorID: c.ActorID,
					ClientID: c.ClientID, ClientCommitID: c.ClientCommitID, SchemaVersion: c.SchemaVersion, Changes: c.Changes})
				if err != nil {
					return err
				}
				if seq != c.CommitSeq {
					t.Fatalf("CommitAppend = %d, want %d", seq, c.CommitSeq)
				}
			}
			if got := tx.Locked(); got.ID != p.ID {
				t.Fatalf("Locked() = %+v", got)
			}
			return nil
		})
	}
	appendCommits(want[:2])
	for i := 2; i < len(want); i++ {
		appendCommits(want[i : i+1])
	}
	if m, err := s.CommitMaxSeq(ctx, p.ID); err != nil || m != 5 {
		t.Fatalf("CommitMaxSeq = %d, %v; want 5", m, err)
	}
	if m, err := s.CommitMaxSeq(ctx, q.ID); err != nil || m != 0 {
		t.Fatalf("CommitMaxSeq of an empty partition = %d, %v", m, err)
	}
	if m, err := s.CommitMaxSeq(ctx, "unregistered"); err != nil || m != 0 {
		t.Fatalf("CommitMaxSeq of an unregistered partition = %d, %v", m, err)
	}
	part, err := s.PartitionGet(ctx, p.ID)
	check(t, err)
	if part.MaxCommitSeq != 5 {
		t.Fatalf("partition max seq = %d, want 5", part.MaxCommitSeq)
	}
	for _, tc := range []struct {
		after int64
		limit int
		want  []storage.Commit
	}{
		{0, 10, want},
		{0, 2, want[:2]},
		{2, 2, want[2:4]},
		{4, 10, want[4:]},
		{5, 10, nil},
	} {
		got, err := s.CommitRange(ctx, p.ID, tc.after, tc.limit)
		check(t, err)
		assertCommits(t, fmt.Sprintf("CommitRange(%d, %d)", tc.after, tc.limit), got, tc.want)
		// The same range with the partition row of its snapshot.
		row, got, err := s.PartitionCommitRange(ctx, p.ID, tc.after, tc.limit)
		check(t, err)
		assertCommits(t, fmt.Sprintf("PartitionCommitRange(%d, %d)", tc.after, tc.limit), got, tc.want)
		if row != part {
			t.Fatalf("PartitionCommitRange row = %+v, want %+v", row, part)
		}
	}
	if _, _, err := s.PartitionCommitRange(ctx, "never-touched", 0, 10); err == nil {
		t.Fatal("PartitionCommitRange of an unregistered partition succeeded")
	} else {
		wantCode(t, err, ssp2.CodeStoragePartitionUnregistered)
	}
	if _, _, err := s.PartitionCommitRange(ctx, p.ID, 0, 0); err == nil {
		t.Fatal("PartitionCommitRange with limit 0 succeeded")
	} else {
		wantCode(t, err, ssp2.CodeStorageInvalidLimit)
	}
	got, err := s.CommitRange(ctx, q.ID, 0, 10)
	check(t, err)
	if len(got) != 0 {
		t.Fatalf("other partition's range = %+v", got)
	}
	for _, limit := range []int{0, storage.MaxCommitRangeLimit + 1} {
		_, err := s.CommitRange(ctx, p.ID, 0, limit)
		wantCode(t, err, ssp2.CodeStorageInvalidLimit)
	}
}

func assertCommits(t *testing.T, what string, got, want []storage.Commit) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d commits, want %d: %+v", what, len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.CommitSeq != w.CommitSeq || g.CreatedAtMs != w.CreatedAtMs || g.ActorID != w.ActorID || g.ClientID != w.ClientID ||
			g.ClientCommitID != w.ClientCommitID || g.SchemaVersion != w.SchemaVersion || len(g.Changes) != len(w.Changes) {
			t.Fatalf("%s: commit %d = %+v, want %+v", what, i, g, w)
		}
		for j := range w.Changes {
			gc, wc := g.Changes[j], w.Changes[j]
			if gc.Table != wc.Table || gc.RowID != wc.RowID || gc.Op != wc.Op || gc.RowVersion != wc.RowVersion ||
				!maps.Equal(gc.Scopes, wc.Scopes) || !bytes.Equal(gc.Row, wc.Row) {
				t.Fatalf("%s: commit %d change %d = %+v, want %+v", what, w.CommitSeq, j, gc, wc)
			}
		}
	}
}

func testCommitAppendRefusals(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	rw := task(t, sc, "t1", "p1", 1, nil)
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		bad := []storage.Change{
			{Table: "tasks", RowID: "t1", Op: storage.OpUpsert, RowVersion: 1, Row: rw.Payload},
			{Table: "tasks", RowID: "t1", Op: storage.OpUpsert, RowVersion: 1, Scopes: rw.Scopes},
			{Table: "tasks", RowID: "t1", Op: 9, Scopes: rw.Scopes},
		}
		_, err := tx.CommitAppend(ctx, storage.CommitParams{Changes: bad[:1]})
		wantCode(t, err, ssp2.CodeMissingScopes)
		for _, ch := range bad[1:] {
			if _, err := tx.CommitAppend(ctx, storage.CommitParams{Changes: []storage.Change{ch}}); err == nil {
				t.Fatalf("CommitAppend(%+v) succeeded", ch)
			}
		}
		// Nothing was written and the seq was not consumed.
		seq, err := tx.CommitAppend(ctx, storage.CommitParams{Changes: []storage.Change{change(rw, "tasks", 1)}})
		if err != nil || seq != 1 {
			t.Fatalf("CommitAppend after refusals = %d, %v; want 1", seq, err)
		}
		return nil
	})
}

// testCommitIndexDedup: many changes sharing scope values make one index
// row per (table, variable, value).
func testCommitIndexDedup(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	var changes []storage.Change
	for i := range 100 {
		changes = append(changes, change(task(t, sc, fmt.Sprint("t", i), "p1", int64(i%3), nil), "tasks", 1))
	}
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		_, err := tx.CommitAppend(ctx, storage.CommitParams{Changes: changes})
		return err
	})
	commits, changed, index, err := hooks(t, s).HookCountLog(ctx, p.ID)
	check(t, err)
	// project p1, owner 0/1/2.
	if commits != 1 || changed != 100 || index != 4 {
		t.Fatalf("log rows = %d commits, %d changes, %d index entries; want 1, 100, 4", commits, changed, index)
	}
}
