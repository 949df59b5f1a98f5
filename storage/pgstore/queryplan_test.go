package pgstore

import (
	"context"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// BenchmarkScopedQueryBigPartition is sqlitestore's benchmark of the name
// on PostgreSQL: a scoped registered query counting one project's open
// rows (100 of 20,000 in the partition), the table analyzed (as the
// store's analyzer does once it has grown). It logs the statement's plan.
func BenchmarkScopedQueryBigPartition(b *testing.B) {
	ctx := context.Background()
	s := openTB(b, 2)
	sc, err := schema.Parse([]byte(`{"version":1,"tables":[{"name":"tasks","primaryKey":"id","scopes":["project:{project_id}"],"columns":[
 {"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"done","type":"boolean"}]}]}`))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.EnsureSchema(ctx, sc); err != nil {
		b.Fatal(err)
	}
	tbl := quote(s.cfg.Schema) + ".tasks"
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+tbl+` (_sync_partition, _sync_row_id, _sync_server_version, _sync_scopes, _sync_payload, id, project_id, done)
SELECT 'p', 't' || i, i, '{}', '\x', 't' || i, 'pr' || (i % 200), i % 2 = 1 FROM generate_series(1, 20000) AS i`); err != nil {
		b.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, "ANALYZE "+tbl); err != nil {
		b.Fatal(err)
	}
	p := storage.QueryParams{QuerySpec: storage.QuerySpec{SQL: "SELECT count(*) AS n FROM tasks WHERE project_id = ? AND done = ?", Tables: []string{"tasks"},
		Columns: []storage.QueryColumn{{Name: "n", Type: ssp2.TypeInteger}}, Limit: 2}, Partition: "p", Args: []any{"pr2", false},
		Scopes: map[string]map[string][]string{"tasks": {"project_id": {"pr2"}}}}
	text, args, err := s.opStatement(&p)
	if err != nil {
		b.Fatal(err)
	}
	rows, err := s.pool.Query(ctx, "EXPLAIN "+text, args...)
	if err != nil {
		b.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			b.Fatal(err)
		}
		plan = append(plan, strings.TrimSpace(line))
	}
	if rows.Close(); rows.Err() != nil {
		b.Fatal(rows.Err())
	}
	b.Log(strings.Join(plan, "; "))
	for b.Loop() {
		res, err := s.Query(ctx, p)
		if err != nil || len(res.Rows) != 1 || res.Rows[0][0] != int64(100) {
			b.Fatal(res.Rows, err)
		}
	}
}
