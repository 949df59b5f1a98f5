// Package bustest holds what the tests of bus and relay share: the schema
// their commits are encoded with, and a bounded test context.
package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/syncnode/syncnode/schema"
)

// SchemaJSON has todos, whose columns cover every column type, and
// projects.
const SchemaJSON = `{"version": 3, "tables": [
 {"name": "todos", "primaryKey": "id", "scopes": ["project:{project_id}"],
  "columns": [
   {"name": "id", "type": "string"},
   {"name": "project_id", "type": "string"},
   {"name": "title", "type": "string"},
   {"name": "done", "type": "boolean"},
   {"name": "rank", "type": "integer"},
   {"name": "score", "type": "float", "nullable": true},
   {"name": "meta", "type": "json", "nullable": true},
   {"name": "blob", "type": "bytes", "nullable": true},
   {"name": "note", "type": "string", "nullable": true}]},
 {"name": "projects", "primaryKey": "id", "scopes": ["project:{id}"],
  "columns": [
   {"name": "id", "type": "string"},
   {"name": "name", "type": "string"}]}]}`

// Schema parses SchemaJSON.
func Schema(t testing.TB) *schema.Schema {
	t.Helper()
	s, err := schema.Parse([]byte(SchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Context is a context that ends at the test's cleanup or after a minute,
// whichever comes first: a hung NATS call fails the test instead of
// stalling the run.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
