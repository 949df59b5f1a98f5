package gate_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/gate"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// prod is the production bus namespace.
var prod bus.Names

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testSchema = `{"version": 1, "tables": [{"name": "tasks", "primaryKey": "id", "columns": [
	{"name": "id", "type": "string"},
	{"name": "project_id", "type": "string"},
	{"name": "title", "type": "string", "nullable": true}],
	"scopes": ["project:{project_id}"]}]}`

func parse(t testing.TB, v int) *schema.Schema {
	t.Helper()
	s, err := schema.Parse([]byte(strings.Replace(testSchema, `"version": 1`, `"version": `+string(rune('0'+v)), 1)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// env is a real SQLite store with schema v1 and, when asked, a real
// embedded NATS server with the control stream.
type env struct {
	t     *testing.T
	ctx   context.Context
	store *sqlitestore.Store
	srv   *embedded.Server
}

func newEnv(t *testing.T, withBus bool) *env {
	t.Helper()
	e := &env{t: t, ctx: testCtx(t)}
	st, err := sqlitestore.Open(e.ctx, sqlitestore.Config{Path: filepath.Join(t.TempDir(), "sync.db"), Synchronous: sqlitestore.SynchronousNormal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.EnsureSchema(e.ctx, parse(t, 1)); err != nil {
		t.Fatal(err)
	}
	e.store = st
	if withBus {
		e.srv = embeddedtest.Start(t)
		if err := bus.EnsureStreams(e.ctx, e.srv.JetStream(), prod, bus.StreamsConfig{}.WithDefaults()); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// partition registers a partition.
func (e *env) partition(id string) storage.Partition {
	e.t.Helper()
	p, err := e.store.PartitionTouch(e.ctx, id, 1)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

type gateOpts struct {
	name     string
	version  int
	bus      bool
	declared []storage.CheckpointKey
	onChange func(string)
}

// gate starts a gate on its own NATS connection (a node of its own) and
// waits until its watched view is live.
func (e *env) gate(o gateOpts) *gate.Gate {
	e.t.Helper()
	if o.version == 0 {
		o.version = 1
	}
	cfg := gate.Config{Store: e.store, Schema: parse(e.t, o.version), Declared: o.declared, Node: o.name, OnChange: o.onChange, WatchCheck: 10 * time.Millisecond}
	if o.bus {
		nc, err := e.srv.Connect(nats.Name(o.name))
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			e.t.Fatal(err)
		}
		cfg.Conn, cfg.JetStream = nc, js
	}
	g, err := gate.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := g.Start(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Stop(ctx); err != nil {
			e.t.Error(err)
		}
	})
	if o.bus {
		waitFor(e.t, 10*time.Second, "the gate's watch to go live", g.WatchLive)
		// Going live starts a resync in the background; it may rewrite
		// tokens from SQL (it repairs changes made without a token), so a
		// test that makes such a change waits for it to end first.
		waitFor(e.t, 10*time.Second, "the gate's first resync", func() bool { return g.Metrics().Resyncs.Load() > 0 })
	}
	return g
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, d, what, cond)
}

func reason(t testing.TB, err error) string {
	t.Helper()
	var e *ssp2.Error
	if !errors.As(err, &e) || e.Code != ssp2.CodeSchemaNotReady {
		t.Fatalf("error = %v, want %s", err, ssp2.CodeSchemaNotReady)
	}
	var d gate.RefusalDetails
	if err := json.Unmarshal(e.Details, &d); err != nil {
		t.Fatalf("details %s: %v", e.Details, err)
	}
	return d.Reason
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestRefusalRule(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	p := e.partition("p")
	a := e.gate(gateOpts{name: "a"})
	b := e.gate(gateOpts{name: "b"})
	ctx := e.ctx
	must[gate.Ticket](t)(a.Admit(ctx, p.ID))

	// B declares: B keeps serving, A refuses the partition, and only it.
	cp := must[storage.Checkpoint](t)(b.Declare(ctx, p.ID, "proj"))
	if cp.State != storage.CheckpointDeclared || !b.Declared(cp.CheckpointKey) || a.Declared(cp.CheckpointKey) {
		t.Fatalf("declared %+v", cp)
	}
	must[gate.Ticket](t)(b.Admit(ctx, p.ID))
	_, err := a.Admit(ctx, p.ID)
	if r := reason(t, err); r != gate.ReasonCheckpointPending {
		t.Fatalf("reason = %s", r)
	}
	e.partition("other")
	must[gate.Ticket](t)(a.Admit(ctx, "other"))
	if r := reason(t, a.Verify(ctx, p.ID)); r != gate.ReasonCheckpointPending {
		t.Fatalf("verify reason = %s", r)
	}
	if err := a.Ready(ctx); err == nil || !strings.Contains(err.Error(), "proj") {
		t.Fatalf("Ready = %v, want the pending checkpoint named", err)
	}
	if err := b.Ready(ctx); err != nil {
		t.Fatalf("the declaring process is not ready: %v", err)
	}

	// Activation reopens it everywhere.
	out := must[storage.ActivateOutcome](t)(b.Activate(ctx, storage.CheckpointActivateParams{CheckpointKey: cp.CheckpointKey}))
	if out != storage.ActivateActivated {
		t.Fatalf("activate = %s", out)
	}
	must[gate.Ticket](t)(a.Admit(ctx, p.ID))
	if err := a.Ready(ctx); err != nil {
		t.Fatal(err)
	}

	// A newer schema in the database refuses the older build; the newer
	// build serves.
	if err := e.store.EnsureSchema(ctx, parse(t, 2)); err != nil {
		t.Fatal(err)
	}
	_, err = a.Admit(ctx, p.ID)
	if r := reason(t, err); r != gate.ReasonSchemaNewer {
		t.Fatalf("reason = %s", r)
	}
	if r := reason(t, a.Ready(ctx)); r != gate.ReasonSchemaNewer {
		t.Fatalf("ready reason = %s", r)
	}
	v2 := e.gate(gateOpts{name: "v2", version: 2})
	must[gate.Ticket](t)(v2.Admit(ctx, p.ID))
	v3 := e.gate(gateOpts{name: "v3", version: 3})
	_, err = v3.Admit(ctx, p.ID)
	if r := reason(t, err); r != gate.ReasonSchemaOlder {
		t.Fatalf("reason = %s", r)
	}
}

// TestDeclareExternal: a checkpoint declared on someone else's behalf
// closes the partition on the declaring gate too, until it activates.
func TestDeclareExternal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	p := e.partition("p")
	a := e.gate(gateOpts{name: "a"})
	ctx := e.ctx
	cp := must[storage.Checkpoint](t)(a.DeclareExternal(ctx, p.ID, "fix"))
	if cp.State != storage.CheckpointDeclared || a.Declared(cp.CheckpointKey) {
		t.Fatalf("declared %+v, own declaration %v", cp, a.Declared(cp.CheckpointKey))
	}
	_, err := a.Admit(ctx, p.ID)
	if r := reason(t, err); r != gate.ReasonCheckpointPending {
		t.Fatalf("reason = %s", r)
	}
	out := must[storage.ActivateOutcome](t)(a.Activate(ctx, storage.CheckpointActivateParams{CheckpointKey: cp.CheckpointKey}))
	if out != storage.ActivateActivated {
		t.Fatalf("activate = %s", out)
	}
	must[gate.Ticket](t)(a.Admit(ctx, p.ID))
}

// TestCheckRefusesChangedToken: a change between admission and the
// serving transaction refuses, in a read and in a write transaction, even
// when the values returned to where they were.
func TestCheckRefusesChangedToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	p := e.partition("p")
	a := e.gate(gateOpts{name: "a"})
	ctx := e.ctx
	inRead := func(tk gate.Ticket) error {
		return e.store.ReadTx(ctx, func(tx storage.ReadTx) error { return tk.Check(ctx, tx) })
	}
	inWrite := func(tk gate.Ticket) error {
		return e.store.WriteTx(ctx, p.ID, func(tx storage.Tx) error { return tk.Check(ctx, tx) })
	}
	tk := must[gate.Ticket](t)(a.Admit(ctx, p.ID))
	if err := inRead(tk); err != nil {
		t.Fatal(err)
	}
	if err := inWrite(tk); err != nil {
		t.Fatal(err)
	}
	if err := (gate.Ticket{}).Check(ctx, nil); err != nil {
		t.Fatalf("the zero ticket checks: %v", err)
	}

	// An epoch rotation under a request.
	must[storage.Partition](t)(a.RotateEpoch(ctx, p.ID))
	for _, check := range []func(gate.Ticket) error{inRead, inWrite} {
		if r := reason(t, check(tk)); r != gate.ReasonTokenChanged {
			t.Fatalf("reason = %s", r)
		}
	}

	// A checkpoint declared and activated by this very process under a
	// request: the pending set is back to empty, the revision is not.
	tk = must[gate.Ticket](t)(a.Admit(ctx, p.ID))
	cp := must[storage.Checkpoint](t)(a.Declare(ctx, p.ID, "flip"))
	must[storage.ActivateOutcome](t)(a.Activate(ctx, storage.CheckpointActivateParams{CheckpointKey: cp.CheckpointKey}))
	if r := reason(t, inRead(tk)); r != gate.ReasonTokenChanged {
		t.Fatalf("reason after V → W → V = %s", r)
	}
	must[gate.Ticket](t)(a.Admit(ctx, p.ID))
}

// TestTokenPropagation: a declaration on one node reaches the other
// through the KV watch; that node then refuses from its watched view,
// without reading SQL, and its change hook runs.
func TestTokenPropagation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	p := e.partition("p")
	var (
		mu      sync.Mutex
		changed []string
	)
	a := e.gate(gateOpts{name: "a", bus: true})
	b := e.gate(gateOpts{name: "b", bus: true, onChange: func(part string) {
		mu.Lock()
		defer mu.Unlock()
		changed = append(changed, part)
	}})
	ctx := e.ctx
	// Warm B's view: the second admission is served from it.
	must[gate.Ticket](t)(b.Admit(ctx, p.ID))
	cached := b.Metrics().AdmitCached.Load()
	tk := must[gate.Ticket](t)(b.Admit(ctx, p.ID))
	if b.Metrics().AdmitCached.Load() != cached+1 {
		t.Fatal("a warm admission read SQL")
	}

	// How fast the refusal travels is BenchmarkRefusalPropagation's
	// business; here it must arrive, through the watch.
	cp := must[storage.Checkpoint](t)(a.Declare(ctx, p.ID, "proj"))
	waitFor(t, 10*time.Second, "B to refuse", func() bool {
		_, err := b.Admit(ctx, p.ID)
		return err != nil
	})
	_, err := b.Admit(ctx, p.ID)
	if r := reason(t, err); r != gate.ReasonCheckpointPending {
		t.Fatalf("reason = %s", r)
	}
	if b.Metrics().WatchUpdates.Load() == 0 {
		t.Fatal("B never saw the token change")
	}
	// A request admitted before the change is refused inside its
	// transaction.
	err = e.store.ReadTx(ctx, func(tx storage.ReadTx) error { return tk.Check(ctx, tx) })
	if r := reason(t, err); r != gate.ReasonCheckpointPending {
		t.Fatalf("in-flight reason = %s", r)
	}
	must[gate.Ticket](t)(a.Admit(ctx, p.ID))

	must[storage.ActivateOutcome](t)(a.Activate(ctx, storage.CheckpointActivateParams{CheckpointKey: cp.CheckpointKey}))
	waitFor(t, time.Second, "B to serve again", func() bool {
		_, err := b.Admit(ctx, p.ID)
		return err == nil
	})
	// B may serve again (healing from SQL) before the watch delivers the
	// activation to its change hook; wait for both hook calls.
	waitFor(t, time.Second, "the change hook to see the activation", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(changed) >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	if changed[0] != p.ID || changed[1] != p.ID {
		t.Fatalf("change hook calls = %q", changed)
	}
}

// TestSQLAloneWithoutKV: a node that lost its NATS connection gates on
// SQL alone and never serves on its stale view.
func TestSQLAloneWithoutKV(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	p := e.partition("p")
	a := e.gate(gateOpts{name: "a", bus: true})
	nc, err := e.srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	b, err := gate.New(gate.Config{Store: e.store, Schema: parse(t, 1), Conn: nc, JetStream: js, Node: "b", WatchCheck: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Stop(context.Background())
	waitFor(t, 10*time.Second, "B live", b.WatchLive)
	must[gate.Ticket](t)(b.Admit(e.ctx, p.ID))
	must[gate.Ticket](t)(b.Admit(e.ctx, p.ID)) // from the view

	nc.Close()
	waitFor(t, time.Second, "B to notice", func() bool { return !b.WatchLive() })
	must[storage.Checkpoint](t)(a.Declare(e.ctx, p.ID, "proj"))
	sqlBefore := b.Metrics().AdmitCached.Load()
	_, err = b.Admit(e.ctx, p.ID)
	if r := reason(t, err); r != gate.ReasonCheckpointPending {
		t.Fatalf("reason = %s", r)
	}
	if b.Metrics().AdmitCached.Load() != sqlBefore {
		t.Fatal("a node without KV admitted from its view")
	}
}

// TestTokensRebuiltFromSQL: tokens reflect SQL after transitions, and a
// lost or damaged token is rebuilt by Reconcile.
func TestTokensRebuiltFromSQL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	p := e.partition("p")
	a := e.gate(gateOpts{name: "a", bus: true})
	ctx := e.ctx
	cp := must[storage.Checkpoint](t)(a.Declare(ctx, p.ID, "proj"))
	kv, err := e.srv.JetStream().KeyValue(ctx, prod.GateBucket())
	if err != nil {
		t.Fatal(err)
	}
	bp, _ := bus.NewPartition(p.ID)
	token := func() gate.Token {
		t.Helper()
		en, err := kv.Get(ctx, bus.GateKey(bp))
		if err != nil {
			t.Fatal(err)
		}
		var tok gate.Token
		if err := json.Unmarshal(en.Value(), &tok); err != nil {
			t.Fatal(err)
		}
		return tok
	}
	want := func() gate.Token {
		st, err := e.store.GateRead(ctx, p.ID, 1)
		if err != nil {
			t.Fatal(err)
		}
		return gate.TokenOf(p.ID, st)
	}
	if got := token(); !got.Equal(want()) || len(got.Pending) != 1 || got.Pending[0] != "proj" {
		t.Fatalf("token %+v, want %+v", got, want())
	}
	writes := a.Metrics().TokenWrites.Load()
	if err := a.Publish(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if a.Metrics().TokenWrites.Load() != writes {
		t.Fatal("an unchanged token was written again")
	}
	// A transition made without the bus (an older tool) and a damaged key.
	if _, err := e.store.CheckpointActivate(ctx, storage.CheckpointActivateParams{CheckpointKey: cp.CheckpointKey}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, bus.GateKey(bp), []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	if err := a.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := token(); !got.Equal(want()) || len(got.Pending) != 0 {
		t.Fatalf("rebuilt token %+v, want %+v", got, want())
	}
	en, err := kv.Get(ctx, bus.GateSchemaKey)
	if err != nil {
		t.Fatal(err)
	}
	var st gate.SchemaToken
	if err := json.Unmarshal(en.Value(), &st); err != nil || st.SchemaVersion != 1 {
		t.Fatalf("schema token %s: %v", en.Value(), err)
	}
}

// TestControlEvents: every transition publishes its CloudEvent.
func TestControlEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	p := e.partition("p")
	ctx := e.ctx
	got := make(chan *nats.Msg, 64)
	sub, err := e.srv.Conn().ChanSubscribe(prod.ControlSubjects(), got)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := e.srv.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	a := e.gate(gateOpts{name: "a", bus: true})
	cp := must[storage.Checkpoint](t)(a.Declare(ctx, p.ID, "proj"))
	claimed := must[storage.Checkpoint](t)(a.Claim(ctx, cp.CheckpointKey))
	a.Advanced(ctx, storage.CheckpointAdvanceParams{CheckpointKey: cp.CheckpointKey, OwnerEpoch: claimed.OwnerEpoch})
	if _, err := a.Activate(ctx, storage.CheckpointActivateParams{CheckpointKey: cp.CheckpointKey, OwnerEpoch: claimed.OwnerEpoch}); err != nil {
		t.Fatal(err)
	}
	must[storage.Partition](t)(a.RotateEpoch(ctx, p.ID))
	if err := e.store.EnsureSchema(ctx, parse(t, 2)); err != nil {
		t.Fatal(err)
	}
	e.gate(gateOpts{name: "v2", version: 2, bus: true})
	want := []string{
		"syncctl.p.checkpoint_declared", "syncctl.p.checkpoint_claimed", "syncctl.p.checkpoint_advanced",
		"syncctl.p.checkpoint_activated", "syncctl.p.epoch_rotated", "syncctl.=global.schema_migrated",
	}
	var seen []string
	timeout := time.After(5 * time.Second)
	for len(seen) < len(want) {
		select {
		case m := <-got:
			if m.Header.Get(bus.HeaderType) != bus.ControlEventType(m.Header.Get(bus.HeaderEventName)) || m.Header.Get(bus.HeaderSource) == "" {
				t.Fatalf("event headers %v", m.Header)
			}
			if strings.HasSuffix(m.Subject, "schema_migrated") && len(seen) < len(want)-1 {
				continue // the first gate's own start announces version 1
			}
			seen = append(seen, m.Subject)
		case <-timeout:
			t.Fatalf("events %q, want %q", seen, want)
		}
	}
	if strings.Join(seen, " ") != strings.Join(want, " ") {
		t.Fatalf("events %q, want %q", seen, want)
	}
	// They are in SYNC_CONTROL.
	s, err := e.srv.JetStream().Stream(ctx, prod.ControlStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs < uint64(len(want)) {
		t.Fatalf("SYNC_CONTROL holds %d messages, %v", info.State.Msgs, err)
	}
}

func TestConfigValidate(t *testing.T) {
	sc := parse(t, 1)
	for _, tc := range []struct {
		cfg  gate.Config
		want string
	}{
		{gate.Config{Schema: sc}, "Store"},
		{gate.Config{Store: (*sqlitestore.Store)(nil)}, "Schema"},
		{gate.Config{Store: (*sqlitestore.Store)(nil), Schema: sc, Declared: []storage.CheckpointKey{{Partition: "p", Name: "x", SchemaVersion: 2}}}, "running schema version"},
		{gate.Config{Store: (*sqlitestore.Store)(nil), Schema: sc, Declared: []storage.CheckpointKey{{Partition: "p", Name: "bad name", SchemaVersion: 1}}}, "Declared"},
		{gate.Config{Store: (*sqlitestore.Store)(nil), Schema: sc, Replicas: 9}, "Replicas"},
	} {
		_, err := gate.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
}

// TestSchemaMigrationPropagates: a newer build migrating the database is
// refused by SQL inside every transaction of an older node at once, and
// at admission as soon as the newer build's schema token reaches it.
func TestSchemaMigrationPropagates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	p := e.partition("p")
	ctx := e.ctx
	old := e.gate(gateOpts{name: "v1", bus: true})
	must[gate.Ticket](t)(old.Admit(ctx, p.ID))
	tk := must[gate.Ticket](t)(old.Admit(ctx, p.ID)) // warm

	if err := e.store.EnsureSchema(ctx, parse(t, 2)); err != nil {
		t.Fatal(err)
	}
	err := e.store.ReadTx(ctx, func(tx storage.ReadTx) error { return tk.Check(ctx, tx) })
	if r := reason(t, err); r != gate.ReasonSchemaNewer {
		t.Fatalf("in-transaction reason = %s", r)
	}
	if fence, ok, err := e.store.WriterFence(ctx, p.ID); err != nil || !ok || fence != 2 {
		t.Fatalf("fence after the migration = %d, %v, %v", fence, ok, err)
	}
	start := time.Now()
	e.gate(gateOpts{name: "v2", version: 2, bus: true}) // publishes schema.current
	waitFor(t, 5*time.Second, "the old node to refuse at admission", func() bool {
		_, err := old.Admit(ctx, p.ID)
		return err != nil
	})
	t.Logf("v2 start → v1 refusal: %s", time.Since(start))
	_, err = old.Admit(ctx, p.ID)
	if r := reason(t, err); r != gate.ReasonSchemaNewer {
		t.Fatalf("reason = %s", r)
	}
}

// TestStaleViewHeals: a change made without a token (an older tool, an
// operator's SQL) leaves the watched view stale; the epoch the request
// read skips it, and a refusal in the transaction drops it, so a retry
// is served. The view stays stale only because nothing resyncs it: the
// resync that going live starts has ended (e.gate waits for it), and it
// would otherwise publish the rotated partition's token and heal the
// view before the stale admission this test needs.
func TestStaleViewHeals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	p := e.partition("p")
	ctx := e.ctx
	g := e.gate(gateOpts{name: "a", bus: true})
	must[gate.Ticket](t)(g.Admit(ctx, p.ID))
	must[gate.Ticket](t)(g.Admit(ctx, p.ID)) // warm

	rotated, err := e.store.PartitionRotateEpoch(ctx, p.ID, 2) // no token
	if err != nil {
		t.Fatal(err)
	}
	check := func(tk gate.Ticket) error {
		return e.store.ReadTx(ctx, func(tx storage.ReadTx) error { return tk.Check(ctx, tx) })
	}
	// With the epoch the request read, the stale view is skipped.
	tk := must[gate.Ticket](t)(g.AdmitAt(ctx, p.ID, rotated.LogEpoch))
	if err := check(tk); err != nil {
		t.Fatalf("admitted at the current epoch, then refused: %v", err)
	}

	if _, err := e.store.PartitionRotateEpoch(ctx, p.ID, 3); err != nil {
		t.Fatal(err)
	}
	tk = must[gate.Ticket](t)(g.Admit(ctx, p.ID)) // from the stale view
	if r := reason(t, check(tk)); r != gate.ReasonTokenChanged {
		t.Fatalf("reason = %s", r)
	}
	tk = must[gate.Ticket](t)(g.Admit(ctx, p.ID)) // the view was dropped: SQL
	if err := check(tk); err != nil {
		t.Fatalf("the retry was refused: %v", err)
	}
}
