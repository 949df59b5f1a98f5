package sqlitestore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"

	"modernc.org/sqlite"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/querysql"
	"github.com/syncnode/syncnode/storage/internal/schemaplan"
)

// Registered queries (REMOTE.md §2) are checked by SQLite's own parser
// and run over relations that shadow the application tables.
//
// Checking: CheckQuery prepares the statement on a scratch in-memory
// connection holding only TEMP tables of the application columns, under
// an authorizer that allows SELECT, recursive CTEs, functions but
// load_extension, and reads of those TEMP tables (and json_each and
// json_tree). Everything else is refused: a schema-qualified main.t or
// an internal sync_* table does not exist there, sqlite_schema and
// pragma table functions are reads the authorizer denies, and ATTACH,
// PRAGMA and every write are actions it denies.
//
// Running: each query connection (a pool of its own, so the store's own
// statements never see the shadows) has TEMP views named like the
// application tables, selecting their application columns where the
// partition (and, for scoped queries, each scope column) matches what
// TEMP tables of the connection hold. Query writes those values with
// bound statements, then runs the registered statement — SQLite resolves
// unqualified names in temp first — and reads the partition's max
// commitSeq, in one transaction.

// QueryShape is what CheckQuery found: the statement's result column
// names, its number of ? placeholders, and the application tables it
// reads (sorted).
type QueryShape struct {
	Columns []string
	Params  int
	Tables  []string
}

// QueryCheckError is a registered query SQLite refuses.
type QueryCheckError struct{ Reason string }

func (e *QueryCheckError) Error() string { return e.Reason }

// CheckQuery validates a registered query against the schema with
// SQLite's parser. It is the registration check for both stores.
func CheckQuery(ctx context.Context, sc *schema.Schema, sqlText string) (QueryShape, error) {
	refuse := func(format string, args ...any) (QueryShape, error) {
		return QueryShape{}, &QueryCheckError{Reason: fmt.Sprintf(format, args...)}
	}
	sh, err := querysql.Lex(sqlText)
	if err != nil {
		return refuse("%v", err)
	}
	if sh.Keyword != "SELECT" && sh.Keyword != "WITH" {
		return refuse("the statement starts with %s: only SELECT (or WITH … SELECT) is allowed", sh.Keyword)
	}
	for _, id := range sh.Identifiers {
		l := strings.ToLower(id)
		if strings.HasPrefix(l, "sync_") || strings.HasPrefix(l, "_sync_") || strings.HasPrefix(l, "sqlite_") {
			return refuse("the statement names %s: internal names are not readable", id)
		}
	}
	c, err := connect(ctx, "file:opcheck?mode=memory&cache=private")
	if err != nil {
		return QueryShape{}, fmt.Errorf("check query: %w", err)
	}
	defer func() { _ = c.close() }()
	cols := map[string]map[string]bool{}
	for _, t := range sc.Tables {
		var b strings.Builder
		b.WriteString("CREATE TEMP TABLE " + quote(t.Name) + " (")
		cols[t.Name] = map[string]bool{}
		for i, col := range t.Columns {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(quote(col.Name) + " " + sqlType(col.Type))
			cols[t.Name][col.Name] = true
		}
		b.WriteString(", PRIMARY KEY (" + quote(t.PrimaryKey) + ")) STRICT, WITHOUT ROWID")
		if err := c.execOnce(ctx, b.String()); err != nil {
			return QueryShape{}, fmt.Errorf("check query: %w", err)
		}
	}
	var (
		denied string
		read   = map[string]bool{}
	)
	deny := func(why string) sqlite.AuthorizerReturnCode {
		if denied == "" {
			denied = why
		}
		return sqlite.AuthorizerDeny
	}
	auth := func(action sqlite.AuthorizerActionCode, a1, a2, db, _ string) sqlite.AuthorizerReturnCode {
		switch action {
		case sqlite.AuthSelect, sqlite.AuthRecursive:
			return sqlite.AuthorizerOK
		case sqlite.AuthFunction:
			if strings.EqualFold(a2, "load_extension") {
				return deny("the function load_extension is not allowed")
			}
			return sqlite.AuthorizerOK
		case sqlite.AuthRead:
			// Only TEMP holds application tables here, so a read of one
			// is a read of the shadowed relation (count(*) reports no
			// database name).
			if (db == "temp" || db == "") && cols[a1] != nil {
				if a2 != "" && !cols[a1][a2] {
					return deny(fmt.Sprintf("column %s.%s is not an application column", a1, a2))
				}
				read[a1] = true
				return sqlite.AuthorizerOK
			}
			if db == "main" && (a1 == "json_each" || a1 == "json_tree") {
				return sqlite.AuthorizerOK
			}
			return deny(fmt.Sprintf("reading %s.%s is outside the application tables", db, a1))
		case sqlite.AuthPragma:
			return deny("PRAGMA is not allowed")
		case sqlite.AuthAttach, sqlite.AuthDetach:
			return deny("ATTACH and DETACH are not allowed")
		}
		return deny(fmt.Sprintf("the statement writes or changes the database (authorizer action %d)", action))
	}
	var shape QueryShape
	err = c.dc.(sqlite.AuthorizerRegisterer).RegisterAuthorizer(auth)
	if err != nil {
		return QueryShape{}, fmt.Errorf("check query: %w", err)
	}
	ds, err := c.dc.(driver.ConnPrepareContext).PrepareContext(stmtCtx, sh.Body)
	if err != nil {
		if denied != "" {
			return refuse("%s", denied)
		}
		return refuse("%v", err)
	}
	defer func() { _ = ds.Close() }()
	shape.Params = len(sh.Placeholders)
	args := make([]driver.NamedValue, shape.Params)
	for i := range args {
		args[i] = driver.NamedValue{Ordinal: i + 1}
	}
	rs, err := ds.(driver.StmtQueryContext).QueryContext(stmtCtx, args)
	if err != nil {
		if denied != "" {
			return refuse("%s", denied)
		}
		return refuse("%v", err)
	}
	shape.Columns = rs.Columns()
	_ = rs.Close()
	if denied != "" {
		return refuse("%s", denied)
	}
	for t := range read {
		shape.Tables = append(shape.Tables, t)
	}
	slices.Sort(shape.Tables)
	return shape, nil
}

