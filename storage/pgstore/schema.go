package pgstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/schemaplan"
)

// sqlType maps an SSP2 type to the column type storing it, spelled as
// format_type reports it.
func sqlType(t ssp2.ColumnType) string {
	switch t {
	case ssp2.TypeInteger:
		return "bigint"
	case ssp2.TypeFloat:
		return "double precision"
	case ssp2.TypeBoolean:
		return "boolean"
	case ssp2.TypeBytes, ssp2.TypeCrdt:
		return "bytea"
	default: // string, json, blob_ref
		return "text"
	}
}

// createTableSQL is the DDL of an application table: the internal columns,
// the schema columns in declaration order, and the primary key pk. The
// key columns use COLLATE "C" so row ids order bytewise, as in SQLite.
func createTableSQL(name string, cols []ssp2.Column, pk []string) string {
	var b strings.Builder
	b.WriteString("CREATE TABLE " + quote(name) + " (\n")
	for _, c := range append(append([]ssp2.Column(nil), schemaplan.InternalColumns...), cols...) {
		b.WriteString("  " + quote(c.Name) + " " + sqlType(c.Type))
		if c.Name == schemaplan.ColPartition || c.Name == schemaplan.ColRowID {
			b.WriteString(` COLLATE "C"`)
		}
		if !c.Nullable {
			b.WriteString(" NOT NULL")
		}
		b.WriteString(",\n")
	}
	quoted := make([]string, len(pk))
	for i, c := range pk {
		quoted[i] = quote(c)
	}
	b.WriteString("  PRIMARY KEY (" + strings.Join(quoted, ", ") + ")\n)")
	return b.String()
}

var defaultPK = []string{schemaplan.ColPartition, schemaplan.ColRowID}

// EnsureSchema implements storage.Store in one transaction, under the
// schema's advisory lock so that nodes starting together install once; a
// refusal rolls all of it back. It declares no checkpoints (gate.go).
func (s *Store) EnsureSchema(ctx context.Context, sc *schema.Schema) error {
	return s.EnsureSchemaWithCheckpoints(ctx, sc, nil)
}

func ensureSchema(ctx context.Context, tx pgx.Tx, sc *schema.Schema) error {
	marker, ok, err := readMarker(ctx, tx)
	if err != nil {
		return err
	}
	var stored *schemaplan.Marker
	if ok {
		stored = &schemaplan.Marker{Version: marker.Version, Layouts: marker.Layouts}
	}
	plan, err := schemaplan.Decide(stored, sc)
	if err != nil {
		return err
	}
	for _, t := range plan.Create {
		exists, cols, err := catalog(ctx, tx, t.Name)
		if err != nil {
			return err
		}
		if exists {
			// A table left by an earlier run without a marker must
			// already be what we would create.
			if err := schemaplan.CheckPhysical(t.Layout(), true, cols, sqlType); err != nil {
				return err
			}
			continue
		}
		if _, err := tx.Exec(ctx, createTableSQL(t.Name, t.WireColumns(), defaultPK)); err != nil {
			return fmt.Errorf("ensure schema: create %s: %w", t.Name, err)
		}
	}
	for _, k := range plan.Keep {
		exists, cols, err := catalog(ctx, tx, k.Table.Name)
		if err != nil {
			return err
		}
		if plan.Action == schemaplan.Migrate && exists {
			// Internal columns a table built by an older build lacks
			// arrive only with a schema version bump (SPEC.md §2.4).
			for _, col := range schemaplan.Upgradable(cols) {
				ddl := "ALTER TABLE " + quote(k.Table.Name) + " ADD COLUMN " + quote(col.Name) + " " + sqlType(col.Type)
				if _, err := tx.Exec(ctx, ddl); err != nil {
					return fmt.Errorf("ensure schema: add column %s.%s: %w", k.Table.Name, col.Name, err)
				}
				cols = append(cols, schemaplan.PhysicalColumn{Name: col.Name, Type: sqlType(col.Type)})
			}
		}
		if err := schemaplan.CheckPhysical(k.Stored, exists, cols, sqlType); err != nil {
			return err
		}
		for _, col := range k.Added {
			ddl := "ALTER TABLE " + quote(k.Table.Name) + " ADD COLUMN " + quote(col.Name) + " " + sqlType(col.Type)
			if _, err := tx.Exec(ctx, ddl); err != nil {
				return fmt.Errorf("ensure schema: add column %s.%s: %w", k.Table.Name, col.Name, err)
			}
		}
		if k.NeedsRewrite() {
			if err := rewriteRows(ctx, tx, k); err != nil {
				return err
			}
		}
	}
	for _, t := range sc.Tables {
		if err := reconcileIndexes(ctx, tx, t); err != nil {
			return err
		}
	}
	if plan.Action == schemaplan.Verify {
		return nil
	}
	layouts, err := schema.MarshalLayouts(sc.Layouts())
	if err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO sync_schema_marker (id, schema_version, layouts, updated_at_ms)
		VALUES (1, $1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET schema_version = EXCLUDED.schema_version,
			layouts = EXCLUDED.layouts, updated_at_ms = EXCLUDED.updated_at_ms`,
		sc.Version, string(layouts), time.Now().UnixMilli()); err != nil {
		return fmt.Errorf("ensure schema: write marker: %w", err)
	}
	return nil
}

// catalog reads a table's columns from pg_catalog: name, type, NOT NULL
// and position in the primary key; exists=false when the table is absent
// from the current schema.
func catalog(ctx context.Context, q querier, table string) (exists bool, cols []schemaplan.PhysicalColumn, err error) {
	rows, err := q.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
			coalesce((SELECT k.n FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n) WHERE k.attnum = a.attnum), 0)
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
		WHERE n.nspname = current_schema() AND c.relname = $1 AND c.relkind = 'r'
		ORDER BY a.attnum`, table)
	if err != nil {
		return false, nil, fmt.Errorf("ensure schema: read catalog of %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var pc schemaplan.PhysicalColumn
		var pk int64
		if err := rows.Scan(&pc.Name, &pc.Type, &pc.NotNull, &pk); err != nil {
			return false, nil, fmt.Errorf("ensure schema: read catalog of %s: %w", table, err)
		}
		pc.PKPos = int(pk)
		cols = append(cols, pc)
	}
	if err := rows.Err(); err != nil {
		return false, nil, fmt.Errorf("ensure schema: read catalog of %s: %w", table, err)
	}
	return len(cols) > 0, cols, nil
}

// querier is what the catalog reads need of a transaction or a pool.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// reconcileIndexes makes the managed indexes of t exactly
// schemaplan.Indexes(t): stale ones (a column no longer scoped, a changed
// or dropped declared index) are dropped, missing ones created.
func reconcileIndexes(ctx context.Context, tx pgx.Tx, t *schema.Table) error {
	defs := schemaplan.Indexes(t)
	want := make(map[string]bool, len(defs))
	for _, ix := range defs {
		want[ix.Name] = true
	}
	rows, err := tx.Query(ctx, `SELECT indexname FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename = $1 AND starts_with(indexname, $2)`, t.Name, schemaplan.ManagedIndexPrefix)
	if err != nil {
		return fmt.Errorf("ensure schema: list indexes of %s: %w", t.Name, err)
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("ensure schema: list indexes of %s: %w", t.Name, err)
	}
	for _, n := range have {
		if want[n] {
			delete(want, n)
			continue
		}
		if _, err := tx.Exec(ctx, "DROP INDEX "+quote(n)); err != nil {
			return fmt.Errorf("ensure schema: drop index %s: %w", n, err)
		}
	}
	for _, ix := range defs {
		if !want[ix.Name] {
			continue
		}
		ddl := ix.CreateSQL(t.Name, quote)
		if _, err := tx.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("ensure schema: create index %s: %w", ix.Name, err)
		}
	}
	return nil
}

