package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// MaxRowsLimit is the largest maxRows a query may declare.
const MaxRowsLimit = 10000

// Mode is a query's authorization mode (REMOTE.md §2.1).
type Mode string

const (
	// Scoped: coverage names, for every table read and every scope
	// variable it declares, the parameters holding the values the query
	// reads; each value must be granted to the caller, and each table's
	// relation holds only the rows with those values.
	Scoped Mode = "scoped"
	// Privileged: Authorize (or AllowActors) decides; the relations hold
	// the whole partition.
	Privileged Mode = "privileged"
)

// Query is a registered query.
type Query struct {
	ID string `json:"id"`
	// SQL is one SELECT with positional ? parameters.
	SQL     string   `json:"sql"`
	Tables  []string `json:"tables"`
	Columns []Column `json:"columns"`
	MaxRows int      `json:"maxRows"`
	Mode    Mode     `json:"mode"`
	// Coverage (scoped) has one record per table read.
	Coverage []Coverage `json:"coverage,omitempty"`
	// Authorize (privileged, Go) decides whether the caller may run it.
	Authorize func(ctx context.Context, id engine.Identity, params []any) (bool, error) `json:"-"`
	// AllowActors (privileged, file) are the actors allowed to run it.
	AllowActors []string `json:"allowActors,omitempty"`
}

// Column is a declared result column; Type is a schema type name.
type Column struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable,omitempty"`
}

// Coverage maps each scope variable of a table to the indexes of the
// parameters holding its values.
type Coverage struct {
	Table  string           `json:"table"`
	Scopes map[string][]int `json:"scopes"`
}

// Command is a registered command (REMOTE.md §3). Exactly one of Run and
// NATS implements it.
type Command struct {
	ID string `json:"id"`
	// Authorize is mandatory in Go; a file gives AllowActors (nil allows
	// every authenticated actor only with "allowActors": ["*"]).
	Authorize   func(ctx context.Context, id engine.Identity, params any) (bool, error) `json:"-"`
	AllowActors []string                                                                `json:"allowActors,omitempty"`
	// Run builds the commit in Go, under the partition lock. It must not
	// have external side effects.
	Run func(ctx context.Context, call CommandCall) ([]Mutation, error) `json:"-"`
	// NATS: a process on the bus implements the command (nats.go). The
	// node reads Reads under the lock and sends them with the request.
	NATS  bool   `json:"nats,omitempty"`
	Reads []Read `json:"reads,omitempty"`
	// TimeoutMs bounds the NATS handler's reply (default 5000).
	TimeoutMs int `json:"timeoutMs,omitempty"`
}

// Read names a row a NATS command is sent: the row of Table whose id is
// the string parameter RowIDParam of the request's params object.
type Read struct {
	Table      string `json:"table"`
	RowIDParam string `json:"rowIdParam"`
}

// CommandCall is what a Go command sees.
type CommandCall struct {
	Identity    engine.Identity
	ClientID    string
	OperationID string
	RequestID   string
	Params      any
	// Rows reads rows the caller's scopes authorize, in the command's
	// transaction.
	Rows engine.CommandReader
	// reg runs Query's registered queries.
	reg *Registry
}

// Query runs the registered query id inside the command's transaction,
// under the partition lock: it reads the state the command's commit is
// judged against (a remote query from inside a command would read
// another snapshot, and on SQLite wait on the writer the command holds).
// It is authorized as the caller's own remote call of it would be — a
// scoped query's covered values must be granted to the caller (else
// operation.forbidden) and its relations hold only their rows; a
// privileged query asks its Authorize or AllowActors — and returns the
// same typed rows, maxRows enforced. params are the positional values
// (nil, bool, int, int64, float64, string, []byte). A failing statement
// is a *storage.QueryError; a failure of the store fails the command.
func (c CommandCall) Query(ctx context.Context, id string, params ...any) (QueryResult, error) {
	if c.reg == nil || c.Rows == nil {
		return QueryResult{}, errorf(CodeExecutionFailed, "this CommandCall runs no queries")
	}
	q, args, err := c.reg.lookup(id, params)
	if err != nil {
		return QueryResult{}, err
	}
	// No ClientID: the command admitted its caller before the lock.
	p := storage.QueryParams{QuerySpec: q.spec, Partition: c.Identity.Partition, Args: args}
	if q.Mode == Scoped {
		allowed, err := c.Rows.Allowed()
		if err != nil {
			return QueryResult{}, errorf(CodeForbidden, "the caller's scopes could not be resolved")
		}
		if p.Scopes, err = grantedCoverage(allowed, q, args); err != nil {
			return QueryResult{}, err
		}
	} else if err := authorizeQuery(ctx, c.Identity, q, args); err != nil {
		return QueryResult{}, err
	}
	res, err := c.Rows.Query(ctx, p)
	if err != nil {
		return QueryResult{}, err
	}
	return q.result(res)
}

