package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/storage"
)

// candidateFile registers the queries the validators of
// TestCandidateQuery read through, and a command writing n tasks of a
// project in one commit.
func candidateFile() File {
	cover := []Coverage{{Table: "tasks", Scopes: map[string][]int{"project_id": {0}}}}
	allow := func(context.Context, engine.Identity, any) (bool, error) { return true, nil }
	return File{
		Queries: []Query{
			{ID: "openCount", SQL: "SELECT count(*) AS n FROM tasks WHERE project_id = ? AND done = ?",
				Tables: []string{"tasks"}, MaxRows: 1, Mode: Scoped, Coverage: cover,
				Columns: []Column{{Name: "n", Type: "integer"}}},
			{ID: "projectTasks", SQL: "SELECT id FROM tasks WHERE project_id = ? ORDER BY id",
				Tables: []string{"tasks"}, MaxRows: 3, Mode: Scoped, Coverage: cover,
				Columns: []Column{{Name: "id", Type: "string"}}},
			// Privileged, and no actor may call it remotely: the candidate
			// read is the server's own.
			{ID: "allTasks", SQL: "SELECT id FROM tasks ORDER BY id",
				Tables: []string{"tasks"}, MaxRows: 100, Mode: Privileged, AllowActors: []string{"nobody"},
				Columns: []Column{{Name: "id", Type: "string"}}},
			// For prio 0, abs of the least int64: both stores fail as it runs.
			{ID: "overflow", SQL: "SELECT id, abs(prio - 9223372036854775807 - 1) AS x FROM tasks WHERE project_id = ? ORDER BY id",
				Tables: []string{"tasks"}, MaxRows: 100, Mode: Scoped, Coverage: cover,
				Columns: []Column{{Name: "id", Type: "string"}, {Name: "x", Type: "integer", Nullable: true}}},
		},
		Commands: []Command{{ID: "createMany", Authorize: allow, Run: func(_ context.Context, c CommandCall) ([]Mutation, error) {
			p := c.Params.(Object)
			proj, _ := p.Get("project")
			first, _ := p.Get("first")
			n, _ := p.Get("n")
			prio, _ := p.Get("prio")
			var muts []Mutation
			for i := range n.(int64) {
				muts = append(muts, task(fmt.Sprintf("t%d", first.(int64)+i), proj.(string), "new", prio.(int64), false))
			}
			return muts, nil
		}}},
	}
}

// observed is what the validators and the planner of one commit read.
type observed struct {
	rowSeen   [][]string // per task upsert: projectTasks before it
	rowErr    []string   // per task upsert: the operation code of a refused read
	open      int64      // openCount in the commit validator
	all       []string   // allTasks in the commit validator
	seq       int64      // maxCommitSeq the commit validator's read reported
	failedErr error      // the overflow query's outcome
	afterErr  error      // a read after it, in the same transaction
	planned   int64      // openCount in the planner
}

