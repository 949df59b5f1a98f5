package node

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// twoNodes starts node A (embedding NATS) and node B (attached to A's
// NATS in external mode), sharing one fresh PostgreSQL schema. B's
// authenticator calls onResolve, when set, while it resolves scopes: a
// hook between admission and the first read.
func twoNodes(t *testing.T, onResolve *atomic.Pointer[func()]) (a, b *Node) {
	t.Helper()
	url, pgSchema := pgtest.Schema(t)
	a = startNode(t, vectorSchema, func(t *testing.T, c *Config) {
		c.Name, c.Store.Postgres.URL, c.Store.Postgres.Schema = "node-a", url, pgSchema
		c.NATS = embedded.Config{Port: embedded.RandomPort, Host: "127.0.0.1", ServerName: "gate-a-" + pgSchema}
	})
	b = startNode(t, vectorSchema, func(t *testing.T, c *Config) {
		c.Name, c.Store.Postgres.URL, c.Store.Postgres.Schema = "node-b", url, pgSchema
		c.NATS = embedded.Config{Mode: embedded.ModeExternal, URLs: []string{a.NATS.ClientURL()}}
		v, err := auth.NewVerifier(auth.Config{Secret: testSecret})
		if err != nil {
			t.Fatal(err)
		}
		bearer := httpapi.BearerAuth(v)
		c.API.Auth = httpapi.AuthenticatorFunc(func(r *http.Request) (engine.Identity, error) {
			id, err := bearer.Authenticate(r)
			if err != nil || onResolve == nil {
				return id, err
			}
			grant := id.Scopes
			id.Scopes = engine.ResolverFunc(func(ctx context.Context, partition, actor string) (engine.Allowed, error) {
				if f := onResolve.Load(); f != nil {
					(*f)()
				}
				return grant.ResolveScopes(ctx, partition, actor)
			})
			return id, nil
		})
	})
	for _, n := range []*Node{a, b} {
		poll.Until(t, 10*time.Second, n.cfg.Name+"'s gate KV watch to go live", n.Gate.WatchLive)
	}
	return a, b
}

// pullFrames is a pull of the tasks table in project p1.
func pullFrames() []ssp2.Frame {
	return []ssp2.Frame{&ssp2.PullHeader{Accept: 3}, &ssp2.Subscription{ID: "s1", Table: "tasks", Scopes: map[string][]string{"project": {"p1"}}}}
}

func request(t *testing.T, epoch string, frames ...ssp2.Frame) []byte {
	t.Helper()
	body, err := (&ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest,
		Frames: append([]ssp2.Frame{&ssp2.ReqHeader{ClientID: "gate-client", SchemaVersion: 1, LogEpoch: &epoch}}, frames...)}).AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// served reports whether a response served the request: 200 without an
// in-band ERROR.
func served(t *testing.T, r response) bool {
	t.Helper()
	if r.status != http.StatusOK {
		return false
	}
	m, err := ssp2.DecodeMessage(r.body)
	if err != nil {
		t.Fatal(err)
	}
	return frame[*ssp2.ErrorFrame](m) == nil
}

