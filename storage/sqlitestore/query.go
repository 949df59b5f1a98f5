package sqlitestore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
// Running: a query runs as its own statement behind a WITH clause
// (schemaplan.QueryRelations, shared with PostgreSQL) that defines, for every application table it reads, a
// common table expression of that name selecting the table's application
// columns from main where the partition and, for a scoped query, each
// scope column match bound values. An unqualified name resolves to a
// common table expression before any table, so the statement reads only
// those relations; its own text is unchanged and its values stay bound.
// The statement and the partition row with the caller's client record
// are read from one snapshot (Query), on a query connection that keeps
// each statement text prepared: a query writes nothing and costs one
// read.
//
// Bounding: a run reads at most maxRows + 1 rows. On a query connection
// the statement carries no LIMIT of ours: it is stepped that many rows
// and reset. A LIMIT would cost every run of a statement with an ORDER
// BY SQLite must sort: under a LIMIT SQLite sorts into a top-N b-tree
// (an insert per row) instead of its sorter (an append per row, one sort
// at the end), the larger part of a registered query's overhead over
// the same SQL run directly. Without the LIMIT an oversize result is
// sorted whole before its first row; the query connections keep
// temporary storage in files (temp_store FILE), so that sort spills past
// the connection's cache size instead of growing in memory. Inside a
// write transaction (TxQuery), on the writer connection whose temporary
// storage is in memory, the statement keeps LIMIT maxRows + 1
// (querysql.Limited), which bounds the sort itself.

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

// queryPool is the store's pool of query connections (read-only, like
// the readers, but apart from them so a long registered query never
// holds a connection the sync path waits for), opened on first use.
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
	c   *conn
	row []any // QueryEach's row buffer, reused by every run
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
			if err == nil {
				// Temporary storage in files: an unbounded sort (see
				// Bounding) spills instead of growing in memory.
				if err = c.execOnce(ctx, "PRAGMA temp_store = FILE"); err != nil {
					_ = c.close()
				}
			}
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

// opStatement is the statement a registered query runs as, and its
// arguments: the partition, the relations' scope values, then the
// request's values (the registered statement's plain ? placeholders
// number after the relations' ?1…?n). A limited statement reads at most
// p.Limit rows in SQL (TxQuery); otherwise its reader stops stepping
// after p.Limit rows (Query; see Bounding above).
func opStatement(in *installed, p *storage.QueryParams, limited bool) (string, []any, error) {
	if p.Limit < 1 {
		return "", nil, fmt.Errorf("query limit %d: a registered query reads at least one row", p.Limit)
	}
	scopeArgs, counts, err := schemaplan.QueryRelationArgs(in.schema, p)
	if err != nil {
		return "", nil, err
	}
	var variant byte
	if limited {
		variant = 1
	}
	text, err := in.texts.Text(p, variant, counts, func() (string, error) {
		sh, err := querysql.Lex(p.SQL)
		if err != nil {
			return "", &storage.QueryError{Err: err}
		}
		defs, err := schemaplan.QueryRelationDefs(in.schema, p.Tables, p.Scopes != nil, counts,
			func(t string) string { return "main." + quote(t) },
			func(n int) string { return "?" + strconv.Itoa(n) })
		if err != nil {
			return "", err
		}
		if limited {
			return querysql.Limited(sh, defs, p.Limit), nil
		}
		return querysql.WithRelations(sh, defs), nil
	})
	if err != nil {
		return "", nil, err
	}
	args := make([]any, 0, 1+len(scopeArgs)+len(p.Args))
	args = append(args, p.Partition)
	for _, a := range slices.Concat(scopeArgs, p.Args) {
		if b, ok := a.(bool); ok {
			a = bindValue(ssp2.TypeBoolean, ssp2.Value{Bool: b})
		}
		args = append(args, a)
	}
	return text, args, nil
}