// TestCandidateQuery: a row validator, a whole-commit validator and a
// reaction planner run registered queries through the push's candidate
// reader on both stores. Each read runs inside the push transaction —
// on SQLite a read through the store would wait on the writer the push
// is — and sees the candidate state: the commit's own rows, the earlier
// operations' for a row validator, one partition only, a privileged
// query without its authorization, maxRows refused as on a remote call.
// A statement failing inside the push (an integer overflow) leaves the
// transaction usable. The commit validator rejects a commit
// that would leave more than 3 open tasks in a project.
func TestCandidateQuery(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		var (
			mu  sync.Mutex
			obs = map[string]*observed{} // by clientCommitId
			reg *Registry
		)
		at := func(ccid string) *observed {
			mu.Lock()
			defer mu.Unlock()
			if obs[ccid] == nil {
				obs[ccid] = &observed{}
			}
			return obs[ccid]
		}
		rowValidator := func(ctx context.Context, v engine.RowValidation) error {
			if v.Row == nil || v.Row["title"] != "new" {
				return nil
			}
			o := at("row:" + v.Partition)
			res, err := reg.QueryCandidate(ctx, v.Candidate, "projectTasks", v.Row["project_id"])
			if err != nil {
				var oe *Error
				if !errors.As(err, &oe) {
					return err
				}
				o.rowErr = append(o.rowErr, oe.Code)
				return nil
			}
			o.rowSeen = append(o.rowSeen, rowIDs(res))
			return nil
		}
		commitValidator := func(ctx context.Context, v engine.CommitValidation) error {
			if v.ActorID == "seeder" {
				return nil
			}
			o := at(v.ClientCommitID)
			res, err := reg.QueryCandidate(ctx, v.Candidate, "openCount", "a", false)
			if err != nil {
				return err
			}
			o.open, o.seq = res.Rows[0][0].Value.(int64), res.MaxCommitSeq
			all, err := reg.QueryCandidate(ctx, v.Candidate, "allTasks")
			if err != nil {
				return err
			}
			o.all = rowIDs(all)
			_, o.failedErr = reg.QueryCandidate(ctx, v.Candidate, "overflow", "a")
			_, o.afterErr = reg.QueryCandidate(ctx, v.Candidate, "openCount", "a", false)
			if o.open > 3 {
				return engine.Reject("app.too_many_open", fmt.Sprintf("%d open tasks", o.open))
			}
			return nil
		}
		planner := func(ctx context.Context, v engine.CommitValidation) ([]engine.PlannedReaction, error) {
			if v.ActorID == "seeder" {
				return nil, nil
			}
			res, err := reg.QueryCandidate(ctx, v.Candidate, "openCount", "a", false)
			if err != nil {
				return nil, err
			}
			n := res.Rows[0][0].Value.(int64)
			at(v.ClientCommitID).planned = n
			return []engine.PlannedReaction{{Key: "notify", Type: "tasks.opened", Version: 1, Payload: map[string]int64{"open": n}}}, nil
		}
		e := newEnv(t, open, candidateFile(), func(c *engine.Config) {
			c.Validators = map[string]engine.RowValidator{"tasks": rowValidator}
			c.CommitValidator = commitValidator
			c.ReactionPlanner = planner
		})
		reg = e.svc.Registry()
		e.put("p", task("t1", "a", "old", 1, false), task("b1", "b", "old", 1, false))
		e.put("q", task("q1", "a", "old", 1, false), task("q2", "a", "old", 1, false))

		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		defer cancel()
		id := caller("p", "u", engine.Allowed{"project_id": {"a"}})
		run := func(reqID string, first, n, prio int64) CommandResult {
			t.Helper()
			res, err := e.svc.Command(ctx, id, cmdReq("createMany", reqID,
				Object{{"project", "a"}, {"first", first}, {"n", n}, {"prio", prio}}))
			if err != nil {
				t.Fatalf("%s: %v", reqID, err)
			}
			return res
		}
		_, ccid := CommandKey("u", "svc", "createMany", "r1")
		if res := run("r1", 2, 2, 0); res.Status != "applied" || res.CommitSeq != 2 {
			t.Fatalf("two tasks: %+v", res)
		}
		o := at(ccid)
		if o.open != 3 || o.planned != 3 {
			t.Fatalf("open tasks seen by the validator %d, the planner %d; want 3 (t1 and the commit's t2, t3)", o.open, o.planned)
		}
		if want := []string{"b1", "t1", "t2", "t3"}; !slices.Equal(o.all, want) {
			t.Fatalf("privileged read of the candidate partition %v, want %v", o.all, want)
		}
		if o.seq != 1 {
			t.Fatalf("maxCommitSeq inside the push %d, want 1 (the commit being judged has none yet)", o.seq)
		}
		if qe := (*storage.QueryError)(nil); !errors.As(o.failedErr, &qe) {
			t.Fatalf("a statement failing inside the push: %v, want a *storage.QueryError", o.failedErr)
		}
		if o.afterErr != nil {
			t.Fatalf("a read after a failed statement: %v", o.afterErr)
		}
		if got := at("row:p").rowSeen; len(got) != 2 || !slices.Equal(got[0], []string{"t1"}) || !slices.Equal(got[1], []string{"t1", "t2"}) {
			t.Fatalf("row validators saw %v, want [[t1] [t1 t2]]", got)
		}
		rs, err := e.store.ReactionList(ctx, storage.ReactionListParams{Partition: "p", Limit: 10})
		var payload struct{ Open int64 }
		if err != nil || len(rs) != 1 || json.Unmarshal(rs[0].Payload, &payload) != nil || payload.Open != 3 || rs[0].SourceCommitSeq != 2 {
			t.Fatalf("planned reactions %+v %v", rs, err)
		}

		// Two more open tasks would make 5: rejected by the whole-commit
		// validator, whose read saw the commit's rows; the second row
		// validator's read of four rows is over projectTasks' maxRows.
		_, ccid = CommandKey("u", "svc", "createMany", "r2")
		res := run("r2", 4, 2, 1)
		if res.Status != "rejected" || len(res.Results) != 1 || res.Results[0].Code != "app.too_many_open" {
			t.Fatalf("a fourth open task: %+v", res)
		}
		if o := at(ccid); o.open != 5 {
			t.Fatalf("the rejected commit's validator saw %d open tasks, want 5", o.open)
		}
		if got := at("row:p").rowErr; !slices.Equal(got, []string{CodeResultTooLarge}) {
			t.Fatalf("row validator reads refused %v, want one %s", got, CodeResultTooLarge)
		}
		if max, _ := e.store.CommitMaxSeq(ctx, "p"); max != 2 {
			t.Fatalf("max seq %d after the rejection", max)
		}
		rows, err := e.query(caller("p", "u", engine.Allowed{"project_id": {"a"}}), "openCount", "a", false)
		if err != nil || rows.Rows[0][0].Value != int64(3) {
			t.Fatalf("remote openCount after the rejection: %+v %v", rows, err)
		}
	})
}

