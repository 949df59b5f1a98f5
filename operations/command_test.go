package operations

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/storage"
)

// commandFile registers Go commands over tasks.
func commandFile(runs *atomic.Int64) File {
	allow := func(context.Context, engine.Identity, any) (bool, error) { return true, nil }
	return File{Commands: []Command{
		{ID: "complete", Authorize: allow, Run: func(ctx context.Context, c CommandCall) ([]Mutation, error) {
			runs.Add(1)
			p := c.Params.(Object)
			idv, _ := p.Get("taskId")
			row, ok, err := c.Rows.GetRow(ctx, "tasks", idv.(string))
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, errors.New("no such task")
			}
			row["done"] = true
			return []Mutation{{Op: "upsert", Table: "tasks", Row: row}}, nil
		}},
		{ID: "empty", Authorize: allow, Run: func(context.Context, CommandCall) ([]Mutation, error) { return nil, nil }},
		{ID: "create", Authorize: allow, Run: func(_ context.Context, c CommandCall) ([]Mutation, error) {
			runs.Add(1)
			p := c.Params.(Object)
			idv, _ := p.Get("taskId")
			proj, _ := p.Get("project")
			return []Mutation{task(idv.(string), proj.(string), "made", 1, false)}, nil
		}},
		{ID: "denied", Authorize: func(context.Context, engine.Identity, any) (bool, error) { return false, nil },
			Run: func(context.Context, CommandCall) ([]Mutation, error) { return nil, nil }},
	}}
}

func cmdReq(op, reqID string, params Object) Request {
	return Request{Kind: "command", ClientID: "svc", OperationID: op, RequestID: reqID, Params: params}
}

// TestCommandReplayCached: a command commits through the push path under
// its remote-command key; a retry returns cached without running the
// callback again and allocates no commit.
func TestCommandReplayCached(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		var runs atomic.Int64
		var notified atomic.Int64
		e := newEnv(t, open, commandFile(&runs), func(c *engine.Config) { c.OnCommit = func(string) { notified.Add(1) } })
		e.put("p", task("t1", "a", "x", 1, false))
		id := caller("p", "u", engine.Allowed{"project_id": {"a"}})
		req := cmdReq("complete", "r1", Object{{"taskId", "t1"}})
		res, err := e.svc.Command(e.ctx, id, req)
		if err != nil || res.Status != "applied" || res.CommitSeq != 2 {
			t.Fatalf("first run: %+v %v", res, err)
		}
		again, err := e.svc.Command(e.ctx, id, req)
		if err != nil || again.Status != "cached" || again.CommitSeq != 2 || runs.Load() != 1 {
			t.Fatalf("retry: %+v %v, %d runs", again, err, runs.Load())
		}
		if n := notified.Load(); n != 2 { // the seed and the command
			t.Fatalf("OnCommit called %d times", n)
		}
		commits, err := e.store.CommitRange(e.ctx, "p", 1, 10)
		if err != nil || len(commits) != 1 {
			t.Fatalf("commits after the seed: %v %v", commits, err)
		}
		cid, ccid := CommandKey("u", "svc", "complete", "r1")
		if c := commits[0]; c.ClientID != cid || c.ClientCommitID != ccid || c.ActorID != "u" || cid != `["remote-command","u","svc"]` || ccid != `["complete","r1"]` {
			t.Fatalf("commit key %q %q by %q", c.ClientID, c.ClientCommitID, c.ActorID)
		}
		if max, _ := e.store.CommitMaxSeq(e.ctx, "p"); max != 2 {
			t.Fatalf("max seq %d after a retry", max)
		}
	})
}

// TestCommandRefusals: an empty plan is operation.invalid_request, a
// callback error operation.execution_failed and not stored (a retry runs
// again), a denied authorize operation.forbidden, a write outside the
// caller's scopes a stored rejection replayed as rejected, reads see no
// ungranted row, and a reserved client id is sync.invalid_client_id.
func TestCommandRefusals(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		var runs atomic.Int64
		e := newEnv(t, open, commandFile(&runs), nil)
		e.put("p", task("t1", "a", "x", 1, false), task("t2", "b", "x", 1, false))
		id := caller("p", "u", engine.Allowed{"project_id": {"a"}})
		if _, err := e.svc.Command(e.ctx, id, cmdReq("empty", "r", Object{})); errCode(err) != CodeInvalidRequest {
			t.Fatalf("empty plan: %v", err)
		}
		if _, err := e.svc.Command(e.ctx, id, cmdReq("denied", "r", Object{})); errCode(err) != CodeForbidden {
			t.Fatalf("denied: %v", err)
		}
		if _, err := e.svc.Command(e.ctx, id, cmdReq("nope", "r", Object{})); errCode(err) != CodeUnknown {
			t.Fatalf("unknown: %v", err)
		}
		// t2 is in project b: the command's read does not see it.
		req := cmdReq("complete", "r2", Object{{"taskId", "t2"}})
		for range 2 {
			if _, err := e.svc.Command(e.ctx, id, req); errCode(err) != CodeExecutionFailed {
				t.Fatalf("read of an ungranted row: %v", err)
			}
		}
		if runs.Load() != 2 {
			t.Fatalf("a failed command is not stored: %d runs, want 2", runs.Load())
		}
		// Writing into project b is refused by scope authorization, stored,
		// and replayed as rejected without running again.
		bad := cmdReq("create", "r3", Object{{"taskId", "t9"}, {"project", "b"}})
		res, err := e.svc.Command(e.ctx, id, bad)
		if err != nil || res.Status != "rejected" || len(res.Results) != 1 || res.Results[0].Code != "sync.forbidden" {
			t.Fatalf("write outside scopes: %+v %v", res, err)
		}
		res, err = e.svc.Command(e.ctx, id, bad)
		if err != nil || res.Status != "rejected" || runs.Load() != 3 {
			t.Fatalf("replayed rejection: %+v %v, %d runs", res, err, runs.Load())
		}
		reserved := cmdReq("create", "r4", Object{{"taskId", "t9"}, {"project", "a"}})
		reserved.ClientID = `["remote-command","x","y"]`
		if _, err := e.svc.Command(e.ctx, id, reserved); errCode(err) != "sync.invalid_client_id" {
			t.Fatalf("reserved client id: %v", err)
		}
		// Another actor's identical request has its own key.
		other := caller("p", "w", engine.Allowed{"project_id": {"a"}})
		ok := cmdReq("create", "r5", Object{{"taskId", "t5"}, {"project", "a"}})
		ok.ClientID = "svc-w"
		if res, err := e.svc.Command(e.ctx, other, ok); err != nil || res.Status != "applied" {
			t.Fatalf("second actor: %+v %v", res, err)
		}
	})
}
