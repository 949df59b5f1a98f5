package operations

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// directQuery runs the benchmark's SQL straight on a store's database,
// the partition filter written in, and returns the rows read.
type directQuery func(partition, project string) (int, error)

// benchStore opens one store for a benchmark and a direct reader of the
// same database: database/sql over the SQLite file, a pgx pool on
// PostgreSQL (both cache the prepared statement, as the store does).
func benchStore(b *testing.B, name string) (func(testing.TB) storage.Store, func() directQuery, func(*testing.B) *cpuMeter) {
	const sqlText = `SELECT id, title FROM %s WHERE _sync_partition = %s AND project_id = %s ORDER BY id`
	ctx := context.Background()
	switch name {
	case "sqlite":
		path := filepath.Join(b.TempDir(), "sync.db")
		open := func(testing.TB) storage.Store {
			st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: path, Synchronous: sqlitestore.SynchronousNormal})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = st.Close() })
			return st
		}
		meter := func(b *testing.B) *cpuMeter { return newCPUMeter(b, "", "") }
		return open, func() directQuery {
			db, err := sql.Open("sqlite", "file:"+path+"?_pragma=query_only(ON)")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = db.Close() })
			st, err := db.Prepare(fmt.Sprintf(sqlText, "tasks", "?", "?"))
			if err != nil {
				b.Fatal(err)
			}
			return func(partition, project string) (int, error) {
				rows, err := st.Query(partition, project)
				if err != nil {
					return 0, err
				}
				n := 0
				for rows.Next() {
					var id, title string
					if err := rows.Scan(&id, &title); err != nil {
						return n, err
					}
					n++
				}
				return n, rows.Close()
			}
		}, meter
	case "postgres":
		url, sch := pgtest.Schema(b)
		url = withAppName(url, sch)
		return func(testing.TB) storage.Store {
				st, err := pgstore.Open(ctx, pgstore.Config{URL: url, Schema: sch})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = st.Close() })
				return st
			}, func() directQuery {
				pool, err := pgxpool.New(ctx, url)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(pool.Close)
				q := fmt.Sprintf(sqlText, pgx.Identifier{sch, "tasks"}.Sanitize(), "$1", "$2")
				return func(partition, project string) (int, error) {
					rows, err := pool.Query(ctx, q, partition, project)
					if err != nil {
						return 0, err
					}
					defer rows.Close()
					n := 0
					for rows.Next() {
						var id, title string
						if err := rows.Scan(&id, &title); err != nil {
							return n, err
						}
						n++
					}
					return n, rows.Err()
				}
			}, func(b *testing.B) *cpuMeter { return newCPUMeter(b, url, sch) }
	}
	b.Fatalf("unknown store %q", name)
	return nil, nil, nil
}

// withAppName names a benchmark's connections (application_name), so
// pgCPU finds their server processes.
func withAppName(url, name string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "application_name=" + name
}

// cpuMeter measures CPU time over a benchmark loop: this process's (user +
// system, getrusage) and, on PostgreSQL, the server processes' serving
// the benchmark's connections (their /proc stat; the server runs on this
// machine). On a shared machine wall time per op moves with the load;
// CPU per op much less, so it is the figure to compare.
type cpuMeter struct {
	b       *testing.B
	pgURL   string // "" on SQLite
	appName string
	self    time.Duration
	server  map[int]time.Duration
}

func newCPUMeter(b *testing.B, pgURL, appName string) *cpuMeter {
	m := &cpuMeter{b: b, pgURL: pgURL, appName: appName, self: selfCPU()}
	m.server = m.serverCPU()
	return m
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU reads the CPU time of every server process of appName.
func (m *cpuMeter) serverCPU() map[int]time.Duration {
	if m.pgURL == "" {
		return nil
	}
	ctx := context.Background()
	c, err := pgx.Connect(ctx, m.pgURL)
	if err != nil {
		m.b.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	rows, err := c.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", m.appName)
	if err != nil {
		m.b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		m.b.Fatal(err)
	}
	out := map[int]time.Duration{}
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			m.b.Fatalf("the server's process stat (the server must run on this machine): %v", err)
		}
		// Fields after the command's closing parenthesis: utime and stime
		// are the 12th and 13th, in clock ticks (100 a second on Linux).
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[int(pid)] = time.Duration(ut+st) * 10 * time.Millisecond
	}
	return out
}

