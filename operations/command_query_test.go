package operations

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/storage"
)

// commandQueryFile registers queries a command reads through and a
// command that closes every open task of a project it finds with one.
func commandQueryFile(seen *[]string, outcome *error) File {
	cover := []Coverage{{Table: "tasks", Scopes: map[string][]int{"project_id": {0}}}}
	allow := func(context.Context, engine.Identity, any) (bool, error) { return true, nil }
	return File{
		Queries: []Query{
			{ID: "openTasks", SQL: "SELECT id, project_id, title, prio FROM tasks WHERE project_id = ? AND NOT done ORDER BY id",
				Tables: []string{"tasks"}, MaxRows: 3, Mode: Scoped, Coverage: cover,
				Columns: []Column{{Name: "id", Type: "string"}, {Name: "project_id", Type: "string"},
					{Name: "title", Type: "string", Nullable: true}, {Name: "prio", Type: "integer"}}},
			// A scoped query with a sloppy WHERE: only the relations keep
			// other projects out.
			{ID: "sloppyIDs", SQL: "SELECT id FROM tasks WHERE project_id = ? OR 1 = 1 ORDER BY id",
				Tables: []string{"tasks"}, MaxRows: 100, Mode: Scoped, Coverage: cover,
				Columns: []Column{{Name: "id", Type: "string"}}},
			{ID: "adminAll", SQL: "SELECT id FROM tasks ORDER BY id",
				Tables: []string{"tasks"}, MaxRows: 100, Mode: Privileged, AllowActors: []string{"admin"},
				Columns: []Column{{Name: "id", Type: "string"}}},
			{ID: "overflow", SQL: "SELECT id, abs(prio - 9223372036854775807 - 1) AS x FROM tasks WHERE project_id = ? ORDER BY id",
				Tables: []string{"tasks"}, MaxRows: 100, Mode: Scoped, Coverage: cover,
				Columns: []Column{{Name: "id", Type: "string"}, {Name: "x", Type: "integer", Nullable: true}}},
		},
		Commands: []Command{
			{ID: "closeProject", Authorize: allow, Run: func(ctx context.Context, c CommandCall) ([]Mutation, error) {
				proj, _ := c.Params.(Object).Get("project")
				res, err := c.Query(ctx, "openTasks", proj)
				if err != nil {
					return nil, err
				}
				var muts []Mutation
				for _, r := range res.Rows {
					m := task(mustField(r, "id").(string), mustField(r, "project_id").(string), "closed", mustField(r, "prio").(int64), true)
					muts = append(muts, m)
				}
				return muts, nil
			}},
			{ID: "probe", Authorize: allow, Run: func(ctx context.Context, c CommandCall) ([]Mutation, error) {
				op, _ := c.Params.(Object).Get("query")
				arg, _ := c.Params.(Object).Get("arg")
				var args []any
				if arg != nil {
					args = append(args, arg)
				}
				res, err := c.Query(ctx, op.(string), args...)
				*outcome = err
				*seen = (*seen)[:0]
				for _, r := range res.Rows {
					*seen = append(*seen, mustField(r, "id").(string))
				}
				if op == "overflow" {
					// The failed statement left the transaction usable: the
					// command reads again and commits.
					if _, err := c.Query(ctx, "sloppyIDs", "a"); err != nil {
						return nil, err
					}
				} else if err != nil {
					return nil, err
				}
				return []Mutation{task("probe", "a", "probe", 1, false)}, nil
			}},
		},
	}
}

func mustField(o Object, k string) any { v, _ := o.Get(k); return v }

// TestCommandQuery: a Go command runs registered queries inside its own
// transaction (CommandCall.Query), on both stores. The query sees the
// partition as the lock holds it — on SQLite a read through the store
// would wait on the writer the command is — and is authorized as the
// caller's own call: a covered value the caller is not granted is
// operation.forbidden, a sloppy scoped query sees the granted project
// only, a privileged query asks its allowActors, maxRows is refused as
// on a remote call, and a failing statement leaves the command usable.
// The commit built from the query's rows goes through the push path.
func TestCommandQuery(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		var (
			seen    []string
			outcome error
		)
		e := newEnv(t, open, commandQueryFile(&seen, &outcome), nil)
		e.put("p", task("a1", "a", "x", 1, false), task("a2", "a", "x", 2, false), task("a3", "a", "x", 0, true),
			task("b1", "b", "x", 1, false))
		e.put("q", task("a9", "a", "x", 1, false))
		u := caller("p", "u", engine.Allowed{"project_id": {"a"}})

		res, err := e.svc.Command(e.ctx, u, cmdReq("closeProject", "r1", Object{{"project", "a"}}))
		if err != nil || res.Status != "applied" || len(res.Results) != 2 {
			t.Fatalf("closeProject: %+v %v", res, err)
		}
		after, err := e.svc.Query(e.ctx, u, Request{Kind: "query", ClientID: "svc", OperationID: "openTasks", Params: []any{"a"}})
		if err != nil || len(after.Rows) != 0 {
			t.Fatalf("open tasks of a after the command: %+v %v", after, err)
		}
		if _, err := e.svc.Command(e.ctx, u, cmdReq("closeProject", "r2", Object{{"project", "b"}})); errCode(err) != CodeForbidden {
			t.Fatalf("a query over an ungranted project inside a command: %v", err)
		}
		probe := func(reqID, query string, arg any) (CommandResult, error) {
			return e.svc.Command(e.ctx, u, cmdReq("probe", reqID, Object{{"query", query}, {"arg", arg}}))
		}
		if res, err := probe("r3", "sloppyIDs", "a"); err != nil || res.Status != "applied" || !slices.Equal(seen, []string{"a1", "a2", "a3"}) {
			t.Fatalf("sloppy scoped query in a command: %v, %+v %v", seen, res, err)
		}
		if _, err := probe("r4", "adminAll", nil); errCode(err) != CodeForbidden || errCode(outcome) != CodeForbidden {
			t.Fatalf("privileged query by a caller it does not allow: %v", err)
		}
		admin := caller("p", "admin", engine.Allowed{"project_id": {"a"}})
		if res, err := e.svc.Command(e.ctx, admin, Request{Kind: "command", ClientID: "adm", OperationID: "probe", RequestID: "r5",
			Params: Object{{"query", "adminAll"}, {"arg", nil}}}); err != nil || res.Status != "applied" ||
			!slices.Equal(seen, []string{"a1", "a2", "a3", "b1", "probe"}) {
			t.Fatalf("privileged query in a command: %v, %+v %v", seen, res, err)
		}
		// openTasks has maxRows 3: four open tasks of a are too many.
		e.put("p", task("a4", "a", "x", 1, false), task("a5", "a", "x", 1, false), task("a6", "a", "x", 1, false), task("a7", "a", "x", 1, false))
		if _, err := e.svc.Command(e.ctx, u, cmdReq("closeProject", "r6", Object{{"project", "a"}})); errCode(err) != CodeResultTooLarge {
			t.Fatalf("a query over maxRows inside a command: %v", err)
		}
		var qe *storage.QueryError
		if res, err := probe("r7", "overflow", "a"); err != nil || res.Status != "applied" || !errors.As(outcome, &qe) {
			t.Fatalf("a failing statement inside a command: %+v %v (query: %v)", res, err, outcome)
		}
		if _, err := probe("r8", "nope", nil); errCode(err) != CodeUnknown {
			t.Fatalf("unknown query inside a command: %v", err)
		}
	})
}
