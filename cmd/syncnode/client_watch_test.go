package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// watcher runs `client watch` with a pipe as stdout and hands its lines
// to the test.
type watcher struct {
	t      *testing.T
	lines  chan string
	cancel context.CancelFunc
	done   chan error
	stderr *syncBuffer
}

func startWatch(t *testing.T, args ...string) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	w := &watcher{t: t, lines: make(chan string, 100), cancel: cancel, done: make(chan error, 1), stderr: &syncBuffer{}}
	go func() {
		err := run(ctx, append([]string{"client", "watch"}, args...), strings.NewReader(""), pw, w.stderr)
		pw.CloseWithError(errors.Join(err, io.EOF))
		w.done <- err
	}()
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
	})
	return w
}

// next returns the next printed line.
func (w *watcher) next() string {
	w.t.Helper()
	select {
	case l, ok := <-w.lines:
		if !ok {
			w.t.Fatalf("watch ended early: %s", w.stderr.String())
		}
		return l
	case <-time.After(30 * time.Second):
		w.t.Fatalf("no line from watch; stderr:\n%s", w.stderr.String())
	}
	return ""
}

// stop interrupts the watch (as SIGINT does) and checks it exits
// cleanly, having printed nothing more.
func (w *watcher) stop() {
	w.t.Helper()
	w.cancel()
	select {
	case err := <-w.done:
		w.done <- err
		if err != nil {
			w.t.Fatalf("watch exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		w.t.Fatal("watch did not exit on interrupt")
	}
	if l, ok := <-w.lines; ok {
		w.t.Fatalf("unexpected line %q", l)
	}
}

func TestClientWatch(t *testing.T) {
	s := startServe(t)
	tok := strings.TrimSpace(mustCLI(t, "client", "token", "--actor", "alice", "--partition", "default",
		"--scope", "project_id=p1,p2", "--data", s.dataDir))
	push := func(flags ...string) {
		t.Helper()
		mustCLI(t, append([]string{"client", "push", "--url", s.url, "--token", tok, "--table", "tasks"}, flags...)...)
	}
	push("--json", `{"id":"t1","project_id":"p1","title":"first","done":false}`)
	conn := []string{"--url", s.url, "--token", tok, "--table", "tasks", "--scope", "project_id=p1"}

	w := startWatch(t, append(conn, "--json")...)
	type line struct {
		Op      string         `json:"op"`
		RowID   string         `json:"rowId"`
		Version int64          `json:"version"`
		Values  map[string]any `json:"values"`
	}
	expect := func(op, id string, version int64, title string) {
		t.Helper()
		raw := w.next()
		var l line
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatalf("line %q: %v", raw, err)
		}
		if l.Op != op || l.RowID != id || l.Version != version || (title != "" && l.Values["title"] != title) {
			t.Fatalf("line %s, want %s %s v%d %q", raw, op, id, version, title)
		}
	}
	expect("row", "t1", 1, "first")
	push("--json", `{"id":"t2","project_id":"p1","title":"second","done":false}`)
	expect("upsert", "t2", 1, "second")
	push("--json", `{"id":"t1","project_id":"p1","title":"first, edited","done":true}`)
	expect("upsert", "t1", 2, "first, edited")
	// A row outside the watched scope prints nothing: the next line is
	// the delete after it.
	push("--json", `{"id":"o1","project_id":"p2","title":"elsewhere","done":false}`)
	push("--delete", "t2")
	expect("delete", "t2", 0, "")
	w.stop()

	// Text lines, one per row.
	w = startWatch(t, conn...)
	if got := w.next(); !strings.HasPrefix(got, "row t1 v2 {") || !strings.Contains(got, `"title":"first, edited"`) {
		t.Fatalf("text line %q", got)
	}
	push("--delete", "t1")
	if got := w.next(); got != "delete t1" {
		t.Fatalf("text line %q", got)
	}
	w.stop()
	if !strings.Contains(w.stderr.String(), "realtime connected") {
		t.Fatalf("stderr does not report the socket:\n%s", w.stderr.String())
	}
}
