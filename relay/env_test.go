package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/bus/bustest"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
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

func str(s string) ssp2.Value { return ssp2.Value{Bytes: []byte(s)} }

func mustPartition(t testing.TB, id string) bus.Partition {
	t.Helper()
	p, err := bus.NewPartition(id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// relayEnv is a real embedded NATS server and a real SQLite store.
type relayEnv struct {
	t      testing.TB
	ctx    context.Context
	srv    *embedded.Server
	js     jetstream.JetStream
	store  *sqlitestore.Store
	schema *schema.Schema
	now    atomic.Int64
}

func newRelayEnv(t testing.TB, opts ...embeddedtest.Option) *relayEnv {
	t.Helper()
	return newRelayEnvOn(t, embeddedtest.Start(t, opts...))
}

// newRelayEnvOn uses an existing server (a cluster member).
func newRelayEnvOn(t testing.TB, srv *embedded.Server) *relayEnv {
	t.Helper()
	e := &relayEnv{t: t, ctx: bustest.Context(t), schema: bustest.Schema(t)}
	e.now.Store(1767225600000)
	e.srv = srv
	e.js = e.srv.JetStream()
	e.store = openStore(t, filepath.Join(t.TempDir(), "sync.db"))
	if err := e.store.EnsureSchema(e.ctx, e.schema); err != nil {
		t.Fatal(err)
	}
	return e
}

func openStore(t testing.TB, path string) *sqlitestore.Store {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: path, Synchronous: sqlitestore.SynchronousNormal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// relay builds a relay over the env's store (not started). It is stopped
// at cleanup.
func (e *relayEnv) relay(cfg Config) *Relay {
	e.t.Helper()
	return e.relayOn(e.js, cfg)
}

func (e *relayEnv) relayOn(js jetstream.JetStream, cfg Config) *Relay {
	e.t.Helper()
	if cfg.Node == "" {
		cfg.Node = "node-1"
	}
	if cfg.Schema == nil {
		cfg.Schema = e.schema
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(e.t)
	}
	if cfg.RetryMin == 0 {
		cfg.RetryMin = 5 * time.Millisecond
		cfg.RetryMax = 100 * time.Millisecond
	}
	r, err := New(js, e.store, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
			e.t.Errorf("relay stop: %v", err)
		}
	})
	return r
}

func (e *relayEnv) start(r *Relay) {
	e.t.Helper()
	if err := r.Start(e.ctx); err != nil {
		e.t.Fatalf("relay start: %v", err)
	}
}

func (e *relayEnv) flush(r *Relay) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	if err := r.Flush(ctx); err != nil {
		e.t.Fatalf("relay flush: %v", err)
	}
}

