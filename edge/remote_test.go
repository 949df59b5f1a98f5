package edge_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/syncnode/syncnode/backfill"
	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/operations"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// remoteOps registers a scoped query over todos and a Go command adding
// one, counting the command's runs.
func remoteOps(runs *atomic.Int64) operations.File {
	return operations.File{
		Queries: []operations.Query{{ID: "todos", SQL: "SELECT id, title FROM todos WHERE project_id = ? ORDER BY id",
			Tables: []string{"todos"}, MaxRows: 10000, Mode: operations.Scoped,
			Columns:  []operations.Column{{Name: "id", Type: "string"}, {Name: "title", Type: "string"}},
			Coverage: []operations.Coverage{{Table: "todos", Scopes: map[string][]int{"project_id": {0}}}}}},
		Commands: []operations.Command{{ID: "addTodo",
			Authorize: func(context.Context, engine.Identity, any) (bool, error) { return true, nil },
			Run: func(_ context.Context, c operations.CommandCall) ([]operations.Mutation, error) {
				runs.Add(1)
				id, _ := c.Params.(operations.Object).Get("id")
				return []operations.Mutation{{Op: "upsert", Table: "todos", Row: map[string]any{"id": id, "project_id": project, "title": "by command", "done": false}}}, nil
			}}},
	}
}

// operate posts one operation request to n and decodes the response.
func operate(t testing.TB, n *node.Node, req operations.Object) operations.Object {
	t.Helper()
	body, err := operations.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	hr, _ := http.NewRequest(http.MethodPost, n.URL()+"/operations", bytes.NewReader(body))
	hr.Header.Set("Content-Type", operations.MediaType)
	hr.Header.Set("Authorization", "Bearer "+nodetest.Token(t, "alice", edgePart, map[string][]string{"project_id": {project}}))
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	v, err := operations.Decode(b)
	if err != nil {
		t.Fatalf("response %d %s: %v", resp.StatusCode, b, err)
	}
	return v.(operations.Object)
}

func field(o operations.Object, k string) any { v, _ := o.Get(k); return v }

func addTodo(reqID, id string) operations.Object {
	return operations.Object{{Key: "revision", Value: int64(1)}, {Key: "kind", Value: "command"}, {Key: "clientId", Value: "ops-client"},
		{Key: "operationId", Value: "addTodo"}, {Key: "requestId", Value: reqID}, {Key: "params", Value: operations.Object{{Key: "id", Value: id}}}}
}

var todosQuery = operations.Object{{Key: "revision", Value: int64(1)}, {Key: "kind", Value: "query"}, {Key: "clientId", Value: "ops-client"},
	{Key: "operationId", Value: "todos"}, {Key: "params", Value: []any{project}}}

// refusedRetryably fails unless o is the retryable sync.schema_not_ready.
func refusedRetryably(t testing.TB, what string, o operations.Object) {
	t.Helper()
	if field(o, "kind") != "error" || field(o, "code") != string(ssp2.CodeSchemaNotReady) || field(o, "retryable") != true {
		t.Fatalf("%s: %v, want the retryable sync.schema_not_ready", what, o)
	}
}

