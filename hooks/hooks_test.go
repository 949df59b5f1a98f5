package hooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/hooks"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/operations"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(hookProcessEnv) == "1" {
		os.Exit(hookProcess())
	}
	goleak.VerifyTestMain(m)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startNode starts a node on the documented nats.conf with users, hooks
// configured by mod, and a hook process answering as the hooks user.
func startNode(t *testing.T, mod func(*node.Config)) (*node.Node, *hookProc) {
	t.Helper()
	n := nodetest.Start(t, func(c *node.Config) {
		c.NATS.ConfigFile = "../docs/nats-permissions.conf"
		c.NATS.User, c.NATS.Password = "syncnode", "node-secret"
		mod(c)
	})
	return n, startHookProcess(t, n.NATS.ClientURL())
}

var p1 = map[string][]string{"project_id": {"p1"}}

// newClient is alice in acme subscribed to project p1. Her token grants
// nothing: with the scopes hook on, the hook decides.
func newClient(t *testing.T, n *node.Node) *client.Client {
	t.Helper()
	c := nodetest.Client(t, n, nodetest.Token(t, "alice", "acme", nil))
	if err := c.Subscribe("s1", "todos", p1); err != nil {
		t.Fatal(err)
	}
	return c
}

func metrics(t *testing.T, n *node.Node) string {
	t.Helper()
	resp, err := http.Get(n.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wantMetric(t *testing.T, text, series string) {
	t.Helper()
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, series+" ") && !strings.HasSuffix(line, " 0") {
			return
		}
	}
	t.Errorf("metrics lack a non-zero %s", series)
}

// TestScopesHook: the hook process decides what alice may read; revoking
// the grant in the hook revokes her subscription on the next round, and a
// hook that does not answer fails the request closed.
func TestScopesHook(t *testing.T) {
	t.Parallel()
	n, h := startNode(t, func(c *node.Config) {
		c.Hooks.Scopes = &hooks.ScopesConfig{Cache: hooks.CacheConfig{TTL: -1}, Timeout: 100 * time.Millisecond}
	})
	ctx := ctxT(t)
	h.grant("acme", "alice", p1)
	c := newClient(t, n)
	if _, err := c.Upsert(ctx, "todos", nodetest.Todo("t1", "p1", "first")); err != nil {
		t.Fatal(err)
	}
	res, err := c.SyncUntilIdle(ctx)
	if err != nil || len(res.Rejected) != 0 || len(res.Revoked) != 0 {
		t.Fatalf("granted round: %+v, %v", res, err)
	}
	if _, ok := c.Row("todos", "t1"); !ok {
		t.Fatal("alice does not read her row")
	}

	h.grant("acme", "alice", map[string][]string{"project_id": {"p2"}})
	res, err = c.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Revoked, []string{"s1"}) {
		t.Fatalf("after the hook revoked p1: revoked %v, want [s1]", res.Revoked)
	}
	if _, ok := c.Row("todos", "t1"); ok {
		t.Error("a revoked subscription kept its row")
	}

	// A hook that does not answer: reads are revoked, writes forbidden.
	h.grant("acme", "alice", p1)
	h.hang(true)
	c2 := newClient(t, n)
	if _, err := c2.Upsert(ctx, "todos", nodetest.Todo("t2", "p1", "second")); err != nil {
		t.Fatal(err)
	}
	res, err = c2.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Revoked, []string{"s1"}) || len(res.Rejected) != 1 || res.Rejected[0].Code != ssp2.CodeForbidden {
		t.Fatalf("timed-out hook: revoked %v, rejected %+v; want [s1] and sync.forbidden", res.Revoked, res.Rejected)
	}
	if rows, err := n.Store.RowList(ctx, storage.RowListParams{Partition: "acme", Table: "todos", Limit: 10}); err != nil || len(rows) != 1 {
		t.Fatalf("rows = %d, %v: the forbidden write landed", len(rows), err)
	}
	m := metrics(t, n)
	wantMetric(t, m, `syncnode_hook_requests_total{hook="scopes"}`)
	wantMetric(t, m, `syncnode_hook_errors_total{hook="scopes",reason="timeout"}`)
	wantMetric(t, m, `syncnode_hook_request_duration_seconds_count{hook="scopes"}`)

	// Unknown actor: the hook's error reply fails closed too.
	h.hang(false)
	h.grant("acme", "alice", nil)
	c3 := newClient(t, n)
	if res, err = c3.Sync(ctx); err != nil || !slices.Equal(res.Revoked, []string{"s1"}) {
		t.Fatalf("error reply: %+v, %v", res, err)
	}
	wantMetric(t, metrics(t, n), `syncnode_hook_errors_total{hook="scopes",reason="error_reply"}`)
}