// PrepareQuery implements storage.Querier: SQLite prepares the statement
// CheckQuery accepted behind its relations, privileged and scoped, as
// Query and TxQuery run it, so a mismatch shows at registration.
func (s *Store) PrepareQuery(ctx context.Context, q storage.QuerySpec) error {
	in := s.schema.Load()
	if in == nil {
		return errors.New("prepare query: no schema installed")
	}
	qc, err := s.queryConn(ctx)
	if err != nil {
		return err
	}
	defer func() { s.queries.conns <- qc }()
	for _, scopes := range []map[string]map[string][]string{nil, {}} {
		for _, limited := range []bool{false, true} {
			text, _, err := opStatement(in, &storage.QueryParams{QuerySpec: q, Scopes: scopes}, limited)
			if err != nil {
				return err
			}
			if limited {
				// TxQuery's form runs on the writer: compile it here
				// without keeping it.
				var ds driver.Stmt
				if ds, err = qc.c.dc.(driver.ConnPrepareContext).PrepareContext(stmtCtx, text); err == nil {
					err = ds.Close()
				}
			} else {
				_, err = qc.c.stmt(ctx, text)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Query implements storage.Querier: the partition row with the caller's
// client record, and the statement, from one snapshot. The first
// statement is stepped to its row and left unreset while the statement
// runs: a connection's implicit read transaction lasts until its last
// active statement is reset, so the two read one snapshot without a
// BEGIN and COMMIT of their own.
func (s *Store) Query(ctx context.Context, p storage.QueryParams) (storage.QueryResult, error) {
	return s.query(ctx, p, nil)
}

// QueryEach implements storage.EachQuerier: Query with each row handed
// to each from one reused buffer, so a run allocates no rows of its own.
func (s *Store) QueryEach(ctx context.Context, p storage.QueryParams, each func(row []any) error) (storage.QueryResult, error) {
	return s.query(ctx, p, each)
}

// query is Query, or QueryEach when each is non-nil.
func (s *Store) query(ctx context.Context, p storage.QueryParams, each func(row []any) error) (storage.QueryResult, error) {
	in := s.schema.Load()
	if in == nil {
		return storage.QueryResult{}, errors.New("query: no schema installed")
	}
	text, args, err := opStatement(in, &p, false)
	if err != nil {
		return storage.QueryResult{}, err
	}
	qc, err := s.queryConn(ctx)
	if err != nil {
		return storage.QueryResult{}, err
	}
	defer func() { s.queries.conns <- qc }()
	c := qc.c
	var out storage.QueryResult
	start, err := c.query(ctx, qPartitionClient, p.ClientID, p.Partition)
	if err != nil {
		return out, fmt.Errorf("query partition: %w", err)
	}
	defer func() { _ = start.Close() }()
	if out.HasPartition = start.Next(); out.HasPartition {
		if err := scanStart(start, &out.Start, p.ClientID); err != nil {
			return storage.QueryResult{}, fmt.Errorf("query partition: %w", err)
		}
		out.MaxCommitSeq = out.Start.Partition.MaxCommitSeq
	} else if err := start.Err(); err != nil {
		return storage.QueryResult{}, fmt.Errorf("query partition: %w", err)
	}
	if each != nil {
		if qc.row == nil || len(qc.row) < len(p.Columns) {
			qc.row = make([]any, len(p.Columns))
		}
		err = c.eachRow(ctx, text, args, &p, queryError, qc.row[:len(p.Columns)], each)
		clear(qc.row) // hold no values past the run
	} else {
		out.Rows, err = c.queryRows(ctx, text, args, &p, queryError)
	}
	if err != nil {
		return storage.QueryResult{}, err
	}
	if err := start.Close(); err != nil {
		return storage.QueryResult{}, fmt.Errorf("query partition: %w", err)
	}
	return out, nil
}

// queryError is a registered query's database failure as its own.
func queryError(err error) error { return &storage.QueryError{Err: err} }

// queryRows runs a registered query's statement on c and reads at most
// p.Limit rows, each normalized to the declared columns, then resets
// the statement: a statement without a LIMIT of ours is never stepped
// past p.Limit rows. A database failure of the statement is failed(err);
// a value that does not fit its column is a *storage.QueryError.
func (c *conn) queryRows(ctx context.Context, text string, args []any, p *storage.QueryParams, failed func(error) error) ([][]any, error) {
	n := len(p.Columns)
	var slab []any // the rows' values, a block of rows at a time
	out := make([][]any, 0, min(p.Limit, 256))
	err := c.readRows(ctx, text, args, p, failed, func() []any {
		if len(slab) < n {
			slab = make([]any, n*min(p.Limit-len(out), 64))
		}
		row := slab[:n:n]
		slab = slab[n:]
		return row
	}, func(row []any) error {
		out = append(out, row)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eachRow is queryRows handing each row to each in row, one buffer
// reused for every row.
func (c *conn) eachRow(ctx context.Context, text string, args []any, p *storage.QueryParams, failed func(error) error, row []any, each func([]any) error) error {
	return c.readRows(ctx, text, args, p, failed, func() []any { return row }, each)
}

// readRows steps the statement for queryRows and eachRow: each row's
// normalized values go into next()'s slice, which is then passed to
// done; it stops after p.Limit rows.
func (c *conn) readRows(ctx context.Context, text string, args []any, p *storage.QueryParams, failed func(error) error, next func() []any, done func([]any) error) error {
	rs, err := c.query(ctx, text, args...)
	if err != nil {
		return failed(err)
	}
	defer func() { _ = rs.Close() }()
	idx, err := resultIndex(rs.dr.Columns(), p.Columns)
	if err != nil {
		return err
	}
	for read := 0; read < p.Limit && rs.Next(); read++ {
		row := next()
		for i, col := range p.Columns {
			v := rs.vals[idx[i]]
			if b, ok := v.([]byte); ok {
				v = slices.Clone(b)
			}
			if row[i], err = storage.NormalizeQueryValue(col, v); err != nil {
				return err
			}
		}
		if err := done(row); err != nil {
			return err
		}
	}
	if err := rs.Err(); err != nil {
		return failed(err)
	}
	if err := rs.Close(); err != nil {
		return failed(err)
	}
	return nil
}

// scanStart reads a qPartitionClient row into st (the client zero when
// it has no record).
func scanStart(r *rows, st *storage.RequestStart, clientID string) error {
	p, cl := &st.Partition, &st.Client
	var subs []byte
	if err := r.Scan(&p.ID, &p.LogEpoch, &p.EpochRequired, &p.CreatedAtMs, &p.LastSeenMs, &p.MaxCommitSeq, &p.HorizonSeq,
		&st.HasClient, &cl.ActorID, &cl.WireVersion, &cl.Cursor, &cl.UpdatedAtMs, &subs); err != nil {
		return err
	}
	if !st.HasClient {
		*cl = storage.Client{}
		return nil
	}
	cl.Partition, cl.ClientID = p.ID, clientID
	if subs != nil {
		cl.Subscriptions = subs
	}
	return nil
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
