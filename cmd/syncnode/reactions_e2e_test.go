package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/reactions"
	"github.com/syncnode/syncnode/storage"
)

// The end-to-end reaction tests run `syncnode serve` and the workers as
// separate processes: the test binary re-executed with SYNCNODE_E2E_CHILD
// set, so a node can be killed with SIGKILL and a worker can die
// mid-reaction.
const (
	childEnv     = "SYNCNODE_E2E_CHILD" // "serve" or "worker"
	childArgsEnv = "SYNCNODE_E2E_ARGS"  // serve: the arguments, as JSON
	workerNATS   = "SYNCNODE_E2E_NATS"
	workerMode   = "SYNCNODE_E2E_MODE" // ok, fail or crash
	workerLog    = "SYNCNODE_E2E_LOG"
)

func childServe() int {
	var args []string
	if err := json.Unmarshal([]byte(os.Getenv(childArgsEnv)), &args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, args, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "syncnode:", err)
		return 1
	}
	return 0
}

// childWorker is a reaction worker written with nothing but nats.go: it
// serves task.created in the queue group "workers", logs every request
// as a JSON line, and answers as its mode says — or, in crash mode, dies
// without answering.
func childWorker() int {
	nc, err := nats.Connect(os.Getenv(workerNATS))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log, err := os.OpenFile(os.Getenv(workerLog), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	mode := os.Getenv(workerMode)
	_, err = nc.QueueSubscribe("syncreact.work.task.created", "workers", func(m *nats.Msg) {
		var req struct {
			Attempt int             `json:"attempt"`
			Payload json.RawMessage `json:"payload"`
		}
		_ = json.Unmarshal(m.Data, &req)
		line, _ := json.Marshal(map[string]any{"key": m.Header.Get("Idempotency-Key"), "attempt": req.Attempt, "payload": req.Payload})
		_, _ = log.Write(append(line, '\n'))
		_ = log.Sync()
		switch mode {
		case "crash":
			os.Exit(3)
		case "fail":
			_ = m.Respond([]byte(`{"status":"failed","code":"worker.broken","details":{"why":"test"}}`))
		default:
			_ = m.Respond([]byte(`{"status":"completed"}`))
		}
	})
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	_ = nc.Drain()
	return 0
}

// child is a running child process.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan error
}

// startChild starts the test binary as a child and waits for a stdout
// line starting with ready; it returns the rest of that line.
func startChild(t *testing.T, env []string, ready string) (*child, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	c := &child{t: t, cmd: cmd, stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = c.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), ready); ok {
				lines <- rest
			}
		}
		close(lines)
		_, _ = io.Copy(io.Discard, out)
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-c.done
		}
	})
	select {
	case rest, ok := <-lines:
		if !ok {
			t.Fatalf("child exited before %q: %s", ready, c.stderr.String())
		}
		return c, rest
	case <-time.After(60 * time.Second):
		t.Fatalf("child did not print %q: %s", ready, c.stderr.String())
	}
	return nil, ""
}

// kill9 kills the child with SIGKILL: no shutdown runs.
func (c *child) kill9() {
	c.t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	<-c.done
}

