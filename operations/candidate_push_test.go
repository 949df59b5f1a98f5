package operations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/operations"
	"github.com/syncnode/syncnode/storage"
)

// TestCandidateQueryClientPush: a node's whole-commit validator, row
// validator and reaction planner read a registered query through the
// push's candidate reader (n.Operations.Registry().QueryCandidate) while
// a Go client pushes over HTTP, on SQLite and PostgreSQL. The push does
// not wait on itself, every read sees the commit's own writes (the row
// validator the state before its row), and the validator's rejection of a
// third open todo reaches the client.
func TestCandidateQueryClientPush(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ops := operations.File{Queries: []operations.Query{{ID: "openTodos",
			SQL:    "SELECT count(*) AS n FROM todos WHERE project_id = ? AND done = ?",
			Tables: []string{"todos"}, MaxRows: 1, Mode: operations.Scoped,
			Columns:  []operations.Column{{Name: "n", Type: "integer"}},
			Coverage: []operations.Coverage{{Table: "todos", Scopes: map[string][]int{"project_id": {0}}}}}}}
		var (
			nodeRef             atomic.Pointer[node.Node]
			seenRow, seenCommit []int64
			planned             []int64
		)
		open := func(ctx context.Context, rd engine.CandidateReader, project any) (int64, error) {
			res, err := nodeRef.Load().Operations.Registry().QueryCandidate(ctx, rd, "openTodos", project, false)
			if err != nil {
				return 0, err
			}
			return res.Rows[0][0].Value.(int64), nil
		}
		n := nodetest.Start(t, b.with(t, func(c *node.Config) {
			c.Operations.Registry = ops
			c.Engine.Validators = map[string]engine.RowValidator{"todos": func(ctx context.Context, v engine.RowValidation) error {
				k, err := open(ctx, v.Candidate, v.Row["project_id"])
				seenRow = append(seenRow, k)
				return err
			}}
			c.Engine.CommitValidator = func(ctx context.Context, v engine.CommitValidation) error {
				k, err := open(ctx, v.Candidate, "p1")
				if err != nil {
					return err
				}
				seenCommit = append(seenCommit, k)
				if k > 2 {
					return engine.Reject("app.too_many_open", fmt.Sprintf("%d open todos", k))
				}
				return nil
			}
			c.Reactions.Planner = func(ctx context.Context, v engine.CommitValidation) ([]engine.PlannedReaction, error) {
				k, err := open(ctx, v.Candidate, "p1")
				if err != nil {
					return nil, err
				}
				planned = append(planned, k)
				return []engine.PlannedReaction{{Key: "count", Type: "todos.counted", Version: 1, Payload: map[string]int64{"open": k}}}, nil
			}
		}))
		nodeRef.Store(n)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl := nodetest.Client(t, n, nodetest.Token(t, "u", "acme", map[string][]string{"project_id": {"p1"}}))
		for _, id := range []string{"t1", "t2", "t3"} {
			if _, err := cl.Upsert(ctx, "todos", nodetest.Todo(id, "p1", id)); err != nil {
				t.Fatal(err)
			}
			res, err := cl.Sync(ctx)
			if err != nil {
				t.Fatalf("push %s: %v", id, err)
			}
			if id == "t3" {
				if len(res.Rejected) != 1 || res.Rejected[0].Code != "app.too_many_open" {
					t.Fatalf("the third open todo: %+v", res)
				}
				continue
			}
			if len(res.Pushed) != 1 || res.Pushed[0].CommitSeq == 0 {
				t.Fatalf("push %s: %+v", id, res)
			}
		}
		// The validators and the planner ran on the push's goroutine, one
		// commit at a time; the client's last round has returned.
		if fmt.Sprint(seenRow) != "[0 1 2]" || fmt.Sprint(seenCommit) != "[1 2 3]" || fmt.Sprint(planned) != "[1 2]" {
			t.Fatalf("open todos seen by the row validator %v (want [0 1 2]), the commit validator %v (want [1 2 3]), the planner %v (want [1 2])",
				seenRow, seenCommit, planned)
		}
		rs, err := n.Store.ReactionList(ctx, storage.ReactionListParams{Partition: "acme", Limit: 10})
		if err != nil || len(rs) != 2 {
			t.Fatalf("reactions %+v %v", rs, err)
		}
		for _, r := range rs {
			var p struct{ Open int64 }
			if err := json.Unmarshal(r.Payload, &p); err != nil || p.Open != r.SourceCommitSeq {
				t.Fatalf("reaction of commit %d planned %s", r.SourceCommitSeq, r.Payload)
			}
		}
	})
}
