package operations_test

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/operations"
)

// natsCall sends an operation request over the NATS binding.
func natsCall(t *testing.T, nc *nats.Conn, subject, token string, req operations.Object) operations.Object {
	t.Helper()
	body, err := operations.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(subject)
	m.Data = body
	if token != "" {
		m.Header.Set("Authorization", "Bearer "+token)
	}
	reply, err := nc.RequestMsg(m, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	v, err := operations.Decode(reply.Data)
	if err != nil {
		t.Fatal(err)
	}
	return v.(operations.Object)
}

// TestNATSCommandHandlerProcess: a command implemented by another process
// on the bus (testdata/cmdhandler, built and run here) is called over
// the NATS request binding: the node reads the declared row under the
// lock, sends it, and commits the handler's mutation; a handler reads
// through its call's read subject (a registered query and rows by key,
// in the command's transaction, with the caller's grant; an ungranted
// project refused); a retry is cached without asking the handler; a
// caller without a token is refused and nothing runs.
func TestNATSCommandHandlerProcess(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cmdhandler")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/cmdhandler").CombinedOutput(); err != nil {
		t.Fatalf("build the handler: %v\n%s", err, out)
	}
	eachBackend(t, func(t *testing.T, b backend) { testNATSCommandHandlerProcess(t, b, bin) })
}

func testNATSCommandHandlerProcess(t *testing.T, b backend, bin string) {
	var runs atomic.Int64
	ops := goOps(&runs)
	ops.Commands = append(ops.Commands, operations.Command{ID: "renameTodo", NATS: true, AllowActors: []string{"svc"},
		Reads: []operations.Read{{Table: "todos", RowIDParam: "id"}}, TimeoutMs: 10000},
		operations.Command{ID: "finishProject", NATS: true, AllowActors: []string{"svc"}, TimeoutMs: 10000})
	n := nodetest.Start(t, b.with(t, func(c *node.Config) { c.Operations.Registry = ops }))
	subject, err := (bus.Names{}).OperationCommand("renameTodo")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	finish, err := (bus.Names{}).OperationCommand("finishProject")
	if err != nil {
		t.Fatal(err)
	}
	proc := exec.CommandContext(ctx, bin, n.NATS.ClientURL(), subject, finish)
	stdout, _ := proc.StdoutPipe()
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = proc.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("handler: %q %v", line, err)
	}
	nc := n.NATS.Conn()
	reqSubject := (bus.Names{}).OperationRequests()
	tok := nodetest.Token(t, "svc", "acme", map[string][]string{"project_id": {"p1"}})

	if res := natsCall(t, nc, reqSubject, "", queryObj("c", "todos", "p1")); res[1].Value != "error" || mustGet(res, "code") != "sync.auth_required" {
		t.Fatalf("no token: %v", res)
	}
	if res := natsCall(t, nc, reqSubject, "not-a-token", commandObj("c", "addTodo", "x", operations.Object{})); mustGet(res, "code") != "sync.auth_required" || runs.Load() != 0 {
		t.Fatalf("bad token: %v, %d runs", res, runs.Load())
	}
	add := commandObj("svc-1", "addTodo", "r1", operations.Object{{Key: "id", Value: "t1"}, {Key: "project", Value: "p1"}, {Key: "title", Value: "old"}})
	if res := natsCall(t, nc, reqSubject, tok, add); mustGet(res, "status") != "applied" {
		t.Fatalf("add over NATS: %v", res)
	}
	rename := commandObj("svc-1", "renameTodo", "r2", operations.Object{{Key: "id", Value: "t1"}, {Key: "title", Value: "new"}})
	if res := natsCall(t, nc, reqSubject, tok, rename); mustGet(res, "status") != "applied" || mustGet(res, "commitSeq") != float64(2) {
		t.Fatalf("rename by the handler process: %v", res)
	}
	// finishProject reads through the call's read subject, inside the
	// command's transaction with the caller's grant: the registered query
	// for the project, then each open todo by key.
	wide := nodetest.Token(t, "svc", "acme", map[string][]string{"project_id": {"p1", "p2"}})
	for i, add := range []operations.Object{
		{{Key: "id", Value: "t2"}, {Key: "project", Value: "p1"}, {Key: "title", Value: "two"}},
		{{Key: "id", Value: "t3"}, {Key: "project", Value: "p1"}, {Key: "title", Value: "three"}},
		{{Key: "id", Value: "t4"}, {Key: "project", Value: "p2"}, {Key: "title", Value: "four"}},
	} {
		if res := natsCall(t, nc, reqSubject, wide, commandObj("svc-1", "addTodo", fmt.Sprintf("seed-%d", i), add)); mustGet(res, "status") != "applied" {
			t.Fatalf("seed: %v", res)
		}
	}
	finished := commandObj("svc-1", "finishProject", "f1", operations.Object{{Key: "project", Value: "p1"}})
	if res := natsCall(t, nc, reqSubject, tok, finished); mustGet(res, "status") != "applied" || len(mustGet(res, "results").([]any)) != 3 {
		t.Fatalf("finishProject p1: %v", res)
	}
	// A read of a project the caller is not granted is refused inside the
	// call: the handler fails, nothing is committed.
	if res := natsCall(t, nc, reqSubject, tok, commandObj("svc-1", "finishProject", "f2", operations.Object{{Key: "project", Value: "p2"}})); mustGet(res, "code") != operations.CodeExecutionFailed {
		t.Fatalf("finishProject of an ungranted project: %v", res)
	}
	for project, want := range map[string]bool{"p1": true, "p2": false} {
		res := natsCall(t, nc, reqSubject, wide, queryObj("svc-1", "todos", project))
		for _, r := range mustGet(res, "rows").([]any) {
			if mustGet(r.(operations.Object), "done") != want {
				t.Fatalf("%s after finishProject: %v", project, res)
			}
		}
	}
	// The retry is answered from the idempotency record even with the
	// handler gone.
	cancel()
	_ = proc.Wait()
	if res := natsCall(t, nc, reqSubject, tok, rename); mustGet(res, "status") != "cached" {
		t.Fatalf("retry: %v", res)
	}
	res := natsCall(t, nc, reqSubject, tok, queryObj("svc-1", "todos", "p1"))
	rows, _ := mustGet(res, "rows").([]any)
	if len(rows) != 3 || mustGet(rows[0].(operations.Object), "title") != "new" {
		t.Fatalf("query over NATS: %v", res)
	}
	// No handler now: a new request fails and stores nothing.
	again := commandObj("svc-1", "renameTodo", "r3", operations.Object{{Key: "id", Value: "t1"}, {Key: "title", Value: "x"}})
	if res := natsCall(t, nc, reqSubject, tok, again); mustGet(res, "code") != operations.CodeExecutionFailed {
		t.Fatalf("handler gone: %v", res)
	}
}

func mustGet(o operations.Object, k string) any { v, _ := o.Get(k); return v }
