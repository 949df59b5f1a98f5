package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// testNode is a real engine over a real SQLite store behind the HTTP
// handler, verifying tokens with the development secret of dataDir.
func testNode(t *testing.T) (url, dataDir string) {
	t.Helper()
	ctx := context.Background()
	dataDir = t.TempDir()
	secret, _, err := auth.DevSecret(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := loadSchema("")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(dataDir, "sync.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.EnsureSchema(ctx, s); err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Config{Schema: s, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(auth.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(httpapi.Config{Engine: e, Auth: httpapi.AuthenticatorFunc(func(r *http.Request) (engine.Identity, error) {
		p, err := v.VerifyHeader(r.Header.Get("Authorization"))
		if err != nil {
			return engine.Identity{}, err
		}
		return engine.Identity{Partition: p.Partition, ActorID: p.ActorID, Scopes: engine.StaticScopes(p.Scopes)}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, dataDir
}

// cli runs the command and returns stdout and the error.
func cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(""), &out, &errOut)
	if err != nil {
		t.Logf("syncnode %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), err
}

func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := cli(t, args...)
	if err != nil {
		t.Fatalf("syncnode %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(strings.NewReader(s))
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("output %q: %v", s, err)
		}
		out = append(out, m)
	}
	return out
}

// TestClientTokenPushPull: mint a token from the node's development
// secret, push rows, pull them back as JSON lines.
func TestClientTokenPushPull(t *testing.T) {
	url, dataDir := testNode(t)
	tok := strings.TrimSpace(mustCLI(t, "client", "token", "--actor", "alice", "--partition", "acme", "--scope", "project_id=p1,p2", "--data", dataDir))
	if strings.Count(tok, ".") != 2 {
		t.Fatalf("token %q is not a JWT", tok)
	}

	out := mustCLI(t, "client", "push", "--url", url, "--token", tok, "--table", "tasks",
		"--json", `{"id":"t1","project_id":"p1","title":"write the README","done":false,"priority":2}`)
	lines := jsonLines(t, out)
	if len(lines) != 1 || lines[0]["status"] != "applied" || lines[0]["commitSeq"] != float64(1) {
		t.Fatalf("push printed %q", out)
	}
	mustCLI(t, "client", "push", "--url", url, "--token", tok, "--table", "tasks",
		"--json", `{"id":"t2","project_id":"p2","title":"ship it","done":true}`)
	mustCLI(t, "client", "push", "--url", url, "--token", tok, "--table", "tasks",
		"--json", `{"id":"t3","project_id":"p1","title":"gone soon","done":false}`)
	mustCLI(t, "client", "push", "--url", url, "--token", tok, "--table", "tasks", "--delete", "t3")

	out = mustCLI(t, "client", "pull", "--url", url, "--token", tok, "--table", "tasks", "--scope", "project_id=p1")
	rows := jsonLines(t, out)
	if len(rows) != 1 || rows[0]["rowId"] != "t1" || rows[0]["version"] != float64(1) {
		t.Fatalf("pull printed %q", out)
	}
	vals := rows[0]["values"].(map[string]any)
	if vals["title"] != "write the README" || vals["priority"] != float64(2) || vals["done"] != false || vals["updated_at_ms"] != nil {
		t.Fatalf("values %v", vals)
	}
	out = mustCLI(t, "client", "pull", "--url", url, "--token", tok, "--table", "tasks", "--scope", "project_id=p1,p2")
	if got := len(jsonLines(t, out)); got != 2 {
		t.Fatalf("pull of p1,p2 printed %d rows: %q", got, out)
	}

	// A stale base version is a conflict: the command fails and prints
	// the server's row.
	out, err := cli(t, "client", "push", "--url", url, "--token", tok, "--table", "tasks", "--base-version", "0",
		"--json", `{"id":"t1","project_id":"p1","title":"clobber","done":true}`)
	lines = jsonLines(t, out)
	if err == nil || len(lines) != 1 || lines[0]["code"] != "sync.version_conflict" || lines[0]["serverVersion"] != float64(1) {
		t.Fatalf("conflicting push: err %v, printed %q", err, out)
	}
	if row := lines[0]["serverRow"].(map[string]any); row["title"] != "write the README" {
		t.Fatalf("server row %v", row)
	}

	// Outside the token's scopes.
	if _, err := cli(t, "client", "push", "--url", url, "--token", tok, "--table", "tasks",
		"--json", `{"id":"x","project_id":"p9","title":"nope","done":false}`); err == nil || !strings.Contains(err.Error(), "sync.forbidden") {
		t.Fatalf("forbidden push: %v", err)
	}
	// A pull of a scope the token does not grant is revoked: it says so
	// and fails rather than printing an empty table.
	out, err = cli(t, "client", "pull", "--url", url, "--token", tok, "--table", "tasks", "--scope", "project_id=p9")
	if err == nil || out != "" || !strings.Contains(err.Error(), "revoked") || !strings.Contains(err.Error(), "sync.scope_revoked") ||
		!strings.Contains(err.Error(), "p9") {
		t.Fatalf("pull of an ungranted scope: err %v, printed %q", err, out)
	}
	// A value of the wrong type never leaves the machine.
	if _, err := cli(t, "client", "push", "--url", url, "--token", tok, "--table", "tasks",
		"--json", `{"id":"y","project_id":"p1","title":"x","done":"yes"}`); err == nil || !strings.Contains(err.Error(), "column done") {
		t.Fatalf("badly typed push: %v", err)
	}
}

// TestClientStateReplay: with --state, a write that could not be sent is
// kept and replayed by the next run; a pull with the same state resumes.
func TestClientStateReplay(t *testing.T) {
	url, dataDir := testNode(t)
	tok := strings.TrimSpace(mustCLI(t, "client", "token", "--actor", "bob", "--partition", "acme", "--scope", "project_id=*", "--data", dataDir))
	state := filepath.Join(t.TempDir(), "bob.json")

	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	if _, err := cli(t, "client", "push", "--url", dead.URL, "--token", tok, "--state", state, "--table", "tasks",
		"--json", `{"id":"t1","project_id":"p1","title":"offline","done":false}`); err == nil {
		t.Fatal("push to a dead node succeeded")
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("state file: %v", err)
	}
	out := mustCLI(t, "client", "push", "--url", url, "--token", tok, "--state", state)
	if lines := jsonLines(t, out); len(lines) != 1 || lines[0]["status"] != "applied" {
		t.Fatalf("replay printed %q", out)
	}
	out = mustCLI(t, "client", "pull", "--url", url, "--token", tok, "--state", state, "--table", "tasks", "--scope", "project_id=p1")
	if rows := jsonLines(t, out); len(rows) != 1 || rows[0]["rowId"] != "t1" {
		t.Fatalf("pull printed %q", out)
	}
	// Again from the saved state: rows come from the file, nothing is
	// re-bootstrapped.
	out = mustCLI(t, "client", "pull", "--url", url, "--token", tok, "--state", state, "--table", "tasks", "--scope", "project_id=p1")
	if rows := jsonLines(t, out); len(rows) != 1 {
		t.Fatalf("second pull printed %q", out)
	}
}

func TestClientUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"client"},
		{"client", "nope"},
		{"client", "token", "--actor", "a"},
		{"client", "token", "--actor", "a", "--secret", "short"},
		// A partition id longer than the bus carries.
		{"client", "token", "--actor", "a", "--partition", strings.Repeat("p", 1025), "--secret", strings.Repeat("s", 32)},
		{"client", "push", "--url", "http://x", "--token", "t"},
		{"client", "push", "--url", "http://x", "--token", "t", "--table", "tasks", "--json", "{}", "--delete", "x"},
		{"client", "pull", "--url", "http://x", "--token", "t", "--table", "tasks"},
		{"client", "pull", "--url", "http://x", "--token", "t", "--table", "tasks", "--scope", "oops"},
	} {
		if _, err := cli(t, args...); err == nil {
			t.Errorf("syncnode %s succeeded", strings.Join(args, " "))
		}
	}
	if out := mustCLI(t, "client", "help"); !strings.Contains(out, "client push") {
		t.Fatalf("help: %q", out)
	}
}