// TestHubRemoteOperations: at the hub, a registered query of an edge
// partition reads the replica (refused, registering nothing, before the
// hub holds one); a registered command is run at the edge while linked —
// its commit is in the edge's log at the edge's seq and in the hub's
// next query — replayed as cached, refused with the retryable
// sync.schema_not_ready while cut (run nowhere) and applied once on the
// retry after the link returns. The hub never runs it itself.
func TestHubRemoteOperations(t *testing.T) {
	var hubRuns, edgeRuns atomic.Int64
	tp := startTopologyWith(t,
		func(c *node.Config) { c.Operations.Registry = remoteOps(&hubRuns) },
		func(c *node.Config) { c.Operations.Registry = remoteOps(&edgeRuns) })
	ctx := context.Background()

	refusedRetryably(t, "query before any replica", operate(t, tp.hub, todosQuery))
	if _, err := tp.hub.Store.PartitionGet(ctx, edgePart); ssp2.CodeOf(err) != ssp2.CodeStoragePartitionUnregistered {
		t.Fatalf("the refused query registered the partition at the hub: %v", err)
	}
	pushTodos(t, clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer"), "seed", 2)
	tp.waitReplica(edgePart)
	if res := operate(t, tp.hub, todosQuery); field(res, "kind") != "query" || len(field(res, "rows").([]any)) != 2 || field(res, "maxCommitSeq") != float64(2) {
		t.Fatalf("query of the replica: %v", res)
	}

	res := operate(t, tp.hub, addTodo("r1", "cmd-1"))
	if field(res, "status") != "applied" || field(res, "commitSeq") != float64(3) {
		t.Fatalf("command at the hub: %v, want applied at the edge's seq 3", res)
	}
	if _, ok := rowAt(t, tp, "cmd-1"); !ok || edgeRuns.Load() != 1 || hubRuns.Load() != 0 {
		t.Fatalf("the command's row at the edge: %v; runs: edge %d, hub %d (want 1, 0)", ok, edgeRuns.Load(), hubRuns.Load())
	}
	// The hub waited for its replica: its next query sees the commit.
	if res := operate(t, tp.hub, todosQuery); len(field(res, "rows").([]any)) != 3 || field(res, "maxCommitSeq") != float64(3) {
		t.Fatalf("query after the command: %v", res)
	}
	if res := operate(t, tp.hub, addTodo("r1", "cmd-1")); field(res, "status") != "cached" || field(res, "commitSeq") != float64(3) || edgeRuns.Load() != 1 {
		t.Fatalf("replayed command: %v (%d runs)", res, edgeRuns.Load())
	}

	tp.cut()
	refusedRetryably(t, "command while cut", operate(t, tp.hub, addTodo("r2", "cmd-2")))
	if _, ok := rowAt(t, tp, "cmd-2"); ok || edgeRuns.Load() != 1 || hubRuns.Load() != 0 {
		t.Fatalf("a refused command ran: at the edge %v; runs: edge %d, hub %d", ok, edgeRuns.Load(), hubRuns.Load())
	}
	if hp, _ := tp.hub.Store.PartitionGet(ctx, edgePart); hp.MaxCommitSeq != 3 {
		t.Fatalf("the replica moved while cut: max seq %d", hp.MaxCommitSeq)
	}
	// Queries keep reading the replica while cut.
	if res := operate(t, tp.hub, todosQuery); len(field(res, "rows").([]any)) != 3 {
		t.Fatalf("query while cut: %v", res)
	}

	tp.restore()
	if res := operate(t, tp.hub, addTodo("r2", "cmd-2")); field(res, "status") != "applied" || field(res, "commitSeq") != float64(4) || edgeRuns.Load() != 2 {
		t.Fatalf("the retry after the link returned: %v (%d runs)", res, edgeRuns.Load())
	}
	tp.waitReplica(edgePart)
	sameRows(t, rows(t, tp.edg.Store, edgePart), rows(t, tp.hub.Store, edgePart))
	if hubRuns.Load() != 0 {
		t.Fatalf("the hub ran the command %d times", hubRuns.Load())
	}
}

// TestHubRefusesAuthoritativeWrites: a server-authoritative commit or a
// backfill of an edge partition at the hub, linked or cut, is refused
// with sync.schema_not_ready (reason remote_home) and writes nothing at
// the hub — no commit in the replica, no checkpoint that would gate the
// replica: they run at the edge, under its serve gate.
func TestHubRefusesAuthoritativeWrites(t *testing.T) {
	tp := startTopology(t)
	ctx := context.Background()
	pushTodos(t, clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "edge-writer"), "seed", 1)
	tp.waitReplica(edgePart)
	runner, err := tp.hub.Backfiller(backfill.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	op := func(context.Context, storage.Tx) ([]ssp2.Operation, error) {
		ran.Add(1)
		return nil, errors.New("must not run")
	}
	try := func(state string) {
		t.Helper()
		_, err := tp.hub.Engine.PushAuthoritative(ctx, engine.AuthoritativeCommit{Partition: edgePart, ActorID: "server",
			ClientID: "server", ClientCommitID: "auth-" + state, Operations: op})
		if ssp2.CodeOf(err) != ssp2.CodeSchemaNotReady {
			t.Fatalf("authoritative commit at the hub (%s): %v, want sync.schema_not_ready", state, err)
		}
		_, err = runner.Run(ctx, backfill.Job{Partition: edgePart, Name: "proj_" + state, Sources: []string{"todos"},
			Batch: func(context.Context, storage.Tx, string) ([]ssp2.Operation, string, bool, error) {
				ran.Add(1)
				return nil, "", true, nil
			}})
		if ssp2.CodeOf(err) != ssp2.CodeSchemaNotReady {
			t.Fatalf("backfill at the hub (%s): %v, want sync.schema_not_ready", state, err)
		}
		cps, err := tp.hub.Store.Checkpoints(ctx, edgePart)
		if err != nil || len(cps) != 0 {
			t.Fatalf("checkpoints of the replica at the hub (%s): %v %v, want none", state, cps, err)
		}
		if hp, _ := tp.hub.Store.PartitionGet(ctx, edgePart); hp.MaxCommitSeq != 1 || ran.Load() != 0 {
			t.Fatalf("the hub wrote its replica (%s): max seq %d, %d runs", state, hp.MaxCommitSeq, ran.Load())
		}
	}
	try("linked")
	tp.cut()
	try("cut")
	// The replica still serves reads.
	c := clientOf(t, tp.hub, edgePart, &client.MemoryStore{Rows: true}, "hub-reader")
	syncOK(t, c)
	if c.Count("todos") != 1 {
		t.Fatalf("hub reader holds %d rows, want 1", c.Count("todos"))
	}
}
