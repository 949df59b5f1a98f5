package pgstore

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// tripCounter counts the writes to a store's connections. pgx sends each
// flight of messages (a statement, or a pipeline of them) in one write
// and then waits for the answer, so a call's writes are its round trips.
type tripCounter struct{ n atomic.Int64 }

func (c *tripCounter) dial(next pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: conn, n: &c.n}, nil
	}
}

// countingConn counts its writes into the store's total (n) and its own
// (own): a test of one call on one connection counts that connection's,
// free of the statements the store runs in the background on others (a
// cursor advance flush, an ANALYZE, a sole writer's lock ping).
type countingConn struct {
	net.Conn
	n   *atomic.Int64
	own atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.n.Add(1)
	c.own.Add(1)
	return c.Conn.Write(b)
}

// connWrites returns the write count of the connection of pool that the
// next call on the pool uses: the pool must hold one connection.
func connWrites(tb testing.TB, pool *pgxpool.Pool) *atomic.Int64 {
	tb.Helper()
	c, err := pool.Acquire(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Release()
	if max := pool.Config().MaxConns; max != 1 {
		tb.Fatalf("the pool may hold %d connections, want 1", max)
	}
	cc, ok := c.Conn().PgConn().Conn().(*countingConn)
	if !ok {
		tb.Fatalf("connection %T is not counted", c.Conn().PgConn().Conn())
	}
	return &cc.own
}

const roundTripSchema = `{"version": 1, "tables": [{"name": "tasks", "primaryKey": "id",
	"columns": [{"name": "id", "type": "string"}, {"name": "project_id", "type": "string"}, {"name": "title", "type": "string"}],
	"scopes": [{"pattern": "project:{project}", "column": "project_id"}]}]}`

func roundTripRow(tb testing.TB, sc *schema.Schema, id, title string) storage.RowWrite {
	tb.Helper()
	t, _ := sc.Table("tasks")
	vals := []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte("p1")}, {Bytes: []byte(title)}}
	scopes, _, ok := t.StoredScopes(vals)
	if !ok {
		tb.Fatal("no stored scopes")
	}
	payload, err := t.Codec.AppendRow(nil, vals)
	if err != nil {
		tb.Fatal(err)
	}
	return storage.RowWrite{RowID: id, Values: vals, Scopes: scopes, Payload: payload}
}

// roundTripStore opens a store of maxConns connections (dial as openDial)
// with roundTripSchema installed and partition "p" registered, and with
// client c1 bound when client is set.
func roundTripStore(tb testing.TB, maxConns int32, dial func(pgconn.DialFunc) pgconn.DialFunc, client bool) (*Store, *schema.Schema) {
	tb.Helper()
	return roundTripStoreWith(tb, Config{MaxConns: maxConns}, dial, client)
}

// roundTripStoreWith is roundTripStore with cfg's other fields.
func roundTripStoreWith(tb testing.TB, cfg Config, dial func(pgconn.DialFunc) pgconn.DialFunc, client bool) (*Store, *schema.Schema) {
	tb.Helper()
	s := openWith(tb, cfg, dial)
	ctx := tb.Context()
	sc, err := schema.Parse([]byte(roundTripSchema))
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.EnsureSchema(ctx, sc); err != nil {
		tb.Fatal(err)
	}
	if _, err := s.PartitionTouch(ctx, "p", 1_000_000); err != nil {
		tb.Fatal(err)
	}
	if client {
		if _, err := s.ClientBind(ctx, storage.Client{Partition: "p", ClientID: "c1", ActorID: "a", WireVersion: 2, Cursor: -1, UpdatedAtMs: 1_000_000}); err != nil {
			tb.Fatal(err)
		}
	}
	return s, sc
}

// roundTrips is the round trips of each step of one push + pull round,
// made of the store calls the engine and the relay make for it.
type roundTrips struct {
	start, push, pull, advance, relay int64
}

func (r roundTrips) String() string {
	return fmt.Sprintf("request start (partition, client, optimistic idempotency lookup) %d, push transaction %d, pull window %d, cursor advance %d, relay read %d",
		r.start, r.push, r.pull, r.advance, r.relay)
}

