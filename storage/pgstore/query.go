package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/querysql"
	"github.com/syncnode/syncnode/storage/internal/schemaplan"
)

// Registered queries (REMOTE.md §2) on PostgreSQL run over views in a
// schema of their own, <schema>__ops, one per application table and named
// like it, selecting the table's application columns where the partition
// (and, for scoped queries, each scope column) matches transaction-local
// settings. A query's transaction sets those settings with bound
// set_config calls and sets search_path to the views' schema alone, so the
// registered statement's unqualified names resolve to the views and the
// internal tables resolve to nothing. The statement itself was checked by
// SQLite's parser at registration (sqlitestore.CheckQuery); its ?
// placeholders become $n.

const (
	settingPartition  = "syncnode.op_partition"
	settingPrivileged = "syncnode.op_privileged"
	settingScopes     = "syncnode.op_scopes"
)

// opsViews tracks which schema the views were built for.
type opsViews struct {
	mu    sync.Mutex
	built *installed
}

func (s *Store) opsSchema() string { return s.cfg.Schema + "__ops" }

// ensureViews (re)builds the views for the installed schema once per
// store, serialized across nodes by the schema advisory lock.
func (s *Store) ensureViews(ctx context.Context) (*installed, error) {
	in := s.schema.Load()
	if in == nil {
		return nil, errors.New("query: no schema installed")
	}
	s.ops.mu.Lock()
	defer s.ops.mu.Unlock()
	if s.ops.built == in {
		return in, nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext(current_schema()))", lockKeySchema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+quote(s.opsSchema())); err != nil {
			return err
		}
		for _, q := range opsViewsSQL(in.schema, s.cfg.Schema, s.opsSchema()) {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("build query views: %w", err)
	}
	s.ops.built = in
	return in, nil
}

func opsViewsSQL(sc *schema.Schema, base, ops string) []string {
	var stmts []string
	for _, t := range sc.Tables {
		cols := make([]string, len(t.Columns))
		for i, c := range t.Columns {
			cols[i] = quote(c.Name)
		}
		where := fmt.Sprintf("%s = current_setting('%s')", quote(schemaplan.ColPartition), settingPartition)
		if len(t.Scopes) > 0 {
			var conds []string
			for _, sv := range t.Scopes {
				conds = append(conds, fmt.Sprintf("%s::text IN (SELECT jsonb_array_elements_text(current_setting('%s')::jsonb -> %s -> %s))",
					quote(sv.Column), settingScopes, literal(t.Name), literal(sv.Variable)))
			}
			where += fmt.Sprintf(" AND (current_setting('%s') = 'on' OR (%s))", settingPrivileged, strings.Join(conds, " AND "))
		}
		view := quote(ops) + "." + quote(t.Name)
		stmts = append(stmts, "DROP VIEW IF EXISTS "+view,
			fmt.Sprintf("CREATE VIEW %s AS SELECT %s FROM %s.%s WHERE %s", view, strings.Join(cols, ", "), quote(base), quote(t.Name), where))
	}
	return stmts
}

// literal quotes a schema name (never a request value) as an SQL string.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func numbered(sqlText string) (string, error) {
	sh, err := querysql.Lex(sqlText)
	if err != nil {
		return "", err
	}
	return querysql.Numbered(sh, func(n int) string { return "$" + strconv.Itoa(n) }), nil
}

// querySettings is the statement that sets a query's search_path and
// settings for the transaction and reads the partition's max commitSeq,
// and its arguments.
func (s *Store) querySettings(p *storage.QueryParams) (string, []any, error) {
	scopes := "{}"
	if p.Scopes != nil {
		b, err := json.Marshal(p.Scopes)
		if err != nil {
			return "", nil, err
		}
		scopes = string(b)
	}
	privileged := "off"
	if p.Scopes == nil {
		privileged = "on"
	}
	q := fmt.Sprintf(`SELECT (SELECT coalesce(max(seq), 0) FROM %s.sync_commits WHERE partition = $1),
		set_config('search_path', $2, true), set_config('%s', $1, true), set_config('%s', $3, true), set_config('%s', $4, true)`,
		quote(s.cfg.Schema), settingPartition, settingPrivileged, settingScopes)
	return q, []any{p.Partition, quote(s.opsSchema()), privileged, scopes}, nil
}

