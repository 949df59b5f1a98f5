package gate_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/gate"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// BenchmarkRound measures the serve gate's cost on whole engine rounds
// (decode, admission, transactions, response), against the same rounds
// without a gate:
//
//	none       no gate
//	gate       the gate with a live KV watch: admission from the watched
//	           view, one SQL gate read inside each serving transaction
//	sqlonly    the gate without NATS: admission reads SQL too
//
// push is one commit of one upsert; pull is one subscription whose cursor
// is current (the steady-state poll, the cheapest round, where the gate's
// share is largest).
func BenchmarkRound(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			for _, round := range []string{"push", "pull"} {
				b.Run(round, func(b *testing.B) {
					for _, mode := range []string{"none", "gate", "sqlonly"} {
						b.Run(mode, func(b *testing.B) { benchRound(b, backend, round, mode) })
					}
				})
			}
		})
	}
}

func openBenchStore(b *testing.B, backend string) storage.Store {
	b.Helper()
	ctx := context.Background()
	if backend == "postgres" {
		url, name := pgtest.Schema(b)
		st, err := pgstore.Open(ctx, pgstore.Config{URL: url, Schema: name})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		return st
	}
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(b.TempDir(), "sync.db")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

func benchRound(b *testing.B, backend, round, mode string) {
	ctx := context.Background()
	st := openBenchStore(b, backend)
	sc := parse(b, 1)
	if err := st.EnsureSchema(ctx, sc); err != nil {
		b.Fatal(err)
	}
	cfg := engine.Config{Schema: sc, Store: st}
	var g *gate.Gate
	if mode != "none" {
		gc := gate.Config{Store: st, Schema: sc, Node: "bench"}
		if mode == "gate" {
			srv := embeddedtest.Start(b)
			js, err := jetstream.New(srv.Conn())
			if err != nil {
				b.Fatal(err)
			}
			gc.Conn, gc.JetStream = srv.Conn(), js
		}
		var err error
		if g, err = gate.New(gc); err != nil {
			b.Fatal(err)
		}
		if err := g.Start(ctx); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = g.Stop(context.Background()) })
		if mode == "gate" {
			waitFor(b, 10*time.Second, "the watch to go live", g.WatchLive)
		}
		cfg.Gate = engine.GateOf(g)
	}
	e, err := engine.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	id := engine.Identity{Partition: "bench", ActorID: "u1", Scopes: engine.StaticScopes{"project_id": {"p1"}}}
	sync := func(frames ...ssp2.Frame) {
		body, err := (&ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest, Frames: frames}).AppendEncode(nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := e.Sync(ctx, id, body, io.Discard); err != nil {
			b.Fatal(err)
		}
	}
	// The epoch, from a header-only answer.
	if _, err := st.PartitionTouch(ctx, id.Partition, time.Now().UnixMilli()); err != nil {
		b.Fatal(err)
	}
	p, err := st.PartitionGet(ctx, id.Partition)
	if err != nil {
		b.Fatal(err)
	}
	epoch := p.LogEpoch
	hdr := &ssp2.ReqHeader{ClientID: "bench-client", SchemaVersion: 1, LogEpoch: &epoch}
	tasks, _ := sc.Table("tasks")
	row := func(i int) []byte {
		payload, err := tasks.Codec.AppendRow(nil, []ssp2.Value{{Bytes: fmt.Appendf(nil, "t%d", i)}, {Bytes: []byte("p1")}, {Bytes: []byte("title")}})
		if err != nil {
			b.Fatal(err)
		}
		return payload
	}
	push := func(i int) {
		sync(hdr, &ssp2.PushCommit{ClientCommitID: fmt.Sprint("c", i), Operations: []ssp2.Operation{
			{Table: "tasks", RowID: fmt.Sprint("t", i), Op: ssp2.OpUpsert, Payload: row(i)}}})
	}
	for i := range 10 {
		push(-1 - i)
	}
	maxSeq, err := st.CommitMaxSeq(ctx, id.Partition)
	if err != nil {
		b.Fatal(err)
	}
	pull := []ssp2.Frame{hdr, &ssp2.PullHeader{Accept: 3},
		&ssp2.Subscription{ID: "s1", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: maxSeq}}
	b.ResetTimer()
	for i := range b.N {
		if round == "push" {
			push(i)
		} else {
			sync(pull...)
		}
	}
	b.StopTimer()
	if os.Getenv("GATE_BENCH_VERBOSE") != "" && g != nil {
		m := g.Metrics()
		b.Logf("admitted %d (cached %d), checks %d, refused %d", m.Admitted.Load(), m.AdmitCached.Load(), m.Checks.Load(), m.Refused.Load())
	}
}

