package operations_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/operations"
	"github.com/syncnode/syncnode/schema"
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
func TestHTTPBinding(t *testing.T) { eachBackend(t, testHTTPBinding) }

func testHTTPBinding(t *testing.T, b backend) {
	var runs atomic.Int64
	n := nodetest.Start(t, b.with(t, func(c *node.Config) { c.Operations.Registry = goOps(&runs) }))
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
func TestWatch(t *testing.T) { eachBackend(t, testWatch) }

func testWatch(t *testing.T, b backend) {
	var runs atomic.Int64
	n := nodetest.Start(t, b.with(t, func(c *node.Config) { c.Operations.Registry = goOps(&runs) }))
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

// wsConn is one /operations/realtime session of a test.
type wsConn struct {
	t   *testing.T
	ctx context.Context
	ws  *websocket.Conn
}

func dialWatch(t *testing.T, ctx context.Context, n *node.Node, token string) *wsConn {
	t.Helper()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(n.URL(), "http")+"/operations/realtime",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.CloseNow() })
	return &wsConn{t: t, ctx: ctx, ws: ws}
}

func (c *wsConn) watch(watchID, op string, params ...any) {
	c.t.Helper()
	b, _ := operations.Encode(operations.Object{{Key: "revision", Value: int64(1)}, {Key: "kind", Value: "watch"}, {Key: "watchId", Value: watchID},
		{Key: "clientId", Value: "svc-" + watchID}, {Key: "operationId", Value: op}, {Key: "params", Value: params}})
	if err := c.ws.Write(c.ctx, websocket.MessageText, b); err != nil {
		c.t.Fatal(err)
	}
}

