package client

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// startNode starts a whole node (SQLite, or PostgreSQL in a "postgres"
// subtest of bothStores; embedded NATS, relay, segment store, engine,
// realtime hub, HTTP) whose bootstrap pages above inlineMax bytes travel
// as SEGMENT_REFs; mods edit the configuration last. It returns a server
// handle over the node's store.
func startNode(t testing.TB, inlineMax int, mods ...func(*node.Config)) (*server, *node.Node) {
	t.Helper()
	s := mustSchema(t, tasksSchema)
	secret := []byte("0123456789abcdef0123456789abcdef")
	v, err := auth.NewVerifier(auth.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := node.Config{
		DataDir: t.TempDir(), HTTP: node.HTTPConfig{Listen: "127.0.0.1:0"}, NATS: embedded.Config{Port: -1}, Schema: s,
		Engine: engine.Config{MaxOperations: new(seedOps), InlineSegmentMaxBytes: &inlineMax},
		API: httpapi.Config{Auth: httpapi.AuthenticatorFunc(func(r *http.Request) (engine.Identity, error) {
			p, err := v.VerifyHeader(r.Header.Get("Authorization"))
			if err != nil {
				return engine.Identity{}, err
			}
			return engine.Identity{Partition: p.Partition, ActorID: p.ActorID, Scopes: engine.StaticScopes(p.Scopes)}, nil
		})},
	}
	if strings.Contains(t.Name(), "/postgres") {
		cfg.Store.Postgres.URL, cfg.Store.Postgres.Schema = pgtest.Schema(t)
	}
	for _, m := range mods {
		m(&cfg)
	}
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return &server{t: t, URL: n.URL(), store: n.Store, engine: n.Engine, schema: s, secret: secret}, n
}

// TestNodeSegmentRefs bootstraps through a real node whose pages are too
// large to inline: every page is a SEGMENT_REF downloaded from
// GET /segments/{id}, verified and applied; a second client reuses the
// built segments. A download refused (scopes that do not match) or
// corrupted in transit fails the subscription without advancing it, and
// the next round recovers.
func TestNodeSegmentRefs(t *testing.T) {
	srv, n := startNode(t, 1024)
	seed(t, srv, 10_000, "p1")
	seed(t, srv, 500, "p2")
	pull := PullOptions{LimitSnapshotRows: 1000, MaxSnapshotPages: 4}

	a := srv.client("alice", []string{"p1"}, func(cfg *Config) { cfg.Pull = pull })
	res := mustSync(t, a)
	if res.Downloads != 10 || res.SegmentRows != 10_000 {
		t.Fatalf("bootstrap: %d downloads, %d rows", res.Downloads, res.SegmentRows)
	}
	sameRows(t, "alice", replicaRows(a), srv.serverRows("p1"))

	built := n.Engine.Metrics().SegmentsBuilt.Load()
	b := srv.client("bob", []string{"p1"}, func(cfg *Config) { cfg.Pull = pull })
	mustSync(t, b)
	sameRows(t, "bob", replicaRows(b), srv.serverRows("p1"))
	if got := n.Engine.Metrics().SegmentsBuilt.Load(); got != built {
		t.Fatalf("the second bootstrap built %d segments, want all reused", got-built)
	}

	// Incremental changes after the bootstrap arrive as commits.
	mustCommit(t, a, Upsert("tasks", task("p1-0000007", "p1", "edited")), Delete("tasks", "p1-0000008"))
	mustSync(t, a)
	mustSync(t, b)
	sameRows(t, "bob after edits", replicaRows(b), srv.serverRows("p1"))

	// Downloads with foreign scopes are refused: the subscription fails,
	// nothing of it is persisted, the next round recovers.
	ft := newFaultTransport()
	ft.segmentScopes = `{"project_id":["p2"]}`
	c := srv.client("carol", []string{"p1"}, func(cfg *Config) {
		cfg.Pull = pull
		cfg.HTTPClient = &http.Client{Transport: ft}
	})
	_, err := c.Sync(context.Background())
	var se *SubscriptionError
	if !errors.As(err, &se) || !errors.Is(err, &Error{Code: ssp2.CodeForbidden}) {
		t.Fatalf("download with foreign scopes: %v", err)
	}
	if s := c.Subscriptions()[0]; s.Cursor != -1 || s.BootstrapState != nil {
		t.Fatalf("a failed section advanced the subscription: %+v", s)
	}

	// A segment corrupted in transit fails its content-address check.
	ft.segmentScopes, ft.corruptSegment = "", true
	if _, err := c.Sync(context.Background()); !errors.As(err, &se) {
		t.Fatalf("corrupted download: %v", err)
	}
	if s := c.Subscriptions()[0]; s.Cursor != -1 {
		t.Fatalf("a corrupted segment advanced the subscription: %+v", s)
	}
	ft.corruptSegment = false
	mustSync(t, c)
	sameRows(t, "carol", replicaRows(c), srv.serverRows("p1"))
}
