package storagetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

var txQueryTests = []test{
	{"CandidateState", testTxQueryCandidate},
}

// testTxQueryCandidate: a store that runs registered queries runs them
// inside its write transaction too (storage.TxQuerier): over the
// transaction's own writes, one partition and the covered scope values
// only, with the transaction's max commitSeq; a statement failing as it
// runs is a *storage.QueryError after which the transaction writes and
// commits; another partition is refused.
func testTxQueryCandidate(t *testing.T, e *env) {
	s, sc := e.store()
	qs, ok := s.(storage.Querier)
	if !ok {
		t.Skip("the store runs no registered queries")
	}
	ctx := t.Context()
	spec := storage.QuerySpec{SQL: "SELECT id, owner_id FROM tasks WHERE done = ? ORDER BY id", Tables: []string{"tasks"},
		Columns: []storage.QueryColumn{{Name: "id", Type: ssp2.TypeString}, {Name: "owner_id", Type: ssp2.TypeInteger}}, Limit: 10}
	// owner_id 0 makes the least int64, whose abs fails on both dialects.
	failing := storage.QuerySpec{SQL: "SELECT id, abs(owner_id - 9223372036854775807 - 1) AS owner_id FROM tasks WHERE done = ?", Tables: []string{"tasks"},
		Columns: spec.Columns, Limit: 10}
	for _, q := range []storage.QuerySpec{spec, failing} {
		if err := qs.PrepareQuery(ctx, q); err != nil {
			t.Fatalf("PrepareQuery(%s): %v", q.SQL, err)
		}
	}
	tasks := table(t, sc, "tasks")
	row := func(id, project string, owner int) storage.RowWrite {
		return rowWrite(t, tasks, values{"id": id, "project_id": project, "owner_id": owner, "done": false})
	}
	p, other := partition(t, s), partition(t, s)
	if _, _, _, err := push(ctx, s, p.ID, row("a", "p1", 1), "c1"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := push(ctx, s, other.ID, row("x", "p1", 1), "c1"); err != nil {
		t.Fatal(err)
	}
	ids := func(res storage.QueryResult) []string {
		var out []string
		for _, r := range res.Rows {
			out = append(out, r[0].(string))
		}
		return out
	}
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		tq, ok := tx.(storage.TxQuerier)
		if !ok {
			t.Fatalf("%T runs registered queries but its write transaction %T does not", s, tx)
		}
		for _, rw := range []storage.RowWrite{row("b", "p1", 2), row("c", "p2", 3)} {
			if _, err := tx.RowUpsert(ctx, "tasks", rw); err != nil {
				return err
			}
		}
		all := storage.QueryParams{QuerySpec: spec, Partition: p.ID, Args: []any{false}}
		res, err := tq.TxQuery(ctx, all)
		if err != nil || !slices.Equal(ids(res), []string{"a", "b", "c"}) || res.MaxCommitSeq != 1 {
			t.Fatalf("privileged TxQuery = %v (max seq %d), %v; want [a b c] at 1", ids(res), res.MaxCommitSeq, err)
		}
		scoped := all
		scoped.Scopes = map[string]map[string][]string{"tasks": {"project": {"p1"}, "owner": {"2", "3"}}}
		if res, err := tq.TxQuery(ctx, scoped); err != nil || !slices.Equal(ids(res), []string{"b"}) {
			t.Fatalf("scoped TxQuery = %v, %v; want [b]", ids(res), err)
		}
		limited := all
		limited.Limit = 2
		if res, err := tq.TxQuery(ctx, limited); err != nil || len(res.Rows) != 2 {
			t.Fatalf("TxQuery limit 2 = %v, %v", ids(res), err)
		}
		if _, err := tx.RowUpsert(ctx, "tasks", row("z", "p1", 0)); err != nil {
			return err
		}
		var qe *storage.QueryError
		if _, err := tq.TxQuery(ctx, storage.QueryParams{QuerySpec: failing, Partition: p.ID, Args: []any{false}}); !errors.As(err, &qe) {
			t.Fatalf("a failing statement: %v, want a *storage.QueryError", err)
		}
		if _, err := tq.TxQuery(ctx, storage.QueryParams{QuerySpec: spec, Partition: other.ID, Args: []any{false}}); !errors.Is(err, storage.ErrTxQueryPartition) {
			t.Fatalf("another partition: %v, want ErrTxQueryPartition", err)
		}
		// The transaction goes on: it reads, writes and commits.
		if res, err := tq.TxQuery(ctx, all); err != nil || len(res.Rows) != 4 {
			t.Fatalf("TxQuery after a failure = %v, %v", ids(res), err)
		}
		_, err = tx.RowUpsert(ctx, "tasks", row("d", "p1", 4))
		return err
	})
	res, err := qs.Query(ctx, storage.QueryParams{QuerySpec: spec, Partition: p.ID, Args: []any{false}})
	if err != nil || !slices.Equal(ids(res), []string{"a", "b", "c", "d", "z"}) {
		t.Fatalf("committed rows %v, %v; want [a b c d z]", ids(res), err)
	}
}
