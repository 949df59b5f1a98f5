package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/loadfix"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/testctl"
)

// syncBuffer is a bytes.Buffer safe for the serve goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// served is a `syncnode serve` running in this process through run.
type served struct {
	url     string
	dataDir string
	stderr  *syncBuffer
	// stop stops the node (SIGTERM's path) and reports serve's error;
	// cleanup calls it too.
	stop func() error
}

var listeningRE = regexp.MustCompile(`^syncnode: listening on (http://\S+)$`)

// serveArgs are the flags external harnesses start the node with.
func serveArgs(dataDir string, extra ...string) []string {
	return append([]string{"serve", "--http", "127.0.0.1:0", "--data", dataDir, "--nats-port", "-1"}, extra...)
}

// startServe runs `syncnode serve` with the harness flags plus extra, and
// returns once it printed its listening line. The node stops at cleanup.
func startServe(t *testing.T, extra ...string) *served {
	t.Helper()
	return startServeIn(t, t.TempDir(), extra...)
}

// startServeIn is startServe on a given data directory.
func startServeIn(t *testing.T, dataDir string, extra ...string) *served {
	t.Helper()
	s := &served{dataDir: dataDir, stderr: &syncBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, serveArgs(s.dataDir, extra...), strings.NewReader(""), pw, s.stderr)
		pw.CloseWithError(errors.Join(err, io.EOF))
		done <- err
	}()
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		close(urls)
	}()
	u, ok := <-urls
	if !ok {
		cancel()
		t.Fatalf("serve exited before listening: %v\n%s", <-done, s.stderr.String())
	}
	s.url = u
	var once sync.Once
	var stopErr error
	s.stop = func() error {
		once.Do(func() {
			cancel()
			stopErr = <-done
		})
		return stopErr
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("serve: %v\n%s", err, s.stderr.String())
		}
	})
	return s
}