// rewriteRows re-encodes every stored payload of k's table and recomputes
// its stored scopes, in keyset pages.
func rewriteRows(ctx context.Context, tx pgx.Tx, k schemaplan.Kept) error {
	rw, err := schemaplan.NewRewriter(k)
	if err != nil {
		return err
	}
	name := quote(k.Table.Name)
	pcol, rcol := quote(schemaplan.ColPartition), quote(schemaplan.ColRowID)
	sel := fmt.Sprintf(`SELECT %[1]s, %[2]s, %[3]s FROM %[4]s WHERE (%[1]s, %[2]s) > ($1, $2) ORDER BY %[1]s, %[2]s LIMIT 500`,
		pcol, rcol, quote(schemaplan.ColPayload), name)
	first := fmt.Sprintf(`SELECT %[1]s, %[2]s, %[3]s FROM %[4]s ORDER BY %[1]s, %[2]s LIMIT 500`,
		pcol, rcol, quote(schemaplan.ColPayload), name)
	upd := fmt.Sprintf(`UPDATE %s SET %s = $1, %s = $2 WHERE %s = $3 AND %s = $4`, name,
		quote(schemaplan.ColPayload), quote(schemaplan.ColScopes), pcol, rcol)
	type item struct {
		partition, rowID string
		payload          []byte
	}
	var after *item
	for {
		var rows pgx.Rows
		if after == nil {
			rows, err = tx.Query(ctx, first)
		} else {
			rows, err = tx.Query(ctx, sel, after.partition, after.rowID)
		}
		if err != nil {
			return fmt.Errorf("ensure schema: rewrite %s: %w", k.Table.Name, err)
		}
		var page []item
		for rows.Next() {
			var it item
			if err := rows.Scan(&it.partition, &it.rowID, &it.payload); err != nil {
				rows.Close()
				return fmt.Errorf("ensure schema: rewrite %s: %w", k.Table.Name, err)
			}
			page = append(page, it)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("ensure schema: rewrite %s: %w", k.Table.Name, err)
		}
		b := &pgx.Batch{}
		for _, it := range page {
			payload, scopes, err := rw.Rewrite(it.payload)
			if err != nil {
				return err
			}
			b.Queue(upd, payload, string(scopes), it.partition, it.rowID)
		}
		if b.Len() > 0 {
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return fmt.Errorf("ensure schema: rewrite %s: %w", k.Table.Name, err)
			}
		}
		if len(page) < 500 {
			return nil
		}
		after = &page[len(page)-1]
	}
}

func readMarker(ctx context.Context, q querier) (storage.SchemaMarker, bool, error) {
	var m storage.SchemaMarker
	rows, err := q.Query(ctx, "SELECT schema_version, layouts FROM sync_schema_marker WHERE id = 1")
	if err != nil {
		return m, false, fmt.Errorf("read schema marker: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		return m, false, rows.Err()
	}
	var layouts string
	if err := rows.Scan(&m.Version, &layouts); err != nil {
		return m, false, fmt.Errorf("read schema marker: %w", err)
	}
	if m.Layouts, err = schema.UnmarshalLayouts([]byte(layouts)); err != nil {
		return m, false, fmt.Errorf("read schema marker: %w", err)
	}
	return m, true, nil
}

// SchemaMarker implements storage.Store.
func (s *Store) SchemaMarker(ctx context.Context) (storage.SchemaMarker, bool, error) {
	return readMarker(ctx, s.pool)
}
