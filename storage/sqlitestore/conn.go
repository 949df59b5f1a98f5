package sqlitestore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"

	"modernc.org/sqlite"
)

// conn is one SQLite connection, used at the driver level rather than
// through database/sql: the store owns its connections for life (there is
// nothing for a pool to do), and the per-statement bookkeeping of
// database/sql costs as much as a short statement. A conn is used by one
// goroutine at a time, and keeps its prepared statements.
type conn struct {
	dc    driver.Conn
	stmts map[string]*stmt
	args  []driver.NamedValue // scratch for binding
	// ran counts the statements run (each binds once): whether a read
	// transaction has read yet (partcache.go).
	ran uint64
	// sql is the statement being prepared or run (the last one, between
	// statements): what the compile test attributes SQLite's
	// compilations to (compile_test.go).
	sql string
}

type stmt struct {
	ds driver.Stmt
	ex driver.StmtExecContext
	qu driver.StmtQueryContext
	// vals is the row buffer of the statement's rows, reused by every
	// query of it (one statement has one result set at a time).
	vals []driver.Value
}

// Statements run under a context that is never cancelled: with a
// cancellable one, the driver starts a watcher goroutine and a progress
// handler per statement, which costs more than most of our statements.
// Cancellation is honoured between statements (and while waiting for a
// connection) instead; every statement is short.
var stmtCtx = context.Background()

func connect(ctx context.Context, dsn string) (*conn, error) {
	ctr, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	dc, err := ctr.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if _, ok := dc.(driver.ExecerContext); !ok {
		_ = dc.Close()
		return nil, errors.New("sqlite driver connection does not execute directly")
	}
	return &conn{dc: dc, stmts: map[string]*stmt{}}, nil
}

func (c *conn) close() error {
	var errs []error
	for _, s := range c.stmts {
		errs = append(errs, s.ds.Close())
	}
	errs = append(errs, c.dc.Close())
	return errors.Join(errs...)
}

// unnamed renders a result list whose columns cost the driver nothing to
// describe. For every query, modernc.org/sqlite's rows copy each result
// column's name and declared type out of SQLite into new Go strings (two
// allocations per column per query, a sixth of a sync round's). A column
// named "" copies nothing, and an expression under a unary plus (a no-op
// on its value, type and affinity-free result) has no declared type. Only
// for statements read by position, never by column name.
func unnamed(exprs ...string) string {
	var b strings.Builder
	for i, e := range exprs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`+(` + e + `) AS ""`)
	}
	return b.String()
}

// stmt returns the prepared statement for q, preparing it on first use.
func (c *conn) stmt(ctx context.Context, q string) (*stmt, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.sql = q
	if s, ok := c.stmts[q]; ok {
		return s, nil
	}
	ds, err := c.dc.(driver.ConnPrepareContext).PrepareContext(stmtCtx, q)
	if err != nil {
		return nil, err
	}
	s := &stmt{ds: ds}
	var ok1, ok2 bool
	s.ex, ok1 = ds.(driver.StmtExecContext)
	s.qu, ok2 = ds.(driver.StmtQueryContext)
	if !ok1 || !ok2 {
		_ = ds.Close()
		return nil, errors.New("sqlite driver statement lacks context methods")
	}
	c.stmts[q] = s
	return s, nil
}

// bind converts args to driver values; the result is valid until the next
// bind on c.
func (c *conn) bind(args []any) ([]driver.NamedValue, error) {
	c.ran++
	nv := c.args[:0]
	for i, a := range args {
		var v driver.Value
		switch x := a.(type) {
		case nil, int64, float64, bool, string, []byte:
			v = x
		case int:
			v = int64(x)
		case int32:
			v = int64(x)
		case uint16:
			v = int64(x)
		default:
			return nil, fmt.Errorf("bind argument %d: unsupported type %T", i+1, a)
		}
		nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: v})
	}
	c.args = nv
	return nv, nil
}