// call sends a JSON request and decodes a JSON answer into out (if not
// nil); it returns the status.
func call(t *testing.T, method, url string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

// mustCall is call that requires 200.
func mustCall(t *testing.T, method, url string, body, out any) {
	t.Helper()
	var raw json.RawMessage
	if st := call(t, method, url, body, &raw); st != http.StatusOK {
		t.Fatalf("%s %s: status %d: %s", method, url, st, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %s: %v", method, url, raw, err)
		}
	}
}

// protocolError is the SSP2 JSON error shape.
type protocolError struct {
	Code              string `json:"code"`
	Category          string `json:"category"`
	Retryable         *bool  `json:"retryable"`
	RecommendedAction string `json:"recommendedAction"`
	Message           string `json:"message"`
}

func (p protocolError) complete() bool {
	return p.Code != "" && p.Category != "" && p.Retryable != nil && p.RecommendedAction != "" && p.Message != ""
}

// actorTransport sets the test actor on every request, as a harness does.
type actorTransport struct{ actor string }

func (a actorTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(testctl.ActorHeader, a.actor)
	return http.DefaultTransport.RoundTrip(r)
}

// conformanceSchema exercises every column type rows/{table} renders.
const conformanceSchema = `{"version": 1, "tables": [{"name": "tasks", "primaryKey": "id",
 "columns": [
  {"name": "id", "type": "string"}, {"name": "project_id", "type": "string"},
  {"name": "title", "type": "string", "nullable": true}, {"name": "done", "type": "boolean"},
  {"name": "priority", "type": "integer", "nullable": true}, {"name": "score", "type": "float", "nullable": true},
  {"name": "meta", "type": "json", "nullable": true}, {"name": "data", "type": "bytes", "nullable": true}],
 "scopes": [{"pattern": "project:{project_id}", "column": "project_id"}]}]}`

const startMs = int64(1_750_000_000_000)

type harness struct {
	t      *testing.T
	s      *served
	schema *schema.Schema
}

// instance creates an instance and returns its id.
func (h *harness) instance(partition string, limits map[string]any) string {
	h.t.Helper()
	body := map[string]any{"schema": json.RawMessage(conformanceSchema), "partition": partition, "nowMs": startMs}
	if limits != nil {
		body["limits"] = limits
	}
	var out struct{ ID string }
	mustCall(h.t, "POST", h.s.url+"/__test/instances", body, &out)
	if out.ID == "" {
		h.t.Fatal("instance without an id")
	}
	return out.ID
}

func (h *harness) ctl(id, path string) string { return h.s.url + "/__test/i/" + id + path }

func (h *harness) grant(id, actor string, allowed map[string][]string) {
	h.t.Helper()
	mustCall(h.t, "POST", h.ctl(id, "/allowed-scopes"), map[string]any{"actorId": actor, "allowed": allowed}, nil)
}

// client is a Go SSP2 client of the instance acting as actor.
func (h *harness) client(id, actor string, accept uint8) *client.Client {
	h.t.Helper()
	c, err := client.New(client.Config{
		BaseURL: h.s.url + "/i/" + id, Schema: h.schema,
		HTTPClient: &http.Client{Transport: actorTransport{actor}},
		Pull:       client.PullOptions{Accept: accept},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

func (h *harness) value(id, path string) int64 {
	h.t.Helper()
	var out struct{ Value *int64 }
	mustCall(h.t, "GET", h.ctl(id, path), nil, &out)
	if out.Value == nil {
		h.t.Fatalf("%s answered no value", path)
	}
	return *out.Value
}

type rowState struct {
	RowID   string            `json:"rowId"`
	Version int64             `json:"version"`
	Values  map[string]any    `json:"values"`
	Scopes  map[string]string `json:"scopes"`
}

func (h *harness) rows(id string) []rowState {
	h.t.Helper()
	var out []rowState
	mustCall(h.t, "GET", h.ctl(id, "/rows/tasks"), nil, &out)
	return out
}

func task(id, project, title string) map[string]any {
	return map[string]any{"id": id, "project_id": project, "title": title, "done": false}
}

// push commits one upsert and syncs; it returns the rejection, if any.
func push(t *testing.T, c *client.Client, values map[string]any) *client.Rejection {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Upsert(ctx, "tasks", values); err != nil {
		t.Fatal(err)
	}
	res, err := c.SyncUntilIdle(ctx)
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	if len(res.Rejected) > 0 {
		return res.Rejected[0]
	}
	return nil
}

func wantRejected(t *testing.T, rj *client.Rejection, code string) {
	t.Helper()
	if rj == nil || string(rj.Code) != code {
		t.Fatalf("rejection = %+v, want %s", rj, code)
	}
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	sc, err := schema.Parse([]byte(conformanceSchema))
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, s: startServe(t, "--test-control"), schema: sc}
}

// TestTestControl drives the control API and the instances' protocol
// routes of a real `serve --test-control` over HTTP.
func TestTestControl(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if !strings.Contains(h.s.stderr.String(), "TEST MODE") {
		t.Errorf("test mode was not announced on stderr:\n%s", h.s.stderr.String())
	}

	t.Run("Capabilities", func(t *testing.T) {
		var caps []string
		mustCall(t, "GET", h.s.url+"/__test/capabilities", nil, &caps)
		if strings.Join(caps, ",") != "validators,commit-validators,realtime,blobs,signed-urls,blob-presign,leases,backup-restore,idempotency-fault" {
			t.Fatalf("capabilities = %v", caps)
		}
	})

	t.Run("CreateRefusals", func(t *testing.T) {
		for name, body := range map[string]map[string]any{
			"no schema":    {"partition": "p", "nowMs": 1},
			"bad schema":   {"schema": map[string]any{"version": 1}, "partition": "p", "nowMs": 1},
			"no partition": {"schema": json.RawMessage(conformanceSchema), "nowMs": 1},
			"no clock":     {"schema": json.RawMessage(conformanceSchema), "partition": "p"},
			"tiny lease":   {"schema": json.RawMessage(conformanceSchema), "partition": "p", "nowMs": 1, "leases": map[string]any{"ttlMs": 999}},
			"tiny ttl":     {"schema": json.RawMessage(conformanceSchema), "partition": "p", "nowMs": 1, "limits": map[string]any{"segmentTtlMs": 10}},
		} {
			var out map[string]string
			if st := call(t, "POST", h.s.url+"/__test/instances", body, &out); st != http.StatusBadRequest || out["error"] == "" {
				t.Errorf("%s: status %d %v, want 400 with an error", name, st, out)
			}
		}
		if st := call(t, "GET", h.s.url+"/__test/i/nope/clock", nil, nil); st != http.StatusNotFound {
			t.Errorf("unknown instance: status %d, want 404", st)
		}
	})

	t.Run("AuthAndProtocolErrors", func(t *testing.T) {
		id := h.instance("p", nil)
		for _, url := range []string{h.s.url + "/i/" + id + "/sync", h.s.url + "/i/nope/sync"} {
			resp, err := http.Post(url, "application/vnd.syncular.sync.v2", strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			var pe protocolError
			_ = json.NewDecoder(resp.Body).Decode(&pe)
			resp.Body.Close()
			want := map[bool]string{true: "sync.auth_required", false: "sync.not_found"}[strings.Contains(url, id)]
			if pe.Code != want || !pe.complete() {
				t.Errorf("%s without an actor: %d %+v, want %s in the SSP2 error shape", url, resp.StatusCode, pe, want)
			}
		}
	})

	t.Run("GrantsAndRowsReadBack", func(t *testing.T) {
		id := h.instance("p", nil)
		h.grant(id, "alice", map[string][]string{"project_id": {"p1"}})
		h.grant(id, "carol", map[string][]string{"project_id": {"*"}})
		alice := h.client(id, "alice", 3)
		if rj := push(t, alice, map[string]any{"id": "t1", "project_id": "p1", "title": "hello", "done": true, "priority": 7,
			"score": 1.5, "meta": json.RawMessage(`{"a": [1, 2]}`), "data": []byte{0, 0xab}}); rj != nil {
			t.Fatalf("alice in p1: %+v", rj)
		}
		wantRejected(t, push(t, alice, task("t2", "p2", "x")), "sync.forbidden")
		if rj := push(t, h.client(id, "carol", 3), task("t3", "p9", "wild")); rj != nil {
			t.Fatalf("carol holding *: %+v", rj)
		}
		// No grant holds {}: writes denied, subscriptions revoked.
		bob := h.client(id, "bob", 3)
		wantRejected(t, push(t, bob, task("t4", "p1", "x")), "sync.forbidden")
		if err := bob.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
			t.Fatal(err)
		}
		res, err := bob.SyncUntilIdle(ctx)
		if len(res.Revoked) != 1 || bob.Count("tasks") != 0 {
			t.Fatalf("bob without a grant: revoked %v, %d rows, %v", res.Revoked, bob.Count("tasks"), err)
		}
		// A grant takes effect on the next request.
		h.grant(id, "bob", map[string][]string{"project_id": {"p1"}})
		if err := bob.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := bob.SyncUntilIdle(ctx); err != nil || bob.Count("tasks") != 1 {
			t.Fatalf("bob after the grant: %d rows, %v", bob.Count("tasks"), err)
		}

		rows := h.rows(id)
		if len(rows) != 2 || rows[0].RowID != "t1" || rows[1].RowID != "t3" {
			t.Fatalf("rows = %+v", rows)
		}
		got, _ := json.Marshal(rows[0])
		want := `{"rowId":"t1","version":1,"values":{"data":{"$bytes":"00ab"},"done":true,"id":"t1","meta":"{\"a\": [1, 2]}",` +
			`"priority":7,"project_id":"p1","score":1.5,"title":"hello"},"scopes":{"project_id":"p1"}}`
		if string(got) != want {
			t.Fatalf("row t1 =\n%s\nwant\n%s", got, want)
		}
		if rows[1].Values["priority"] != nil || rows[1].Values["data"] != nil {
			t.Fatalf("NULLs of t3 = %v", rows[1].Values)
		}
		if push(t, alice, map[string]any{"id": "t1", "project_id": "p1", "title": "again", "done": true}); h.rows(id)[0].Version != 2 {
			t.Fatalf("version after an update = %d, want 2", h.rows(id)[0].Version)
		}
		if h.value(id, "/max-commit-seq") != 3 {
			t.Fatalf("max-commit-seq = %d, want 3", h.value(id, "/max-commit-seq"))
		}
		if st := call(t, "GET", h.ctl(id, "/rows/nope"), nil, nil); st != http.StatusNotFound {
			t.Fatalf("rows of an unknown table: %d", st)
		}
	})

	t.Run("Isolation", func(t *testing.T) {
		// Two instances with the same partition name share nothing.
		a, b := h.instance("same", nil), h.instance("same", nil)
		for _, id := range []string{a, b} {
			h.grant(id, "alice", map[string][]string{"project_id": {"p1"}})
		}
		ca := h.client(a, "alice", ssp2.AcceptExternalRows)
		for i := range 3 {
			if rj := push(t, ca, task(fmt.Sprintf("a%d", i), "p1", "in a")); rj != nil {
				t.Fatal(rj)
			}
		}
		if h.value(a, "/max-commit-seq") != 3 || h.value(b, "/max-commit-seq") != 0 || len(h.rows(b)) != 0 {
			t.Fatalf("a: seq %d; b: seq %d, %d rows", h.value(a, "/max-commit-seq"), h.value(b, "/max-commit-seq"), len(h.rows(b)))
		}
		// A bootstrap by reference in a: the segment downloads from a,
		// and is unknown to b.
		seg := h.client(a, "alice", ssp2.AcceptExternalRows)
		if err := seg.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
			t.Fatal(err)
		}
		res, err := seg.SyncUntilIdle(ctx)
		if err != nil || res.Downloads != 1 || seg.Count("tasks") != 3 {
			t.Fatalf("bootstrap by reference in a: %+v, %v", res, err)
		}
		ids := segmentIDs(t, h, a, "alice")
		for _, sid := range ids {
			if st, pe := download(t, h.s.url+"/i/"+a, "alice", sid); st != http.StatusOK {
				t.Fatalf("download from a: %d %+v", st, pe)
			}
			if st, pe := download(t, h.s.url+"/i/"+b, "alice", sid); st != http.StatusNotFound || pe.Code != "sync.not_found" {
				t.Fatalf("a's segment from b: %d %+v, want 404 sync.not_found", st, pe)
			}
		}
		cb := h.client(b, "alice", 3)
		if err := cb.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := cb.SyncUntilIdle(ctx); err != nil || cb.Count("tasks") != 0 {
			t.Fatalf("b sees %d rows, %v", cb.Count("tasks"), err)
		}
	})

	t.Run("ClockDrivesSegmentTTL", func(t *testing.T) {
		id := h.instance("p", map[string]any{"segmentTtlMs": 60_000, "maxDeltaBytes": 1 << 20, "maxPresenceBytes": 4096})
		var clock struct{ NowMs int64 }
		mustCall(t, "GET", h.ctl(id, "/clock"), nil, &clock)
		if clock.NowMs != startMs {
			t.Fatalf("clock = %d, want %d", clock.NowMs, startMs)
		}
		h.grant(id, "alice", map[string][]string{"project_id": {"p1"}})
		c := h.client(id, "alice", ssp2.AcceptExternalRows)
		if rj := push(t, c, task("t1", "p1", "x")); rj != nil {
			t.Fatal(rj)
		}
		if err := c.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.SyncUntilIdle(ctx); err != nil {
			t.Fatal(err)
		}
		sid := segmentIDs(t, h, id, "alice")[0]
		mustCall(t, "POST", h.ctl(id, "/clock/advance"), map[string]any{"ms": 59_000}, &clock)
		if clock.NowMs != startMs+59_000 {
			t.Fatalf("advanced clock = %d", clock.NowMs)
		}
		if st, pe := download(t, h.s.url+"/i/"+id, "alice", sid); st != http.StatusOK {
			t.Fatalf("before expiry: %d %+v", st, pe)
		}
		mustCall(t, "POST", h.ctl(id, "/clock/advance"), map[string]any{"ms": 1_000}, &clock)
		if st, pe := download(t, h.s.url+"/i/"+id, "alice", sid); st != http.StatusNotFound || pe.Code != "sync.segment_expired" {
			t.Fatalf("after the virtual TTL: %d %+v, want 404 sync.segment_expired", st, pe)
		}
		if st := call(t, "POST", h.ctl(id, "/clock/advance"), map[string]any{"ms": -1}, nil); st != http.StatusBadRequest {
			t.Fatalf("negative advance: %d", st)
		}
	})

	t.Run("Prune", func(t *testing.T) {
		id := h.instance("p", nil)
		h.grant(id, "alice", map[string][]string{"project_id": {"p1"}})
		c := h.client(id, "alice", 3)
		if err := c.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			if rj := push(t, c, task(fmt.Sprintf("t%d", i), "p1", "x")); rj != nil {
				t.Fatal(rj)
			}
		}
		var out struct{ HorizonSeq *int64 }
		mustCall(t, "POST", h.ctl(id, "/prune"), nil, &out)
		if out.HorizonSeq == nil || *out.HorizonSeq != 0 {
			t.Fatalf("prune with the defaults: %+v, want horizon 0 (1000 commits retained)", out)
		}
		// The client is active now at cursor 4: a zero window still counts it.
		mustCall(t, "POST", h.ctl(id, "/prune"), map[string]any{"retention": map[string]any{"activeWindowMs": 0, "ageForceMs": 0, "minRetainedCommits": 0}}, &out)
		if *out.HorizonSeq != 4 {
			t.Fatalf("prune of everything: horizon %d, want 4", *out.HorizonSeq)
		}
		if h.value(id, "/horizon-seq") != 4 || h.value(id, "/max-commit-seq") != 4 {
			t.Fatalf("horizon %d, max %d", h.value(id, "/horizon-seq"), h.value(id, "/max-commit-seq"))
		}
		// A new client bootstraps past the pruned log.
		old := h.client(id, "alice", 3)
		if err := old.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := old.SyncUntilIdle(ctx); err != nil || old.Count("tasks") != 4 {
			t.Fatalf("bootstrap after pruning: %d rows, %v", old.Count("tasks"), err)
		}
		if st := call(t, "POST", h.ctl(id, "/prune"), map[string]any{"retention": map[string]any{"minRetainedCommits": -1}}, nil); st != http.StatusBadRequest {
			t.Fatalf("negative retention: %d", st)
		}
	})

	t.Run("ResolverFailure", func(t *testing.T) {
		id := h.instance("p", nil)
		h.grant(id, "alice", map[string][]string{"project_id": {"p1"}})
		c := h.client(id, "alice", ssp2.AcceptExternalRows)
		if rj := push(t, c, task("t1", "p1", "x")); rj != nil {
			t.Fatal(rj)
		}
		if err := c.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.SyncUntilIdle(ctx); err != nil {
			t.Fatal(err)
		}
		sid := segmentIDs(t, h, id, "alice")[0]
		for _, mode := range []string{"failing", "outage"} {
			mustCall(t, "POST", h.ctl(id, "/resolver"), map[string]any{mode: true}, nil)
			wantRejected(t, push(t, c, task("t2", "p1", mode)), "sync.forbidden")
			if st, pe := download(t, h.s.url+"/i/"+id, "alice", sid); st != http.StatusForbidden || pe.Code != "sync.forbidden" {
				t.Fatalf("%s: download %d %+v, want 403 sync.forbidden", mode, st, pe)
			}
			fresh := h.client(id, "alice", 3)
			if err := fresh.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
				t.Fatal(err)
			}
			res, _ := fresh.SyncUntilIdle(ctx)
			if len(res.Revoked) != 1 {
				t.Fatalf("%s: subscription not revoked: %+v", mode, res)
			}
			mustCall(t, "POST", h.ctl(id, "/resolver"), map[string]any{mode: false}, nil)
		}
		if rj := push(t, c, task("t3", "p1", "healthy")); rj != nil {
			t.Fatalf("after recovery: %+v", rj)
		}
	})

	t.Run("Validators", func(t *testing.T) {
		id := h.instance("p", nil)
		h.grant(id, "alice", map[string][]string{"project_id": {"p1"}})
		c := h.client(id, "alice", 3)
		install := func(specs any) int {
			return call(t, "POST", h.ctl(id, "/validators"), map[string]any{"specs": specs}, nil)
		}
		if st := install([]any{map[string]any{"table": "tasks", "rule": map[string]any{"kind": "maxLength", "column": "title", "max": 5, "code": "app.title_too_long"}}}); st != 200 {
			t.Fatalf("install maxLength: %d", st)
		}
		rj := push(t, c, task("long", "p1", "much too long"))
		wantRejected(t, rj, "app.title_too_long")
		var details map[string]any
		if err := json.Unmarshal(rj.Details, &details); err != nil || details["reason"] != "max_length_exceeded" || details["requiredAction"] != "edit_fields" {
			t.Fatalf("details = %s", rj.Details)
		}
		if len(h.rows(id)) != 0 {
			t.Fatal("a rejected commit wrote a row")
		}
		for _, code := range []string{"sync.nope", "blob.x", ""} {
			if st := install([]any{map[string]any{"table": "tasks", "rule": map[string]any{"kind": "maxLength", "column": "title", "max": 5, "code": code}}}); st != http.StatusBadRequest {
				t.Fatalf("code %q: %d, want 400", code, st)
			}
		}
		wantRejected(t, push(t, c, task("long2", "p1", "still too long")), "app.title_too_long") // a refused install changed nothing
		if st := install([]any{}); st != 200 {
			t.Fatal(st)
		}
		if rj := push(t, c, task("long3", "p1", "long is fine now")); rj != nil {
			t.Fatalf("after clearing: %+v", rj)
		}

		// immutableWhen reads the stored row.
		install([]any{map[string]any{"table": "tasks", "rule": map[string]any{"kind": "immutableWhen", "column": "title", "guardColumn": "done", "guardValue": true, "code": "app.done_task_frozen"}}})
		if rj := push(t, c, map[string]any{"id": "f", "project_id": "p1", "title": "first", "done": false}); rj != nil {
			t.Fatal(rj)
		}
		if rj := push(t, c, map[string]any{"id": "f", "project_id": "p1", "title": "first", "done": true}); rj != nil {
			t.Fatalf("marking done: %+v", rj)
		}
		wantRejected(t, push(t, c, map[string]any{"id": "f", "project_id": "p1", "title": "renamed", "done": true}), "app.done_task_frozen")

		// unexpectedError: a plain failure is the fixed constraint violation.
		install([]any{map[string]any{"table": "tasks", "rule": map[string]any{"kind": "unexpectedError", "message": "secret-token"}}})
		rj = push(t, c, task("u", "p1", "x"))
		wantRejected(t, rj, "sync.constraint_violation")
		if strings.Contains(rj.Message, "secret-token") {
			t.Fatalf("the validator's error text leaked: %q", rj.Message)
		}
		install([]any{})

		// requireSiblingWhen over the whole commit.
		spec := map[string]any{"kind": "requireSiblingWhen", "table": "tasks", "column": "title", "equals": "parent", "siblingRowIdSuffix": "-child", "code": "app.sibling_required"}
		mustCall(t, "POST", h.ctl(id, "/commit-validator"), map[string]any{"spec": spec}, nil)
		wantRejected(t, push(t, c, task("p", "p1", "parent")), "app.sibling_required")
		if _, err := c.Commit(ctx, client.Op{Table: "tasks", Values: task("p", "p1", "parent")}, client.Op{Table: "tasks", Values: task("p-child", "p1", "child")}); err != nil {
			t.Fatal(err)
		}
		if res, err := c.SyncUntilIdle(ctx); err != nil || len(res.Rejected) != 0 {
			t.Fatalf("parent with its sibling: %+v, %v", res.Rejected, err)
		}
		bad := map[string]any{"kind": "requireSiblingWhen", "table": "tasks", "column": "title", "equals": "parent", "siblingRowIdSuffix": "-child", "code": "sync.x"}
		if st := call(t, "POST", h.ctl(id, "/commit-validator"), map[string]any{"spec": bad}, nil); st != http.StatusBadRequest {
			t.Fatalf("reserved commit code: %d", st)
		}
		mustCall(t, "POST", h.ctl(id, "/commit-validator"), map[string]any{}, nil)
		if rj := push(t, c, task("q", "p1", "parent")); rj != nil {
			t.Fatalf("after clearing the commit validator: %+v", rj)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		id := h.instance("p", nil)
		dir := filepath.Join(h.s.dataDir, "test-instances", id)
		if _, err := os.Stat(filepath.Join(dir, "sync.db")); err != nil {
			t.Fatalf("instance database: %v", err)
		}
		mustCall(t, "DELETE", h.s.url+"/__test/i/"+id, nil, nil)
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("instance dir after DELETE: %v", err)
		}
		if st := call(t, "GET", h.ctl(id, "/clock"), nil, nil); st != http.StatusNotFound {
			t.Fatalf("deleted instance: %d", st)
		}
		if st := call(t, "DELETE", h.s.url+"/__test/i/"+id, nil, nil); st != http.StatusNotFound {
			t.Fatalf("second DELETE: %d", st)
		}
	})
}

