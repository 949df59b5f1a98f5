package pgstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/schemaplan"
	"github.com/syncnode/syncnode/storage/storagetest"
)

// The contract suite's hooks, compiled into the package only for its
// tests: raw SQL against the store's own schema.

var _ storagetest.Hooks = (*Store)(nil)

func (s *Store) rawExec(ctx context.Context, stmts ...string) error {
	for _, q := range stmts {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
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
		other := "bytea"
		if sqlType(typ) == "bytea" {
			other = "text"
		}
		return s.rawExec(ctx, "ALTER TABLE "+t+" DROP COLUMN "+q, "ALTER TABLE "+t+" ADD COLUMN "+q+" "+other)
	case storagetest.ReasonNullability:
		return s.rawExec(ctx, "ALTER TABLE "+t+" ALTER COLUMN "+q+" DROP NOT NULL")
	case storagetest.ReasonPrimaryKey:
		var name string
		if err := s.pool.QueryRow(ctx, `SELECT conname FROM pg_constraint
			WHERE conrelid = $1::regclass AND contype = 'p'`, table).Scan(&name); err != nil {
			return err
		}
		return s.rawExec(ctx, "ALTER TABLE "+t+" DROP CONSTRAINT "+quote(name),
			fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (%s, %s)", t, quote(schemaplan.ColRowID), quote(schemaplan.ColPartition)))
	}
	return fmt.Errorf("unknown tamper reason %q", reason)
}

func (s *Store) HookConstrain(ctx context.Context, table, column string, kind storage.ConstraintKind) error {
	t, q := quote(table), quote(column)
	switch kind {
	case storage.ConstraintUnique:
		return s.rawExec(ctx, fmt.Sprintf("CREATE UNIQUE INDEX hook_unique ON %s (%s)", t, q))
	case storage.ConstraintNotNull:
		return s.rawExec(ctx, "ALTER TABLE "+t+" ALTER COLUMN "+q+" SET NOT NULL")
	case storage.ConstraintCheck:
		return s.rawExec(ctx, fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT hook_check CHECK (%s <> '%s')", t, q, storagetest.CheckForbiddenValue))
	case storage.ConstraintForeignKey:
		return s.rawExec(ctx, "CREATE TABLE hook_parent (id text PRIMARY KEY)",
			fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT hook_fk FOREIGN KEY (%s) REFERENCES hook_parent (id)", t, q))
	}
	return fmt.Errorf("unsupported constraint kind %q", kind)
}

func (s *Store) HookCatalog(ctx context.Context) (string, error) {
	var b strings.Builder
	for _, q := range []string{
		`SELECT c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) ||
				CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
			WHERE n.nspname = current_schema() AND c.relkind = 'r' ORDER BY c.relname, a.attnum`,
		`SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() ORDER BY indexname`,
		`SELECT conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
			WHERE connamespace = current_schema()::regnamespace ORDER BY conrelid::regclass::text, conname`,
	} {
		rows, err := s.pool.Query(ctx, q)
		if err != nil {
			return "", err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return "", err
		}
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
	}
	return b.String(), nil
}

func (s *Store) HookCountLog(ctx context.Context, partition string) (commits, changes, index int64, err error) {
	err = s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM sync_commits WHERE partition = $1),
		(SELECT count(*) FROM sync_changes WHERE partition = $1),
		(SELECT count(*) FROM sync_scope_index WHERE partition = $1)`, partition).Scan(&commits, &changes, &index)
	return commits, changes, index, err
}
