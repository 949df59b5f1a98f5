package relay

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// fillLog appends n one-table commits to partition, many per transaction
// (setup speed only; the relay reads commits, not transactions).
func (e *relayEnv) fillLog(partition string, n int) {
	e.t.Helper()
	if _, err := e.store.PartitionTouch(e.ctx, partition, e.now.Add(1)); err != nil {
		e.t.Fatal(err)
	}
	tbl, _ := e.schema.Table("todos")
	for done := 0; done < n; {
		k := min(200, n-done)
		err := e.store.WriteTx(e.ctx, partition, func(tx storage.Tx) error {
			for range k {
				seq := tx.Locked().MaxCommitSeq + int64(done) + 1
				rowID := fmt.Sprintf("r%d", seq)
				vals := []ssp2.Value{str(rowID), str("p1"), str("a todo title of ordinary length"), {Bool: true}, {Int: seq}, {Float: 0.25}, str(`{"tags":["x"]}`), {Null: true}, {Null: true}}
				payload, err := tbl.Codec.AppendRow(nil, vals)
				if err != nil {
					return err
				}
				scopes := map[string]string{"project_id": "p1"}
				ver, err := tx.RowUpsert(e.ctx, "todos", storage.RowWrite{RowID: rowID, Values: vals, Scopes: scopes, Payload: payload})
				if err != nil {
					return err
				}
				if _, err := tx.CommitAppend(e.ctx, storage.CommitParams{
					CreatedAtMs: e.now.Add(1), ActorID: "actor", ClientID: "client", ClientCommitID: rowID, SchemaVersion: e.schema.Version,
					Changes: []storage.Change{{Table: "todos", RowID: rowID, Op: storage.OpUpsert, RowVersion: ver, Scopes: scopes, Row: payload}},
				}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			e.t.Fatal(err)
		}
		done += k
	}
}

// BenchmarkRelayThroughput measures events/s from the SQLite log into
// JetStream (one event per commit): every event published one by one
// (awaiting each ack) versus in atomic batches, on one partition and on
// eight relayed concurrently. b.N is the number of events.
func BenchmarkRelayThroughput(b *testing.B) {
	for _, mode := range []struct {
		name  string
		batch int
	}{{"one-by-one", 1}, {"atomic-batch", MaxBatchMessages}} {
		for _, parts := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/partitions=%d", mode.name, parts), func(b *testing.B) {
				b.StopTimer()
				e := newRelayEnv(b)
				per := (b.N + parts - 1) / parts
				names := make([]string, parts)
				for i := range names {
					names[i] = fmt.Sprintf("part-%d", i)
					e.fillLog(names[i], per)
				}
				r := e.relay(Config{BatchMessages: mode.batch, Workers: parts, ResyncInterval: -1})
				b.StartTimer()
				start := time.Now()
				e.start(r) // the start-up sweep relays every partition
				e.flush(r)
				elapsed := time.Since(start)
				b.StopTimer()
				events := r.Stats().Events
				if events != int64(per*parts) {
					b.Fatalf("relayed %d events, want %d", events, per*parts)
				}
				b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// BenchmarkCommitToSubscriber measures, under light load (one commit at a
// time), the latency from the end of the SQL commit (WriteTx returned) to
// a core-NATS subscriber on another connection receiving the event.
func BenchmarkCommitToSubscriber(b *testing.B) {
	e := newRelayEnv(b)
	nc, err := e.srv.Connect()
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	got := make(chan time.Time, 16)
	sub, err := nc.Subscribe(prod.AllCommits(), func(*nats.Msg) { got <- time.Now() })
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	r := e.relay(Config{ResyncInterval: -1})
	e.start(r)
	e.flush(r)

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		e.commit("p", "todos")
		committed := time.Now()
		r.Notify("p")
		select {
		case at := <-got:
			lat = append(lat, at.Sub(committed))
		case <-time.After(10 * time.Second):
			b.Fatal("event not received")
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// BenchmarkRelayRuns measures the CPU (the whole process: relay, SQLite
// and the embedded NATS server) and the wall time per event of relaying a
// run of N one-message commits after one notification, the shape of a
// relay run under concurrent pushes: one by one (awaiting each ack)
// versus one atomic batch, which the server stages in a temporary store.
// Runs of up to smallRun go one by one in production either way. b.N is
// the number of runs.
func BenchmarkRelayRuns(b *testing.B) {
	for _, n := range relayRunSizes {
		for _, mode := range []struct {
			name  string
			batch int
		}{{"one-by-one", 1}, {"atomic-batch", MaxBatchMessages}} {
			b.Run(fmt.Sprintf("run=%d/%s", n, mode.name), func(b *testing.B) {
				b.StopTimer()
				e := newRelayEnv(b)
				e.fillLog("p", 1)
				r := e.relay(Config{BatchMessages: mode.batch, Workers: 1, ResyncInterval: -1})
				e.start(r)
				e.flush(r)
				var cpu, wall time.Duration
				for range b.N {
					e.fillLog("p", n)
					c0, t0 := processCPU(b), time.Now()
					r.Notify("p")
					e.flush(r)
					wall += time.Since(t0)
					cpu += processCPU(b) - c0
				}
				events := float64(b.N * n)
				b.ReportMetric(float64(cpu.Microseconds())/events, "cpu-µs/event")
				b.ReportMetric(float64(wall.Microseconds())/events, "wall-µs/event")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// processCPU is the process's user + system time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var relayRunSizes = []int{16, 32, 64, 128, 256}
