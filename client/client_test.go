package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// TestTwoClientsConverge interleaves upserts and deletes from two clients
// over many rounds; both replicas end equal to each other and to the
// server.
func TestTwoClientsConverge(t *testing.T) { bothStores(t, testTwoClientsConverge) }

func testTwoClientsConverge(t *testing.T) {
	srv := newServer(t, nil)
	a := srv.client("alice", []string{"p1", "p2"}, nil)
	b := srv.client("bob", []string{"p1", "p2"}, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for round := range 30 {
		for _, c := range []*Client{a, b} {
			var ops []Op
			for range 1 + rng.IntN(4) {
				id := fmt.Sprintf("t%02d", rng.IntN(25))
				if rng.IntN(4) == 0 {
					ops = append(ops, Delete("tasks", id))
					continue
				}
				row := task(id, fmt.Sprintf("p%d", 1+rng.IntN(2)), fmt.Sprintf("%s by %s in %d", id, c.ClientID(), round))
				row["priority"] = rng.IntN(5)
				ops = append(ops, Upsert("tasks", row))
			}
			mustCommit(t, c, ops...)
			if rng.IntN(2) == 0 {
				if _, err := c.Sync(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	mustSync(t, a)
	mustSync(t, b)
	mustSync(t, a)
	want := srv.serverRows("p1", "p2")
	if len(want) == 0 {
		t.Fatal("no rows on the server")
	}
	sameRows(t, "alice", replicaRows(a), want)
	sameRows(t, "bob", replicaRows(b), want)
	if len(a.Pending())+len(b.Pending()) != 0 {
		t.Fatal("outboxes not drained")
	}
	// Values decode by column name and type.
	for _, r := range a.Rows("tasks") {
		if _, ok := r.Values["title"].(string); !ok || r.Values["id"] != r.ID || r.Version < 1 {
			t.Fatalf("row %+v", r)
		}
		if p, ok := r.Values["priority"].(int64); !ok || p < 0 || p > 4 {
			t.Fatalf("priority %#v", r.Values["priority"])
		}
	}
}

// TestOfflineOutboxAndLostResponse: commits queued offline survive failed
// rounds; a response lost after the server applied them is answered
// cached on the retry under the same ids, and nothing applies twice.
func TestOfflineOutboxAndLostResponse(t *testing.T) { bothStores(t, testOfflineOutboxAndLostResponse) }

func testOfflineOutboxAndLostResponse(t *testing.T) {
	srv := newServer(t, nil)
	ft := newFaultTransport()
	c := srv.client("alice", []string{"p1"}, func(cfg *Config) {
		cfg.HTTPClient = &http.Client{Transport: ft}
		cfg.CommitID = func(n int64) string { return fmt.Sprintf("alice-%d", n) }
	})
	mustSync(t, c) // acquire the epoch while online
	ctx := context.Background()

	ft.offline = true
	var ids []string
	for i := range 3 {
		ids = append(ids, mustCommit(t, c, Upsert("tasks", task(fmt.Sprintf("t%d", i), "p1", "offline"))))
	}
	if _, err := c.Sync(ctx); !errors.Is(err, errOffline) {
		t.Fatalf("offline sync: %v", err)
	}
	if got := len(c.Pending()); got != 3 {
		t.Fatalf("pending = %d, want 3", got)
	}

	ft.offline, ft.loseResponse = false, true
	if _, err := c.Sync(ctx); err == nil {
		t.Fatal("sync with a lost response succeeded")
	}
	if got := srv.engine.Metrics().PushApplied.Load(); got != 3 {
		t.Fatalf("server applied %d commits, want 3", got)
	}
	if got := len(c.Pending()); got != 3 {
		t.Fatalf("pending after lost response = %d, want 3 (unacknowledged)", got)
	}

	res, err := c.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Pushed) != 3 {
		t.Fatalf("pushed %+v", res.Pushed)
	}
	for i, p := range res.Pushed {
		if p.ClientCommitID != ids[i] || p.Status != ssp2.PushCached {
			t.Fatalf("outcome %d = %+v, want cached %s", i, p, ids[i])
		}
	}
	mustSync(t, c)
	if got := srv.engine.Metrics().PushApplied.Load(); got != 3 {
		t.Fatalf("server applied %d commits after replay, want 3", got)
	}
	if len(c.Pending()) != 0 {
		t.Fatal("outbox not drained")
	}
	want := srv.serverRows("p1")
	for id, e := range want {
		if e.version != 1 {
			t.Fatalf("row %s at version %d: applied twice", id, e.version)
		}
	}
	sameRows(t, "alice", replicaRows(c), want)
}

// TestConflicts: a stale baseVersion yields a conflict record with the
// server's row; a baseVersion for an absent row yields row_missing. Both
// leave the outbox and surface as typed rejections.
func TestConflicts(t *testing.T) { bothStores(t, testConflicts) }

func testConflicts(t *testing.T) {
	srv := newServer(t, nil)
	a := srv.client("alice", []string{"p1"}, nil)
	b := srv.client("bob", []string{"p1"}, nil)
	mustCommit(t, a, Upsert("tasks", task("t1", "p1", "first")))
	mustSync(t, a)
	mustSync(t, b)
	if v := b.Version("tasks", "t1"); v != 1 {
		t.Fatalf("bob sees t1 at version %d", v)
	}
	mustCommit(t, b, Upsert("tasks", task("t1", "p1", "bob's edit")).IfUnchanged())
	mustSync(t, b)

	// Alice still holds version 1.
	mustCommit(t, a, Upsert("tasks", task("t1", "p1", "alice's edit")).IfUnchanged())
	mustCommit(t, a, Upsert("tasks", task("t9", "p1", "ghost")).WithBaseVersion(3))
	res := mustSync(t, a)
	if len(res.Rejected) != 2 {
		t.Fatalf("rejected %+v", res.Rejected)
	}
	conflict, missing := res.Rejected[0], res.Rejected[1]
	if !errors.Is(conflict, &Error{Code: ssp2.CodeVersionConflict}) || conflict.Conflict == nil {
		t.Fatalf("conflict = %+v", conflict)
	}
	if conflict.Conflict.ServerVersion != 2 || conflict.Conflict.ServerRow["title"] != "bob's edit" {
		t.Fatalf("conflict record = %+v", conflict.Conflict)
	}
	if len(conflict.Commit.Operations) != 1 || conflict.OpIndex != 0 {
		t.Fatalf("conflict commit = %+v", conflict)
	}
	if !errors.Is(missing, &Error{Code: ssp2.CodeRowMissing}) || missing.Conflict != nil {
		t.Fatalf("row_missing = %+v", missing)
	}
	if len(a.Pending()) != 0 {
		t.Fatal("rejected commits stayed queued")
	}
	// Alice converged on bob's write.
	if r, _ := a.Row("tasks", "t1"); r.Values["title"] != "bob's edit" || r.Version != 2 {
		t.Fatalf("alice's t1 = %+v", r)
	}
}

// TestForbiddenWrite: a write outside the token's scopes is rejected
// sync.forbidden and changes nothing.
func TestForbiddenWrite(t *testing.T) { bothStores(t, testForbiddenWrite) }

func testForbiddenWrite(t *testing.T) {
	srv := newServer(t, nil)
	c := srv.client("alice", []string{"p1"}, nil)
	mustCommit(t, c, Upsert("tasks", task("t1", "p2", "not mine")))
	res := mustSync(t, c)
	if len(res.Rejected) != 1 || !errors.Is(res.Rejected[0], &Error{Code: ssp2.CodeForbidden}) {
		t.Fatalf("rejected = %+v", res.Rejected)
	}
	if len(srv.serverRows("p2")) != 0 {
		t.Fatal("forbidden write landed")
	}
}

// TestScopeRevocation: losing one project's grant purges exactly that
// project's rows and drops queued writes into it; the other project's
// rows stay.
func TestScopeRevocation(t *testing.T) { bothStores(t, testScopeRevocation) }

func testScopeRevocation(t *testing.T) {
	srv := newServer(t, nil)
	writer := srv.client("writer", []string{"p1", "p2", "p3"}, nil)
	for i := range 10 {
		mustCommit(t, writer, Upsert("tasks", task(fmt.Sprintf("a%d", i), "p1", "a")), Upsert("tasks", task(fmt.Sprintf("b%d", i), "p2", "b")),
			Upsert("tasks", task(fmt.Sprintf("c%d", i), "p3", "c")))
	}
	mustSync(t, writer)

	tok := srv.token("alice", "p1", "p2")
	c := srv.client("alice", nil, func(cfg *Config) {
		cfg.TokenFunc = func(context.Context) (string, error) { return tok, nil }
		cfg.MaxOperations = 1 // one commit per round: the second is still queued at the revocation
	})
	for _, p := range []string{"p1", "p2"} {
		if err := c.Subscribe("sub-"+p, "tasks", map[string][]string{"project_id": {p}}); err != nil {
			t.Fatal(err)
		}
	}
	mustSync(t, c)
	if got := c.Count("tasks"); got != 20 {
		t.Fatalf("alice holds %d rows, want 20", got)
	}
	// A row outside every subscription survives the purge: revocation
	// deletes only what the revoked grant delivered.
	c.rep.tables["tasks"].put("local", replicaRows(writer)["c0"])

	// Two queued writes into p2: the first is pushed in the revoking round
	// and refused by the server, the second is still queued when the
	// revocation arrives and is dropped locally.
	mustCommit(t, c, Upsert("tasks", task("b98", "p2", "pushed with the revocation")))
	mustCommit(t, c, Upsert("tasks", task("b99", "p2", "queued at the revocation")))
	tok = srv.token("alice", "p1")
	res := mustSync(t, c)
	if len(res.Revoked) != 1 || res.Revoked[0] != "sub-p2" {
		t.Fatalf("revoked = %v", res.Revoked)
	}
	if len(res.Rejected) != 2 || !errors.Is(res.Rejected[0], &Error{Code: ssp2.CodeForbidden}) ||
		!res.Rejected[1].Dropped || !errors.Is(res.Rejected[1], &Error{Code: ssp2.CodeScopeRevoked}) {
		t.Fatalf("queued writes into the revoked scope: %+v", res.Rejected)
	}
	if len(c.Pending()) != 0 {
		t.Fatal("outbox not drained")
	}
	got := replicaRows(c)
	delete(got, "local")
	sameRows(t, "alice after revocation", got, srv.serverRows("p1"))
	if _, ok := c.Row("tasks", "local"); !ok {
		t.Fatal("a row outside the revoked scopes was purged")
	}
	// The revoked subscription is no longer pulled.
	for _, s := range c.Subscriptions() {
		if s.ID == "sub-p2" && s.Status != statusRevoked {
			t.Fatalf("sub-p2 = %+v", s)
		}
	}
	if _, err := c.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestCursorBehindHorizon: a client whose cursor fell behind the pruning
// horizon is answered reset, re-bootstraps and converges.
func TestCursorBehindHorizon(t *testing.T) { bothStores(t, testCursorBehindHorizon) }

func testCursorBehindHorizon(t *testing.T) {
	srv := newServer(t, nil)
	writer := srv.client("writer", []string{"p1"}, nil)
	lagger := srv.client("lagger", []string{"p1"}, nil)
	mustCommit(t, writer, Upsert("tasks", task("t0", "p1", "x")), Upsert("tasks", task("gone", "p1", "x")))
	mustSync(t, writer)
	mustSync(t, lagger)
	for i := range 20 {
		mustCommit(t, writer, Upsert("tasks", task(fmt.Sprintf("t%d", i), "p1", fmt.Sprintf("v%d", i))))
	}
	mustCommit(t, writer, Delete("tasks", "gone"))
	mustSync(t, writer)

	ctx := context.Background()
	p, err := srv.store.PartitionGet(ctx, partition)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := srv.store.Prune(ctx, storage.PruneParams{Partition: partition, LogEpoch: p.LogEpoch, ThroughSeq: p.MaxCommitSeq,
		NowMs: time.Now().Add(time.Hour).UnixMilli(), ActiveWindowMs: 1, MinRetainedCommits: 1})
	if err != nil {
		t.Fatal(err)
	}
	if pr.HorizonSeq <= lagger.Subscriptions()[0].Cursor {
		t.Fatalf("horizon %d did not pass the lagger's cursor %d", pr.HorizonSeq, lagger.Subscriptions()[0].Cursor)
	}
	res := mustSync(t, lagger)
	if len(res.Reset) != 1 || res.SegmentRows == 0 {
		t.Fatalf("lagger result %+v", res)
	}
	sameRows(t, "lagger", replicaRows(lagger), srv.serverRows("p1"))
	if _, ok := lagger.Row("tasks", "gone"); ok {
		t.Fatal("a row deleted behind the horizon survived the re-bootstrap")
	}
}

// TestEpochRotation: after the server rotates the log epoch, a client
// with queued commits resets (rows, cursors) and converges, keeping its
// client id and pushing its outbox under the new epoch.
func TestEpochRotation(t *testing.T) { bothStores(t, testEpochRotation) }

func testEpochRotation(t *testing.T) {
	srv := newServer(t, nil)
	c := srv.client("alice", []string{"p1"}, nil)
	mustCommit(t, c, Upsert("tasks", task("t1", "p1", "before")))
	mustSync(t, c)
	oldEpoch, id := c.LogEpoch(), c.ClientID()

	ctx := context.Background()
	if _, err := srv.store.PartitionRotateEpoch(ctx, partition, time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, c, Upsert("tasks", task("t2", "p1", "queued across the rotation")))
	res := mustSync(t, c)
	if !res.EpochReset || c.LogEpoch() == oldEpoch || c.ClientID() != id {
		t.Fatalf("reset %v, epoch %q (was %q), id %q (was %q)", res.EpochReset, c.LogEpoch(), oldEpoch, c.ClientID(), id)
	}
	if len(res.Pushed) != 1 || res.Pushed[0].Status != ssp2.PushApplied {
		t.Fatalf("pushed %+v", res.Pushed)
	}
	sameRows(t, "alice", replicaRows(c), srv.serverRows("p1"))
	if c.Count("tasks") != 2 {
		t.Fatalf("rows = %d", c.Count("tasks"))
	}
}

// TestFileStoreRestart: a client rebuilt from its state file keeps its id,
// rows and cursors, and replays the outbox it queued before the restart.
func TestFileStoreRestart(t *testing.T) {
	srv := newServer(t, nil)
	path := filepath.Join(t.TempDir(), "state.json")
	fs := &FileStore{Path: path}
	c := srv.client("alice", []string{"p1"}, func(cfg *Config) { cfg.Store = fs })
	mustCommit(t, c, Upsert("tasks", task("t1", "p1", "one")))
	mustSync(t, c)
	mustCommit(t, c, Upsert("tasks", task("t2", "p1", "queued")))
	id, cursor := c.ClientID(), c.Subscriptions()[0].Cursor

	c2, err := New(Config{BaseURL: srv.URL, Token: srv.token("alice", "p1"), Schema: srv.schema, Store: &FileStore{Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	if c2.ClientID() != id || c2.Subscriptions()[0].Cursor != cursor || c2.Count("tasks") != 1 || len(c2.Pending()) != 1 {
		t.Fatalf("restored: id %s cursor %d rows %d pending %d", c2.ClientID(), c2.Subscriptions()[0].Cursor, c2.Count("tasks"), len(c2.Pending()))
	}
	res := mustSync(t, c2)
	if res.SegmentRows != 0 || len(res.Pushed) != 1 {
		t.Fatalf("restarted client re-bootstrapped or lost its outbox: %+v", res)
	}
	sameRows(t, "restarted", replicaRows(c2), srv.serverRows("p1"))

	// A different client id for the same state is refused.
	if _, err := New(Config{BaseURL: srv.URL, Schema: srv.schema, ClientID: "other", Store: &FileStore{Path: path}}); err == nil {
		t.Fatal("a foreign client id adopted the state")
	}
}

// TestMemoryStoreWithoutRowsRebootstraps: a store that keeps no rows makes
// a rebuilt client bootstrap again instead of trusting its cursors.
func TestMemoryStoreWithoutRowsRebootstraps(t *testing.T) {
	srv := newServer(t, nil)
	ms := &MemoryStore{}
	c := srv.client("alice", []string{"p1"}, func(cfg *Config) { cfg.Store = ms })
	mustCommit(t, c, Upsert("tasks", task("t1", "p1", "one")))
	mustSync(t, c)
	c2 := srv.client("alice", []string{"p1"}, func(cfg *Config) { cfg.Store = ms })
	if s := c2.Subscriptions()[0]; s.Cursor != -1 || c2.Count("tasks") != 0 {
		t.Fatalf("rebuilt client trusts a cursor without rows: %+v", s)
	}
	mustSync(t, c2)
	sameRows(t, "rebuilt", replicaRows(c2), srv.serverRows("p1"))
}

// TestErrors: request-level failures come back typed with their code and
// HTTP status; the schema floor stops the client.
func TestErrors(t *testing.T) {
	srv := newServer(t, nil)
	c, err := New(Config{BaseURL: srv.URL, Token: "not-a-jwt", Schema: srv.schema})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Sync(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Code != ssp2.CodeAuthRequired || e.Status != http.StatusUnauthorized || !e.Retryable {
		t.Fatalf("bad token: %v", err)
	}

	v2 := mustSchema(t, `{"version":2,"tables":[{"name":"tasks","columns":[{"name":"id","type":"string"},{"name":"project_id","type":"string"},
		{"name":"title","type":"string"},{"name":"done","type":"boolean"},{"name":"priority","type":"integer","nullable":true},
		{"name":"updated_at_ms","type":"integer","nullable":true}],"primaryKey":"id","scopes":["project:{project_id}"]}]}`)
	floor := newServerSchema(t, v2, nil)
	old := floor.client("alice", []string{"p1"}, func(cfg *Config) { cfg.Schema = srv.schema })
	_, err = old.Sync(context.Background())
	var se *SchemaUnsupportedError
	if !errors.As(err, &se) || se.RequiredVersion != 2 || !errors.Is(err, &Error{Code: ssp2.CodeClientSchemaUnsupported}) {
		t.Fatalf("schema floor: %v", err)
	}
	if _, err := old.Sync(context.Background()); !errors.As(err, &se) {
		t.Fatalf("a stopped client synced again: %v", err)
	}

	// A request the server refuses as a whole: a subscription with a scope
	// variable the table does not declare.
	bad := srv.client("alice", []string{"p1"}, nil)
	if err := bad.Subscribe("typo", "tasks", map[string][]string{"projectid": {"p1"}}); err != nil {
		t.Fatal(err)
	}
	_, err = bad.Sync(context.Background())
	if !errors.As(err, &e) || e.Code != ssp2.CodeInvalidSubscription || e.Status != http.StatusBadRequest {
		t.Fatalf("invalid subscription: %v", err)
	}
}

// TestMaxOperationsSplitsRounds: an outbox larger than the per-request cap
// drains over several requests, in order.
func TestMaxOperationsSplitsRounds(t *testing.T) {
	srv := newServer(t, func(cfg *engine.Config) { cfg.MaxOperations = new(10) })
	c := srv.client("alice", []string{"p1"}, func(cfg *Config) { cfg.MaxOperations = 10 })
	for i := range 7 {
		mustCommit(t, c, Upsert("tasks", task(fmt.Sprintf("a%d", i), "p1", "x")), Upsert("tasks", task(fmt.Sprintf("b%d", i), "p1", "x")),
			Upsert("tasks", task(fmt.Sprintf("c%d", i), "p1", "x")))
	}
	res := mustSync(t, c)
	if len(res.Pushed) != 7 || res.Rounds < 3 {
		t.Fatalf("pushed %d commits in %d rounds", len(res.Pushed), res.Rounds)
	}
	sameRows(t, "alice", replicaRows(c), srv.serverRows("p1"))
}
