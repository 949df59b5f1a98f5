package operations

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/storage"
)

// TestScopedJoinOracle is TestScopedQueryOracle for a query over two
// tables with scopes of their own (tasks by project_id, notes by
// user_id): over random rows in three partitions, random grants of both
// variables and random covered values, the join returns exactly the ids
// the rows API holds in both tables for the covered values of the
// caller's partition, and is refused when either value is not granted.
// (A result past the join's maxRows of 10, which these rows do not reach,
// would have to be operation.result_too_large: TestMaxRowsExact.)
func TestScopedJoinOracle(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		e := newEnv(t, open, validFile(), nil)
		rng := rand.New(rand.NewPCG(3, 4))
		parts := []string{"p0", "p1", "p2"}
		projects := []string{"a", "b", "c"}
		users := []string{"u1", "u2", "u3"}
		for _, p := range parts {
			var muts []Mutation
			for i := range 40 {
				id := fmt.Sprintf("%s-r%02d", p, i)
				muts = append(muts, task(id, projects[rng.IntN(len(projects))], "title", int64(i), false))
				if rng.IntN(3) > 0 { // some tasks have no note
					muts = append(muts, Mutation{Op: "upsert", Table: "notes", Row: map[string]any{"id": id, "user_id": users[rng.IntN(len(users))], "body": "body " + id}})
				}
			}
			e.put(p, muts...)
		}
		pick := func(vals []string) []string {
			var out []string
			for _, v := range vals {
				if rng.IntN(3) > 0 {
					out = append(out, v)
				}
			}
			return out
		}
		scan := func(part, table, variable, value string) []string {
			var ids []string
			if err := e.store.ReadTx(e.ctx, func(tx storage.ReadTx) error {
				rows, err := tx.RowScan(e.ctx, storage.ScanParams{Partition: part, Table: table, Scopes: map[string][]string{variable: {value}}, Limit: 1000})
				for _, r := range rows {
					ids = append(ids, r.RowID)
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return ids
		}
		var served, tooLarge int
		for trial := range 80 {
			part := parts[rng.IntN(len(parts))]
			grant := engine.Allowed{"project_id": pick(projects), "user_id": pick(users)}
			if trial%8 == 0 {
				grant["user_id"] = []string{engine.Wildcard}
			}
			project, user := projects[rng.IntN(len(projects))], users[rng.IntN(len(users))]
			id := caller(part, fmt.Sprintf("actor%d", trial), grant)
			res, err := e.query(id, "join", project, user)
			granted := slices.Contains(grant["project_id"], project) &&
				(slices.Contains(grant["user_id"], user) || slices.Contains(grant["user_id"], engine.Wildcard))
			if !granted {
				if errCode(err) != CodeForbidden {
					t.Fatalf("trial %d: ungranted (%s, %s) answered %v, %v", trial, project, user, res, err)
				}
				continue
			}
			notes := scan(part, "notes", "user_id", user)
			var oracle []string
			for _, tid := range scan(part, "tasks", "project_id", project) {
				if slices.Contains(notes, tid) {
					oracle = append(oracle, tid)
				}
			}
			if len(oracle) > 10 {
				if errCode(err) != CodeResultTooLarge {
					t.Fatalf("trial %d: %d rows over maxRows 10 answered %v, %v", trial, len(oracle), res, err)
				}
				tooLarge++
				continue
			}
			if err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
			var got []string
			for _, r := range res.Rows {
				v, _ := r.Get("id")
				got = append(got, v.(string))
			}
			if !slices.Equal(got, oracle) {
				t.Fatalf("trial %d (%s, %s, %s): got %v, the rows API holds %v", trial, part, project, user, got, oracle)
			}
			served++
		}
		if served < 10 {
			t.Fatalf("only %d granted trials were compared (%d over maxRows): the test checks too little", served, tooLarge)
		}
	})
}