// pushPullRound makes one round's store calls: the push of one upsert
// into row and the pull of its commit, counting each step's writes in n.
// unhinted makes them as the engine did before RequestStart, WriteTxRows
// and PlanWindow.
func pushPullRound(ctx context.Context, tb testing.TB, s *Store, n *atomic.Int64, sc *schema.Schema, i int, row string, unhinted bool) roundTrips {
	tb.Helper()
	const partition, client = "p", "c1"
	key := fmt.Sprintf("commit-%d", i)
	var out roundTrips
	step := func(dst *int64, f func() error) {
		tb.Helper()
		before := n.Load()
		if err := f(); err != nil {
			tb.Fatal(err)
		}
		*dst = n.Load() - before
	}
	var part storage.Partition
	step(&out.start, func() error {
		if unhinted {
			p, _, _, err := s.PartitionTouchClient(ctx, partition, client, 1_000_000)
			if err != nil {
				return err
			}
			part = p
			_, ok, err := s.IdempotencyGet(ctx, partition, client, key)
			if ok {
				return fmt.Errorf("commit %s already stored", key)
			}
			return err
		}
		// The engine's start of a request: the optimistic idempotency
		// lookup comes with the partition row and the client record.
		st, err := s.RequestStart(ctx, storage.RequestStartParams{Partition: partition, ClientID: client, CommitIDs: []string{key}, NowMs: 1_000_000})
		if _, ok := st.Pushes[key]; ok {
			return fmt.Errorf("commit %s already stored", key)
		}
		part = st.Partition
		return err
	})
	rw := roundTripRow(tb, sc, row, key)
	var seq int64
	step(&out.push, func() error {
		// As the engine pushes: the row the commit writes named ahead.
		var ahead []storage.RowRef
		if !unhinted {
			ahead = []storage.RowRef{{Table: "tasks", RowID: row}}
		}
		return s.WriteTxRows(ctx, partition, ahead, func(tx storage.Tx) error {
			if _, err := tx.GateRead(ctx, partition, sc.Version); err != nil {
				return err
			}
			if _, ok, err := tx.IdempotencyGet(ctx, client, key); err != nil || ok {
				return fmt.Errorf("re-check: %v %v", ok, err)
			}
			sp, err := tx.Savepoint(ctx)
			if err != nil {
				return err
			}
			if _, _, err := tx.RowGet(ctx, partition, "tasks", row); err != nil {
				return err
			}
			v, err := tx.RowUpsert(ctx, "tasks", rw)
			if err != nil {
				return err
			}
			if err := sp.Release(ctx); err != nil {
				return err
			}
			seq, err = tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: 1, ActorID: "a", ClientID: client, ClientCommitID: key, SchemaVersion: 1,
				Changes: []storage.Change{{Table: "tasks", RowID: row, Op: storage.OpUpsert, RowVersion: v, Scopes: rw.Scopes, Row: rw.Payload}}})
			if err != nil {
				return err
			}
			_, err = tx.IdempotencyPut(ctx, storage.PushRecord{ClientID: client, ClientCommitID: key, ActorID: "a",
				Status: storage.PushApplied, CommitSeq: seq, Result: []byte("result"), CreatedAtMs: 1})
			return err
		})
	})
	step(&out.pull, func() error {
		wp := storage.WindowParams{Partition: partition, Table: "tasks",
			Scopes: map[string][]string{"project": {"p1"}}, AfterSeq: seq - 1, Limit: 100}
		return s.ReadTx(ctx, func(tx storage.ReadTx) error {
			if !unhinted {
				tx.(storage.WindowPlanner).PlanWindow(wp) // as the engine's pull section does
			}
			if _, err := tx.Partition(ctx, partition); err != nil {
				return err
			}
			if _, err := tx.GateRead(ctx, partition, sc.Version); err != nil {
				return err
			}
			w, err := tx.CommitWindow(ctx, wp)
			if err == nil && (len(w.Commits) != 1 || w.Commits[0].CommitSeq != seq || w.Commits[0].ClientCommitID != key) {
				err = fmt.Errorf("window %+v does not hold commit %d alone", w, seq)
			}
			return err
		})
	})
	step(&out.relay, func() error {
		if _, err := s.PartitionGet(ctx, partition); err != nil {
			return err
		}
		_, commits, err := s.PartitionCommitRange(ctx, partition, seq-1, 1000)
		if err == nil && (len(commits) != 1 || len(commits[0].Changes) != 1) {
			err = fmt.Errorf("commit range %+v does not hold commit %d alone", commits, seq)
		}
		return err
	})
	step(&out.advance, func() error {
		return s.ClientAdvance(ctx, storage.ClientAckParams{Partition: partition, ClientID: client, ActorID: "a",
			LogEpoch: part.LogEpoch, Cursor: seq, NowMs: 1_000_000})
	})
	return out
}

