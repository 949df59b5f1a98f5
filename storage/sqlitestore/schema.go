package sqlitestore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/schemaplan"
)

// sqlType maps an SSP2 type to the STRICT column type storing it, which is
// also what pragma_table_info reports.
func sqlType(t ssp2.ColumnType) string {
	switch t {
	case ssp2.TypeInteger, ssp2.TypeBoolean:
		return "INTEGER"
	case ssp2.TypeFloat:
		return "REAL"
	case ssp2.TypeBytes, ssp2.TypeCrdt:
		return "BLOB"
	default: // string, json, blob_ref
		return "TEXT"
	}
}

func quote(ident string) string { return `"` + ident + `"` }

// ddl spells the application tables in SQLite: STRICT makes SQLite
// enforce the column types; WITHOUT ROWID clusters rows by (partition,
// row id) so keyset scans read them in order.
var ddl = schemaplan.DDL{Quote: quote, SQLType: sqlType, TableOptions: " STRICT, WITHOUT ROWID"}

// EnsureSchema implements storage.Store. Everything runs in one write
// transaction (a member of a group transaction, writer.go); a refusal
// rolls all of it back. It declares no checkpoints (gate.go).
func (s *Store) EnsureSchema(ctx context.Context, sc *schema.Schema) error {
	return s.EnsureSchemaWithCheckpoints(ctx, sc, nil)
}

func (s *Store) ensureSchema(ctx context.Context, c *conn, sc *schema.Schema) error {
	if err := applyMigrations(ctx, c, s.migrations); err != nil {
		return err
	}
	return schemaplan.Ensure(ctx, schemaSteps{c}, ddl, sc)
}

// schemaSteps are the steps of schemaplan.Ensure in SQLite, on the writer
// connection inside the schema transaction.
type schemaSteps struct{ c *conn }

func (st schemaSteps) ReadMarker(ctx context.Context) (storage.SchemaMarker, bool, error) {
	return readMarker(ctx, st.c)
}

func (st schemaSteps) Catalog(ctx context.Context, table string) (bool, []schemaplan.PhysicalColumn, error) {
	return catalog(ctx, st.c, table)
}

func (st schemaSteps) Exec(ctx context.Context, ddl string) error { return st.c.execOnce(ctx, ddl) }

func (st schemaSteps) RewriteRows(ctx context.Context, k schemaplan.Kept) error {
	return rewriteRows(ctx, st.c, k)
}

func (st schemaSteps) ReconcileIndexes(ctx context.Context, t *schema.Table) error {
	return reconcileIndexes(ctx, st.c, t)
}

// Analyzed seeds the planner statistics of the new indexes (stats.go).
func (st schemaSteps) Analyzed(ctx context.Context, sc *schema.Schema) error {
	return seedStats(ctx, st.c, sc)
}

func (st schemaSteps) WriteMarker(ctx context.Context, version int32, layouts []byte) error {
	return st.c.execOnce(ctx, `INSERT INTO sync_schema_marker (id, schema_version, layouts, updated_at_ms)
		VALUES (1, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET schema_version = excluded.schema_version,
			layouts = excluded.layouts, updated_at_ms = excluded.updated_at_ms`,
		version, string(layouts), time.Now().UnixMilli())
}