// commit appends one commit to partition touching the given tables (one
// row change each, in that order) and returns its commitSeq.
func (e *relayEnv) commit(partition string, tables ...string) int64 {
	e.t.Helper()
	ctx := e.ctx
	now := e.now.Add(1)
	if _, err := e.store.PartitionTouch(ctx, partition, now); err != nil {
		e.t.Fatal(err)
	}
	var seq int64
	err := e.store.WriteTx(ctx, partition, func(tx storage.Tx) error {
		max := tx.Locked().MaxCommitSeq + 1
		var changes []storage.Change
		for i, table := range tables {
			rowID := fmt.Sprintf("r%d-%d", max, i)
			var vals []ssp2.Value
			var scopes map[string]string
			switch table {
			case "todos":
				vals = []ssp2.Value{str(rowID), str("p1"), str("title " + rowID), {Bool: i%2 == 0}, {Int: max}, {Float: 0.5}, str(`{"k":[1,2]}`), {Bytes: []byte("hi")}, {Null: true}}
				scopes = map[string]string{"project_id": "p1"}
			case "projects":
				vals = []ssp2.Value{str(rowID), str("project " + rowID)}
				scopes = map[string]string{"id": rowID}
			default:
				e.t.Fatalf("unknown table %s", table)
			}
			tbl, _ := e.schema.Table(table)
			payload, err := tbl.Codec.AppendRow(nil, vals)
			if err != nil {
				return err
			}
			ver, err := tx.RowUpsert(ctx, table, storage.RowWrite{RowID: rowID, Values: vals, Scopes: scopes, Payload: payload})
			if err != nil {
				return err
			}
			changes = append(changes, storage.Change{Table: table, RowID: rowID, Op: storage.OpUpsert, RowVersion: ver, Scopes: scopes, Row: payload})
		}
		var err error
		seq, err = tx.CommitAppend(ctx, storage.CommitParams{
			CreatedAtMs: now, ActorID: "actor", ClientID: "client", ClientCommitID: fmt.Sprintf("cc-%d", now),
			SchemaVersion: e.schema.Version, Changes: changes,
		})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return seq
}

// streamEvents reads every commit event in SYNC_COMMITS, in stream order
// (messages that are not commit events are skipped).
func (e *relayEnv) streamEvents() []bus.Event {
	return streamEventsOf(e.t, e.ctx, e.js)
}

func streamEventsOf(t testing.TB, ctx context.Context, js jetstream.JetStream) []bus.Event {
	t.Helper()
	s, err := js.Stream(ctx, prod.CommitStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	var out []bus.Event
	next := uint64(1)
	deadline := time.Now().Add(20 * time.Second)
	for {
		// In a cluster a fresh consumer may not answer at once: retry
		// from where the last attempt stopped.
		cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: next}
		cons, err := js.OrderedConsumer(ctx, prod.CommitStream(), cfg)
		for err == nil {
			var m jetstream.Msg
			m, err = cons.Next(jetstream.FetchMaxWait(2 * time.Second))
			if err != nil {
				break
			}
			md, _ := m.Metadata()
			if meta, err := prod.ParseMeta(m.Subject(), m.Headers()); err == nil {
				out = append(out, bus.Event{Meta: meta, StreamSeq: md.Sequence.Stream, Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
			}
			next = md.Sequence.Stream + 1
			if md.Sequence.Stream >= info.State.LastSeq {
				return out
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("read stream: %v", err)
		}
	}
}

type eventKey struct {
	commitSeq int64
	table     string
}

// checkLogInStream asserts that the stream holds, for partition under its
// current epoch, exactly the log's events from the horizon on: each
// (commit, table) once, in log order.
func (e *relayEnv) checkLogInStream(partition string) []bus.Event {
	e.t.Helper()
	part, err := e.store.PartitionGet(e.ctx, partition)
	if err != nil {
		e.t.Fatal(err)
	}
	commits, err := e.store.CommitRange(e.ctx, partition, part.HorizonSeq, storage.MaxCommitRangeLimit)
	if err != nil {
		e.t.Fatal(err)
	}
	var want []eventKey
	for _, c := range commits {
		var tables []string
		for _, ch := range c.Changes {
			if !slices.Contains(tables, ch.Table) {
				tables = append(tables, ch.Table)
			}
		}
		for _, tb := range tables {
			want = append(want, eventKey{c.CommitSeq, tb})
		}
	}
	var got []eventKey
	var evs []bus.Event
	for _, ev := range e.streamEvents() {
		if ev.Partition.ID() == partition && ev.LogEpoch == bus.EscapeEpoch(part.LogEpoch) {
			got = append(got, eventKey{ev.CommitSeq, ev.Table})
			evs = append(evs, ev)
		}
	}
	if !slices.Equal(got, want) {
		e.t.Fatalf("partition %q: stream holds %d events, log has %d\n got %v\nwant %v", partition, len(got), len(want), abbrev(got), abbrev(want))
	}
	return evs
}

func abbrev(ks []eventKey) string {
	if len(ks) <= 20 {
		return fmt.Sprint(ks)
	}
	return fmt.Sprint(ks[:10], " … ", ks[len(ks)-10:])
}

// waitDedupWindowPassed waits until every Nats-Msg-Id stored so far in
// SYNC_COMMITS has left the duplicate window: a probe id published now is
// accepted again once the window has passed for it, and the server purges
// older entries first.
func (e *relayEnv) waitDedupWindowPassed(window time.Duration) {
	e.t.Helper()
	probe := func() *jetstream.PubAck {
		// "=pr" is not a valid escape: no partition has this token.
		ack, err := e.js.PublishMsg(e.ctx, &nats.Msg{Subject: "sync.=probe.commit.probe", Data: []byte("probe")}, jetstream.WithMsgID("dedup-probe"))
		if err != nil {
			e.t.Fatal(err)
		}
		return ack
	}
	if ack := probe(); ack.Duplicate {
		e.t.Fatal("probe id already in the window")
	}
	deadline := time.Now().Add(window*3 + 5*time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for probe().Duplicate {
		if time.Now().After(deadline) {
			e.t.Fatalf("duplicate window %v did not pass", window)
		}
		<-tick.C
	}
}

// waitFor polls cond until it returns nil or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s: %v", what, err)
		}
		<-tick.C
	}
}

// mustStop stops a follower or watcher, failing t if it does not stop.
func mustStop(t testing.TB, s interface{ Stop(context.Context) error }) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Error(err)
	}
}
