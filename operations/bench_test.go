package operations

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

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
func benchStore(b *testing.B, name string) (func(testing.TB) storage.Store, func() directQuery) {
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
		}
	case "postgres":
		url, sch := pgtest.Schema(b)
		return func(testing.TB) storage.Store {
				st, err := pgstore.Open(ctx, pgstore.Config{URL: url, Schema: sch})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = st.Close() })
				b.Cleanup(func() {
					if c, err := pgx.Connect(context.Background(), url); err == nil {
						_, _ = c.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{sch + "__ops"}.Sanitize()+" CASCADE")
						_ = c.Close(context.Background())
					}
				})
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
			}
	}
	b.Fatalf("unknown store %q", name)
	return nil, nil
}

// BenchmarkQuery100 is a registered query of 100 rows (operation) against
// the same SQL run directly on the store's database with the partition
// filter written in (direct), on each store. Target: operation ≤ 1.2×
// direct.
func BenchmarkQuery100(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			open, direct := benchStore(b, name)
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
				for b.Loop() {
					res, err := e.query(id, "q", "a")
					if err != nil || len(res.Rows) != 100 {
						b.Fatal(len(res.Rows), err)
					}
				}
			})
			b.Run("direct", func(b *testing.B) {
				run := direct()
				for b.Loop() {
					if n, err := run("p", "a"); err != nil || n != 100 {
						b.Fatal(n, err)
					}
				}
			})
		})
	}
}

// BenchmarkCommandRound is a Go command of one upsert (command) against a
// push of the same operation through the same pipeline (push), on each
// store. Target: command ≤ 1.2× push. cpu-µs/op is this process's CPU
// (PostgreSQL's server is not in it).
func BenchmarkCommandRound(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			var n int
			f := File{Commands: []Command{{ID: "add",
				Authorize: func(context.Context, engine.Identity, any) (bool, error) { return true, nil },
				Run: func(_ context.Context, c CommandCall) ([]Mutation, error) {
					return []Mutation{task(c.RequestID, "a", "title", 1, false)}, nil
				}}}}
			e := newEnv(b, stores[name], f, nil)
			id := caller("p", "u", engine.Allowed{"project_id": {"a"}})
			b.Run("command", func(b *testing.B) {
				cpu0 := cpuTime(b)
				for b.Loop() {
					n++
					res, err := e.svc.Command(e.ctx, id, Request{Kind: "command", ClientID: "svc", OperationID: "add", RequestID: fmt.Sprintf("c%d", n), Params: Object{}})
					if err != nil || res.Status != "applied" {
						b.Fatal(res, err)
					}
				}
				b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			})
			b.Run("push", func(b *testing.B) {
				cpu0 := cpuTime(b)
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
				b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			})
		})
	}
}