// segmentIDs bootstraps a fresh actor client accepting only references,
// and returns the ids of the segments it was referred to.
func segmentIDs(t *testing.T, h *harness, id, actor string) []string {
	t.Helper()
	body, err := (&ssp2.Message{WireVersion: 1, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: fmt.Sprintf("probe-%d", time.Now().UnixNano()), SchemaVersion: h.schema.Version},
		&ssp2.PullHeader{Accept: ssp2.AcceptExternalRows},
		&ssp2.Subscription{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: -1},
	}}).AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", h.s.url+"/i/"+id+"/sync", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/vnd.syncular.sync.v2")
	req.Header.Set(testctl.ActorHeader, actor)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("probe: %d %s", resp.StatusCode, b)
	}
	m, err := ssp2.DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, f := range m.Frames {
		if r, ok := f.(*ssp2.SegmentRef); ok {
			ids = append(ids, r.SegmentID)
		}
	}
	if len(ids) == 0 {
		t.Fatalf("probe got no SEGMENT_REF: %+v", m.Frames)
	}
	return ids
}

// download fetches a segment as actor with the p1 scopes.
func download(t *testing.T, base, actor, segmentID string) (int, protocolError) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/segments/"+segmentID, nil)
	req.Header.Set(testctl.ActorHeader, actor)
	req.Header.Set("X-Syncular-Scopes", `{"project_id":["p1"]}`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var pe protocolError
	if resp.StatusCode != http.StatusOK {
		_ = json.NewDecoder(resp.Body).Decode(&pe)
		if !pe.complete() {
			t.Fatalf("download error %d is not in the SSP2 error shape: %+v", resp.StatusCode, pe)
		}
	}
	return resp.StatusCode, pe
}