// BenchmarkGateOverhead runs the same rounds through three engines on one
// store and one NATS server — without the gate, with it (KV watch live),
// and with a gate on SQL alone (a node without NATS) — interleaved, and
// reports the median round of each and the gate's overhead: interleaving
// cancels the drift of a shared, noisy machine that separate benchmarks
// cannot.
func BenchmarkGateOverhead(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			for _, round := range []string{"push", "pull"} {
				b.Run(round, func(b *testing.B) { benchOverhead(b, backend, round) })
			}
		})
	}
}

func benchOverhead(b *testing.B, backend, round string) {
	ctx := context.Background()
	st := openBenchStore(b, backend)
	sc := parse(b, 1)
	if err := st.EnsureSchema(ctx, sc); err != nil {
		b.Fatal(err)
	}
	srv := embeddedtest.Start(b)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		b.Fatal(err)
	}
	g, err := gate.New(gate.Config{Store: st, Schema: sc, Node: "bench", Conn: srv.Conn(), JetStream: js})
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = g.Stop(context.Background()) })
	waitFor(b, 10*time.Second, "the watch to go live", g.WatchLive)
	plain, err := engine.New(engine.Config{Schema: sc, Store: st})
	if err != nil {
		b.Fatal(err)
	}
	gated, err := engine.New(engine.Config{Schema: sc, Store: st, Gate: engine.GateOf(g)})
	if err != nil {
		b.Fatal(err)
	}
	// The degraded mode: a node without NATS admits from SQL.
	sqlGate, err := gate.New(gate.Config{Store: st, Schema: sc})
	if err != nil {
		b.Fatal(err)
	}
	sqlOnly, err := engine.New(engine.Config{Schema: sc, Store: st, Gate: engine.GateOf(sqlGate)})
	if err != nil {
		b.Fatal(err)
	}
	id := engine.Identity{Partition: "bench", ActorID: "u1", Scopes: engine.StaticScopes{"project_id": {"p1"}}}
	p, err := st.PartitionTouch(ctx, id.Partition, time.Now().UnixMilli())
	if err != nil {
		b.Fatal(err)
	}
	epoch := p.LogEpoch
	hdr := &ssp2.ReqHeader{ClientID: "bench-client", SchemaVersion: 1, LogEpoch: &epoch}
	tasks, _ := sc.Table("tasks")
	body := func(frames ...ssp2.Frame) []byte {
		out, err := (&ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest, Frames: frames}).AppendEncode(nil)
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	pushBody := func(tag string, i int) []byte {
		rowID := fmt.Sprintf("%s%d", tag, i)
		payload, err := tasks.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte(rowID)}, {Bytes: []byte("p1")}, {Bytes: []byte("title")}})
		if err != nil {
			b.Fatal(err)
		}
		return body(hdr, &ssp2.PushCommit{ClientCommitID: rowID, Operations: []ssp2.Operation{{Table: "tasks", RowID: rowID, Op: ssp2.OpUpsert, Payload: payload}}})
	}
	run := func(e *engine.Engine, req []byte) time.Duration {
		start := time.Now()
		if err := e.Sync(ctx, id, req, io.Discard); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for i := range 10 {
		run(plain, pushBody("seed", i))
	}
	maxSeq, err := st.CommitMaxSeq(ctx, id.Partition)
	if err != nil {
		b.Fatal(err)
	}
	pull := body(hdr, &ssp2.PullHeader{Accept: 3},
		&ssp2.Subscription{ID: "s1", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: maxSeq})
	var off, on, sq []time.Duration
	b.ResetTimer()
	for i := range b.N {
		reqOff, reqOn, reqSQL := pull, pull, pull
		if round == "push" {
			reqOff, reqOn, reqSQL = pushBody("off", i), pushBody("on", i), pushBody("sql", i)
		}
		// Rotate the order so no variant always runs first.
		for k := range 3 {
			switch (i + k) % 3 {
			case 0:
				off = append(off, run(plain, reqOff))
			case 1:
				on = append(on, run(gated, reqOn))
			case 2:
				sq = append(sq, run(sqlOnly, reqSQL))
			}
		}
	}
	b.StopTimer()
	mOff, mOn, mSQL := median(off), median(on), median(sq)
	b.ReportMetric(float64(mOff.Microseconds()), "µs-none")
	b.ReportMetric(float64(mOn.Microseconds()), "µs-gate")
	b.ReportMetric(float64(mSQL.Microseconds()), "µs-sqlonly")
	b.ReportMetric(100*(float64(mOn)-float64(mOff))/float64(mOff), "%overhead")
	b.ReportMetric(100*(float64(mSQL)-float64(mOff))/float64(mOff), "%overhead-sqlonly")
	if m := g.Metrics(); m.AdmitCached.Load() < int64(b.N)/2 {
		b.Fatalf("the gated rounds were not admitted from the watched view: %d of %d", m.AdmitCached.Load(), b.N)
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkRefusalPropagation measures how long a checkpoint declared by
// one node takes to become a refusal at admission on another: the
// declaration (SQL, then the KV token), the watch, the other node's SQL
// re-read. Each round declares a new checkpoint and activates it again;
// it reports the median and p99 of the rounds.
func BenchmarkRefusalPropagation(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			ctx := context.Background()
			st := openBenchStore(b, backend)
			sc := parse(b, 1)
			if err := st.EnsureSchema(ctx, sc); err != nil {
				b.Fatal(err)
			}
			if _, err := st.PartitionTouch(ctx, "p", time.Now().UnixMilli()); err != nil {
				b.Fatal(err)
			}
			srv := embeddedtest.Start(b)
			if err := bus.EnsureStreams(ctx, srv.JetStream(), prod, bus.StreamsConfig{}.WithDefaults()); err != nil {
				b.Fatal(err)
			}
			node := func(name string) *gate.Gate {
				nc, err := srv.Connect()
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(nc.Close)
				js, err := jetstream.New(nc)
				if err != nil {
					b.Fatal(err)
				}
				g, err := gate.New(gate.Config{Store: st, Schema: sc, Node: name, Conn: nc, JetStream: js})
				if err != nil {
					b.Fatal(err)
				}
				if err := g.Start(ctx); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = g.Stop(context.Background()) })
				waitFor(b, 10*time.Second, name+"'s watch", g.WatchLive)
				return g
			}
			a, other := node("a"), node("b")
			var lat []time.Duration
			b.ResetTimer()
			for i := range b.N {
				if _, err := other.Admit(ctx, "p"); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				cp, err := a.Declare(ctx, "p", fmt.Sprint("cp", i))
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := other.Admit(ctx, "p"); err != nil {
						break
					}
					if time.Since(start) > 5*time.Second {
						b.Fatal("no refusal within 5s")
					}
				}
				lat = append(lat, time.Since(start))
				if _, err := a.Activate(ctx, storage.CheckpointActivateParams{CheckpointKey: cp.CheckpointKey}); err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := other.Admit(ctx, "p"); err == nil {
						break
					}
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "µs-p50")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "µs-p99")
		})
	}
}