// Query connection state: the TEMP tables the views read.
const (
	opCtxTable   = "sync_op_ctx"   // (partition, privileged): one row
	opScopeTable = "sync_op_scope" // (tbl, variable, value)
)

// opViewsSQL is the DDL of a query connection's shadows for one schema:
// privileged views filter by partition only, scoped ones by partition
// and scope values too (two shapes rather than one with an OR, so SQLite
// can use the scope indexes).
func opViewsSQL(sc *schema.Schema, privileged bool) []string {
	stmts := []string{
		"CREATE TEMP TABLE IF NOT EXISTS " + opCtxTable + " (partition TEXT NOT NULL, privileged INTEGER NOT NULL)",
		"CREATE TEMP TABLE IF NOT EXISTS " + opScopeTable + " (tbl TEXT NOT NULL, variable TEXT NOT NULL, value ANY)",
		"CREATE INDEX IF NOT EXISTS temp." + opScopeTable + "_k ON " + opScopeTable + " (tbl, variable, value)",
	}
	for _, t := range sc.Tables {
		cols := make([]string, len(t.Columns))
		for i, c := range t.Columns {
			cols[i] = quote(c.Name)
		}
		where := fmt.Sprintf("%s = (SELECT partition FROM temp.%s)", quote(schemaplan.ColPartition), opCtxTable)
		if !privileged {
			for _, s := range t.Scopes {
				where += fmt.Sprintf(" AND %s IN (SELECT value FROM temp.%s WHERE tbl = %s AND variable = %s)",
					quote(s.Column), opScopeTable, literal(t.Name), literal(s.Variable))
			}
		}
		stmts = append(stmts, "DROP VIEW IF EXISTS temp."+quote(t.Name),
			fmt.Sprintf("CREATE TEMP VIEW %s AS SELECT %s FROM main.%s WHERE %s", quote(t.Name), strings.Join(cols, ", "), quote(t.Name), where))
	}
	return stmts
}

// literal quotes a schema name (never a request value) as an SQL string.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// queryPool is the store's pool of query connections, opened on first
// use.
type queryPool struct {
	conns chan *queryConn
}

func newQueryPool(n int) queryPool {
	p := queryPool{conns: make(chan *queryConn, n)}
	for range n {
		p.conns <- &queryConn{}
	}
	return p
}

type queryConn struct {
	c          *conn
	views      *installed // the schema the shadows were built for
	privileged bool       // and their shape
}