// catalog reads a table's columns from pragma_table_info; exists=false
// when the table is absent.
func catalog(ctx context.Context, c *conn, table string) (exists bool, cols []schemaplan.PhysicalColumn, err error) {
	rows, err := c.queryOnce(ctx, `SELECT name, type, "notnull", pk FROM pragma_table_info(?)`, table)
	if err != nil {
		return false, nil, fmt.Errorf("ensure schema: read catalog of %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var pc schemaplan.PhysicalColumn
		if err := rows.Scan(&pc.Name, &pc.Type, &pc.NotNull, &pc.PKPos); err != nil {
			return false, nil, fmt.Errorf("ensure schema: read catalog of %s: %w", table, err)
		}
		cols = append(cols, pc)
	}
	if err := rows.Err(); err != nil {
		return false, nil, fmt.Errorf("ensure schema: read catalog of %s: %w", table, err)
	}
	return len(cols) > 0, cols, nil
}

// reconcileIndexes makes the managed indexes of t exactly
// schemaplan.Indexes(t): stale ones (a column no longer scoped, a changed
// or dropped declared index) are dropped, missing ones created.
func reconcileIndexes(ctx context.Context, c *conn, t *schema.Table) error {
	defs := schemaplan.Indexes(t)
	want := make(map[string]bool, len(defs))
	for _, ix := range defs {
		want[ix.Name] = true
	}
	rows, err := c.queryOnce(ctx, `SELECT name FROM sqlite_schema
		WHERE type = 'index' AND tbl_name = ? AND substr(name, 1, length(?)) = ?`, t.Name, schemaplan.ManagedIndexPrefix, schemaplan.ManagedIndexPrefix)
	if err != nil {
		return fmt.Errorf("ensure schema: list indexes of %s: %w", t.Name, err)
	}
	var have []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return fmt.Errorf("ensure schema: list indexes of %s: %w", t.Name, err)
		}
		have = append(have, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("ensure schema: list indexes of %s: %w", t.Name, err)
	}
	for _, n := range have {
		if want[n] {
			delete(want, n)
			continue
		}
		if err := c.execOnce(ctx, "DROP INDEX "+quote(n)); err != nil {
			return fmt.Errorf("ensure schema: drop index %s: %w", n, err)
		}
	}
	for _, ix := range defs {
		if !want[ix.Name] {
			continue
		}
		ddl := ix.CreateSQL(t.Name, quote)
		if err := c.execOnce(ctx, ddl); err != nil {
			return fmt.Errorf("ensure schema: create index %s: %w", ix.Name, err)
		}
	}
	return nil
}

// rewriteRows re-encodes k's table in keyset pages (schemaplan.RewriteTable),
// one UPDATE a row.
func rewriteRows(ctx context.Context, c *conn, k schemaplan.Kept) error {
	name := quote(k.Table.Name)
	pcol, rcol := quote(schemaplan.ColPartition), quote(schemaplan.ColRowID)
	limit := strconv.Itoa(schemaplan.RewritePageRows)
	sel := fmt.Sprintf(`SELECT %[1]s, %[2]s, %[3]s FROM %[4]s WHERE (%[1]s, %[2]s) > (?, ?) ORDER BY %[1]s, %[2]s LIMIT %[5]s`,
		pcol, rcol, quote(schemaplan.ColPayload), name, limit)
	first := fmt.Sprintf(`SELECT %[1]s, %[2]s, %[3]s FROM %[4]s ORDER BY %[1]s, %[2]s LIMIT %[5]s`,
		pcol, rcol, quote(schemaplan.ColPayload), name, limit)
	upd := fmt.Sprintf(`UPDATE %s SET %s = ?, %s = ? WHERE %s = ? AND %s = ?`, name,
		quote(schemaplan.ColPayload), quote(schemaplan.ColScopes), pcol, rcol)
	read := func(after *schemaplan.StoredRow) (page []schemaplan.StoredRow, err error) {
		q, args := first, []any(nil)
		if after != nil {
			q, args = sel, []any{after.Partition, after.RowID}
		}
		rows, err := c.queryOnce(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var r schemaplan.StoredRow
			if err := rows.Scan(&r.Partition, &r.RowID, &r.Payload); err != nil {
				return nil, err
			}
			page = append(page, r)
		}
		return page, rows.Err()
	}
	return schemaplan.RewriteTable(k, read, func(page []schemaplan.StoredRow) error {
		for _, r := range page {
			if err := c.execOnce(ctx, upd, r.Payload, string(r.Scopes), r.Partition, r.RowID); err != nil {
				return err
			}
		}
		return nil
	})
}

func readMarker(ctx context.Context, c *conn) (storage.SchemaMarker, bool, error) {
	var (
		m       storage.SchemaMarker
		layouts string
	)
	ok, err := c.queryRow(ctx, "SELECT schema_version, layouts FROM sync_schema_marker WHERE id = 1", nil, &m.Version, &layouts)
	if err != nil {
		return m, false, fmt.Errorf("read schema marker: %w", err)
	}
	if !ok {
		return m, false, nil
	}
	if m.Layouts, err = schema.UnmarshalLayouts([]byte(layouts)); err != nil {
		return m, false, fmt.Errorf("read schema marker: %w", err)
	}
	return m, true, nil
}

// SchemaMarker implements storage.Store.
func (s *Store) SchemaMarker(ctx context.Context) (m storage.SchemaMarker, ok bool, err error) {
	err = s.withReader(ctx, func(c *conn) error {
		m, ok, err = readMarker(ctx, c)
		return err
	})
	return m, ok, err
}