// beginQuery opens a read-only snapshot with the query settings in place
// and returns the partition's max commitSeq read in it.
func (s *Store) beginQuery(ctx context.Context, c *pgx.Conn, p *storage.QueryParams) (pgx.Tx, int64, error) {
	q, args, err := s.querySettings(p)
	if err != nil {
		return nil, 0, err
	}
	tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, 0, err
	}
	var seq int64
	if err := tx.QueryRow(ctx, q, args...).Scan(&seq, nil, nil, nil, nil); err != nil {
		_ = tx.Rollback(ctx)
		return nil, 0, err
	}
	return tx, seq, nil
}

// PrepareQuery implements storage.Querier: PostgreSQL parses and plans
// the statement over the views.
func (s *Store) PrepareQuery(ctx context.Context, q storage.QuerySpec) error {
	if _, err := s.ensureViews(ctx); err != nil {
		return err
	}
	sqlText, err := numbered(q.SQL)
	if err != nil {
		return err
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	tx, _, err := s.beginQuery(ctx, c.Conn(), &storage.QueryParams{QuerySpec: q})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Prepare(ctx, "", sqlText)
	return err
}

// Query implements storage.Querier: BEGIN (repeatable read, read only),
// the settings and max commitSeq, the statement and COMMIT go to the
// server as one pipelined batch, one round trip.
func (s *Store) Query(ctx context.Context, p storage.QueryParams) (storage.QueryResult, error) {
	if _, err := s.ensureViews(ctx); err != nil {
		return storage.QueryResult{}, err
	}
	sqlText, err := numbered(p.SQL)
	if err != nil {
		return storage.QueryResult{}, &storage.QueryError{Err: err}
	}
	settings, sargs, err := s.querySettings(&p)
	if err != nil {
		return storage.QueryResult{}, err
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return storage.QueryResult{}, err
	}
	defer c.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	b.Queue(settings, sargs...)
	b.Queue(sqlText, p.Args...)
	b.Queue("COMMIT")
	br := c.SendBatch(ctx, b)
	out, err := readQueryBatch(br, &p)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		if c.Conn().PgConn().TxStatus() != 'I' {
			_, _ = c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
		return storage.QueryResult{}, err
	}
	return out, nil
}

// readQueryBatch reads the results of Query's batch in order.
func readQueryBatch(br pgx.BatchResults, p *storage.QueryParams) (storage.QueryResult, error) {
	var out storage.QueryResult
	if _, err := br.Exec(); err != nil {
		return out, fmt.Errorf("query context: %w", err)
	}
	if err := br.QueryRow().Scan(&out.MaxCommitSeq, nil, nil, nil, nil); err != nil {
		return out, fmt.Errorf("query context: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return out, &storage.QueryError{Err: err}
	}
	defer rows.Close()
	var idx []int
	for rows.Next() {
		if idx == nil {
			fds := rows.FieldDescriptions()
			names := make([]string, len(fds))
			for i, f := range fds {
				names[i] = f.Name
			}
			if idx, err = resultIndex(names, p.Columns); err != nil {
				return out, err
			}
		}
		if len(out.Rows) == p.Limit {
			break
		}
		vals, err := rows.Values()
		if err != nil {
			return out, &storage.QueryError{Err: err}
		}
		row := make([]any, len(p.Columns))
		for i, col := range p.Columns {
			if row[i], err = storage.NormalizeQueryValue(col, numeric(vals[idx[i]])); err != nil {
				return out, err
			}
		}
		out.Rows = append(out.Rows, row)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, &storage.QueryError{Err: err}
	}
	if _, err := br.Exec(); err != nil {
		return out, fmt.Errorf("query commit: %w", err)
	}
	return out, nil
}

// numeric turns a numeric (sum of bigints, say) into an int64 when
// whole, else a float64, for NormalizeQueryValue.
func numeric(v any) any {
	n, ok := v.(pgtype.Numeric)
	if !ok {
		return v
	}
	if i, err := n.Int64Value(); err == nil && i.Valid {
		if f, err := n.Float64Value(); err == nil && f.Float64 == float64(i.Int64) {
			return i.Int64
		}
	}
	if f, err := n.Float64Value(); err == nil && f.Valid {
		return f.Float64
	}
	return v
}

// resultIndex maps each declared column to its position in the result.
func resultIndex(names []string, cols []storage.QueryColumn) ([]int, error) {
	idx := make([]int, len(cols))
	for i, c := range cols {
		j := -1
		for k, n := range names {
			if n == c.Name {
				j = k
				break
			}
		}
		if j < 0 {
			return nil, &storage.QueryError{Column: c.Name, Err: errors.New("missing from the result")}
		}
		idx[i] = j
	}
	return idx, nil
}

var _ storage.Querier = (*Store)(nil)