// report adds cpu-µs/op (this process) and, on PostgreSQL,
// server-cpu-µs/op, over the loop just run.
func (m *cpuMeter) report() {
	n := float64(m.b.N)
	m.b.ReportMetric(float64((selfCPU()-m.self).Microseconds())/n, "cpu-µs/op")
	if m.pgURL == "" {
		return
	}
	var d time.Duration
	for pid, t := range m.serverCPU() {
		d += t - m.server[pid]
	}
	m.b.ReportMetric(float64(d.Microseconds())/n, "server-cpu-µs/op")
}

// BenchmarkQuery100 is a registered query of 100 rows (operation) against
// the same SQL run directly on the store's database with the partition
// filter written in (direct), on each store. Target: operation ≤ 1.2×
// direct. Besides wall time it reports CPU per op (cpuMeter), the
// comparison that holds on a loaded machine.
func BenchmarkQuery100(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			open, direct, meter := benchStore(b, name)
			f := File{Queries: []Query{scopedTasks("q", "SELECT id, title FROM tasks WHERE project_id = ? ORDER BY id")}}
			e := newEnv(b, open, f, nil)
			var muts []Mutation
			for i := range 100 {
				muts = append(muts, task(fmt.Sprintf("t%03d", i), "a", "a title of some length", int64(i), false))
				muts = append(muts, task(fmt.Sprintf("u%03d", i), "b", "another", int64(i), false))
			}
			e.put("p", muts...)
			e.put("q", muts...)
			id := caller("p", "u", engine.Allowed{"project_id": {"a"}})
			b.Run("operation", func(b *testing.B) {
				m := meter(b)
				for b.Loop() {
					res, err := e.query(id, "q", "a")
					if err != nil || len(res.Rows) != 100 {
						b.Fatal(len(res.Rows), err)
					}
				}
				m.report()
			})
			b.Run("direct", func(b *testing.B) {
				run := direct()
				m := meter(b)
				for b.Loop() {
					if n, err := run("p", "a"); err != nil || n != 100 {
						b.Fatal(n, err)
					}
				}
				m.report()
			})
		})
	}
}

// BenchmarkCommandRound is a Go command of one upsert (command) against a
// push of the same operation through the same pipeline (push), on each
// store. Target: command ≤ 1.2× push. Besides wall time it reports CPU
// per op (cpuMeter: this process's, and PostgreSQL's server's).
func BenchmarkCommandRound(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			open, _, meter := benchStore(b, name)
			var n int
			f := File{Commands: []Command{{ID: "add",
				Authorize: func(context.Context, engine.Identity, any) (bool, error) { return true, nil },
				Run: func(_ context.Context, c CommandCall) ([]Mutation, error) {
					return []Mutation{task(c.RequestID, "a", "title", 1, false)}, nil
				}}}}
			e := newEnv(b, open, f, nil)
			id := caller("p", "u", engine.Allowed{"project_id": {"a"}})
			b.Run("command", func(b *testing.B) {
				m := meter(b)
				for b.Loop() {
					n++
					res, err := e.svc.Command(e.ctx, id, Request{Kind: "command", ClientID: "svc", OperationID: "add", RequestID: fmt.Sprintf("c%d", n), Params: Object{}})
					if err != nil || res.Status != "applied" {
						b.Fatal(res, err)
					}
				}
				m.report()
			})
			b.Run("push", func(b *testing.B) {
				m := meter(b)
				for b.Loop() {
					n++
					ops, err := e.svc.operations([]Mutation{task(fmt.Sprintf("p%d", n), "a", "title", 1, false)})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := e.engine.PushAuthoritative(e.ctx, engine.AuthoritativeCommit{Partition: "p", ActorID: "u", ClientID: "pusher", ClientCommitID: fmt.Sprintf("p%d", n),
						Operations: func(context.Context, storage.Tx) ([]ssp2.Operation, error) { return ops, nil }}); err != nil {
						b.Fatal(err)
					}
				}
				m.report()
			})
		})
	}
}