// TestTwoNodesGate: two nodes on one PostgreSQL and one NATS. A
// checkpoint declared by node A makes node B answer 503, through the KV
// watch, while A keeps serving; after activation both serve; an epoch
// rotation in the middle of a pull is refused.
func TestTwoNodesGate(t *testing.T) {
	var hook atomic.Pointer[func()]
	a, b := twoNodes(t, &hook)
	ctx := t.Context()
	const part = "acme"
	tok := token(t, "u1", part, map[string][]string{"project": {"p1"}})
	epoch := acquireEpoch(t, a, tok)
	if e := acquireEpoch(t, b, tok); e != epoch {
		t.Fatalf("nodes disagree on the epoch: %q, %q", epoch, e)
	}
	pull := request(t, epoch, pullFrames()...)
	for _, n := range []*Node{a, b} {
		for range 2 { // the second admission comes from the watched view
			if r := post(t, n.URL()+"/sync", tok, httpapi.ContentType, pull, nil); !served(t, r) {
				t.Fatalf("%s before the migration: %d %s", n.cfg.Name, r.status, r.body)
			}
		}
	}
	cachedBefore := b.Gate.Metrics().AdmitCached.Load()
	if cachedBefore == 0 {
		t.Fatal("node B never admitted from its watched view")
	}

	// Node A declares a checkpoint: B refuses (how fast is
	// BenchmarkRefusalPropagation's business, in package gate).
	cp, err := a.Gate.Declare(ctx, part, "tasks-projection")
	if err != nil {
		t.Fatal(err)
	}
	var refused response
	poll.Until(t, 10*time.Second, "node B to refuse after the declaration", func() bool {
		refused = post(t, b.URL()+"/sync", tok, httpapi.ContentType, pull, nil)
		return refused.status == http.StatusServiceUnavailable
	})
	jsonError(t, refused, http.StatusServiceUnavailable, ssp2.CodeSchemaNotReady)
	if refused.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	// B's view was warm (open): only the watched token change could make
	// B refuse at admission (a 503). Without it B would admit and refuse
	// inside the pull's transaction, in-band.
	if b.Gate.Metrics().WatchUpdates.Load() == 0 {
		t.Error("node B refused without seeing the token change")
	}
	// A pushes and pulls: it declared the checkpoint.
	push := request(t, epoch, &ssp2.PushCommit{ClientCommitID: "c1", Operations: []ssp2.Operation{{Table: "tasks", RowID: "t1", Op: ssp2.OpUpsert, Payload: vectorTaskRow(t, a, "t1")}}})
	if r := post(t, a.URL()+"/sync", tok, httpapi.ContentType, push, nil); !served(t, r) {
		t.Fatalf("node A refused a push during its own backfill: %d %s", r.status, r.body)
	}
	if r := post(t, a.URL()+"/sync", tok, httpapi.ContentType, pull, nil); !served(t, r) {
		t.Fatalf("node A refused a pull during its own backfill: %d %s", r.status, r.body)
	}
	jsonError(t, post(t, b.URL()+"/sync", tok, httpapi.ContentType, request(t, epoch, &ssp2.PushCommit{ClientCommitID: "c2",
		Operations: []ssp2.Operation{{Table: "tasks", RowID: "t2", Op: ssp2.OpUpsert, Payload: vectorTaskRow(t, b, "t2")}}}), nil),
		http.StatusServiceUnavailable, ssp2.CodeSchemaNotReady)
	// Segment downloads on B are refused too, before any lookup.
	jsonError(t, get(t, b.URL()+"/segments/sha256:"+strings.Repeat("0", 64), tok, `{"project":["p1"]}`, ""),
		http.StatusServiceUnavailable, ssp2.CodeSchemaNotReady)
	// B's readiness says why; A's is fine.
	ready := get(t, b.URL()+"/readyz", "", "", "")
	if ready.status != http.StatusServiceUnavailable || !strings.Contains(string(ready.body), "tasks-projection") {
		t.Fatalf("B /readyz = %d %s", ready.status, ready.body)
	}
	if r := get(t, a.URL()+"/readyz", "", "", ""); r.status != http.StatusOK {
		t.Fatalf("A /readyz = %d %s", r.status, r.body)
	}

	// Activation reopens B.
	maxSeq, err := a.Store.CommitMaxSeq(ctx, part)
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Gate.Activate(ctx, storage.CheckpointActivateParams{CheckpointKey: cp.CheckpointKey, Watermark: maxSeq, Sources: []string{"tasks"}})
	if err != nil || out != storage.ActivateActivated {
		t.Fatalf("activate = %s, %v", out, err)
	}
	poll.Until(t, 10*time.Second, "node B to serve after the activation", func() bool {
		return served(t, post(t, b.URL()+"/sync", tok, httpapi.ContentType, pull, nil))
	})
	for _, n := range []*Node{a, b} {
		if r := post(t, n.URL()+"/sync", tok, httpapi.ContentType, pull, nil); !served(t, r) {
			t.Fatalf("%s after activation: %d %s", n.cfg.Name, r.status, r.body)
		}
		if r := get(t, n.URL()+"/readyz", "", "", ""); r.status != http.StatusOK {
			t.Fatalf("%s /readyz after activation = %d %s", n.cfg.Name, r.status, r.body)
		}
	}

	// An epoch rotation (by node A) in the middle of a pull on node B,
	// after admission and before the first read, is refused rather than
	// served: the section never starts.
	rotate := func() {
		if _, err := a.Gate.RotateEpoch(ctx, part); err != nil {
			t.Error(err)
		}
	}
	hook.Store(&rotate)
	r := post(t, b.URL()+"/sync", tok, httpapi.ContentType, pull, nil)
	hook.Store(nil)
	if r.status != http.StatusOK {
		t.Fatalf("mid-pull rotation: %d %s", r.status, r.body)
	}
	m, err := ssp2.DecodeMessage(r.body)
	if err != nil {
		t.Fatal(err)
	}
	ef := frame[*ssp2.ErrorFrame](m)
	if ef == nil || ef.Code != string(ssp2.CodeSchemaNotReady) || !ef.Retryable {
		t.Fatalf("mid-pull rotation answered %+v, want an in-band retryable %s", m.Frames, ssp2.CodeSchemaNotReady)
	}
	if frame[*ssp2.SubStart](m) != nil || frame[*ssp2.Commit](m) != nil {
		t.Fatalf("a section was served across the rotation: %+v", m.Frames)
	}
	// The next request learns the new epoch.
	if rh := send(t, b, tok, 2, request2Frames(epoch)...).Frames[0].(*ssp2.RespHeader); !rh.ResetRequired || rh.LogEpoch == epoch {
		t.Fatalf("after the rotation: %+v", rh)
	}
}

