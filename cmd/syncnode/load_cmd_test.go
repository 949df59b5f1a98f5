package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// syncnodeProcess runs this binary as `syncnode args…` and returns its
// exit code, stdout and stderr.
func syncnodeProcess(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "SYNCNODE_TEST_MAIN=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("syncnode %v: %v\n%s", args, err, stderr.String())
	return 0, "", ""
}

// slowProxy forwards to target, holding every POST /sync for delay and
// answering every failEvery-th one with a 503 instead (0: never).
func slowProxy(t *testing.T, target string, delay time.Duration, failEvery int64) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/sync" {
			if failEvery > 0 && n.Add(1)%failEvery == 0 {
				http.Error(w, `{"code":"sync.internal_error","message":"injected"}`, http.StatusServiceUnavailable)
				return
			}
			timer := time.NewTimer(delay)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestLoadSlowServerFails: a server slower than a p95 ceiling makes
// `syncnode load` exit non-zero and name the crossed threshold, on stderr
// and in the JSON result.
func TestLoadSlowServerFails(t *testing.T) {
	s := startServe(t, "--load-fixture")
	proxy := slowProxy(t, s.url, 20*time.Millisecond, 0)
	out := filepath.Join(t.TempDir(), "result.json")
	code, stdout, stderr := syncnodeProcess(t, "load", "push-pull", "--smoke", "--url", proxy, "--vus", "2", "--duration", "1s",
		"--max-p95", "round=10ms", "--quiet", "--json", out)
	if code != 1 || !strings.Contains(stderr, "thresholds crossed") || !strings.Contains(stderr, "push-pull: round p95:") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "FAIL  round p95") || !strings.Contains(stdout, "PASS  protocol errors") {
		t.Fatalf("summary:\n%s", stdout)
	}
	var doc struct {
		Results []struct {
			Scenario string
			Pass     bool
			Checks   []struct {
				Name string
				Pass bool
			}
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Results) != 1 || doc.Results[0].Pass {
		t.Fatalf("json %s: %v", b, err)
	}
	for _, c := range doc.Results[0].Checks {
		if c.Name == "round p95" && c.Pass {
			t.Fatalf("json says the p95 check passed: %s", b)
		}
	}
}

// TestLoadErrorsFail: answers the virtual clients cannot use fail the run
// as protocol errors.
func TestLoadErrorsFail(t *testing.T) {
	s := startServe(t, "--load-fixture")
	// Every third /sync fails: a loaded machine may manage only a few
	// dozen rounds in the second the run lasts.
	proxy := slowProxy(t, s.url, 0, 3)
	var stdout, stderr syncBuffer
	err := run(context.Background(), []string{"load", "maintenance-churn", "--smoke", "--url", proxy, "--duration", "1s", "--quiet",
		"--max-p95", "round=1h"}, strings.NewReader(""), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "maintenance-churn: protocol errors:") {
		t.Fatalf("err = %v\n%s", err, stdout.String())
	}
	if !strings.Contains(stdout.String(), "HTTP 503 sync.internal_error: injected") {
		t.Fatalf("the summary does not show the error:\n%s", stdout.String())
	}
}

// TestLoadLocalNode: without --url, load starts its own load-fixture node
// (this binary as `serve --load-fixture`), runs, stops it, and writes the
// markdown report into a README section.
func TestLoadLocalNode(t *testing.T) {
	readme := filepath.Join(t.TempDir(), "README.md")
	if err := os.WriteFile(readme, []byte("# x\n<!-- syncnode load report: begin -->\nold\n<!-- syncnode load report: end -->\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := syncnodeProcess(t, "load", "push-pull", "--smoke", "--vus", "2", "--duration", "1s",
		"--max-p95", "round=1h", "--report", "--readme", readme)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	// The summary and progress go to stderr, the table to stdout.
	if !strings.Contains(stderr, "push-pull · smoke · 2 VUs") || !strings.Contains(stderr, "ms/round · peak RSS") ||
		!strings.Contains(stdout, "| push-pull | 2 VUs, 1s (smoke) |") || !strings.Contains(stdout, "SQLite (synchronous=FULL), local node") {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "\nold\n") || !strings.Contains(string(b), "| push-pull | 2 VUs, 1s (smoke) |") {
		t.Fatalf("README:\n%s", b)
	}
}

func TestLoadUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"load"},
		{"load", "nope"},
		{"load", "push-pull", "extra"},
		{"load", "push-pull", "--max-p95", "bootstrap=1s"},
		{"load", "push-pull", "--max-p95", "round"},
		{"load", "push-pull", "--url", "http://127.0.0.1:1", "--postgres", "postgres://x"},
		{"load", "push-pull", "--transport", "quic"},
		{"load", "bootstrap-storm", "--transport", "socket"},
	} {
		var stdout, stderr syncBuffer
		if err := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
