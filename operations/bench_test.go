package operations

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// BenchmarkQuery100 is a registered query of 100 rows (operation) against
// the same SQL run directly on the SQLite file with the partition filter
// written in (direct). Target: operation ≤ 1.2× direct.
func BenchmarkQuery100(b *testing.B) {
	path := filepath.Join(b.TempDir(), "sync.db")
	open := func(testing.TB) storage.Store {
		st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: path, Synchronous: sqlitestore.SynchronousNormal})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		return st
	}
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
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=query_only(ON)")
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		st, err := db.Prepare(`SELECT id, title FROM tasks WHERE _sync_partition = ? AND project_id = ? ORDER BY id`)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			rows, err := st.Query("p", "a")
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for rows.Next() {
				var id, title string
				if err := rows.Scan(&id, &title); err != nil {
					b.Fatal(err)
				}
				n++
			}
			if err := rows.Close(); err != nil || n != 100 {
				b.Fatal(n, err)
			}
		}
	})
}

// BenchmarkCommandRound is a Go command of one upsert (command) against a
// push of the same operation through the same pipeline (push). Target:
// command ≤ 1.2× push.
func BenchmarkCommandRound(b *testing.B) {
	var n int
	f := File{Commands: []Command{{ID: "add",
		Authorize: func(context.Context, engine.Identity, any) (bool, error) { return true, nil },
		Run: func(_ context.Context, c CommandCall) ([]Mutation, error) {
			return []Mutation{task(c.RequestID, "a", "title", 1, false)}, nil
		}}}}
	e := newEnv(b, stores["sqlite"], f, nil)
	id := caller("p", "u", engine.Allowed{"project_id": {"a"}})
	b.Run("command", func(b *testing.B) {
		for b.Loop() {
			n++
			res, err := e.svc.Command(e.ctx, id, Request{Kind: "command", ClientID: "svc", OperationID: "add", RequestID: fmt.Sprintf("c%d", n), Params: Object{}})
			if err != nil || res.Status != "applied" {
				b.Fatal(res, err)
			}
		}
	})
	b.Run("push", func(b *testing.B) {
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
	})
}