// TestRoundTrips counts the round trips of a push + pull round's store
// calls (after a warm-up round has prepared every statement) and holds
// them to the budget. The request's start is one (RequestStart: the
// partition row, the client record and the optimistic idempotency
// lookup). A push transaction whose commit's optimistic lookup just
// missed is two: BEGIN, the lock, the hinted push results, the row
// named ahead and the partition row; the savepoint, the upsert (deferred:
// the row was read), the queued writes and COMMIT. The pull window is
// one, planned (BEGIN, the partition row, the first candidates with their
// changes and headers, COMMIT), the relay's read two, and a cursor
// advance none (it waits for the next flush, once per
// ClientAdvanceDelay). Before these budgets the round was
// 1 + 1 + 5 + 5 + 1 + 5, then 1 + 1 + 4 + 3 + 0 + 2, then 1 + 0 + 3 + 1 +
// 0 + 2.
func TestRoundTrips(t *testing.T) {
	c := &tripCounter{}
	// One connection: every statement is prepared once, by the warm-up.
	s, sc := roundTripStore(t, 1, c.dial, true)
	ctx := t.Context()
	pushPullRound(ctx, t, s, &c.n, sc, 0, "r0", false) // prepares the statements
	s.flushAdvances()                                  // the cursor advances' write, once per ClientAdvanceDelay
	got := pushPullRound(ctx, t, s, connWrites(t, s.pool), sc, 1, "r0", false)
	t.Logf("round trips: %s", got)
	want := roundTrips{start: 1, push: 2, pull: 1, advance: 0, relay: 2}
	if got.push > want.push || got.pull > want.pull || got.advance > want.advance || got.relay > want.relay ||
		got.start > want.start {
		t.Fatalf("round trips:\n got  %s\n want %s (at most)", got, want)
	}
}

// BenchmarkPushPullRound makes push + pull rounds' store calls one after
// another on one connection, as the engine makes them (hinted; on a sole
// writer, whose starts come from its cache) and as it made them before
// RequestStart, WriteTxRows and PlanWindow (unhinted).
// It reports the round trips and, when the server's backend runs on this
// machine, the CPU time it spent per round: what a round costs
// PostgreSQL, free of the concurrency that makes throughput on a shared
// machine noisy.
func BenchmarkPushPullRound(b *testing.B) {
	for _, bc := range []struct {
		name           string
		unhinted, sole bool
	}{{"hinted", false, false}, {"unhinted", true, false}, {"sole-writer", false, true}} {
		unhinted := bc.unhinted
		b.Run(bc.name, func(b *testing.B) {
			c := &tripCounter{}
			s, sc := roundTripStoreWith(b, Config{MaxConns: 1, SoleWriter: bc.sole}, c.dial, true)
			ctx := b.Context()
			var pid int
			if err := s.pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				b.Fatal(err)
			}
			for i := range 20 { // past the custom plans of every statement
				pushPullRound(ctx, b, s, &c.n, sc, i, fmt.Sprint("r", i%4), unhinted)
			}
			cpu0, cpuOK := procCPU(pid)
			trips0 := c.n.Load()
			i := 20
			b.ResetTimer()
			for b.Loop() {
				pushPullRound(ctx, b, s, &c.n, sc, i, fmt.Sprint("r", i%4), unhinted)
				i++
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64(c.n.Load()-trips0)/n, "trips/round")
			if cpu1, ok := procCPU(pid); ok && cpuOK {
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/n, "pg-µs/round")
			}
		})
	}
}

