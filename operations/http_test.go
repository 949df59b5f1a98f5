package operations_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/operations"
)

// goOps registers a scoped query over todos and a Go command adding one.
func goOps(runs *atomic.Int64) operations.File {
	return operations.File{
		Queries: []operations.Query{{ID: "todos", SQL: "SELECT id, title, done FROM todos WHERE project_id = ? ORDER BY id",
			Tables: []string{"todos"}, MaxRows: 100, Mode: operations.Scoped,
			Columns:  []operations.Column{{Name: "id", Type: "string"}, {Name: "title", Type: "string"}, {Name: "done", Type: "boolean"}},
			Coverage: []operations.Coverage{{Table: "todos", Scopes: map[string][]int{"project_id": {0}}}}}},
		Commands: []operations.Command{{ID: "addTodo",
			Authorize: func(context.Context, engine.Identity, any) (bool, error) { return true, nil },
			Run: func(_ context.Context, c operations.CommandCall) ([]operations.Mutation, error) {
				runs.Add(1)
				p := c.Params.(operations.Object)
				id, _ := p.Get("id")
				proj, _ := p.Get("project")
				title, _ := p.Get("title")
				return []operations.Mutation{{Op: "upsert", Table: "todos", Row: map[string]any{"id": id, "project_id": proj, "title": title, "done": false}}}, nil
			}}},
	}
}

func post(t *testing.T, url, token, contentType string, v operations.Object) (int, operations.Object) {
	t.Helper()
	body, err := operations.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/operations", bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Content-Type") != operations.MediaType {
		return resp.StatusCode, nil
	}
	out, err := operations.Decode(b)
	if err != nil {
		t.Fatalf("response %s: %v", b, err)
	}
	return resp.StatusCode, out.(operations.Object)
}

func queryObj(clientID, op string, params ...any) operations.Object {
	if params == nil {
		params = []any{}
	}
	return operations.Object{{Key: "revision", Value: int64(1)}, {Key: "kind", Value: "query"}, {Key: "clientId", Value: clientID},
		{Key: "operationId", Value: op}, {Key: "params", Value: params}}
}

func commandObj(clientID, op, reqID string, params operations.Object) operations.Object {
	return operations.Object{{Key: "revision", Value: int64(1)}, {Key: "kind", Value: "command"}, {Key: "clientId", Value: clientID},
		{Key: "operationId", Value: op}, {Key: "requestId", Value: reqID}, {Key: "params", Value: params}}
}

func get(o operations.Object, k string) any { v, _ := o.Get(k); return v }