// TestTestModesRefusedOffLoopback: the modes replace authentication, so
// serve refuses them on a listener other hosts could reach.
func TestTestModesRefusedOffLoopback(t *testing.T) {
	for _, mode := range []string{"--test-control", "--load-fixture"} {
		for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:0"} {
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{"serve", "--http", addr, "--data", t.TempDir(), "--nats-port", "-1", mode}, strings.NewReader(""), &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), "loopback") {
				t.Errorf("%s on %s: %v, want a loopback refusal", mode, addr, err)
			}
			if out.Len() != 0 {
				t.Errorf("%s on %s printed %q", mode, addr, out.String())
			}
		}
	}
	for _, addr := range []string{"127.0.0.1:1", "localhost:1", "[::1]:1"} {
		if err := checkLoopback(addr); err != nil {
			t.Errorf("checkLoopback(%s) = %v", addr, err)
		}
	}
}

// TestTestModesAbsentFromNormalServe: a node started without the flags
// has none of the routes.
func TestTestModesAbsentFromNormalServe(t *testing.T) {
	s := startServe(t)
	for _, r := range []struct{ method, path string }{
		{"GET", "/__test/capabilities"}, {"POST", "/__test/instances"}, {"POST", "/i/x/sync"},
		{"GET", "/__load/metrics"}, {"POST", "/__load/reset"}, {"POST", "/__load/prune"},
	} {
		if st := call(t, r.method, s.url+r.path, nil, nil); st != http.StatusNotFound {
			t.Errorf("%s %s on a normal node: %d, want 404", r.method, r.path, st)
		}
	}
	if strings.Contains(s.stderr.String(), "TEST MODE") {
		t.Error("a normal node announced test mode")
	}
}

