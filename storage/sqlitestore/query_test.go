package sqlitestore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

const queryTestSchema = `{"version":1,"tables":[{"name":"tasks","primaryKey":"id","scopes":["project:{project_id}"],"columns":[
 {"name":"id","type":"string"},{"name":"project_id","type":"string"}]}]}`

// TestQueryStatementBound: Query runs a registered query's statement
// without a LIMIT of ours (its own LIMIT kept as written) and steps it
// at most Limit (maxRows + 1) rows, in the statement's order; TxQuery's
// form reads at most Limit rows in SQL, LIMIT appended or, under the
// query's own outermost LIMIT, wrapped. Both compile, the query
// connections keep temporary storage in files (an unbounded sort
// spills), and a limit below one is refused.
func TestQueryStatementBound(t *testing.T) {
	ctx := context.Background()
	s := openTB(t, SynchronousNormal)
	sc, err := schema.Parse([]byte(queryTestSchema))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureSchema(ctx, sc); err != nil {
		t.Fatal(err)
	}
	err = s.write(ctx, func(c *conn) error {
		return c.execOnce(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 8)
INSERT INTO tasks (_sync_partition, _sync_row_id, _sync_server_version, _sync_scopes, _sync_payload, id, project_id)
SELECT 'p', 't' || i, i, '{}', x'', 't' || i, 'a' FROM n`)
	})
	if err != nil {
		t.Fatal(err)
	}
	cols := []storage.QueryColumn{{Name: "id", Type: ssp2.TypeString}}
	for _, c := range []struct {
		sql, queryTail, txTail string
		want                   []string
	}{
		{"SELECT id FROM tasks WHERE project_id = ? ORDER BY id DESC", "ORDER BY id DESC", "ORDER BY id DESC\nLIMIT 6",
			[]string{"t8", "t7", "t6", "t5", "t4", "t3"}},
		{"SELECT id FROM tasks WHERE project_id = ? ORDER BY id LIMIT 3", "ORDER BY id LIMIT 3", "LIMIT 3\n) AS _syncnode_result\nLIMIT 6",
			[]string{"t1", "t2", "t3"}},
	} {
		p := storage.QueryParams{QuerySpec: storage.QuerySpec{SQL: c.sql, Tables: []string{"tasks"}, Columns: cols, Limit: 6},
			Partition: "p", Args: []any{"a"}, Scopes: map[string]map[string][]string{"tasks": {"project_id": {"a"}}}}
		for limited, tail := range map[bool]string{false: c.queryTail, true: c.txTail} {
			text, _, err := opStatement(&installed{schema: sc}, &p, limited)
			if err != nil || !strings.HasSuffix(text, tail) {
				t.Fatalf("%s (limited %v): statement %q (%v), want it to end %q", c.sql, limited, text, err, tail)
			}
		}
		if err := s.PrepareQuery(ctx, p.QuerySpec); err != nil {
			t.Fatalf("%s: prepare: %v", c.sql, err)
		}
		res, err := s.Query(ctx, p)
		if err != nil {
			t.Fatalf("%s: %v", c.sql, err)
		}
		var got []string
		for _, r := range res.Rows {
			got = append(got, r[0].(string))
		}
		if !slices.Equal(got, c.want) {
			t.Fatalf("%s: rows %v, want %v", c.sql, got, c.want)
		}
		// QueryEach hands over the same rows one by one (the slice
		// reused, its values kept) and collects none; an error from each
		// stops the run and comes back as is.
		var each []string
		eres, err := s.QueryEach(ctx, p, func(row []any) error {
			each = append(each, row[0].(string))
			return nil
		})
		if err != nil || eres.Rows != nil || eres.MaxCommitSeq != res.MaxCommitSeq || eres.HasPartition != res.HasPartition ||
			!slices.Equal(each, c.want) {
			t.Fatalf("%s: QueryEach rows %v (collected %v, seq %d, %v), want %v", c.sql, each, eres.Rows, eres.MaxCommitSeq, err, c.want)
		}
		stop := errors.New("stop")
		calls := 0
		if _, err := s.QueryEach(ctx, p, func([]any) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
			t.Fatalf("%s: QueryEach with a failing each: %v after %d calls, want stop after 1", c.sql, err, calls)
		}
		p.Limit = 0
		if _, err := s.Query(ctx, p); err == nil {
			t.Fatalf("%s: limit 0 ran", c.sql)
		}
	}
	qc, err := s.queryConn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.queries.conns <- qc }()
	var store int64
	if ok, err := qc.c.queryRow(ctx, "PRAGMA temp_store", nil, &store); err != nil || !ok || store != 1 {
		t.Fatalf("query connection temp_store %d (%v, %v), want 1 (FILE)", store, ok, err)
	}
}
