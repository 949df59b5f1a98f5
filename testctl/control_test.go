package testctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const tasksSchema = `{"version": 1, "tables": [{"name": "tasks", "primaryKey": "id",
 "columns": [{"name": "id", "type": "string"}, {"name": "project_id", "type": "string"}],
 "scopes": ["project:{project_id}"]}]}`

// control serves a Control over HTTP on a real embedded NATS server.
type control struct {
	t   *testing.T
	srv *embedded.Server
	ctl *Control
	url string
}

func newControl(t *testing.T) *control {
	t.Helper()
	srv := embeddedtest.Start(t)
	ctl, err := New(Config{Bus: srv, Dir: filepath.Join(t.TempDir(), "instances")})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(ctl)
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := ctl.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return &control{t: t, srv: srv, ctl: ctl, url: hs.URL}
}

// inst is a live instance.
func (c *control) inst(id string) *instance {
	c.t.Helper()
	c.ctl.mu.Lock()
	defer c.ctl.mu.Unlock()
	in := c.ctl.instances[id]
	if in == nil {
		c.t.Fatalf("no instance %s", id)
	}
	return in
}

func (c *control) do(method, path string, body []byte, actor string) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if actor != "" {
		req.Header.Set(ActorHeader, actor)
		req.Header.Set("Content-Type", httpapi.ContentType)
		req.Header.Set("Accept-Encoding", "identity")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// instance creates an instance of partition acme whose actor u1 holds
// project p1, and returns its id.
func (c *control) instance() string { return c.instanceWith(nil) }

func (c *control) instanceWith(limits map[string]any) string {
	c.t.Helper()
	req := map[string]any{"schema": json.RawMessage(tasksSchema), "partition": "acme", "nowMs": 1_750_000_000_000}
	if limits != nil {
		req["limits"] = limits
	}
	body, _ := json.Marshal(req)
	st, b := c.do("POST", "/__test/instances", body, "")
	var out struct{ ID string }
	if st != http.StatusOK || json.Unmarshal(b, &out) != nil || out.ID == "" {
		c.t.Fatalf("create: %d %s", st, b)
	}
	grant, _ := json.Marshal(map[string]any{"actorId": "u1", "allowed": map[string][]string{"project_id": {"p1"}}})
	if st, b := c.do("POST", "/__test/i/"+out.ID+"/allowed-scopes", grant, ""); st != http.StatusOK {
		c.t.Fatalf("grant: %d %s", st, b)
	}
	return out.ID
}

// sync posts an SSP2 request to an instance as u1 with client c1.
func (c *control) sync(id string, epoch *string, frames ...ssp2.Frame) (int, []byte) {
	c.t.Helper()
	return c.syncAs(id, "c1", epoch, frames...)
}

// syncAs posts an SSP2 request to an instance as u1 with clientID.
func (c *control) syncAs(id, clientID string, epoch *string, frames ...ssp2.Frame) (int, []byte) {
	c.t.Helper()
	frames = append([]ssp2.Frame{&ssp2.ReqHeader{ClientID: clientID, SchemaVersion: 1, LogEpoch: epoch}}, frames...)
	body, err := (&ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest, Frames: frames}).AppendEncode(nil)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.do("POST", "/i/"+id+"/sync", body, "u1")
}

// epoch acquires the instance's log epoch.
func (c *control) epoch(id string) string {
	c.t.Helper()
	st, b := c.sync(id, nil, &ssp2.PullHeader{Accept: 3})
	m, err := ssp2.DecodeMessage(b)
	if st != http.StatusOK || err != nil {
		c.t.Fatalf("epoch: %d %s (%v)", st, b, err)
	}
	return m.Frames[0].(*ssp2.RespHeader).LogEpoch
}

func pullFrames() []ssp2.Frame {
	return []ssp2.Frame{&ssp2.PullHeader{Accept: 3}, &ssp2.Subscription{ID: "s1", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}}}
}

