package sqlitestore

import (
	"context"
	"fmt"
	"strings"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/schemaplan"
	"github.com/syncnode/syncnode/storage/storagetest"
)

// The contract suite's hooks, compiled into the package only for its
// tests: raw SQL against the store's own file.

var _ storagetest.Hooks = (*Store)(nil)

func (s *Store) rawExec(ctx context.Context, stmts ...string) error {
	return s.write(ctx, func(c *conn) error {
		for _, q := range stmts {
			if err := c.execOnce(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
}

// columnType is table.column's type in the installed schema.
func (s *Store) columnType(table, column string) (ssp2.ColumnType, error) {
	var sc *schema.Schema
	if inst := s.schema.Load(); inst != nil {
		sc = inst.schema
	}
	return storagetest.ColumnType(sc, table, column)
}

func (s *Store) HookTamper(ctx context.Context, table, column, reason string) error {
	t, q := quote(table), quote(column)
	switch reason {
	case storagetest.ReasonMissingTable:
		return s.rawExec(ctx, "DROP TABLE "+t)
	case storagetest.ReasonMissingColumn:
		return s.rawExec(ctx, "ALTER TABLE "+t+" DROP COLUMN "+q)
	case storagetest.ReasonType:
		typ, err := s.columnType(table, column)
		if err != nil {
			return err
		}
		other := "BLOB"
		if sqlType(typ) == "BLOB" {
			other = "TEXT"
		}
		return s.rawExec(ctx, "ALTER TABLE "+t+" DROP COLUMN "+q, "ALTER TABLE "+t+" ADD COLUMN "+q+" "+other)
	case storagetest.ReasonNullability:
		typ, err := s.columnType(table, column)
		if err != nil {
			return err
		}
		return s.rawExec(ctx, "ALTER TABLE "+t+" DROP COLUMN "+q, "ALTER TABLE "+t+" ADD COLUMN "+q+" "+sqlType(typ))
	case storagetest.ReasonPrimaryKey:
		inst := s.schema.Load()
		ts := inst.tables[table]
		return s.rawExec(ctx, "DROP TABLE "+t,
			ddl.CreateTable(table, ts.t.WireColumns(), []string{schemaplan.ColRowID, schemaplan.ColPartition}))
	}
	return fmt.Errorf("unknown tamper reason %q", reason)
}

func (s *Store) HookConstrain(ctx context.Context, table, column string, kind storage.ConstraintKind) error {
	t, q := quote(table), quote(column)
	switch kind {
	case storage.ConstraintUnique:
		return s.rawExec(ctx, fmt.Sprintf("CREATE UNIQUE INDEX hook_unique ON %s (%s)", t, q))
	case storage.ConstraintNotNull:
		// SQLite cannot alter a column's constraints: re-add it.
		return s.rawExec(ctx, "ALTER TABLE "+t+" DROP COLUMN "+q,
			"ALTER TABLE "+t+" ADD COLUMN "+q+" TEXT NOT NULL DEFAULT ''")
	case storage.ConstraintCheck:
		return s.rawExec(ctx, "ALTER TABLE "+t+" DROP COLUMN "+q,
			fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s TEXT CHECK (%s <> '%s')", t, q, q, storagetest.CheckForbiddenValue))
	case storage.ConstraintForeignKey:
		return s.rawExec(ctx, "CREATE TABLE hook_parent (id TEXT PRIMARY KEY)",
			"ALTER TABLE "+t+" DROP COLUMN "+q,
			"ALTER TABLE "+t+" ADD COLUMN "+q+" TEXT REFERENCES hook_parent (id)")
	}
	return fmt.Errorf("unsupported constraint kind %q", kind)
}

func (s *Store) HookCatalog(ctx context.Context) (string, error) {
	var b strings.Builder
	err := s.withReader(ctx, func(c *conn) error {
		rows, err := c.queryOnce(ctx, `SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_schema ORDER BY type, name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var typ, name, tbl, sql string
			if err := rows.Scan(&typ, &name, &tbl, &sql); err != nil {
				return err
			}
			fmt.Fprintf(&b, "%s %s on %s: %s\n", typ, name, tbl, sql)
		}
		return rows.Err()
	})
	return b.String(), err
}

func (s *Store) HookCountLog(ctx context.Context, partition string) (commits, changes, index int64, err error) {
	err = s.withReader(ctx, func(c *conn) error {
		_, err := c.queryRow(ctx, `SELECT
			(SELECT count(*) FROM sync_commits WHERE partition = ?1),
			(SELECT count(*) FROM sync_changes WHERE partition = ?1),
			(SELECT count(*) FROM sync_scope_index WHERE partition = ?1)`, []any{partition}, &commits, &changes, &index)
		return err
	})
	return commits, changes, index, err
}