func (s *Store) queryConn(ctx context.Context) (*queryConn, error) {
	select {
	case <-s.closed:
		return nil, ErrClosed
	default:
	}
	select {
	case qc := <-s.queries.conns:
		if qc.c == nil {
			c, err := connect(ctx, dsn(s.cfg, true))
			if err != nil {
				s.queries.conns <- qc
				return nil, fmt.Errorf("open sqlite query connection: %w", err)
			}
			qc.c = c
		}
		return qc, nil
	case <-s.closed:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// closeQueries closes the query connections (from Close).
func (s *Store) closeQueries() error {
	var errs []error
	for range s.cfg.Readers {
		if qc := <-s.queries.conns; qc.c != nil {
			errs = append(errs, qc.c.close())
		}
	}
	return errors.Join(errs...)
}

// shadow (re)builds qc's views for the installed schema, toggling the
// reader's query_only off for its TEMP writes.
func (qc *queryConn) prepare(ctx context.Context, in *installed, p *storage.QueryParams) error {
	c := qc.c
	if _, err := c.exec(ctx, "PRAGMA query_only = OFF"); err != nil {
		return err
	}
	defer func() { _, _ = c.exec(context.WithoutCancel(ctx), "PRAGMA query_only = ON") }()
	privileged := p != nil && p.Scopes == nil
	if qc.views != in || qc.privileged != privileged {
		for _, q := range opViewsSQL(in.schema, privileged) {
			if err := c.execOnce(ctx, q); err != nil {
				return fmt.Errorf("build query views: %w", err)
			}
		}
		qc.views, qc.privileged = in, privileged
	}
	if p == nil {
		return nil
	}
	if _, err := c.exec(ctx, "DELETE FROM temp."+opCtxTable); err != nil {
		return err
	}
	if _, err := c.exec(ctx, "DELETE FROM temp."+opScopeTable); err != nil {
		return err
	}
	if _, err := c.exec(ctx, "INSERT INTO temp."+opCtxTable+" (partition, privileged) VALUES (?, ?)", p.Partition, p.Scopes == nil); err != nil {
		return err
	}
	for _, name := range p.Tables {
		t, ok := in.schema.Table(name)
		if !ok {
			return fmt.Errorf("unknown table %q", name)
		}
		for _, sc := range t.Scopes {
			f, none, err := schemaplan.ScanFilters(t, &storage.ScanParams{Table: name, Scopes: map[string][]string{sc.Variable: p.Scopes[name][sc.Variable]}, Limit: 1})
			if err != nil || none {
				continue // no usable value: the table's relation is empty
			}
			vals := make([]any, 0, f[0].Len())
			for _, v := range f[0].Strings {
				vals = append(vals, v)
			}
			for _, v := range f[0].Ints {
				vals = append(vals, v)
			}
			for _, v := range f[0].Bools {
				vals = append(vals, bindValue(ssp2.TypeBoolean, ssp2.Value{Bool: v}))
			}
			for _, v := range vals {
				if _, err := c.exec(ctx, "INSERT INTO temp."+opScopeTable+" (tbl, variable, value) VALUES (?, ?, ?)", name, sc.Variable, v); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// PrepareQuery implements storage.Querier: SQLite runs the statement
// CheckQuery accepted; it is prepared over the shadows once here so a
// view mismatch shows at registration.
func (s *Store) PrepareQuery(ctx context.Context, q storage.QuerySpec) error {
	in := s.schema.Load()
	if in == nil {
		return errors.New("prepare query: no schema installed")
	}
	sh, err := querysql.Lex(q.SQL)
	if err != nil {
		return err
	}
	qc, err := s.queryConn(ctx)
	if err != nil {
		return err
	}
	defer func() { s.queries.conns <- qc }()
	if err := qc.prepare(ctx, in, nil); err != nil {
		return err
	}
	_, err = qc.c.stmt(ctx, sh.Body)
	return err
}

// Query implements storage.Querier.
func (s *Store) Query(ctx context.Context, p storage.QueryParams) (storage.QueryResult, error) {
	in := s.schema.Load()
	if in == nil {
		return storage.QueryResult{}, errors.New("query: no schema installed")
	}
	sh, err := querysql.Lex(p.SQL)
	if err != nil {
		return storage.QueryResult{}, &storage.QueryError{Err: err}
	}
	qc, err := s.queryConn(ctx)
	if err != nil {
		return storage.QueryResult{}, err
	}
	defer func() { s.queries.conns <- qc }()
	c := qc.c
	var out storage.QueryResult
	err = readTx(ctx, c, func() error {
		if err := qc.prepare(ctx, in, &p); err != nil {
			return fmt.Errorf("query context: %w", err)
		}
		if _, err := c.queryRow(ctx, `SELECT coalesce(max(seq), 0) FROM sync_commits WHERE partition = ?`, []any{p.Partition}, &out.MaxCommitSeq); err != nil {
			return fmt.Errorf("query max seq: %w", err)
		}
		args := make([]any, len(p.Args))
		for i, a := range p.Args {
			if b, ok := a.(bool); ok {
				args[i] = bindValue(ssp2.TypeBoolean, ssp2.Value{Bool: b})
			} else {
				args[i] = a
			}
		}
		rs, err := c.query(ctx, sh.Body, args...)
		if err != nil {
			return &storage.QueryError{Err: err}
		}
		defer func() { _ = rs.Close() }()
		idx, err := resultIndex(rs.dr.Columns(), p.Columns)
		if err != nil {
			return err
		}
		for rs.Next() {
			if len(out.Rows) == p.Limit {
				break
			}
			row := make([]any, len(p.Columns))
			for i, col := range p.Columns {
				v := rs.vals[idx[i]]
				if b, ok := v.([]byte); ok {
					v = slices.Clone(b)
				}
				if row[i], err = storage.NormalizeQueryValue(col, v); err != nil {
					return err
				}
			}
			out.Rows = append(out.Rows, row)
		}
		if err := rs.Err(); err != nil {
			return &storage.QueryError{Err: err}
		}
		return nil
	})
	if err != nil {
		return storage.QueryResult{}, err
	}
	return out, nil
}

// resultIndex maps each declared column to its position in the result.
func resultIndex(names []string, cols []storage.QueryColumn) ([]int, error) {
	idx := make([]int, len(cols))
	for i, c := range cols {
		j := slices.Index(names, c.Name)
		if j < 0 {
			return nil, &storage.QueryError{Column: c.Name, Err: errors.New("missing from the result")}
		}
		idx[i] = j
	}
	return idx, nil
}

var _ storage.Querier = (*Store)(nil)