// Mutation is one full-row upsert or delete a command returns.
type Mutation struct {
	// Op is "upsert" or "delete".
	Op    string
	Table string
	// RowID is required for a delete; an upsert's is its primary key.
	RowID string
	// Row is the full row of an upsert by column name (string, int64,
	// float64, bool, []byte, json as string or json.RawMessage, nil).
	Row map[string]any
}

// File is the operations file of the binary (`operations = "ops.json"`).
type File struct {
	Queries  []Query   `json:"queries"`
	Commands []Command `json:"commands"`
}

// LoadFile reads an operations file; unknown fields are refused.
func LoadFile(path string) (File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("operations file: %w", err)
	}
	var f File
	dec := json.NewDecoder(bytesReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return File{}, fmt.Errorf("operations file %s: %w", path, err)
	}
	return f, nil
}

// Registry holds the validated operations.
type Registry struct {
	queries  map[string]*query
	commands map[string]*command
}

type query struct {
	Query
	spec    storage.QuerySpec
	params  int
	columns []storage.QueryColumn
}

type command struct {
	Command
	timeout time.Duration
}

// DefaultCommandTimeout bounds a NATS command handler's reply.
const DefaultCommandTimeout = 5 * time.Second

// NewRegistry validates every operation against the schema and returns
// the registry; every refusal is reported at once, each naming the
// operation and its field.
func NewRegistry(ctx context.Context, sc *schema.Schema, f File) (*Registry, error) {
	r := &Registry{queries: map[string]*query{}, commands: map[string]*command{}}
	var errs []error
	ids := map[string]bool{}
	for i, q := range f.Queries {
		at := fmt.Sprintf("operations: queries[%d] (%q)", i, q.ID)
		bad := func(field, format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s.%s: %s", at, field, fmt.Sprintf(format, args...)))
		}
		if q.ID == "" {
			bad("id", "is empty")
		} else if ids[q.ID] {
			bad("id", "is registered twice")
		}
		ids[q.ID] = true
		n := len(errs)
		rq, err := checkQuery(ctx, sc, q, bad)
		if err != nil {
			return nil, err
		}
		if len(errs) == n {
			r.queries[q.ID] = rq
		}
	}
	for i, c := range f.Commands {
		at := fmt.Sprintf("operations: commands[%d] (%q)", i, c.ID)
		bad := func(field, format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s.%s: %s", at, field, fmt.Sprintf(format, args...)))
		}
		if c.ID == "" {
			bad("id", "is empty")
		} else if ids[c.ID] {
			bad("id", "is registered twice")
		}
		ids[c.ID] = true
		if c.Authorize == nil && len(c.AllowActors) == 0 {
			bad("authorize", "is required (Authorize in Go, allowActors in a file)")
		}
		if (c.Run != nil) == c.NATS {
			bad("run", "exactly one of Run (Go) and nats must implement the command")
		}
		if c.NATS {
			if _, err := (bus.Names{}).OperationCommand(c.ID); err != nil {
				bad("id", "%v", err)
			}
		}
		if !c.NATS && len(c.Reads) > 0 {
			bad("reads", "only a NATS command declares reads")
		}
		for j, rd := range c.Reads {
			if _, ok := sc.Table(rd.Table); !ok {
				bad(fmt.Sprintf("reads[%d].table", j), "unknown table %q", rd.Table)
			}
			if rd.RowIDParam == "" {
				bad(fmt.Sprintf("reads[%d].rowIdParam", j), "is empty")
			}
		}
		if c.TimeoutMs < 0 {
			bad("timeoutMs", "%d is negative", c.TimeoutMs)
		}
		to := DefaultCommandTimeout
		if c.TimeoutMs > 0 {
			to = time.Duration(c.TimeoutMs) * time.Millisecond
		}
		r.commands[c.ID] = &command{Command: c, timeout: to}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// checkQuery validates one query; the returned error is an
// infrastructure failure, refusals go to bad.
func checkQuery(ctx context.Context, sc *schema.Schema, q Query, bad func(field, format string, args ...any)) (*query, error) {
	rq := &query{Query: q}
	if q.MaxRows < 1 || q.MaxRows > MaxRowsLimit {
		bad("maxRows", "%d is outside 1..%d", q.MaxRows, MaxRowsLimit)
	}
	if len(q.Columns) == 0 {
		bad("columns", "are missing: a query declares its result columns")
	}
	seen := map[string]bool{}
	for j, c := range q.Columns {
		t, ok := ssp2.ParseColumnType(c.Type)
		switch {
		case c.Name == "":
			bad(fmt.Sprintf("columns[%d].name", j), "is empty")
		case seen[c.Name]:
			bad(fmt.Sprintf("columns[%d].name", j), "%q is declared twice", c.Name)
		case !ok || t == ssp2.TypeCrdt:
			bad(fmt.Sprintf("columns[%d].type", j), "%q is not a result type", c.Type)
		}
		seen[c.Name] = true
		rq.columns = append(rq.columns, storage.QueryColumn{Name: c.Name, Type: t, Nullable: c.Nullable})
	}
	for j, t := range q.Tables {
		switch st, ok := sc.Table(t); {
		case !ok:
			bad(fmt.Sprintf("tables[%d]", j), "unknown table %q", t)
		case !st.Materialize:
			bad(fmt.Sprintf("tables[%d]", j), "table %q has materialize: false and cannot be queried", t)
		}
	}
	shape, err := sqlitestore.CheckQuery(ctx, sc, q.SQL)
	if err != nil {
		var ce *sqlitestore.QueryCheckError
		if !errors.As(err, &ce) {
			return nil, err
		}
		bad("sql", "%s", ce.Reason)
		return rq, nil
	}
	rq.params = shape.Params
	for _, t := range shape.Tables {
		if !slices.Contains(q.Tables, t) {
			bad("tables", "the SQL reads %q, which is not declared", t)
		}
	}
	for _, t := range q.Tables {
		if !slices.Contains(shape.Tables, t) {
			bad("tables", "%q is declared but the SQL does not read it", t)
		}
	}
	for _, c := range q.Columns {
		switch n := count(shape.Columns, c.Name); {
		case n == 0:
			bad("columns", "%q is not a column of the SQL's result", c.Name)
		case n > 1:
			bad("columns", "%q appears %d times in the SQL's result", c.Name, n)
		}
	}
	switch q.Mode {
	case Scoped:
		if q.Authorize != nil || len(q.AllowActors) > 0 {
			bad("mode", "a scoped query is authorized by its coverage, not by authorize or allowActors")
		}
		checkCoverage(sc, q, shape, bad)
	case Privileged:
		if q.Authorize == nil && len(q.AllowActors) == 0 {
			bad("authorize", "a privileged query needs Authorize (Go) or allowActors (file)")
		}
		if len(q.Coverage) > 0 {
			bad("coverage", "a privileged query has no coverage")
		}
	default:
		bad("mode", "%q is neither scoped nor privileged", q.Mode)
	}
	rq.spec = storage.QuerySpec{SQL: q.SQL, Tables: slices.Clone(shape.Tables), Columns: rq.columns, Limit: q.MaxRows + 1}
	return rq, nil
}

func checkCoverage(sc *schema.Schema, q Query, shape sqlitestore.QueryShape, bad func(field, format string, args ...any)) {
	byTable := map[string]bool{}
	for j, cv := range q.Coverage {
		at := fmt.Sprintf("coverage[%d]", j)
		t, ok := sc.Table(cv.Table)
		switch {
		case !ok:
			bad(at+".table", "unknown table %q", cv.Table)
			continue
		case byTable[cv.Table]:
			bad(at+".table", "%q is covered twice", cv.Table)
		case !slices.Contains(shape.Tables, cv.Table):
			bad(at+".table", "%q is not read by the query", cv.Table)
		}
		byTable[cv.Table] = true
		for v, params := range cv.Scopes {
			if _, ok := t.Scope(v); !ok {
				bad(at+".scopes", "table %s declares no scope variable %q", t.Name, v)
			}
			if len(params) == 0 {
				bad(at+".scopes."+v, "names no parameter")
			}
			for _, p := range params {
				if p < 0 || p >= shape.Params {
					bad(at+".scopes."+v, "parameter %d is outside the query's %d parameters", p, shape.Params)
				}
			}
		}
		for _, s := range t.Scopes {
			if _, ok := cv.Scopes[s.Variable]; !ok {
				bad(at+".scopes", "scope variable %q of table %s is not covered", s.Variable, t.Name)
			}
		}
	}
	for _, t := range shape.Tables {
		if !byTable[t] {
			bad("coverage", "table %q read by the query has no coverage record", t)
		}
	}
}

func count(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

// Prepare checks every query on the store's own dialect (PostgreSQL
// parses and plans it over its relations); a store without query support
// leaves the queries registered, and they fail with
// operation.storage_unsupported.
func (r *Registry) Prepare(ctx context.Context, store storage.Store) error {
	qs, ok := store.(storage.Querier)
	if !ok {
		return nil
	}
	var errs []error
	for _, id := range slices.Sorted(mapsKeys(r.queries)) {
		if err := qs.PrepareQuery(ctx, r.queries[id].spec); err != nil {
			errs = append(errs, fmt.Errorf("operations: query %q.sql: the store refuses it: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// IDs returns the registered query and command ids, sorted.
func (r *Registry) IDs() (queries, commands []string) {
	return slices.Sorted(mapsKeys(r.queries)), slices.Sorted(mapsKeys(r.commands))
}

// Tables returns the tables a registered query reads (the watch's
// trigger), ok=false for an unknown query.
func (r *Registry) Tables(id string) ([]string, bool) {
	q, ok := r.queries[id]
	if !ok {
		return nil, false
	}
	return q.spec.Tables, true
}
