package operations_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/operations"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// backend selects a node's store for a test.
type backend func(t *testing.T, c *node.Config)

// backends are the two stores every node-level test runs on: the
// node's SQLite file, and a fresh PostgreSQL schema per test.
var backends = []struct {
	name string
	on   backend
}{
	{"sqlite", func(*testing.T, *node.Config) {}},
	{"postgres", func(t *testing.T, c *node.Config) { c.Store.Postgres.URL, c.Store.Postgres.Schema = pgtest.Schema(t) }},
}

// eachBackend runs f once per store.
func eachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b.on) })
	}
}

// with returns the node option that selects b's store, then applies mod.
func (b backend) with(t *testing.T, mod func(*node.Config)) func(*node.Config) {
	return func(c *node.Config) {
		b(t, c)
		mod(c)
	}
}

// TestNodeRefusesEscapingRegistration: on either store, a node whose
// operations hold one of the escapes — a schema-qualified main
// table, the commit log, ATTACH, a CTE naming an internal table, a
// writing statement, a second statement — does not start, and says which
// query and field (every escape and malformed declaration one by one:
// TestRegistrationRefusesEscapes).
func TestNodeRefusesEscapingRegistration(t *testing.T) {
	escapes := []struct{ name, sql, want string }{
		{"main.todos", "SELECT id FROM main.todos WHERE project_id = ?", "no such table"},
		{"sync_commits", "SELECT client_id AS id FROM sync_commits WHERE partition = ?", "sync_commits"},
		{"attach", "ATTACH DATABASE 'x.db' AS x", "only SELECT"},
		{"cte", "WITH c AS (SELECT client_id FROM sync_client_records) SELECT id FROM todos WHERE project_id = ?", "sync_client_records"},
		{"write", "UPDATE todos SET title = 'x' WHERE project_id = ?", "only SELECT"},
		{"second", "SELECT id FROM todos WHERE project_id = ?; DELETE FROM todos", "second statement"},
	}
	eachBackend(t, func(t *testing.T, b backend) {
		for _, esc := range escapes {
			t.Run(esc.name, func(t *testing.T) {
				bad := operations.File{Queries: []operations.Query{{ID: "esc", SQL: esc.sql,
					Tables: []string{"todos"}, MaxRows: 10, Mode: operations.Privileged, AllowActors: []string{"*"},
					Columns: []operations.Column{{Name: "id", Type: "string"}}}}}
				n, err := node.New(nodetest.Config(t, b.with(t, func(c *node.Config) { c.Operations.Registry = bad })))
				if err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					if err = n.Start(ctx); err == nil {
						_ = n.Stop(ctx)
					}
				}
				if err == nil || !strings.Contains(err.Error(), `queries[0] ("esc").sql`) || !strings.Contains(err.Error(), esc.want) {
					t.Fatalf("a node with %q: %v", esc.sql, err)
				}
			})
		}
	})
}