// stop asks the child to shut down and waits.
func (c *child) stop() {
	c.t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		if err != nil {
			c.t.Errorf("child: %v\n%s", err, c.stderr.String())
		}
	case <-time.After(30 * time.Second):
		c.t.Fatalf("child did not stop: %s", c.stderr.String())
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// e2e is a data directory served by child nodes, with workers on the
// node's NATS port.
type e2e struct {
	t        *testing.T
	dataDir  string
	natsPort int
	conf     string
	mu       sync.Mutex
	workers  int
}

const e2eConfig = `
[reactions]
enabled = %v
lease = "1500ms"
sweep_interval = "250ms"
initial_backoff = "300ms"
max_backoff = "1s"

[[reactions.rules]]
name = "welcome"
table = "tasks"
on = "insert"
type = "task.created"
max_attempts = 4
payload = { task = "new.id", title = "new.title" }
`

// serve starts a node on the data directory, its runner on or off.
func (e *e2e) serve(runner bool) (*child, string) {
	e.t.Helper()
	if err := os.WriteFile(e.conf, fmt.Appendf(nil, e2eConfig, runner), 0o644); err != nil {
		e.t.Fatal(err)
	}
	args, _ := json.Marshal([]string{"serve", "--config", e.conf, "--http", "127.0.0.1:0", "--data", e.dataDir,
		"--nats-port", fmt.Sprint(e.natsPort)})
	return startChild(e.t, []string{childEnv + "=serve", childArgsEnv + "=" + string(args), "SYNCNODE_LOG_LEVEL=warn"}, "syncnode: listening on ")
}

// worker starts a worker process in mode; its log is returned.
func (e *e2e) worker(mode string) (*child, string) {
	e.t.Helper()
	e.mu.Lock()
	e.workers++
	log := filepath.Join(e.t.TempDir(), fmt.Sprintf("worker-%d-%s.jsonl", e.workers, mode))
	e.mu.Unlock()
	c, _ := startChild(e.t, []string{childEnv + "=worker", workerMode + "=" + mode, workerLog + "=" + log,
		workerNATS + "=" + fmt.Sprintf("nats://127.0.0.1:%d", e.natsPort)}, "ready")
	return c, log
}

// logged reads a worker's log: the attempts it saw of each key.
func logged(t *testing.T, path string) map[string][]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var l struct {
			Key     string `json:"key"`
			Attempt int    `json:"attempt"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("worker log line %q: %v", line, err)
		}
		out[l.Key] = append(out[l.Key], l.Attempt)
	}
	return out
}

func (e *e2e) natsURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", e.natsPort) }

// push inserts one task through the node at url and returns its
// reaction's idempotency key.
func (e *e2e) push(url, id string) string {
	e.t.Helper()
	secret, _, err := auth.DevSecret(e.dataDir)
	if err != nil {
		e.t.Fatal(err)
	}
	tok, err := auth.Mint(secret, auth.Principal{ActorID: "alice", Partition: "acme", Scopes: map[string][]string{"project_id": {"p1"}}}, time.Hour, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	sch, err := loadSchema("")
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := client.New(client.Config{BaseURL: url, Token: tok, Schema: sch, HTTPClient: &http.Client{}})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx := context.Background()
	ccid, err := c.Upsert(ctx, "tasks", map[string]any{"id": id, "project_id": "p1", "title": "hello " + id, "done": false})
	if err != nil {
		e.t.Fatal(err)
	}
	if res, err := c.SyncUntilIdle(ctx); err != nil || len(res.Rejected) != 0 || len(res.Pushed) != 1 {
		e.t.Fatalf("push %s: %+v, %v", id, res, err)
	}
	return storage.ReactionIdempotencyKey("acme", c.ClientID(), ccid, "welcome/0")
}

// show reads one reaction with `syncnode reactions show --json`, through
// the running node's admin API.
func (e *e2e) show(key string) reactions.Info {
	e.t.Helper()
	out := mustCLI(e.t, "reactions", "show", "--nats", e.natsURL(), "--partition", "acme", "--key", key, "--json")
	var r reactions.Info
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		e.t.Fatalf("reactions show: %v: %s", err, out)
	}
	return r
}

func (e *e2e) waitStatus(key string, st storage.ReactionStatus) reactions.Info {
	e.t.Helper()
	var r reactions.Info
	poll.Until(e.t, 60*time.Second, "reaction "+string(st), func() bool {
		r = e.show(key)
		return r.Status == st
	})
	return r
}

func TestReactionsEndToEnd(t *testing.T) {
	e := &e2e{t: t, dataDir: t.TempDir(), natsPort: freePort(t)}
	e.conf = filepath.Join(e.dataDir, "syncnode.toml")

	// A commit is acknowledged by a node whose runner is off, so nothing
	// can run its reaction; the node is then killed with SIGKILL.
	s1, url := e.serve(false)
	k1 := e.push(url, "t1")
	s1.kill9()

	// After a restart with the runner on, the reaction runs, through a
	// worker process on NATS.
	s2, url := e.serve(true)
	w1, log1 := e.worker("ok")
	r1 := e.waitStatus(k1, storage.ReactionCompleted)
	if string(r1.Payload) != `{"task":"t1","title":"hello t1"}` || r1.Type != "task.created" || r1.MaxAttempts != 4 {
		t.Fatalf("reaction after the restart: %+v", r1)
	}
	if got := logged(t, log1)[k1]; len(got) != 1 {
		t.Fatalf("the worker saw %s attempts %v, want one", k1, got)
	}
	w1.stop()

	// A worker that dies mid-reaction: the attempt times out at the end
	// of its lease and another worker runs it again.
	w2, log2 := e.worker("crash")
	k2 := e.push(url, "t2")
	select {
	case <-w2.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the crashing worker never got the reaction")
	}
	w3, log3 := e.worker("ok")
	r2 := e.waitStatus(k2, storage.ReactionCompleted)
	if r2.Attempts != 2 || r2.Failure == nil || r2.Failure.Code != "reaction.worker_timeout" {
		t.Fatalf("reaction after the worker crash: %+v (failure %+v)", r2, r2.Failure)
	}
	if a, b := logged(t, log2)[k2], logged(t, log3)[k2]; len(a) != 1 || a[0] != 1 || len(b) != 1 || b[0] != 2 {
		t.Fatalf("attempts seen by the crashed worker %v and the next %v", a, b)
	}
	w3.stop()

	// A reaction that keeps failing dead-letters after its attempts, and
	// `syncnode reactions retry` brings it back.
	w4, log4 := e.worker("fail")
	k3 := e.push(url, "t3")
	r3 := e.waitStatus(k3, storage.ReactionDeadLetter)
	if r3.Attempts != 4 || r3.Failure == nil || r3.Failure.Code != "worker.broken" || string(r3.Failure.Details) != `{"why":"test"}` {
		t.Fatalf("dead letter: %+v (failure %+v)", r3, r3.Failure)
	}
	if got := logged(t, log4)[k3]; len(got) != 4 {
		t.Fatalf("the failing worker saw attempts %v, want 4", got)
	}
	var dead []reactions.Info
	out := mustCLI(t, "reactions", "list", "--nats", e.natsURL(), "--status", "dead-letter", "--json")
	if err := json.Unmarshal([]byte(out), &dead); err != nil || len(dead) != 1 || dead[0].IdempotencyKey != k3 {
		t.Fatalf("dead letters listed: %s (%v)", out, err)
	}
	w4.stop()
	_, log5 := e.worker("ok")
	out = mustCLI(t, "reactions", "retry", "--nats", e.natsURL(), "--partition", "acme", "--key", k3)
	if !strings.Contains(out, "requeued") {
		t.Fatalf("retry printed %q", out)
	}
	if r := e.waitStatus(k3, storage.ReactionCompleted); r.Attempts != 1 || r.Failure != nil {
		t.Fatalf("after the operator retry: %+v", r)
	}
	if got := logged(t, log5)[k3]; len(got) != 1 || got[0] != 1 {
		t.Fatalf("the worker after the retry saw attempts %v", got)
	}
	// A second retry is refused, by the node and offline alike: the
	// reaction is not a dead letter.
	for _, where := range [][]string{{"--nats", e.natsURL()}, {"--data", e.dataDir, "--no-nats"}} {
		if _, err := cli(t, append([]string{"reactions", "retry", "--partition", "acme", "--key", k3}, where...)...); err == nil || !strings.Contains(err.Error(), "not a dead letter") {
			t.Fatalf("retry of a completed reaction %v: %v", where, err)
		}
	}
	s2.stop()
}
