package operations_test

import (
	"testing"

	"github.com/syncnode/syncnode/node"
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
