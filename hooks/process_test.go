package hooks_test

// The hook process of the tests: a separate OS process (the test binary
// re-executed with SYNCNODE_TEST_HOOK_PROCESS=1) that answers the three
// hooks with nothing but nats.go and the standard library, as a host
// written in any language would. The test steers it over
// syncnode.hook.testctl.<command> (the hooks user may only subscribe
// under syncnode.hook.>) and reads "ready" from its stdout.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

const (
	hookProcessEnv = "SYNCNODE_TEST_HOOK_PROCESS"
	hookURLEnv     = "SYNCNODE_TEST_HOOK_URL"
	hookUserEnv    = "SYNCNODE_TEST_HOOK_USER"
	hookPassEnv    = "SYNCNODE_TEST_HOOK_PASSWORD"
	controlPrefix  = "syncnode.hook.testctl."
)

// hookProcess is the process's main: it serves until stdin closes.
func hookProcess() int {
	nc, err := nats.Connect(os.Getenv(hookURLEnv), nats.UserInfo(os.Getenv(hookUserEnv), os.Getenv(hookPassEnv)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "hook process:", err)
		return 1
	}
	defer nc.Close()
	var (
		mu     sync.Mutex
		grants = map[string]map[string][]string{} // partition/actor → scopes
		hang   bool
		counts = map[string]int{}
	)
	reply := func(m *nats.Msg, v any) {
		b, _ := json.Marshal(v)
		_ = m.Respond(b)
	}
	// handle counts the request and drops it when hanging: the node's
	// deadline must fire.
	handle := func(hook string, fn func(m *nats.Msg)) nats.MsgHandler {
		return func(m *nats.Msg) {
			mu.Lock()
			counts[hook]++
			h := hang
			mu.Unlock()
			if !h {
				fn(m)
			}
		}
	}
	subs := map[string]nats.MsgHandler{
		"syncnode.hook.scopes.>": handle("scopes", func(m *nats.Msg) {
			var req struct{ Partition, ActorID string }
			if err := json.Unmarshal(m.Data, &req); err != nil {
				reply(m, map[string]any{"error": map[string]string{"code": "bad_request", "message": err.Error()}})
				return
			}
			mu.Lock()
			g, ok := grants[req.Partition+"/"+req.ActorID]
			mu.Unlock()
			if !ok {
				reply(m, map[string]any{"error": map[string]string{"code": "unknown_actor"}})
				return
			}
			reply(m, map[string]any{"scopes": g})
		}),
		"syncnode.hook.validate.>": handle("validate", func(m *nats.Msg) {
			var req struct {
				Operations []struct {
					OpIndex int            `json:"opIndex"`
					Op      string         `json:"op"`
					RowID   string         `json:"rowId"`
					Row     map[string]any `json:"row"`
				} `json:"operations"`
				ReadSubject string `json:"readSubject"`
			}
			if err := json.Unmarshal(m.Data, &req); err != nil {
				reply(m, map[string]any{"error": map[string]string{"code": "bad_request", "message": err.Error()}})
				return
			}
			for _, op := range req.Operations {
				if title, _ := op.Row["title"].(string); op.Op == "upsert" && strings.HasPrefix(title, "limit") {
					// Read the candidate state through the request's read
					// subject: at most 2 todos of the row's project.
					if rj := limitTodos(nc, req.ReadSubject, op.OpIndex, op.RowID, op.Row); rj != nil {
						reply(m, map[string]any{"reject": rj})
						return
					}
				}
				if title, _ := op.Row["title"].(string); op.Op == "upsert" && strings.HasPrefix(title, "bad") {
					reply(m, map[string]any{"reject": map[string]any{
						"opIndex": op.OpIndex, "code": "todo.bad_title", "message": "a title must not start with bad",
						"details": map[string]any{"fieldPaths": []string{"title"}, "reason": "bad_title"},
					}})
					return
				}
			}
			reply(m, map[string]any{"accept": true})
		}),
		"syncnode.hook.token": handle("token", func(m *nats.Msg) {
			var req struct{ Token string }
			_ = json.Unmarshal(m.Data, &req)
			actor, partition, ok := strings.Cut(strings.TrimPrefix(req.Token, "tok-"), "@")
			if !ok || !strings.HasPrefix(req.Token, "tok-") {
				// Refuse the way nats.go's micro package does: headers.
				_ = m.RespondMsg(&nats.Msg{Header: nats.Header{
					"Nats-Service-Error-Code": []string{"401"}, "Nats-Service-Error": []string{"unknown token"}}})
				return
			}
			reply(m, map[string]any{"actorId": actor, "partition": partition, "scopes": map[string][]string{"project_id": {"p1"}},
				"expiresAtMs": time.Now().Add(time.Hour).UnixMilli()})
		}),
		controlPrefix + "grant": func(m *nats.Msg) {
			var req struct {
				Partition, Actor string
				Scopes           map[string][]string
			}
			_ = json.Unmarshal(m.Data, &req)
			mu.Lock()
			if req.Scopes == nil {
				delete(grants, req.Partition+"/"+req.Actor)
			} else {
				grants[req.Partition+"/"+req.Actor] = req.Scopes
			}
			mu.Unlock()
			reply(m, "ok")
		},
		controlPrefix + "hang": func(m *nats.Msg) {
			mu.Lock()
			hang = string(m.Data) == "true"
			mu.Unlock()
			reply(m, "ok")
		},
		controlPrefix + "count": func(m *nats.Msg) {
			mu.Lock()
			n := counts[string(m.Data)]
			mu.Unlock()
			reply(m, n)
		},
	}
	for subject, h := range subs {
		if _, err := nc.Subscribe(subject, h); err != nil {
			fmt.Fprintln(os.Stderr, "hook process:", err)
			return 1
		}
	}
	if err := nc.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "hook process:", err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// limitTodos is the validate hook's read check: the registered query
// openTodos over the commit's candidate state (the commit's own rows
// included) must find at most 2 todos in the row's project, and the row
// read back by key must be the one the commit writes. A failed read is a
// rejection naming it, so the test sees it.
func limitTodos(nc *nats.Conn, readSubject string, opIndex int, rowID string, row map[string]any) map[string]any {
	read := func(req, out any) error {
		b, _ := json.Marshal(req)
		m, err := nc.Request(readSubject, b, 5*time.Second)
		if err != nil {
			return err
		}
		var e struct {
			Error *struct{ Code, Message string }
		}
		if json.Unmarshal(m.Data, &e); e.Error != nil {
			return fmt.Errorf("%s: %s", e.Error.Code, e.Error.Message)
		}
		return json.Unmarshal(m.Data, out)
	}
	fail := func(err error) map[string]any {
		return map[string]any{"opIndex": opIndex, "code": "todo.read_failed", "message": err.Error()}
	}
	if readSubject == "" {
		return fail(fmt.Errorf("no readSubject"))
	}
	var q struct {
		Rows []struct {
			ID string `json:"id"`
		} `json:"rows"`
	}
	if err := read(map[string]any{"kind": "query", "operationId": "openTodos", "params": []any{row["project_id"]}}, &q); err != nil {
		return fail(err)
	}
	var got struct {
		Row           map[string]any `json:"row"`
		ServerVersion int64          `json:"serverVersion"`
	}
	if err := read(map[string]any{"kind": "getRow", "table": "todos", "rowId": rowID}, &got); err != nil {
		return fail(err)
	}
	if got.Row["title"] != row["title"] || got.ServerVersion < 1 {
		return fail(fmt.Errorf("getRow %s = %v (version %d), not the commit's row", rowID, got.Row, got.ServerVersion))
	}
	if err := read(map[string]any{"kind": "query", "operationId": "nope", "params": []any{}}, &q); err == nil || !strings.HasPrefix(err.Error(), "operation.unknown") {
		return fail(fmt.Errorf("an unknown query read: %v", err))
	}
	if len(q.Rows) > 2 {
		return map[string]any{"opIndex": opIndex, "code": "todo.too_many", "message": fmt.Sprintf("%d todos", len(q.Rows))}
	}
	return nil
}

// hookProc is a running hook process and a connection to steer it.
type hookProc struct {
	t  *testing.T
	nc *nats.Conn
}

// startHookProcess runs the hook process against url as the hooks user
// of the documented permissions, and stops it at cleanup.
func startHookProcess(t *testing.T, url string) *hookProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), hookProcessEnv+"=1", hookURLEnv+"="+url, hookUserEnv+"=hooks", hookPassEnv+"=hooks-secret")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("hook process: %v", err)
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("hook process did not start: %q, %v", line, err)
	}
	// The steering connection is the node's user: the hooks user may not
	// publish requests.
	nc, err := nats.Connect(url, nats.UserInfo("syncnode", "node-secret"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &hookProc{t: t, nc: nc}
}

func (h *hookProc) control(cmd string, body []byte) []byte {
	h.t.Helper()
	msg, err := h.nc.Request(controlPrefix+cmd, body, 10*time.Second)
	if err != nil {
		h.t.Fatalf("hook control %s: %v", cmd, err)
	}
	return msg.Data
}

// grant sets actor's scopes in partition (nil: unknown actor).
func (h *hookProc) grant(partition, actor string, scopes map[string][]string) {
	h.t.Helper()
	b, _ := json.Marshal(map[string]any{"partition": partition, "actor": actor, "scopes": scopes})
	h.control("grant", b)
}

// hang makes the process drop every hook request (true) or answer again.
func (h *hookProc) hang(on bool) {
	h.t.Helper()
	h.control("hang", []byte(fmt.Sprint(on)))
}

// count is how many requests of hook the process received.
func (h *hookProc) count(hook string) int {
	h.t.Helper()
	var n int
	if err := json.Unmarshal(h.control("count", []byte(hook)), &n); err != nil {
		h.t.Fatal(err)
	}
	return n
}