// snapshot reads the next message, which must be a snapshot of watchID,
// and returns its rows.
func (c *wsConn) snapshot(watchID string) []any {
	c.t.Helper()
	_, b, err := c.ws.Read(c.ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	v, err := operations.Decode(b)
	if err != nil {
		c.t.Fatal(err)
	}
	m := v.(operations.Object)
	if get(m, "kind") != "snapshot" || get(m, "watchId") != watchID {
		c.t.Fatalf("want a snapshot of %s, got %v", watchID, m)
	}
	rows, _ := get(m, "rows").([]any)
	return rows
}

func metric(t *testing.T, n *node.Node, name string) float64 {
	t.Helper()
	resp, err := http.Get(n.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("metric %s is not exported", name)
	return 0
}

// twoTables has todos and an unrelated notes table.
const twoTables = `{"version": 1, "tables": [
 {"name": "todos", "primaryKey": "id", "scopes": ["project:{project_id}"],
  "columns": [{"name": "id", "type": "string"}, {"name": "project_id", "type": "string"},
   {"name": "title", "type": "string"}, {"name": "done", "type": "boolean"}]},
 {"name": "notes", "primaryKey": "id", "scopes": ["project:{project_id}"],
  "columns": [{"name": "id", "type": "string"}, {"name": "project_id", "type": "string"}, {"name": "body", "type": "string"}]}]}`

// TestWatchIgnoresUnrelatedTable: with a watch on todos (session A) and
// one on notes (session B) of the same partition, a commit to notes
// re-runs the notes watch only, a later commit to todos the todos watch.
// The hub handles commit events one at a time in publish order, and counts
// a rerun before it starts one; so when A's snapshot of the todos commit
// arrives, the notes event has been handled completely, and the rerun
// count is exactly 2 unless the notes commit also woke the todos watch.
func TestWatchIgnoresUnrelatedTable(t *testing.T) { eachBackend(t, testWatchIgnoresUnrelatedTable) }

func testWatchIgnoresUnrelatedTable(t *testing.T, be backend) {
	sc, err := schema.Parse([]byte(twoTables))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	f := goOps(&runs)
	f.Queries = append(f.Queries, operations.Query{ID: "notes", SQL: "SELECT id, body FROM notes WHERE project_id = ? ORDER BY id",
		Tables: []string{"notes"}, MaxRows: 100, Mode: operations.Scoped,
		Columns:  []operations.Column{{Name: "id", Type: "string"}, {Name: "body", Type: "string"}},
		Coverage: []operations.Coverage{{Table: "notes", Scopes: map[string][]int{"project_id": {0}}}}})
	f.Commands = append(f.Commands, operations.Command{ID: "addNote",
		Authorize: func(context.Context, engine.Identity, any) (bool, error) { return true, nil },
		Run: func(_ context.Context, c operations.CommandCall) ([]operations.Mutation, error) {
			id, _ := c.Params.(operations.Object).Get("id")
			return []operations.Mutation{{Op: "upsert", Table: "notes", Row: map[string]any{"id": id, "project_id": "p1", "body": "b"}}}, nil
		}})
	n := nodetest.Start(t, be.with(t, func(c *node.Config) { c.Schema = sc; c.Operations.Registry = f }))
	tok := nodetest.Token(t, "svc", "acme", map[string][]string{"project_id": {"p1"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b := dialWatch(t, ctx, n, tok), dialWatch(t, ctx, n, tok)
	a.watch("todos-w", "todos", "p1")
	if rows := a.snapshot("todos-w"); len(rows) != 0 {
		t.Fatalf("first todos snapshot %v", rows)
	}
	b.watch("notes-w", "notes", "p1")
	if rows := b.snapshot("notes-w"); len(rows) != 0 {
		t.Fatalf("first notes snapshot %v", rows)
	}
	if got := metric(t, n, "syncnode_operations_watch_reruns_total"); got != 0 {
		t.Fatalf("%v reruns before any commit", got)
	}
	cmd := func(op, req string, params operations.Object) {
		code, res := post(t, n.URL(), tok, operations.MediaType, commandObj("svc-1", op, req, params))
		if code != 200 || get(res, "status") != "applied" {
			t.Fatalf("%s: %d %v", op, code, res)
		}
	}
	cmd("addNote", "n1", operations.Object{{Key: "id", Value: "n1"}})
	if rows := b.snapshot("notes-w"); len(rows) != 1 {
		t.Fatalf("notes snapshot after the notes commit %v", rows)
	}
	cmd("addTodo", "t1", operations.Object{{Key: "id", Value: "t1"}, {Key: "project", Value: "p1"}, {Key: "title", Value: "x"}})
	if rows := a.snapshot("todos-w"); len(rows) != 1 || get(rows[0].(operations.Object), "id") != "t1" {
		t.Fatalf("todos snapshot after the todos commit %v", rows)
	}
	if got := metric(t, n, "syncnode_operations_watch_reruns_total"); got != 2 {
		t.Fatalf("%v reruns: the notes commit woke the todos watch", got)
	}
}

// TestWatchRerunsAfterReconnect: the hub follows the live tail on core
// NATS, which loses what is published while the connection is down; so
// when the node's connection comes back every watch is re-run, commit or
// not. The stream has no consumer for the hubs meanwhile.
func TestWatchRerunsAfterReconnect(t *testing.T) {
	srv := embeddedtest.Start(t)
	var runs atomic.Int64
	n := nodetest.Start(t, func(c *node.Config) {
		c.Operations.Registry = goOps(&runs)
		c.NATS = embedded.Config{Mode: embedded.ModeExternal, URLs: []string{srv.ClientURL()}}
	})
	tok := nodetest.Token(t, "svc", "acme", map[string][]string{"project_id": {"p1"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialWatch(t, ctx, n, tok)
	c.watch("w1", "todos", "p1")
	if rows := c.snapshot("w1"); len(rows) != 0 {
		t.Fatalf("first snapshot %v", rows)
	}
	st, err := n.NATS.JetStream().Stream(ctx, bus.Names{}.CommitStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Fatalf("the commit stream has %d consumers, want 0", info.State.Consumers)
	}
	id, err := n.NATS.Conn().GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.NATSServer().DisconnectClientByID(id); err != nil {
		t.Fatal(err)
	}
	// No commit: the next message is the re-run after the reconnect.
	if rows := c.snapshot("w1"); len(rows) != 0 {
		t.Fatalf("snapshot after the reconnect %v", rows)
	}
}
