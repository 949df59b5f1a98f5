package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/goleak"

	"github.com/syncnode/syncnode/admin"
	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// permissionsConf is the documented nats.conf with an operator, a hooks
// and an app user (docs/bus.md, "Permissions").
const permissionsConf = "../docs/nats-permissions.conf"

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startSecured starts a node on the documented nats.conf with users;
// mods edit the configuration further.
func startSecured(t *testing.T, mods ...func(*node.Config)) *node.Node {
	t.Helper()
	return nodetest.Start(t, func(c *node.Config) {
		c.NATS.ConfigFile = permissionsConf
		c.NATS.User, c.NATS.Password = "syncnode", "node-secret"
		for _, m := range mods {
			m(c)
		}
	})
}

// connect opens a TCP connection to the node's NATS as user; async errors
// (permission violations) go to errs when it is non-nil.
func connect(t *testing.T, n *node.Node, user, password string, errs chan<- error) *nats.Conn {
	t.Helper()
	opts := []nats.Option{nats.UserInfo(user, password), nats.MaxReconnects(0)}
	if errs != nil {
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	}
	nc, err := nats.Connect(n.NATS.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// seed pushes todos into partitions through a real client, pulls them (a
// bootstrap builds a segment), and waits until the relay published them.
func seed(t *testing.T, n *node.Node, partition string, rows int) {
	t.Helper()
	ctx := ctxT(t)
	c := nodetest.Client(t, n, nodetest.Token(t, "alice", partition, map[string][]string{"project_id": {"p1"}}))
	for i := range rows {
		if _, err := c.Upsert(ctx, "todos", nodetest.Todo(partition+"-"+string(rune('a'+i)), "p1", "t")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Subscribe("s1", "todos", map[string][]string{"project_id": {"p1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SyncUntilIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func wantCode(t *testing.T, err error, code admin.Code) *admin.Error {
	t.Helper()
	var ae *admin.Error
	if !errors.As(err, &ae) || ae.Code != code {
		t.Fatalf("err = %v, want %s", err, code)
	}
	return ae
}

// TestEndpoints calls every admin endpoint as the operator user of the
// documented permissions, over TCP, against a running node.
func TestEndpoints(t *testing.T) {
	t.Parallel()
	n := startSecured(t)
	seed(t, n, "acme", 3)
	seed(t, n, "beta", 1)
	ctx := ctxT(t)
	api := admin.NewClient(connect(t, n, "operator", "operator-secret", nil), 10*time.Second)

	info, err := api.NodeInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Node != "test-node" || info.Version != "1.2.3" || info.SchemaVersion != 1 || info.StoredSchemaVersion != 1 ||
		info.Storage != "sqlite" || !info.Ready || info.UptimeMs < 0 || len(info.Hooks) != 0 {
		t.Errorf("node info = %+v", info)
	}
	if r := info.Relay; r.Events < 4 || r.Lag != 0 || r.PartitionsChecked != 2 || r.PartitionsBehind != 0 || r.LagError != "" {
		t.Errorf("relay info = %+v, want 4+ events, no lag over 2 partitions", r)
	}

	page, err := api.Partitions(ctx, admin.PartitionsRequest{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Partitions) != 1 || page.Partitions[0].Partition != "acme" || page.Next == nil || *page.Next != "acme" {
		t.Fatalf("first page = %+v", page)
	}
	page, err = api.Partitions(ctx, admin.PartitionsRequest{After: page.Next, Limit: 1})
	if err != nil || len(page.Partitions) != 1 || page.Partitions[0].Partition != "beta" || page.Next != nil {
		t.Fatalf("second page = %+v, %v", page, err)
	}

	pi, err := api.PartitionInfo(ctx, admin.PartitionRequest{Partition: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if pi.MaxCommitSeq != 3 || pi.Token != "acme" || pi.LogEpoch == "" || pi.Relay.PublishedSeq != 3 || pi.Relay.Lag != 0 ||
		!pi.Gate.Serving || !pi.Gate.Registered || pi.Gate.LogEpoch != pi.LogEpoch || pi.Gate.RunningSchemaVersion != 1 {
		t.Errorf("partition info = %+v", pi)
	}

	cl, err := api.Clients(ctx, admin.ClientsRequest{Partition: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cl.Clients) != 1 || cl.Clients[0].ActorID != "alice" || cl.Clients[0].Cursor != 3 || cl.Clients[0].Behind != 0 ||
		!strings.Contains(string(cl.Clients[0].Subscriptions), "s1") {
		t.Errorf("clients = %+v", cl)
	}

	cp, err := api.CheckpointDeclare(ctx, admin.DeclareRequest{Partition: "acme", Name: "cp1"})
	if err != nil || cp.Partition != "acme" || cp.Name != "cp1" || cp.SchemaVersion != 1 || cp.State != "declared" {
		t.Fatalf("declare = %+v, %v", cp, err)
	}
	if _, err := api.CheckpointDeclare(ctx, admin.DeclareRequest{Partition: "acme", Name: "cp2"}); err != nil {
		t.Fatal(err)
	}
	one := "acme"
	list, err := api.Checkpoints(ctx, admin.CheckpointsRequest{Partition: &one})
	if err != nil || len(list.Checkpoints) != 2 {
		t.Fatalf("list = %+v, %v", list, err)
	}
	g, err := api.Gate(ctx, admin.PartitionRequest{Partition: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Pending) != 2 || g.Pending[0].Name != "cp1" || g.WriterFence == nil || *g.WriterFence != 1 {
		t.Errorf("gate with pending checkpoints = %+v", g)
	}
	// The operator's checkpoints close the partition on every node.
	if g.Serving || g.Refusal == nil || g.Refusal.SyncCode != ssp2.CodeSchemaNotReady {
		t.Errorf("gate with pending checkpoints: serving %v, refusal %+v", g.Serving, g.Refusal)
	}
	// A watermark below the partition's changes is stale: a conflict
	// carrying the outcome.
	zero := int64(0)
	_, err = api.CheckpointActivate(ctx, admin.ActivateRequest{Partition: "acme", Name: "cp2", Sources: []string{"todos"}, Watermark: &zero})
	ae := wantCode(t, err, admin.CodeConflict)
	var out admin.ActivateResponse
	if json.Unmarshal(ae.Details, &out) != nil || out.Outcome != "stale" {
		t.Errorf("stale activation details = %s", ae.Details)
	}
	three := int64(3)
	act, err := api.CheckpointActivate(ctx, admin.ActivateRequest{Partition: "acme", Name: "cp1", Sources: []string{"todos"}, Watermark: &three})
	if err != nil || act.Outcome != "activated" || act.Watermark != 3 {
		t.Fatalf("activate = %+v, %v", act, err)
	}

	rot, err := api.RotateEpoch(ctx, admin.PartitionRequest{Partition: "beta"})
	if err != nil || rot.Partition != "beta" || rot.LogEpoch == "" {
		t.Fatalf("rotate = %+v, %v", rot, err)
	}
	bi, err := api.PartitionInfo(ctx, admin.PartitionRequest{Partition: "beta"})
	if err != nil || bi.LogEpoch != rot.LogEpoch || !bi.EpochRequired {
		t.Fatalf("after rotation: %+v, %v", bi, err)
	}
	if rp, err := api.Republish(ctx); err != nil || !rp.Republished {
		t.Fatalf("republish = %+v, %v", rp, err)
	}

	pr, err := api.Prune(ctx, admin.PruneRequest{Partition: "acme", Literal: true})
	if err != nil || pr.HorizonSeq != 3 || pr.RemovedCommits != 3 {
		t.Fatalf("prune = %+v, %v", pr, err)
	}

	st, err := api.SegmentStats(ctx)
	if err != nil || st.Objects < 1 || st.Builds < 1 || st.StoredBytes == 0 {
		t.Fatalf("segment stats = %+v, %v", st, err)
	}
	if sp, err := api.SegmentPrune(ctx, admin.SegmentPruneRequest{GC: true}); err != nil || sp.Objects != 0 {
		t.Fatalf("segment prune of live segments = %+v, %v", sp, err)
	}
}

// TestErrors checks the typed error replies: codes, the syncnode code
// behind them, and the micro error headers.
func TestErrors(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nil)
	ctx := ctxT(t)
	nc := connect(t, n, "", "", nil)
	api := admin.NewClient(nc, 10*time.Second)

	_, err := api.PartitionInfo(ctx, admin.PartitionRequest{Partition: "missing"})
	if ae := wantCode(t, err, admin.CodeNotFound); ae.SyncCode != ssp2.CodeStoragePartitionUnregistered {
		t.Errorf("sync code = %q", ae.SyncCode)
	}
	_, err = api.PartitionInfo(ctx, admin.PartitionRequest{})
	wantCode(t, err, admin.CodeInvalidRequest)
	_, err = api.Partitions(ctx, admin.PartitionsRequest{Limit: admin.MaxLimit + 1})
	wantCode(t, err, admin.CodeInvalidRequest)
	_, err = api.CheckpointActivate(ctx, admin.ActivateRequest{Partition: "p", Name: "n"})
	wantCode(t, err, admin.CodeInvalidRequest)
	_, err = api.CheckpointActivate(ctx, admin.ActivateRequest{Partition: "p", Name: "undeclared", Sources: []string{"todos"}})
	if ae := wantCode(t, err, admin.CodeNotFound); ae.SyncCode != ssp2.CodeStorageCheckpointNotDeclared {
		t.Errorf("undeclared activation: sync code = %q", ae.SyncCode)
	}

	// Raw: unknown fields are refused, the status travels in the headers.
	msg, err := nc.RequestWithContext(ctx, bus.AdminSubject(bus.AdminPartitionsInfo), []byte(`{"partition":"p","bogus":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Header.Get(micro.ErrorCodeHeader); got != "400" {
		t.Errorf("error code header = %q, want 400", got)
	}
	var body struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(msg.Data, &body); err != nil || body.Error.Code != string(admin.CodeInvalidRequest) ||
		!strings.Contains(body.Error.Message, "bogus") {
		t.Errorf("error body = %s", msg.Data)
	}
	if msg, err := nc.RequestWithContext(ctx, bus.AdminSubject(bus.AdminNodeInfo), []byte(`[1]`)); err != nil ||
		msg.Header.Get(micro.ErrorCodeHeader) != "400" {
		t.Errorf("a non-object body: %v, %v", msg, err)
	}
}

// TestDiscovery is what `nats micro ls` and `nats micro info syncnode`
// do: PING and INFO on $SRV subjects list the node's service and every
// endpoint.
func TestDiscovery(t *testing.T) {
	t.Parallel()
	n := startSecured(t)
	ctx := ctxT(t)
	nc := connect(t, n, "operator", "operator-secret", nil)

	// nats micro ls pings every service.
	msg, err := nc.RequestWithContext(ctx, "$SRV.PING", nil)
	if err != nil {
		t.Fatal(err)
	}
	var ping micro.Ping
	if err := json.Unmarshal(msg.Data, &ping); err != nil || ping.Name != bus.AdminService || ping.Version != "1.2.3" ||
		ping.Metadata["node"] != "test-node" {
		t.Fatalf("ping = %+v, %v", ping, err)
	}
	msg, err = nc.RequestWithContext(ctx, "$SRV.INFO.syncnode", nil)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, ep := range info.Endpoints {
		subjects = append(subjects, ep.Subject)
		want := bus.AdminQueueGroup
		if ep.Subject == bus.AdminSubject(bus.AdminNodeInfo) {
			want = "" // every node answers node.info
		}
		if ep.QueueGroup != want {
			t.Errorf("endpoint %s: queue group %q, want %q", ep.Subject, ep.QueueGroup, want)
		}
	}
	for _, ep := range n.Admin.Endpoints() {
		if !slices.Contains(subjects, bus.AdminSubject(ep.Name)) {
			t.Errorf("INFO lacks %s (has %v)", bus.AdminSubject(ep.Name), subjects)
		}
	}
	// The node adds the reactions endpoints (package reactions, through
	// Extension) to the built-in ones.
	for _, ep := range []string{bus.AdminReactionsList, bus.AdminReactionsShow, bus.AdminReactionsRetry, bus.AdminReactionsPrune, bus.AdminReactionsStats} {
		if !slices.Contains(subjects, bus.AdminSubject(ep)) {
			t.Errorf("INFO lacks %s (has %v)", bus.AdminSubject(ep), subjects)
		}
	}
	if want := len(n.Admin.Endpoints()) + 5; len(subjects) != want {
		t.Errorf("%d endpoints, want %d: %v", len(subjects), want, subjects)
	}
}

// TestPermissions: with the documented nats.conf, the app and hooks users
// are refused by the server before the node sees the request, while the
// app user still follows commit events.
func TestPermissions(t *testing.T) {
	t.Parallel()
	n := startSecured(t)
	ctx := ctxT(t)
	op := connect(t, n, "operator", "operator-secret", nil)
	events := make(chan *nats.Msg, 16)

	for _, u := range []struct{ user, password string }{{"app", "app-secret"}, {"hooks", "hooks-secret"}} {
		errs := make(chan error, 4)
		nc := connect(t, n, u.user, u.password, errs)
		if u.user == "app" {
			if _, err := nc.ChanSubscribe(bus.Names{}.AllCommits(), events); err != nil {
				t.Fatal(err)
			}
		}
		for _, subject := range []string{bus.AdminSubject(bus.AdminCheckpointsRotate), "$SRV.PING.syncnode"} {
			if err := nc.Publish(subject, []byte(`{"partition":"acme"}`)); err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errs:
				if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), subject) {
					t.Errorf("%s publishing %s: async error %v, want a permissions violation", u.user, subject, err)
				}
			case <-ctx.Done():
				t.Fatalf("%s publishing %s: the server did not refuse", u.user, subject)
			}
		}
	}
	// The node never saw a rotate-epoch request.
	msg, err := op.RequestWithContext(ctx, "$SRV.STATS.syncnode", nil)
	if err != nil {
		t.Fatal(err)
	}
	var stats micro.Stats
	if err := json.Unmarshal(msg.Data, &stats); err != nil {
		t.Fatal(err)
	}
	for _, ep := range stats.Endpoints {
		if ep.NumRequests != 0 {
			t.Errorf("endpoint %s served %d requests", ep.Subject, ep.NumRequests)
		}
	}

	seed(t, n, "acme", 1)
	select {
	case m := <-events:
		if !strings.HasPrefix(m.Subject, "sync.acme.commit.") {
			t.Errorf("app user got %s", m.Subject)
		}
	case <-ctx.Done():
		t.Fatal("the app user received no commit event")
	}
}

// TestExtension registers an extra endpoint (the shape of the reactions
// endpoints) next to the built-in ones.
func TestExtension(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, func(c *node.Config) { c.Admin.Disabled = true })
	ctx := ctxT(t)
	nc := connect(t, n, "", "", nil)
	type countReq struct {
		Status string `json:"status"`
	}
	ext := extension{{Name: "reactions.counts", Handler: admin.Handle(func(_ context.Context, r countReq) (map[string]int, error) {
		if r.Status == "" {
			return nil, &admin.Error{Code: admin.CodeInvalidRequest, Message: "status is required"}
		}
		return map[string]int{r.Status: 7}, nil
	})}}
	a, err := admin.New(admin.Config{Conn: nc, Node: "x", Store: n.Store, Gate: n.Gate, Extensions: []admin.Extension{ext}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(context.Background()) })
	api := admin.NewClient(nc, 10*time.Second)
	var got map[string]int
	if err := api.Call(ctx, "reactions.counts", countReq{Status: "pending"}, &got); err != nil || got["pending"] != 7 {
		t.Fatalf("extension call = %v, %v", got, err)
	}
	wantCode(t, api.Call(ctx, "reactions.counts", countReq{}, &got), admin.CodeInvalidRequest)
	// Without Segments or Relay, those endpoints say so.
	_, err = api.SegmentStats(ctx)
	wantCode(t, err, admin.CodeUnavailable)

	for _, bad := range []string{"node.info", "Reactions.list", "reactions", "a.b.c"} {
		b, err := admin.New(admin.Config{Conn: nc, Store: n.Store, Gate: n.Gate,
			Extensions: []admin.Extension{extension{{Name: bad, Handler: ext[0].Handler}}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(ctx); err == nil {
			_ = b.Stop(ctx)
			t.Errorf("extension endpoint %q accepted", bad)
		}
	}
}

type extension []admin.Endpoint

func (e extension) AdminEndpoints() []admin.Endpoint { return e }

// TestNoNode: a client without a node to answer says so.
func TestNoNode(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, func(c *node.Config) { c.Admin.Disabled = true })
	_, err := admin.NewClient(connect(t, n, "", "", nil), 5*time.Second).NodeInfo(ctxT(t))
	if !errors.Is(err, admin.ErrNoNode) {
		t.Fatalf("err = %v, want ErrNoNode", err)
	}
}

func TestCodes(t *testing.T) {
	t.Parallel()
	seen := map[int]admin.Code{}
	for _, c := range admin.Codes() {
		if !strings.HasPrefix(string(c), "admin.") {
			t.Errorf("code %q outside admin.*", c)
		}
		if prev, ok := seen[c.Status()]; ok {
			t.Errorf("codes %s and %s share status %d", prev, c, c.Status())
		}
		seen[c.Status()] = c
	}
	if len(seen) != 5 {
		t.Errorf("%d codes", len(seen))
	}
}

// TestPermissionsDocumented: docs/bus.md shows docs/nats-permissions.conf
// verbatim, so the tested file and the documented one cannot drift.
func TestPermissionsDocumented(t *testing.T) {
	t.Parallel()
	conf, err := os.ReadFile(permissionsConf)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/bus.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), string(conf)) {
		t.Error("docs/bus.md does not contain docs/nats-permissions.conf verbatim")
	}
}
