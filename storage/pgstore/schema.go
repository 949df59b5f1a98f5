package pgstore

import (
	"context"
	"fmt"
	"strconv"
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

// ddl spells the application tables in PostgreSQL: the key columns use
// COLLATE "C" so row ids order bytewise, as in SQLite.
var ddl = schemaplan.DDL{Quote: quote, SQLType: sqlType, KeyCollate: ` COLLATE "C"`, TableOptions: ""}

// EnsureSchema implements storage.Store in one transaction, under the
// schema's advisory lock so that nodes starting together install once; a
// refusal rolls all of it back. It declares no checkpoints (gate.go).
func (s *Store) EnsureSchema(ctx context.Context, sc *schema.Schema) error {
	return s.EnsureSchemaWithCheckpoints(ctx, sc, nil)
}

func ensureSchema(ctx context.Context, tx pgx.Tx, sc *schema.Schema) error {
	return schemaplan.Ensure(ctx, schemaSteps{tx}, ddl, sc)
}

// schemaSteps are the steps of schemaplan.Ensure in PostgreSQL, on the
// schema transaction.
type schemaSteps struct{ tx pgx.Tx }

func (st schemaSteps) ReadMarker(ctx context.Context) (storage.SchemaMarker, bool, error) {
	return readMarker(ctx, st.tx)
}

func (st schemaSteps) Catalog(ctx context.Context, table string) (bool, []schemaplan.PhysicalColumn, error) {
	return catalog(ctx, st.tx, table)
}

func (st schemaSteps) Exec(ctx context.Context, ddl string) error {
	_, err := st.tx.Exec(ctx, ddl)
	return err
}

func (st schemaSteps) RewriteRows(ctx context.Context, k schemaplan.Kept) error {
	return rewriteRows(ctx, st.tx, k)
}

func (st schemaSteps) ReconcileIndexes(ctx context.Context, t *schema.Table) error {
	return reconcileIndexes(ctx, st.tx, t)
}

// Analyzed does nothing: autovacuum keeps PostgreSQL's statistics.
func (schemaSteps) Analyzed(context.Context, *schema.Schema) error { return nil }

func (st schemaSteps) WriteMarker(ctx context.Context, version int32, layouts []byte) error {
	_, err := st.tx.Exec(ctx, `INSERT INTO sync_schema_marker (id, schema_version, layouts, updated_at_ms)
		VALUES (1, $1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET schema_version = EXCLUDED.schema_version,
			layouts = EXCLUDED.layouts, updated_at_ms = EXCLUDED.updated_at_ms`,
		version, string(layouts), time.Now().UnixMilli())
	return err
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

// rewriteRows re-encodes k's table in keyset pages (schemaplan.RewriteTable),
// each page's updates sent in one batch.
func rewriteRows(ctx context.Context, tx pgx.Tx, k schemaplan.Kept) error {
	name := quote(k.Table.Name)
	pcol, rcol := quote(schemaplan.ColPartition), quote(schemaplan.ColRowID)
	limit := strconv.Itoa(schemaplan.RewritePageRows)
	sel := fmt.Sprintf(`SELECT %[1]s, %[2]s, %[3]s FROM %[4]s WHERE (%[1]s, %[2]s) > ($1, $2) ORDER BY %[1]s, %[2]s LIMIT %[5]s`,
		pcol, rcol, quote(schemaplan.ColPayload), name, limit)
	first := fmt.Sprintf(`SELECT %[1]s, %[2]s, %[3]s FROM %[4]s ORDER BY %[1]s, %[2]s LIMIT %[5]s`,
		pcol, rcol, quote(schemaplan.ColPayload), name, limit)
	upd := fmt.Sprintf(`UPDATE %s SET %s = $1, %s = $2 WHERE %s = $3 AND %s = $4`, name,
		quote(schemaplan.ColPayload), quote(schemaplan.ColScopes), pcol, rcol)
	read := func(after *schemaplan.StoredRow) ([]schemaplan.StoredRow, error) {
		var rows pgx.Rows
		var err error
		if after == nil {
			rows, err = tx.Query(ctx, first)
		} else {
			rows, err = tx.Query(ctx, sel, after.Partition, after.RowID)
		}
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(row pgx.CollectableRow) (r schemaplan.StoredRow, err error) {
			err = row.Scan(&r.Partition, &r.RowID, &r.Payload)
			return r, err
		})
	}
	return schemaplan.RewriteTable(k, read, func(page []schemaplan.StoredRow) error {
		b := &pgx.Batch{}
		for _, r := range page {
			b.Queue(upd, r.Payload, string(r.Scopes), r.Partition, r.RowID)
		}
		return tx.SendBatch(ctx, b).Close()
	})
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
