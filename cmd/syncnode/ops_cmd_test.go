package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// TestOpsCall loads an operations file into a node and runs its query
// with syncnode ops call, on SQLite and PostgreSQL; an ungranted scope
// fails with the code.
func TestOpsCall(t *testing.T) {
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) { testOpsCall(t, store == "postgres") })
	}
}

func testOpsCall(t *testing.T, pg bool) {
	path := filepath.Join(t.TempDir(), "ops.json")
	doc := `{"queries": [{"id": "todos", "sql": "SELECT id, title FROM todos WHERE project_id = ? ORDER BY id",
	  "tables": ["todos"], "maxRows": 100, "mode": "scoped",
	  "columns": [{"name": "id", "type": "string"}, {"name": "title", "type": "string"}],
	  "coverage": [{"table": "todos", "scopes": {"project_id": [0]}}]}]}`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, func(c *node.Config) {
		c.Operations.File = path
		if pg {
			c.Store.Postgres.URL, c.Store.Postgres.Schema = pgtest.Schema(t)
		}
	})
	tok := nodetest.Token(t, "ops", "default", map[string][]string{"project_id": {"p1"}})
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"ops", "call", "--url", n.URL(), "--token", tok, "--id", "todos", "--params", `["p1"]`}, nil, &out, &errb)
	if err != nil || !strings.Contains(out.String(), `"kind": "query"`) || !strings.Contains(out.String(), `"maxCommitSeq": 0`) {
		t.Fatalf("ops call: %v\n%s%s", err, out.String(), errb.String())
	}
	out.Reset()
	err = run(context.Background(), []string{"ops", "call", "--url", n.URL(), "--token", tok, "--id", "todos", "--params", `["p2"]`}, nil, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "operation.forbidden") {
		t.Fatalf("ungranted: %v\n%s", err, out.String())
	}
}

// TestOperationsConfig: the operations key and flag reach the node.
func TestOperationsConfig(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c, err := parseServeFlags(fs, []string{"--operations", "ops.json"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := c.node(); err != nil || nc.Operations.File != "ops.json" {
		t.Fatalf("flag: node operations file %q, %v", nc.Operations.File, err)
	}
	c, err = parseConfigFile(t, `operations = "from-file.json"`)
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := c.node(); err != nil || nc.Operations.File != "from-file.json" {
		t.Fatalf("file: node operations file %q, %v", nc.Operations.File, err)
	}
}