// TestScopesHookCache: answers serve an actor for the TTL; a revocation
// takes effect once it passed.
func TestScopesHookCache(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Now())
	n, h := startNode(t, func(c *node.Config) {
		c.Clock = clk
		c.Hooks.Scopes = &hooks.ScopesConfig{Cache: hooks.CacheConfig{TTL: 30 * time.Second}}
	})
	ctx := ctxT(t)
	h.grant("acme", "alice", p1)
	c := newClient(t, n)
	for range 3 {
		if res, err := c.Sync(ctx); err != nil || len(res.Revoked) != 0 {
			t.Fatalf("granted round: %+v, %v", res, err)
		}
	}
	if got := h.count("scopes"); got != 1 {
		t.Fatalf("hook asked %d times in three rounds within the TTL, want 1", got)
	}
	h.grant("acme", "alice", map[string][]string{"project_id": {"p2"}})
	if res, err := c.Sync(ctx); err != nil || len(res.Revoked) != 0 {
		t.Fatalf("within the TTL the cached grant holds: %+v, %v", res, err)
	}
	clk.Advance(31 * time.Second)
	res, err := c.Sync(ctx)
	if err != nil || !slices.Equal(res.Revoked, []string{"s1"}) {
		t.Fatalf("after the TTL: %+v, %v; want s1 revoked", res, err)
	}
	if got := h.count("scopes"); got != 2 {
		t.Errorf("hook asked %d times, want 2", got)
	}
	wantMetric(t, metrics(t, n), `syncnode_hook_cache_hits_total{hook="scopes"}`)
}