// exec runs the cached statement q and returns the number of rows it
// changed.
func (c *conn) exec(ctx context.Context, q string, args ...any) (int64, error) {
	s, err := c.stmt(ctx, q)
	if err != nil {
		return 0, err
	}
	nv, err := c.bind(args)
	if err != nil {
		return 0, err
	}
	res, err := s.ex.ExecContext(stmtCtx, nv)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// query runs the cached statement q.
func (c *conn) query(ctx context.Context, q string, args ...any) (*rows, error) {
	s, err := c.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	nv, err := c.bind(args)
	if err != nil {
		return nil, err
	}
	dr, err := s.qu.QueryContext(stmtCtx, nv)
	if err != nil {
		return nil, err
	}
	if n := len(dr.Columns()); cap(s.vals) < n {
		s.vals = make([]driver.Value, n)
	}
	return &rows{dr: dr, vals: s.vals[:len(dr.Columns())]}, nil
}

// queryRow runs the cached statement q and scans its first row into
// dest; ok=false when there is no row.
func (c *conn) queryRow(ctx context.Context, q string, args []any, dest ...any) (ok bool, err error) {
	r, err := c.query(ctx, q, args...)
	if err != nil {
		return false, err
	}
	defer r.Close()
	if !r.Next() {
		return false, r.Err()
	}
	if err := r.Scan(dest...); err != nil {
		return false, err
	}
	return true, r.Close()
}

// execOnce runs q (which may hold several statements) without caching it:
// DDL and one-off statements.
func (c *conn) execOnce(ctx context.Context, q string, args ...any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.sql = q
	nv, err := c.bind(args)
	if err != nil {
		return err
	}
	_, err = c.dc.(driver.ExecerContext).ExecContext(stmtCtx, q, nv)
	return err
}

// queryOnce runs q without caching it; closing the rows finalizes it.
func (c *conn) queryOnce(ctx context.Context, q string, args ...any) (*rows, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.sql = q
	ds, err := c.dc.(driver.ConnPrepareContext).PrepareContext(stmtCtx, q)
	if err != nil {
		return nil, err
	}
	nv, err := c.bind(args)
	if err != nil {
		_ = ds.Close()
		return nil, err
	}
	dr, err := ds.(driver.StmtQueryContext).QueryContext(stmtCtx, nv)
	if err != nil {
		_ = ds.Close()
		return nil, err
	}
	r := newRows(dr)
	r.stmt = ds
	return r, nil
}

// rows iterates a driver result set with the shape of *sql.Rows.
type rows struct {
	dr     driver.Rows
	stmt   driver.Stmt // closed with the rows when the statement is not cached
	vals   []driver.Value
	err    error
	closed bool
}

func newRows(dr driver.Rows) *rows {
	return &rows{dr: dr, vals: make([]driver.Value, len(dr.Columns()))}
}

func (r *rows) Next() bool {
	if r.closed || r.err != nil {
		return false
	}
	if err := r.dr.Next(r.vals); err != nil {
		if err != io.EOF {
			r.err = err
		}
		_ = r.Close()
		return false
	}
	return true
}

func (r *rows) Err() error { return r.err }

func (r *rows) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	clear(r.vals) // hold no values past the rows (the buffer may be reused)
	err := r.dr.Close()
	if r.stmt != nil {
		err = errors.Join(err, r.stmt.Close())
	}
	return err
}

// Scan converts the current row into dest: *string, *[]byte, *int64,
// *int, *int32, *uint16, *bool, *float64, or **int64 for a nullable
// integer. Byte slices are fresh copies made by the driver.
func (r *rows) Scan(dest ...any) error {
	if len(dest) != len(r.vals) {
		return fmt.Errorf("scan: %d destinations for %d columns", len(dest), len(r.vals))
	}
	for i, d := range dest {
		if err := assign(d, r.vals[i]); err != nil {
			return fmt.Errorf("scan column %d: %w", i, err)
		}
	}
	return nil
}

func assign(dest any, v driver.Value) error {
	switch d := dest.(type) {
	case *string:
		switch x := v.(type) {
		case string:
			*d = x
			return nil
		case []byte:
			*d = string(x)
			return nil
		}
	case *[]byte:
		switch x := v.(type) {
		case nil:
			*d = nil
			return nil
		case []byte:
			*d = x
			return nil
		case string:
			*d = []byte(x)
			return nil
		}
	case *int64:
		if x, ok := v.(int64); ok {
			*d = x
			return nil
		}
	case **int64:
		switch x := v.(type) {
		case nil:
			*d = nil
			return nil
		case int64:
			*d = &x
			return nil
		}
	case *int:
		if x, ok := v.(int64); ok {
			*d = int(x)
			return nil
		}
	case *int32:
		if x, ok := v.(int64); ok && int64(int32(x)) == x {
			*d = int32(x)
			return nil
		}
	case *uint16:
		if x, ok := v.(int64); ok && int64(uint16(x)) == x {
			*d = uint16(x)
			return nil
		}
	case *bool:
		if x, ok := v.(int64); ok {
			*d = x != 0
			return nil
		}
	case *float64:
		switch x := v.(type) {
		case float64:
			*d = x
			return nil
		case int64:
			*d = float64(x)
			return nil
		}
	}
	return fmt.Errorf("cannot store %T in %T", v, dest)
}