// TestLoadFixtureServe runs `serve --load-fixture --test-control
// --validators FILE`: the fixture at /, the control API beside it, and
// the rules file enforced on the node's own routes.
func TestLoadFixtureServe(t *testing.T) {
	rulesFile := filepath.Join(t.TempDir(), "rules.json")
	if err := os.WriteFile(rulesFile, []byte(`{"validators": [{"table": "tasks",
		"rule": {"kind": "maxLength", "column": "title", "max": 10, "code": "app.title_too_long"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--load-fixture", "--test-control", "--validators", rulesFile)
	ctx := context.Background()

	mustCall(t, "POST", s.url+"/__load/reset", map[string]int{"seedRows": 100}, nil)
	sc, err := schema.Parse([]byte(loadfix.SchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Config{BaseURL: s.url, Schema: sc})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("s", "tasks", map[string][]string{"project_id": {"storm"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SyncUntilIdle(ctx); err != nil || c.Count("tasks") != 100 {
		t.Fatalf("bootstrap without a token: %d rows, %v", c.Count("tasks"), err)
	}
	wantRejected(t, push(t, c, map[string]any{"id": "x", "project_id": "storm", "title": "far too long a title", "done": false, "priority": 1, "updated_at_ms": 1}), "app.title_too_long")
	if rj := push(t, c, map[string]any{"id": "y", "project_id": "storm", "title": "short", "done": false, "priority": 1, "updated_at_ms": 1}); rj != nil {
		t.Fatalf("short title: %+v", rj)
	}
	// The realtime channel is the node's: a socket opens and closes.
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.url, "http")+"/realtime?clientId=rt-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if typ, b, err := ws.Read(ctx); err != nil || typ != websocket.MessageText || !strings.Contains(string(b), `"event":"hello"`) {
		t.Fatalf("first realtime message: %s %v", b, err)
	}
	_ = ws.Close(websocket.StatusNormalClosure, "")
	var m map[string]any
	poll.Until(t, 10*time.Second, "the realtime counters", func() bool {
		mustCall(t, "GET", s.url+"/__load/metrics", nil, &m)
		return m["realtimeOpened"] == 1.0 && m["realtimeClosed"] == 1.0
	})
	if m["pushApplied"] != 1.0 || m["pushRejected"] != 1.0 {
		t.Fatalf("metrics = %v", m)
	}
	var caps []string
	mustCall(t, "GET", s.url+"/__test/capabilities", nil, &caps)
	if len(caps) == 0 {
		t.Fatal("no capabilities with both modes on")
	}
}

// TestServeRefusesBadValidators: a rules file that does not fit the
// schema stops serve before it listens.
func TestServeRefusesBadValidators(t *testing.T) {
	rulesFile := filepath.Join(t.TempDir(), "rules.json")
	if err := os.WriteFile(rulesFile, []byte(`{"validators": [{"table": "tasks",
		"rule": {"kind": "maxLength", "column": "nope", "max": 10, "code": "app.x"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), serveArgs(t.TempDir(), "--validators", rulesFile), strings.NewReader(""), &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `no column "nope"`) || out.Len() != 0 {
		t.Fatalf("serve with a bad rules file: %v, stdout %q", err, out.String())
	}
}

// TestTestModesMintNoDevToken: a test mode replaces authentication, so it
// generates no development secret and prints no token, and it announces
// itself exactly once. The node's own routes then refuse every request.
func TestTestModesMintNoDevToken(t *testing.T) {
	for _, modes := range [][]string{{"--test-control"}, {"--load-fixture"}, {"--test-control", "--load-fixture"}} {
		t.Run(strings.Join(modes, ","), func(t *testing.T) {
			s := startServe(t, modes...)
			errOut := s.stderr.String()
			if n := strings.Count(errOut, "TEST MODE"); n != 1 {
				t.Errorf("the TEST MODE banner printed %d times:\n%s", n, errOut)
			}
			if strings.Contains(errOut, "development authentication") || strings.Contains(errOut, "eyJ") {
				t.Errorf("a test mode printed a development token:\n%s", errOut)
			}
			if _, err := os.Stat(filepath.Join(s.dataDir, "dev-jwt-secret")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a test mode generated a development secret: %v", err)
			}
			if len(modes) == 1 && modes[0] == "--test-control" {
				var pe protocolError
				if st := call(t, "GET", s.url+"/segments/x", nil, &pe); st != http.StatusUnauthorized || pe.Code != string(ssp2.CodeAuthRequired) {
					t.Errorf("GET /segments/x on a test-control node: %d %+v, want 401 sync.auth_required", st, pe)
				}
			}
		})
	}
}
