package sqlitestore

import (
	"context"
	"fmt"
	"strings"
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

// createTableSQL is the DDL of an application table: the internal columns,
// the schema columns in declaration order, and the primary key pk. STRICT
// makes SQLite enforce the column types; WITHOUT ROWID clusters rows by
// (partition, row id) so keyset scans read them in order.
func createTableSQL(name string, cols []ssp2.Column, pk []string) string {
	var b strings.Builder
	b.WriteString("CREATE TABLE " + quote(name) + " (\n")
	for _, c := range append(append([]ssp2.Column(nil), schemaplan.InternalColumns...), cols...) {
		b.WriteString("  " + quote(c.Name) + " " + sqlType(c.Type))
		if !c.Nullable {
			b.WriteString(" NOT NULL")
		}
		b.WriteString(",\n")
	}
	quoted := make([]string, len(pk))
	for i, c := range pk {
		quoted[i] = quote(c)
	}
	b.WriteString("  PRIMARY KEY (" + strings.Join(quoted, ", ") + ")\n) STRICT, WITHOUT ROWID")
	return b.String()
}

var defaultPK = []string{schemaplan.ColPartition, schemaplan.ColRowID}

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
	marker, ok, err := readMarker(ctx, c)
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
		exists, cols, err := catalog(ctx, c, t.Name)
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
		if err := c.execOnce(ctx, createTableSQL(t.Name, t.WireColumns(), defaultPK)); err != nil {
			return fmt.Errorf("ensure schema: create %s: %w", t.Name, err)
		}
	}
	for _, k := range plan.Keep {
		// Before migrating, the table must match the layout it was built
		// for; when verifying, stored and running layouts are equal.
		exists, cols, err := catalog(ctx, c, k.Table.Name)
		if err != nil {
			return err
		}
		if plan.Action == schemaplan.Migrate && exists {
			// Internal columns a table built by an older build lacks
			// arrive only with a schema version bump (SPEC.md §2.4).
			for _, col := range schemaplan.Upgradable(cols) {
				ddl := "ALTER TABLE " + quote(k.Table.Name) + " ADD COLUMN " + quote(col.Name) + " " + sqlType(col.Type)
				if err := c.execOnce(ctx, ddl); err != nil {
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
			if err := c.execOnce(ctx, ddl); err != nil {
				return fmt.Errorf("ensure schema: add column %s.%s: %w", k.Table.Name, col.Name, err)
			}
		}
		if k.NeedsRewrite() {
			if err := rewriteRows(ctx, c, k); err != nil {
				return err
			}
		}
	}
	for _, t := range sc.Tables {
		if err := reconcileIndexes(ctx, c, t); err != nil {
			return err
		}
	}
	if err := seedStats(ctx, c, sc); err != nil {
		return err
	}
	if plan.Action == schemaplan.Verify {
		return nil
	}
	layouts, err := schema.MarshalLayouts(sc.Layouts())
	if err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	if err := c.execOnce(ctx, `INSERT INTO sync_schema_marker (id, schema_version, layouts, updated_at_ms)
		VALUES (1, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET schema_version = excluded.schema_version,
			layouts = excluded.layouts, updated_at_ms = excluded.updated_at_ms`,
		sc.Version, string(layouts), time.Now().UnixMilli()); err != nil {
		return fmt.Errorf("ensure schema: write marker: %w", err)
	}
	return nil
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

// rewriteRows re-encodes every stored payload of k's table and recomputes
// its stored scopes, in keyset pages so no cursor is open while the table
// is updated.
func rewriteRows(ctx context.Context, c *conn, k schemaplan.Kept) error {
	rw, err := schemaplan.NewRewriter(k)
	if err != nil {
		return err
	}
	type key struct{ partition, rowID string }
	sel := fmt.Sprintf(`SELECT %[1]s, %[2]s, %[3]s FROM %[4]s %%s ORDER BY %[1]s, %[2]s LIMIT 500`,
		quote(schemaplan.ColPartition), quote(schemaplan.ColRowID), quote(schemaplan.ColPayload), quote(k.Table.Name))
	upd := fmt.Sprintf(`UPDATE %s SET %s = ?, %s = ? WHERE %s = ? AND %s = ?`, quote(k.Table.Name),
		quote(schemaplan.ColPayload), quote(schemaplan.ColScopes), quote(schemaplan.ColPartition), quote(schemaplan.ColRowID))
	var after *key
	for {
		q, args := fmt.Sprintf(sel, ""), []any(nil)
		if after != nil {
			q = fmt.Sprintf(sel, fmt.Sprintf("WHERE (%s, %s) > (?, ?)", quote(schemaplan.ColPartition), quote(schemaplan.ColRowID)))
			args = []any{after.partition, after.rowID}
		}
		rows, err := c.queryOnce(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("ensure schema: rewrite %s: %w", k.Table.Name, err)
		}
		type item struct {
			key
			payload []byte
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
		for _, it := range page {
			payload, scopes, err := rw.Rewrite(it.payload)
			if err != nil {
				return err
			}
			if err := c.execOnce(ctx, upd, payload, string(scopes), it.partition, it.rowID); err != nil {
				return fmt.Errorf("ensure schema: rewrite %s: %w", k.Table.Name, err)
			}
		}
		if len(page) < 500 {
			return nil
		}
		after = &page[len(page)-1].key
	}
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
