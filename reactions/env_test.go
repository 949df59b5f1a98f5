package reactions

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/relay"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const envSchema = `{"version": 1, "tables": [{"name": "orders", "primaryKey": "id", "columns": [
	{"name": "id", "type": "string"}, {"name": "shop", "type": "string"}],
	"scopes": ["shop:{shop}"]}]}`

// env is a real store, a real embedded NATS server on a random port and
// the real relay publishing the store's commits as commit events.
type env struct {
	t      testing.TB
	ctx    context.Context
	store  storage.Store
	schema *schema.Schema
	srv    *embedded.Server
	relay  *relay.Relay
	seq    atomic.Int64
	// committed is when commit's last push transaction returned.
	committed time.Time
}

type backend struct {
	name string
	open func(t testing.TB) storage.Store
}

var backends = []backend{
	{"sqlite", func(t testing.TB) storage.Store {
		st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "sync.db"), Synchronous: sqlitestore.SynchronousNormal})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
	{"postgres", func(t testing.TB) storage.Store {
		url, sch := pgtest.Schema(t)
		st, err := pgstore.Open(context.Background(), pgstore.Config{URL: url, Schema: sch, MaxConns: 16})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
}

func newEnv(t testing.TB, b backend) *env {
	t.Helper()
	sc, err := schema.Parse([]byte(envSchema))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: context.Background(), store: b.open(t), schema: sc, srv: embeddedtest.Start(t)}
	if err := e.store.EnsureSchema(e.ctx, sc); err != nil {
		t.Fatal(err)
	}
	e.relay, err = relay.New(e.srv.JetStream(), e.store, relay.Config{Node: "test", Schema: sc, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.relay.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.relay.Stop(ctx)
	})
	return e
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// conn is a new TCP connection to the env's server, closed at cleanup.
func (e *env) conn() *nats.Conn {
	e.t.Helper()
	nc, err := nats.Connect(e.srv.ClientURL())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

// runner starts a runner on the env with cfg's zero fields filled in for
// tests (a sweep of an hour, so only the bus wakes it) and stops it at
// cleanup.
func (e *env) runner(cfg Config) *Runner {
	e.t.Helper()
	if cfg.Store == nil {
		cfg.Store = e.store
	}
	if cfg.Conn == nil {
		cfg.Conn = e.srv.Conn()
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(e.t)
	}
	r, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := r.Start(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Stop(ctx)
	})
	return r
}

// plan is one reaction to enqueue.
type plan struct {
	key, typ    string
	payload     string
	maxAttempts int32
}

// commit appends a commit (one order row) to partition p with the given
// reactions, in one push transaction, and tells the relay; it returns
// the idempotency keys.
func (e *env) commit(p string, plans ...plan) []storage.ReactionKey {
	e.t.Helper()
	_, keys := e.append(p, plans...)
	e.relay.Notify(p)
	return keys
}

// commitHanded is commit for a commit handed to the relay the way the
// engine hands over a push's commit (relay.Committed), with the number
// of reactions it enqueued, which its event then carries.
func (e *env) commitHanded(p string, plans ...plan) []storage.ReactionKey {
	e.t.Helper()
	seq, keys := e.append(p, plans...)
	cs, err := e.store.CommitRange(e.ctx, p, seq-1, 1)
	if err != nil || len(cs) != 1 {
		e.t.Fatalf("read commit %d: %v", seq, err)
	}
	part, err := e.store.PartitionGet(e.ctx, p)
	if err != nil {
		e.t.Fatal(err)
	}
	e.relay.Committed(p, part.LogEpoch, cs[0], len(plans))
	return keys
}

// append appends the commit of commit and returns its commitSeq and the
// reactions' keys.
func (e *env) append(p string, plans ...plan) (int64, []storage.ReactionKey) {
	e.t.Helper()
	if _, err := e.store.PartitionTouch(e.ctx, p, time.Now().UnixMilli()); err != nil {
		e.t.Fatal(err)
	}
	n := e.seq.Add(1)
	ccid := fmt.Sprint("cc-", n)
	tb, _ := e.schema.Table("orders")
	id := fmt.Sprint("o", n)
	vals := []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte("s1")}}
	row, err := tb.Codec.AppendRow(nil, vals)
	if err != nil {
		e.t.Fatal(err)
	}
	var (
		keys []storage.ReactionKey
		seq  int64
	)
	err = e.store.WriteTx(e.ctx, p, func(tx storage.Tx) error {
		scopes := map[string]string{"shop": "s1"}
		v, err := tx.RowUpsert(e.ctx, "orders", storage.RowWrite{RowID: id, Values: vals, Scopes: scopes, Payload: row})
		if err != nil {
			return err
		}
		now := time.Now().UnixMilli()
		seq, err = tx.CommitAppend(e.ctx, storage.CommitParams{CreatedAtMs: now, ActorID: "a", ClientID: "client", ClientCommitID: ccid, SchemaVersion: 1,
			Changes: []storage.Change{{Table: "orders", RowID: id, Op: storage.OpUpsert, RowVersion: v, Scopes: scopes, Row: row}}})
		if err != nil {
			return err
		}
		var rs []storage.ReactionNew
		for _, pl := range plans {
			if pl.payload == "" {
				pl.payload = `{"order":"` + id + `"}`
			}
			if pl.maxAttempts == 0 {
				pl.maxAttempts = storage.DefaultReactionMaxAttempts
			}
			k := storage.ReactionIdempotencyKey(p, "client", ccid, pl.key)
			keys = append(keys, storage.ReactionKey{Partition: p, IdempotencyKey: k})
			rs = append(rs, storage.ReactionNew{IdempotencyKey: k, Type: pl.typ, Version: 1, Payload: json.RawMessage(pl.payload), MaxAttempts: pl.maxAttempts})
		}
		return tx.ReactionEnqueue(e.ctx, storage.ReactionEnqueueParams{SourceClientID: "client", SourceClientCommitID: ccid, SourceCommitSeq: seq, CreatedAtMs: now, Reactions: rs})
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.committed = time.Now()
	return seq, keys
}

func (e *env) get(k storage.ReactionKey) storage.Reaction {
	e.t.Helper()
	r, ok, err := e.store.ReactionGet(e.ctx, k)
	if err != nil || !ok {
		e.t.Fatalf("ReactionGet(%v) = %v, %v", k, ok, err)
	}
	return r
}

func (e *env) status(k storage.ReactionKey) storage.ReactionStatus { return e.get(k).Status }

// events records the lifecycle events on the env's server.
type events struct {
	mu  sync.Mutex
	got []recorded
}

type recorded struct {
	subject string
	header  nats.Header
	body    EventBody
}

func (e *env) events() *events {
	e.t.Helper()
	ev := &events{}
	nc := e.conn()
	if _, err := nc.Subscribe(prod.ReactionEvents(), func(m *nats.Msg) {
		var b EventBody
		if err := json.Unmarshal(m.Data, &b); err != nil {
			e.t.Errorf("event body %s: %v", m.Data, err)
		}
		ev.mu.Lock()
		ev.got = append(ev.got, recorded{m.Subject, m.Header, b})
		ev.mu.Unlock()
	}); err != nil {
		e.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	return ev
}

// of returns the events named event of key k.
func (ev *events) of(event string, k storage.ReactionKey) []recorded {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	var out []recorded
	for _, r := range ev.got {
		if _, name, _, _ := prod.ParseReactionEventSubject(r.subject); name == event && r.body.IdempotencyKey == k.IdempotencyKey {
			out = append(out, r)
		}
	}
	return out
}

// prod is the production bus namespace the tests run in.
var prod bus.Names