func rowIDs(r QueryResult) []string {
	out := make([]string, len(r.Rows))
	for i, row := range r.Rows {
		out[i] = row[0].Value.(string)
	}
	return out
}

// TestCandidateQueryRefusals: an unknown id and params that do not fit
// are refused before the store is asked.
func TestCandidateQueryRefusals(t *testing.T) {
	reg, err := NewRegistry(context.Background(), parseSchema(t), candidateFile())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id     string
		params []any
		code   string
	}{
		{"nope", nil, CodeUnknown},
		{"openCount", []any{"a"}, CodeInvalidRequest},
		{"openCount", []any{"a", map[string]any{}}, CodeInvalidRequest},
		{"openCount", []any{1.5, false}, CodeInvalidRequest}, // a float cannot be a scope value
	} {
		// A nil reader: a refusal never reaches the store.
		_, err := reg.QueryCandidate(context.Background(), nil, c.id, c.params...)
		if errCode(err) != c.code {
			t.Errorf("%s %v: %v, want %s", c.id, c.params, err, c.code)
		}
	}
}

// TestCandidateQueryConcurrentPushes: eight commands of one partition at
// once (on PostgreSQL those arriving while the partition's transaction is
// open join its write group, each in a savepoint) each count the partition's tasks from their validator. Each
// count includes every commit before it and its own row, so the counts
// are exactly 2..9, and the query's settings never leak into another
// member's statements.
func TestCandidateQueryConcurrentPushes(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		var (
			mu     sync.Mutex
			counts []int64
			reg    *Registry
		)
		e := newEnv(t, open, candidateFile(), func(c *engine.Config) {
			c.CommitValidator = func(ctx context.Context, v engine.CommitValidation) error {
				if v.ActorID == "seeder" {
					return nil
				}
				res, err := reg.QueryCandidate(ctx, v.Candidate, "allTasks")
				if err != nil {
					return err
				}
				mu.Lock()
				counts = append(counts, int64(len(res.Rows)))
				mu.Unlock()
				return nil
			}
		})
		reg = e.svc.Registry()
		e.put("p", task("t0", "a", "old", 1, false))
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		defer cancel()
		id := caller("p", "u", engine.Allowed{"project_id": {"a"}})
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range 8 {
			wg.Go(func() {
				res, err := e.svc.Command(ctx, id, cmdReq("createMany", fmt.Sprintf("r%d", i),
					Object{{"project", "a"}, {"first", int64(10 + i)}, {"n", int64(1)}, {"prio", int64(1)}}))
				if err == nil && res.Status != "applied" {
					err = fmt.Errorf("status %s %+v", res.Status, res.Results)
				}
				errs[i] = err
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		slices.Sort(counts)
		if want := []int64{2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(counts, want) {
			t.Fatalf("counts seen by the validators %v, want %v", counts, want)
		}
	})
}