// served reports whether a response served the request: 200 without an
// in-band ERROR.
func served(t *testing.T, status int, body []byte) bool {
	t.Helper()
	if status != http.StatusOK {
		return false
	}
	m, err := ssp2.DecodeMessage(body)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Frames {
		if _, ok := f.(*ssp2.ErrorFrame); ok {
			return false
		}
	}
	return true
}

// TestInstancesAreNodes: each instance is a real node in its own bus
// namespace. A commit pushed over HTTP reaches that instance's commit
// stream and subject, and nothing reaches the other instance's or the
// production names; a checkpoint declared on the instance's partition (by
// an operator's admin open, through the instance's gate bucket) refuses
// its pulls while the other instance, with the same partition id, keeps
// serving; the activation reopens it. Deleting an instance removes its
// namespace.
func TestInstancesAreNodes(t *testing.T) {
	c := newControl(t)
	ctx := t.Context()
	a, b := c.instance(), c.instance()
	nsA, err := namespace(a)
	if err != nil {
		t.Fatal(err)
	}
	nsB, _ := namespace(b)

	nc, err := c.srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subA, err := nc.SubscribeSync(nsA.AllCommits())
	if err != nil {
		t.Fatal(err)
	}
	subOthers := make([]*nats.Subscription, 0, 2)
	for _, subject := range []string{nsB.AllCommits(), bus.Names{}.AllCommits()} {
		s, err := nc.SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		subOthers = append(subOthers, s)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	epochA := c.epoch(a)
	payload := taskRow(t, c, a, "t1")
	st, body := c.sync(a, &epochA, &ssp2.PushCommit{ClientCommitID: "c1",
		Operations: []ssp2.Operation{{Table: "tasks", RowID: "t1", Op: ssp2.OpUpsert, Payload: payload}}})
	if !served(t, st, body) {
		t.Fatalf("push: %d %s", st, body)
	}

	msg, err := subA.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no commit event on %s: %v", nsA.AllCommits(), err)
	}
	p, _ := bus.NewPartition("acme")
	want, _ := nsA.CommitSubject(p, "tasks")
	if msg.Subject != want {
		t.Fatalf("event on %s, want %s", msg.Subject, want)
	}
	if meta, err := nsA.ParseMeta(msg.Subject, msg.Header); err != nil || meta.Partition.ID() != "acme" || meta.CommitSeq != 1 {
		t.Fatalf("event meta = %+v, %v", meta, err)
	}
	js := c.srv.JetStream()
	streamMsgs := func(name string) (uint64, error) {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return 0, err
		}
		return s.CachedInfo().State.Msgs, nil
	}
	// The event reached the subscriber; the stream's state may count it a
	// moment later.
	var held uint64
	poll.Until(t, 10*time.Second, nsA.CommitStream()+" to hold the event", func() bool {
		n, err := streamMsgs(nsA.CommitStream())
		held = n
		return err == nil && n >= 1
	})
	if held != 1 {
		t.Fatalf("%s holds %d events, want 1", nsA.CommitStream(), held)
	}
	// B's relay made its own stream, which stays empty; nothing was
	// published in the production namespace.
	if n, err := streamMsgs(nsB.CommitStream()); err != nil || n != 0 {
		t.Fatalf("%s holds %d events (%v), want 0", nsB.CommitStream(), n, err)
	}
	if _, err := streamMsgs(bus.Names{}.CommitStream()); err == nil {
		t.Fatalf("an instance created the production stream %s", bus.Names{}.CommitStream())
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, s := range subOthers {
		if n, _, _ := s.Pending(); n != 0 {
			t.Fatalf("%d events on %s", n, s.Subject)
		}
	}

	// Both instances serve the same partition id before the declaration.
	epochB := c.epoch(b)
	for _, id := range []string{a, b} {
		poll.Until(t, 10*time.Second, "instance "+id+"'s gate watch to go live", c.inst(id).node.Gate.WatchLive)
	}
	if st, body := c.sync(a, &epochA, pullFrames()...); !served(t, st, body) {
		t.Fatalf("pull on A: %d %s", st, body)
	}

	// An operator declares a checkpoint on A's data, in A's namespace.
	admin, err := node.OpenOffline(ctx, node.Config{DataDir: c.inst(a).dir, Names: nsA,
		Store: node.StoreConfig{SQLite: sqlitestore.Config{Path: filepath.Join(c.inst(a).dir, "sync.db")}}},
		node.OfflineOptions{NATSURL: c.srv.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if len(admin.Warnings) > 0 {
		t.Fatalf("admin fell back to SQL: %v", admin.Warnings)
	}
	cp, err := admin.Gate.Declare(ctx, "acme", "tasks-projection")
	if err != nil {
		t.Fatal(err)
	}
	// A's warm view admits from its watched token: only the token change
	// in A's gate bucket makes it refuse at admission, with a 503 (a
	// refusal found in SQL inside the pull would be in-band).
	var refused []byte
	poll.Until(t, 10*time.Second, "A to refuse its pulls with 503", func() bool {
		st, body := c.sync(a, &epochA, pullFrames()...)
		refused = body
		return st == http.StatusServiceUnavailable
	})
	var perr struct{ Code string }
	if err := json.Unmarshal(refused, &perr); err != nil || perr.Code != string(ssp2.CodeSchemaNotReady) {
		t.Fatalf("refusal = %s, want %s", refused, ssp2.CodeSchemaNotReady)
	}
	if st, body := c.sync(b, &epochB, pullFrames()...); !served(t, st, body) {
		t.Fatalf("B refused with A's checkpoint: %d %s", st, body)
	}

	maxSeq, err := admin.Store.CommitMaxSeq(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := admin.Gate.Activate(ctx, storage.CheckpointActivateParams{CheckpointKey: cp.CheckpointKey, Watermark: maxSeq, Sources: []string{"tasks"}}); err != nil || out != storage.ActivateActivated {
		t.Fatalf("activate = %s, %v", out, err)
	}
	poll.Until(t, 10*time.Second, "A to serve again", func() bool {
		st, body := c.sync(a, &epochA, pullFrames()...)
		return served(t, st, body)
	})

	// DELETE removes the instance's streams and buckets.
	if st, body := c.do("DELETE", "/__test/i/"+a, nil, ""); st != http.StatusOK {
		t.Fatalf("delete: %d %s", st, body)
	}
	for _, s := range []string{nsA.CommitStream(), nsA.ControlStream()} {
		if _, err := js.Stream(ctx, s); err == nil {
			t.Errorf("%s survived the instance", s)
		}
	}
	for _, bucket := range []string{nsA.GateBucket(), nsA.LeaseBucket()} {
		if _, err := js.KeyValue(ctx, bucket); err == nil {
			t.Errorf("%s survived the instance", bucket)
		}
	}
	for _, bucket := range []string{nsA.SegmentsBucket(), nsA.BlobsBucket()} {
		if _, err := js.ObjectStore(ctx, bucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
			t.Errorf("%s survived the instance", bucket)
		}
	}
	if _, err := js.Stream(ctx, nsB.CommitStream()); err != nil {
		t.Errorf("deleting A removed B's stream: %v", err)
	}
}

// taskRow encodes tasks(id, p1) with the instance's schema.
func taskRow(t *testing.T, c *control, id, rowID string) []byte {
	t.Helper()
	tbl, _ := c.inst(id).schema.Table("tasks")
	b, err := tbl.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte(rowID)}, {Bytes: []byte("p1")}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInlineSegmentMaxBytesZero: limits.inlineSegmentMaxBytes 0 means
// never inline (a client accepting references gets one), while an
// absent limit keeps the default and inlines a small page.
func TestInlineSegmentMaxBytesZero(t *testing.T) {
	c := newControl(t)
	for _, tc := range []struct {
		limits map[string]any
		ref    bool
	}{{nil, false}, {map[string]any{"inlineSegmentMaxBytes": 0}, true}} {
		id := c.instanceWith(tc.limits)
		epoch := c.epoch(id)
		if st, body := c.sync(id, &epoch, &ssp2.PushCommit{ClientCommitID: "c1",
			Operations: []ssp2.Operation{{Table: "tasks", RowID: "t1", Op: ssp2.OpUpsert, Payload: taskRow(t, c, id, "t1")}}}); !served(t, st, body) {
			t.Fatalf("push: %d %s", st, body)
		}
		// A bootstrap (cursor -1) of a client accepting both lanes.
		st, body := c.sync(id, &epoch, &ssp2.PullHeader{Accept: 3},
			&ssp2.Subscription{ID: "s1", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: -1})
		if !served(t, st, body) {
			t.Fatalf("pull: %d %s", st, body)
		}
		m, _ := ssp2.DecodeMessage(body)
		var inline, ref int
		for _, f := range m.Frames {
			switch f.(type) {
			case *ssp2.SegmentInline:
				inline++
			case *ssp2.SegmentRef:
				ref++
			}
		}
		if tc.ref && (ref != 1 || inline != 0) || !tc.ref && (inline != 1 || ref != 0) {
			t.Errorf("limits %v: %d inline, %d references", tc.limits, inline, ref)
		}
	}
}

// TestMaxOperationsPerRequestZero: limits.maxOperationsPerRequest 0 caps
// a request at zero operations (every push refused with
// sync.too_many_operations), while an absent limit keeps the default.
func TestMaxOperationsPerRequestZero(t *testing.T) {
	c := newControl(t)
	for _, tc := range []struct {
		limits  map[string]any
		refused bool
	}{{nil, false}, {map[string]any{"maxOperationsPerRequest": 0}, true}} {
		id := c.instanceWith(tc.limits)
		epoch := c.epoch(id)
		st, body := c.sync(id, &epoch, &ssp2.PushCommit{ClientCommitID: "c1",
			Operations: []ssp2.Operation{{Table: "tasks", RowID: "t1", Op: ssp2.OpUpsert, Payload: taskRow(t, c, id, "t1")}}})
		var pe struct{ Code string }
		_ = json.Unmarshal(body, &pe)
		switch {
		case tc.refused && (st != http.StatusBadRequest || pe.Code != string(ssp2.CodeTooManyOperations)):
			t.Errorf("limits %v: %d %s, want 400 sync.too_many_operations", tc.limits, st, body)
		case !tc.refused && !served(t, st, body):
			t.Errorf("limits %v: push refused: %d %s", tc.limits, st, body)
		}
	}
	st, body := c.do("POST", "/__test/instances", []byte(`{"schema": `+tasksSchema+`, "partition": "p", "nowMs": 1, "limits": {"maxOperationsPerRequest": -1}}`), "")
	if st != http.StatusBadRequest {
		t.Errorf("maxOperationsPerRequest -1: %d %s", st, body)
	}
}

// TestUnknownInstanceRoutes: every route under an instance's mount
// answers errors in the SSP2 JSON shape, an unknown one included (not
// the mux's plain-text 404).
func TestUnknownInstanceRoutes(t *testing.T) {
	c := newControl(t)
	id := c.instance()
	for _, r := range []struct{ method, path string }{
		{"GET", "/i/" + id + "/nope"}, {"POST", "/i/" + id + "/sync/extra"}, {"GET", "/i/" + id + "/"},
		{"GET", "/i/" + id + "/sync"}, {"GET", "/i/unknown/sync"},
	} {
		req, _ := http.NewRequest(r.method, c.url+r.path, nil)
		req.Header.Set(ActorHeader, "u1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var pe struct {
			Code, Category, RecommendedAction, Message string
			Retryable                                  *bool
		}
		if resp.StatusCode < 400 || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &pe) != nil ||
			pe.Code == "" || pe.Category == "" || pe.RecommendedAction == "" || pe.Message == "" || pe.Retryable == nil {
			t.Errorf("%s %s: %d %q %s, want the SSP2 JSON error shape", r.method, r.path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
	}
}
