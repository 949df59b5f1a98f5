package sqlitestore

import (
	"context"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

const queryTestSchema = `{"version":1,"tables":[{"name":"tasks","primaryKey":"id","scopes":["project:{project_id}"],"columns":[
 {"name":"id","type":"string"},{"name":"project_id","type":"string"}]}]}`

// TestQueryStatementLimit: a registered query's statement reads at most
// Limit (maxRows + 1) rows in SQL, LIMIT appended or, under the query's
// own outermost LIMIT, wrapped; it compiles and runs either way, and a
// limit below one is refused.
func TestQueryStatementLimit(t *testing.T) {
	ctx := context.Background()
	s := openTB(t, SynchronousNormal)
	sc, err := schema.Parse([]byte(queryTestSchema))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureSchema(ctx, sc); err != nil {
		t.Fatal(err)
	}
	cols := []storage.QueryColumn{{Name: "id", Type: ssp2.TypeString}}
	for _, c := range []struct{ sql, tail string }{
		{"SELECT id FROM tasks WHERE project_id = ? ORDER BY id", "ORDER BY id\nLIMIT 6"},
		{"SELECT id FROM tasks WHERE project_id = ? ORDER BY id LIMIT 3", "LIMIT 3\n) AS _syncnode_result\nLIMIT 6"},
	} {
		p := storage.QueryParams{QuerySpec: storage.QuerySpec{SQL: c.sql, Tables: []string{"tasks"}, Columns: cols, Limit: 6},
			Partition: "p", Args: []any{"a"}, Scopes: map[string]map[string][]string{"tasks": {"project_id": {"a"}}}}
		text, _, err := opStatement(sc, &p)
		if err != nil || !strings.HasSuffix(text, c.tail) {
			t.Fatalf("%s: statement %q (%v), want it to end %q", c.sql, text, err, c.tail)
		}
		if err := s.PrepareQuery(ctx, p.QuerySpec); err != nil {
			t.Fatalf("%s: prepare: %v", c.sql, err)
		}
		if res, err := s.Query(ctx, p); err != nil || len(res.Rows) != 0 || res.HasPartition {
			t.Fatalf("%s: %+v, %v", c.sql, res, err)
		}
		p.Limit = 0
		if _, err := s.Query(ctx, p); err == nil {
			t.Fatalf("%s: limit 0 ran", c.sql)
		}
	}
}