// TestValidateHook: the hook rejects a commit with its code and details,
// and the whole commit rolls back; a hook that does not answer rejects
// the commit.
func TestValidateHook(t *testing.T) {
	t.Parallel()
	n, h := startNode(t, func(c *node.Config) {
		c.Hooks.Validate = &hooks.ValidateConfig{Timeout: 100 * time.Millisecond}
	})
	ctx := ctxT(t)
	c := nodetest.Client(t, n, nodetest.Token(t, "alice", "acme", p1))
	rows := func() int {
		t.Helper()
		rs, err := n.Store.RowList(ctx, storage.RowListParams{Partition: "acme", Table: "todos", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		return len(rs)
	}

	if _, err := c.Commit(ctx, client.Upsert("todos", nodetest.Todo("good", "p1", "fine")),
		client.Upsert("todos", nodetest.Todo("bad", "p1", "bad title"))); err != nil {
		t.Fatal(err)
	}
	res, err := c.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) != 1 {
		t.Fatalf("rejected = %+v, want one", res.Rejected)
	}
	rj := res.Rejected[0]
	var details struct {
		FieldPaths []string `json:"fieldPaths"`
		Reason     string   `json:"reason"`
	}
	if rj.Code != "todo.bad_title" || rj.OpIndex != 1 || rj.Message != "a title must not start with bad" ||
		json.Unmarshal(rj.Details, &details) != nil || !slices.Equal(details.FieldPaths, []string{"title"}) || details.Reason != "bad_title" {
		t.Fatalf("rejection = %+v (details %s)", rj, rj.Details)
	}
	if got := rows(); got != 0 {
		t.Fatalf("%d rows after a rejected commit: it did not roll back whole", got)
	}

	if _, err := c.Upsert(ctx, "todos", nodetest.Todo("good", "p1", "fine")); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Sync(ctx); err != nil || len(res.Rejected) != 0 || rows() != 1 {
		t.Fatalf("accepted commit: %+v, %v, %d rows", res, err, rows())
	}

	h.hang(true)
	if _, err := c.Upsert(ctx, "todos", nodetest.Todo("late", "p1", "fine")); err != nil {
		t.Fatal(err)
	}
	res, err = c.Sync(ctx)
	if err != nil || len(res.Rejected) != 1 || res.Rejected[0].Code != ssp2.CodeConstraintViolation || rows() != 1 {
		t.Fatalf("timed-out hook: %+v, %v, %d rows; want sync.constraint_violation and nothing written", res.Rejected, err, rows())
	}
	m := metrics(t, n)
	wantMetric(t, m, `syncnode_hook_rejections_total{hook="validate"}`)
	wantMetric(t, m, `syncnode_hook_errors_total{hook="validate",reason="timeout"}`)
}

// TestTokenHook: with no JWT verifier, the hook turns bearer tokens into
// actor, partition and scopes; a refused token is a 401.
func TestTokenHook(t *testing.T) {
	t.Parallel()
	n, _ := startNode(t, func(c *node.Config) {
		c.API.Auth = nil
		c.Hooks.Token = &hooks.TokenConfig{}
	})
	ctx := ctxT(t)
	c := nodetest.Client(t, n, "tok-bob@globex")
	if err := c.Subscribe("s1", "todos", p1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Upsert(ctx, "todos", nodetest.Todo("t1", "p1", "x")); err != nil {
		t.Fatal(err)
	}
	if res, err := c.SyncUntilIdle(ctx); err != nil || len(res.Rejected) != 0 || len(res.Revoked) != 0 {
		t.Fatalf("hook-verified token: %+v, %v", res, err)
	}
	cl, ok, err := n.Store.ClientGet(ctx, "globex", c.ClientID())
	if err != nil || !ok || cl.ActorID != "bob" {
		t.Fatalf("client record in globex = %+v, %v, %v", cl, ok, err)
	}

	bad := nodetest.Client(t, n, "forged")
	_, err = bad.Sync(ctx)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusUnauthorized || ce.Code != ssp2.CodeAuthRequired {
		t.Fatalf("refused token: %v, want 401 sync.auth_required", err)
	}
	wantMetric(t, metrics(t, n), `syncnode_hook_errors_total{hook="token",reason="error_reply"}`)
	wantMetric(t, metrics(t, n), `syncnode_hook_cache_hits_total{hook="token"}`)
}

// TestValidateHookReads: with reads on, the validate hook (the process,
// as the documented hooks user) reads the commit's candidate state
// through its request's read subject on either store: a registered query
// that counts the commit's own new row, and the row by key. The hook
// rejects a third todo in a project; the read runs inside the push
// transaction — on SQLite a remote operation from the hook would wait on
// the writer the push holds until the hook's deadline.
func TestValidateHookReads(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			n, _ := startNode(t, func(c *node.Config) {
				if store == "postgres" {
					c.Store.Postgres.URL, c.Store.Postgres.Schema = pgtest.Schema(t)
				}
				c.Hooks.Validate = &hooks.ValidateConfig{Timeout: 10 * time.Second, Reads: true}
				c.Operations.Registry = operations.File{Queries: []operations.Query{{ID: "openTodos",
					SQL: "SELECT id FROM todos WHERE project_id = ? AND NOT done ORDER BY id", Tables: []string{"todos"},
					MaxRows: 100, Mode: operations.Scoped, Columns: []operations.Column{{Name: "id", Type: "string"}},
					Coverage: []operations.Coverage{{Table: "todos", Scopes: map[string][]int{"project_id": {0}}}}}}}
			})
			ctx := ctxT(t)
			c := nodetest.Client(t, n, nodetest.Token(t, "alice", "acme", map[string][]string{"project_id": {"p1", "p2"}}))
			push := func(id, project string) []*client.Rejection {
				t.Helper()
				if _, err := c.Upsert(ctx, "todos", nodetest.Todo(id, project, "limit "+id)); err != nil {
					t.Fatal(err)
				}
				res, err := c.Sync(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return res.Rejected
			}
			for _, id := range []string{"a", "b"} {
				if rj := push(id, "p1"); len(rj) != 0 {
					t.Fatalf("todo %s: rejected %+v", id, rj)
				}
			}
			if rj := push("c", "p1"); len(rj) != 1 || rj[0].Code != "todo.too_many" || rj[0].Message != "3 todos" {
				t.Fatalf("third todo of p1: %+v, want todo.too_many counting the commit's own row", rj)
			}
			if rj := push("d", "p2"); len(rj) != 0 {
				t.Fatalf("first todo of p2: rejected %+v", rj)
			}
			rs, err := n.Store.RowList(ctx, storage.RowListParams{Partition: "acme", Table: "todos", Limit: 10})
			if err != nil || len(rs) != 3 {
				t.Fatalf("rows after the hook's rejections: %d, %v", len(rs), err)
			}
		})
	}
}