func request2Frames(epoch string) []ssp2.Frame {
	e := epoch
	return append([]ssp2.Frame{&ssp2.ReqHeader{ClientID: "gate-client", SchemaVersion: 1, LogEpoch: &e}}, pullFrames()...)
}

func vectorTaskRow(t *testing.T, n *Node, id string) []byte {
	t.Helper()
	tbl, _ := n.cfg.Schema.Table("tasks")
	b, err := tbl.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte("p1")}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGatePropagation: across rounds, a checkpoint declared on node A
// becomes a refusal at admission on node B, through B's KV watch (B's
// watched view was warm, and B counts the token change), and its
// activation reopens B. How fast is BenchmarkRefusalPropagation's
// business (package gate).
func TestGatePropagation(t *testing.T) {
	a, b := twoNodes(t, nil)
	ctx := t.Context()
	const part = "prop"
	if _, err := a.Store.PartitionTouch(ctx, part, time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	// warm: B admits the partition from its watched view, without SQL,
	// and B's watcher is done with every update it saw (updates of them):
	// a refusal can then only come from a token change B watched after
	// that. A re-read still in flight (the last activation's) may run
	// after A's next declaration and refuse from it unseen.
	var updates int64
	warm := func() bool {
		m := b.Gate.Metrics()
		updates = m.WatchUpdates.Load()
		if m.WatchApplied.Load() != updates {
			return false
		}
		cached := m.AdmitCached.Load()
		_, err := b.Gate.Admit(ctx, part)
		return err == nil && m.AdmitCached.Load() > cached
	}
	for i := range 10 {
		poll.Until(t, 10*time.Second, "B's watched view to admit the partition", warm)
		cp, err := a.Gate.Declare(ctx, part, "cp"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		var refusal error
		poll.Until(t, 10*time.Second, "B to refuse after A's declaration", func() bool {
			_, refusal = b.Gate.Admit(ctx, part)
			return refusal != nil
		})
		if ssp2.CodeOf(refusal) != ssp2.CodeSchemaNotReady {
			t.Fatalf("round %d: B refused with %v, want %s", i, refusal, ssp2.CodeSchemaNotReady)
		}
		if b.Gate.Metrics().WatchUpdates.Load() == updates {
			t.Fatalf("round %d: B refused without seeing the token change", i)
		}
		if out, err := a.Gate.Activate(ctx, storage.CheckpointActivateParams{CheckpointKey: cp.CheckpointKey}); err != nil || out != storage.ActivateActivated {
			t.Fatalf("round %d: activate = %s, %v", i, out, err)
		}
	}
	poll.Until(t, 10*time.Second, "B to admit after the last activation", func() bool {
		_, err := b.Gate.Admit(ctx, part)
		return err == nil
	})
}