// procCPU reads a local process's CPU time from /proc.
func procCPU(pid int) (time.Duration, bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	_, rest, ok := strings.Cut(string(raw), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond, true
}

// BenchmarkPushOnePartition pushes single-change commits from 16
// goroutines into one partition, each push its optimistic lookup and
// its write transaction as the engine makes them: the load fixture's
// shape, where every client writes the same partition and the write
// groups share transactions. WriteTxRows names the row ahead, as the
// engine does; WriteTx does not.
func BenchmarkPushOnePartition(b *testing.B) {
	b.Run("WriteTxRows", func(b *testing.B) { benchmarkPushOnePartition(b, (*Store).WriteTxRows) })
	b.Run("WriteTx", func(b *testing.B) {
		benchmarkPushOnePartition(b, func(s *Store, ctx context.Context, partition string, _ []storage.RowRef, fn func(storage.Tx) error) error {
			return s.WriteTx(ctx, partition, fn)
		})
	})
}

func benchmarkPushOnePartition(b *testing.B, writeTx func(s *Store, ctx context.Context, partition string, rows []storage.RowRef, fn func(storage.Tx) error) error) {
	c := &tripCounter{}
	s, sc := roundTripStore(b, 16, c.dial, false)
	write := func(ctx context.Context, partition string, rows []storage.RowRef, fn func(storage.Tx) error) error {
		return writeTx(s, ctx, partition, rows, fn)
	}
	ctx := b.Context()
	var next atomic.Int64
	push := func() error {
		n := next.Add(1)
		key := fmt.Sprint(n)
		rw := roundTripRow(b, sc, fmt.Sprintf("r%d", n%1000), key)
		if _, ok, err := s.IdempotencyGet(ctx, "p", "c", key); err != nil || ok {
			return fmt.Errorf("lookup: %v %v", ok, err)
		}
		return write(ctx, "p", []storage.RowRef{{Table: "tasks", RowID: rw.RowID}}, func(tx storage.Tx) error {
			if _, ok, err := tx.IdempotencyGet(ctx, "c", key); err != nil || ok {
				return fmt.Errorf("re-check: %v %v", ok, err)
			}
			if _, _, err := tx.RowGet(ctx, "p", "tasks", rw.RowID); err != nil {
				return err
			}
			v, err := tx.RowUpsert(ctx, "tasks", rw)
			if err != nil {
				return err
			}
			seq, err := tx.CommitAppend(ctx, storage.CommitParams{ActorID: "a", ClientID: "c", ClientCommitID: key, SchemaVersion: 1,
				Changes: []storage.Change{{Table: "tasks", RowID: rw.RowID, Op: storage.OpUpsert, RowVersion: v, Scopes: rw.Scopes, Row: rw.Payload}}})
			if err != nil {
				return err
			}
			_, err = tx.IdempotencyPut(ctx, storage.PushRecord{ClientID: "c", ClientCommitID: key, ActorID: "a",
				Status: storage.PushApplied, CommitSeq: seq, Result: []byte("result"), CreatedAtMs: 1})
			return err
		})
	}
	// A warm-up opens every connection and prepares its statements, so
	// that the backends' CPU can be counted from here.
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 10 {
				if err := push(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	pids := backendPIDs(b, s)
	cpu0 := pidsCPU(pids)
	trips0, commits0 := c.n.Load(), next.Load()
	b.SetParallelism(8) // 16 goroutines on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := push(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	n := float64(next.Load() - commits0)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
	b.ReportMetric(float64(c.n.Load()-trips0)/n, "trips/commit")
	if len(pids) > 0 {
		b.ReportMetric(float64((pidsCPU(pids)-cpu0).Microseconds())/n, "pg-µs/commit")
	}
}

// backendPIDs returns the backend pids of the store's idle connections.
func backendPIDs(tb testing.TB, s *Store) []int {
	tb.Helper()
	conns := s.pool.AcquireAllIdle(tb.Context())
	var pids []int
	for _, c := range conns {
		pids = append(pids, int(c.Conn().PgConn().PID()))
		c.Release()
	}
	return pids
}

// pidsCPU sums the CPU time of local processes.
func pidsCPU(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		d, _ := procCPU(pid)
		sum += d
	}
	return sum
}