// TestHTTPBinding: POST /operations runs a command and a query over real
// HTTP with the tagged encoding; a retry is cached; the command's commit
// is on the bus and in a client's pull; other media types are 415, no
// token 401.
func TestHTTPBinding(t *testing.T) {
	var runs atomic.Int64
	n := nodetest.Start(t, func(c *node.Config) { c.Operations.Registry = goOps(&runs) })
	tok := nodetest.Token(t, "svc", "acme", map[string][]string{"project_id": {"p1"}})
	events, err := n.NATS.Conn().SubscribeSync("sync.>")
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := post(t, n.URL(), tok, "application/json", queryObj("c", "todos", "p1")); code != http.StatusUnsupportedMediaType {
		t.Fatalf("application/json: %d", code)
	}
	if code, _ := post(t, n.URL(), "", operations.MediaType, queryObj("c", "todos", "p1")); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
	cmd := commandObj("svc-1", "addTodo", "req-1", operations.Object{{Key: "id", Value: "t1"}, {Key: "project", Value: "p1"}, {Key: "title", Value: "hello"}})
	code, res := post(t, n.URL(), tok, operations.MediaType, cmd)
	if code != 200 || get(res, "status") != "applied" || get(res, "commitSeq") != float64(1) {
		t.Fatalf("command: %d %v", code, res)
	}
	code, res = post(t, n.URL(), tok, operations.MediaType, cmd)
	if code != 200 || get(res, "status") != "cached" || runs.Load() != 1 {
		t.Fatalf("retry: %d %v, %d runs", code, res, runs.Load())
	}
	msg, err := events.NextMsg(10 * time.Second)
	if err != nil || !strings.Contains(msg.Subject, "todos") || !strings.Contains(string(msg.Data), `remote-command`) {
		t.Fatalf("bus event: %v %v", msg, err)
	}
	code, res = post(t, n.URL(), tok, operations.MediaType, queryObj("svc-1", "todos", "p1"))
	rows, _ := get(res, "rows").([]any)
	if code != 200 || len(rows) != 1 || get(res, "maxCommitSeq") != float64(1) {
		t.Fatalf("query: %d %v", code, res)
	}
	if r := rows[0].(operations.Object); get(r, "id") != "t1" || get(r, "title") != "hello" || get(r, "done") != false {
		t.Fatalf("row %v", r)
	}
	if code, res = post(t, n.URL(), tok, operations.MediaType, queryObj("svc-1", "todos", "p2")); code != 403 || get(res, "code") != operations.CodeForbidden {
		t.Fatalf("ungranted scope: %d %v", code, res)
	}
	if code, res = post(t, n.URL(), tok, operations.MediaType, queryObj("svc-1", "addTodo", "p1")); code != 404 || get(res, "code") != operations.CodeUnknown {
		t.Fatalf("wrong kind: %d %v", code, res)
	}
	cl := nodetest.Client(t, n, nodetest.Token(t, "reader", "acme", map[string][]string{"project_id": {"p1"}}))
	if err := cl.Subscribe("s", "todos", map[string][]string{"project_id": {"p1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SyncUntilIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := cl.Row("todos", "t1"); !ok {
		t.Fatal("the command's row is not in a client's pull")
	}
}

// TestWatch: a watch gets a snapshot, a new one after a commit to its
// table, and none after a commit to another partition's table; a reused
// watch id is refused.
func TestWatch(t *testing.T) {
	var runs atomic.Int64
	n := nodetest.Start(t, func(c *node.Config) { c.Operations.Registry = goOps(&runs) })
	tok := nodetest.Token(t, "svc", "acme", map[string][]string{"project_id": {"p1"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(n.URL(), "http")+"/operations/realtime",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	send := func(o operations.Object) {
		b, _ := operations.Encode(o)
		if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() operations.Object {
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		v, err := operations.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		return v.(operations.Object)
	}
	watchMsg := operations.Object{{Key: "revision", Value: int64(1)}, {Key: "kind", Value: "watch"}, {Key: "watchId", Value: "w1"},
		{Key: "clientId", Value: "svc-1"}, {Key: "operationId", Value: "todos"}, {Key: "params", Value: []any{"p1"}}}
	send(watchMsg)
	if m := recv(); get(m, "kind") != "snapshot" || len(get(m, "rows").([]any)) != 0 {
		t.Fatalf("first snapshot %v", m)
	}
	send(watchMsg)
	if m := recv(); get(m, "kind") != "error" || get(m, "code") != operations.CodeInvalidRequest || get(m, "watchId") != "w1" {
		t.Fatalf("reused watch id: %v", m)
	}
	// A commit to the same table in another partition: no rerun. Then one
	// in ours: a new snapshot, which must be the next message.
	other := nodetest.Token(t, "svc", "other", map[string][]string{"project_id": {"p1"}})
	cmd := func(token, req, id string) {
		code, res := post(t, n.URL(), token, operations.MediaType, commandObj("svc-1", "addTodo", req, operations.Object{{Key: "id", Value: id}, {Key: "project", Value: "p1"}, {Key: "title", Value: "x"}}))
		if code != 200 || get(res, "status") != "applied" {
			t.Fatalf("command: %d %v", code, res)
		}
	}
	cmd(other, "r0", "elsewhere")
	cmd(tok, "r1", "t1")
	m := recv()
	rows, _ := get(m, "rows").([]any)
	if get(m, "kind") != "snapshot" || len(rows) != 1 || get(rows[0].(operations.Object), "id") != "t1" {
		t.Fatalf("snapshot after the commit %v", m)
	}
	if n.Operations == nil {
		t.Fatal("no operations service")
	}
}
