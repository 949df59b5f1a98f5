package sqlitestore

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/schemaplan"
)

const planTestSchema = `{"version":1,"tables":[{"name":"tasks","primaryKey":"id","scopes":["project:{project_id}"],"columns":[
 {"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"done","type":"boolean"}]}]}`

// bigPartition is a store whose partition "p" holds n tasks over 200
// projects, written in one statement after EnsureSchema (as rows pushed
// into a store opened before they existed: no statistics gathered on
// them).
func bigPartition(tb testing.TB, n int) (*Store, storage.QueryParams) {
	ctx := context.Background()
	s := openTB(tb, SynchronousNormal)
	sc, err := schema.Parse([]byte(planTestSchema))
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.EnsureSchema(ctx, sc); err != nil {
		tb.Fatal(err)
	}
	err = s.write(ctx, func(c *conn) error {
		return c.execOnce(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
INSERT INTO tasks (_sync_partition, _sync_row_id, _sync_server_version, _sync_scopes, _sync_payload, id, project_id, done)
SELECT 'p', 't' || i, i, '{}', x'', 't' || i, 'pr' || (i % 200), i % 2 FROM n`, n)
	})
	if err != nil {
		tb.Fatal(err)
	}
	spec := storage.QuerySpec{SQL: "SELECT count(*) AS n FROM tasks WHERE project_id = ? AND done = ?", Tables: []string{"tasks"},
		Columns: []storage.QueryColumn{{Name: "n", Type: ssp2.TypeInteger}}, Limit: 2}
	p := storage.QueryParams{QuerySpec: spec, Partition: "p", Args: []any{"pr2", false},
		Scopes: map[string]map[string][]string{"tasks": {"project_id": {"pr2"}}}}
	return s, p
}

// BenchmarkScopedQueryBigPartition is a scoped registered query counting
// one project's open rows (100 of 20,000 in the partition). cpu-µs/op is
// this process's CPU (all of SQLite's), steadier than ns/op on a shared
// machine.
func BenchmarkScopedQueryBigPartition(b *testing.B) {
	s, p := bigPartition(b, 20_000)
	ctx := context.Background()
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	cpu0 := cpu()
	defer func() { b.ReportMetric(float64((cpu()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op") }()
	for b.Loop() {
		res, err := s.Query(ctx, p)
		if err != nil || len(res.Rows) != 1 || res.Rows[0][0] != int64(100) {
			b.Fatal(res.Rows, err)
		}
	}
}

// TestScopedQueryPlan: on a table without gathered statistics (its rows
// written after EnsureSchema), a scoped registered query's relation reads
// the scope index, not the partition's primary key range, and EnsureSchema
// run again keeps the statistics it finds.
func TestScopedQueryPlan(t *testing.T) {
	ctx := context.Background()
	s, p := bigPartition(t, 2_000)
	sc := s.schema.Load().schema
	text, args, err := opStatement(&installed{schema: sc}, &p, false)
	if err != nil {
		t.Fatal(err)
	}
	plan := func() string {
		var out []string
		err := s.write(ctx, func(c *conn) error {
			rows, err := c.queryOnce(ctx, "EXPLAIN QUERY PLAN "+text, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id, parent, notUsed int64
				var detail string
				if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
					return err
				}
				out = append(out, detail)
			}
			return rows.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, "; ")
	}
	want := "USING INDEX " + schemaplan.ScopeIndexName("tasks", "project_id")
	if got := plan(); !strings.Contains(got, want) {
		t.Fatalf("plan %q, want it to read %s", got, want)
	}
	if err := s.EnsureSchema(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if got := plan(); !strings.Contains(got, want) {
		t.Fatalf("plan after EnsureSchema again %q, want it to read %s", got, want)
	}
}

// TestWindowPlan: the window statement of every candidates shape walks
// the scope index by its primary key, seeks each candidate's changes and
// header by theirs, and sorts nothing for its ORDER BY (windowText).
func TestWindowPlan(t *testing.T) {
	ctx := context.Background()
	s := openTB(t, SynchronousNormal)
	for _, shape := range []string{"1", "n", "11", "1n", "n1", "111"} {
		text := windowText([]byte(shape))
		var out []string
		err := s.write(ctx, func(c *conn) error {
			args := make([]any, strings.Count(text, "?"))
			for i := range args {
				args[i] = int64(1)
			}
			rows, err := c.queryOnce(ctx, "EXPLAIN QUERY PLAN "+text, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id, parent, notUsed int64
				var detail string
				if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
					return err
				}
				out = append(out, detail)
			}
			return rows.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(out, "; ")
		for _, want := range []string{"SEARCH s USING PRIMARY KEY", "SEARCH ch USING PRIMARY KEY (partition=? AND seq=?)",
			"SEARCH c USING PRIMARY KEY (partition=? AND seq=?)"} {
			if !strings.Contains(plan, want) {
				t.Errorf("shape %s: plan %q, want %q", shape, plan, want)
			}
		}
		if strings.Contains(plan, "ORDER BY") {
			t.Errorf("shape %s: plan %q sorts for its ORDER BY", shape, plan)
		}
	}
}
