package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/syncnode/syncnode/ssp2"
)

// Querier runs registered authoritative queries (REMOTE.md §2). A store
// that implements it executes a registered, already validated SELECT in
// one read snapshot with every application table it names replaced by a
// relation of that table's application columns, restricted to one
// partition (and, for a scoped query, to the covered scope values). The
// SQL and its arguments are never combined as text: the partition and the
// scope values reach the relations as bound values.
type Querier interface {
	// PrepareQuery checks that q compiles on this store over the
	// partition-filtered relations (the registration's dialect check).
	PrepareQuery(ctx context.Context, q QuerySpec) error
	// Query runs q and returns at most p.Limit rows, each normalized to
	// the declared result columns, and the partition's max commitSeq, all
	// from one snapshot. A database failure or a value that does not fit
	// its declared column is a *QueryError.
	Query(ctx context.Context, p QueryParams) (QueryResult, error)
}

// EachQuerier is a Querier that can hand a run's rows to the caller one
// at a time instead of collecting them (optional; SQLite implements it).
// QueryEach is Query with each normalized row passed to each, in order,
// as it is read, and QueryResult.Rows left nil: the slice row is valid
// only during the call (the store reuses it), the values in it are the
// caller's to keep. An error from each stops the run and is returned as
// is.
type EachQuerier interface {
	QueryEach(ctx context.Context, p QueryParams, each func(row []any) error) (QueryResult, error)
}

// QuerySpec is a registered query as the store sees it.
type QuerySpec struct {
	// SQL is positional SQLite-family SQL: plain ? placeholders.
	SQL string
	// Tables are the application tables it reads.
	Tables []string
	// Columns are the declared result columns, in result order.
	Columns []QueryColumn
	// Limit is the most rows a run reads: maxRows + 1, so the caller
	// detects an oversize result. The store bounds the statement by it
	// (a LIMIT in SQL, or, on SQLite's query connections, stepping no
	// further), so an oversize result returns no more than Limit rows.
	Limit int
}

// QueryColumn is a declared result column.
type QueryColumn struct {
	Name     string
	Type     ssp2.ColumnType
	Nullable bool
}

// QueryParams is one execution of a registered query.
type QueryParams struct {
	QuerySpec
	Partition string
	// Args are the positional arguments: nil, int64, float64, bool,
	// string or []byte.
	Args []any
	// Scopes, when not nil, restricts each table's relation to the rows
	// whose scope column of each variable holds one of the listed values
	// (rendered as stored scopes are: decimal integers, "true"/"false").
	// A table of Tables missing from Scopes, or a variable of it with no
	// values, matches no row. nil means privileged: the partition only.
	Scopes map[string]map[string][]string
	// ClientID is the caller's client id: the query also reads, in its
	// snapshot, the partition row and this client's record
	// (QueryResult.Start), so admitting the caller needs no read of its
	// own (engine.AdmitRead).
	ClientID string
}

// QueryResult is the outcome of one query.
type QueryResult struct {
	// Rows hold one value per declared column: nil, string, int64,
	// float64, bool, or []byte (bytes and crdt columns; json and blob_ref
	// columns are strings).
	Rows [][]any
	// MaxCommitSeq is the partition's max commitSeq (0 without a
	// partition row).
	MaxCommitSeq int64
	// Start is the partition row and the record of QueryParams.ClientID
	// as the snapshot holds them, untouched (Start.Pushes is nil);
	// HasPartition is false when the partition has no row.
	Start        RequestStart
	HasPartition bool
}

// QueryError is a registered query's execution failure
// (operation.query_failed).
type QueryError struct {
	Column string // set when a value does not fit its declared column
	Err    error
}

func (e *QueryError) Error() string {
	if e.Column != "" {
		return fmt.Sprintf("query result column %q: %v", e.Column, e.Err)
	}
	return "query failed: " + e.Err.Error()
}

func (e *QueryError) Unwrap() error { return e.Err }

// NormalizeQueryValue converts a database value to the Go form of the
// declared column (QueryResult.Rows). SQLite stores booleans as integers
// and may return a float column's whole value as an integer; PostgreSQL
// returns its own types. Anything else that is not the declared type is a
// *QueryError. A value already of its declared form is returned as the
// same interface value, so normalizing a row allocates nothing.
func NormalizeQueryValue(c QueryColumn, v any) (any, error) {
	bad := func(why string) (any, error) {
		return nil, &QueryError{Column: c.Name, Err: errors.New(why)}
	}
	if v == nil {
		if !c.Nullable {
			return bad("NULL for a non-nullable column")
		}
		return nil, nil
	}
	switch c.Type {
	case ssp2.TypeString, ssp2.TypeJSON, ssp2.TypeBlobRef:
		switch x := v.(type) {
		case string:
			return v, nil
		case []byte:
			if c.Type == ssp2.TypeString {
				return bad("bytes for a string column")
			}
			return string(x), nil
		}
	case ssp2.TypeInteger:
		switch x := v.(type) {
		case int64:
			return v, nil
		case int32:
			return int64(x), nil
		case int16:
			return int64(x), nil
		case float64:
			if x == math.Trunc(x) && x >= -(1<<63) && x < 1<<63 {
				return int64(x), nil
			}
		}
	case ssp2.TypeFloat:
		switch x := v.(type) {
		case float64:
			return v, nil
		case float32:
			return float64(x), nil
		case int64:
			return float64(x), nil
		}
	case ssp2.TypeBoolean:
		switch x := v.(type) {
		case bool:
			return v, nil
		case int64:
			if x == 0 || x == 1 {
				return x == 1, nil
			}
		}
	case ssp2.TypeBytes, ssp2.TypeCrdt:
		if _, ok := v.([]byte); ok {
			return v, nil
		}
	}
	return bad(fmt.Sprintf("a %T value is not of the declared type %s", v, c.Type))
}

// RenderScopeValue renders a query argument as a stored scope value
// (schema.RenderValue's forms), ok=false for a value no scope can hold.
func RenderScopeValue(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case int64:
		return strconv.FormatInt(x, 10), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}
