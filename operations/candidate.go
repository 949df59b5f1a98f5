package operations

import (
	"context"
	"slices"
	"sync"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/storage"
)

// QueryCandidate runs the registered query id over a push's candidate
// state, for a host's validator or reaction planner: rd is the
// Candidate of the engine.RowValidation or engine.CommitValidation it was
// given, so the query reads the push's partition with the commit's
// writes applied, inside the push's transaction (a remote query from
// inside a push would read another snapshot, and on SQLite wait on the
// writer the push is).
//
// The query runs as a remote call of it would — the same relations,
// maxRows and typed results — with params as its positional values
// (nil, bool, int, int64, float64, string, []byte). It is the server's
// own read, so nothing authorizes it: a scoped query's relations hold the
// rows of the values its coverage names in params, granted or not, and a
// privileged query's Authorize is not called.
//
// A refusal (an unknown id, params that do not fit, a result over
// maxRows) is an *Error with its operation code; a failure of the
// statement or of a result value is a *storage.QueryError, after which
// the push goes on; anything else is the store's failure, and the push
// fails with sync.internal_error whatever the validator returns.
func (r *Registry) QueryCandidate(ctx context.Context, rd engine.CandidateReader, id string, params ...any) (QueryResult, error) {
	q, args, err := r.lookup(id, params)
	if err != nil {
		return QueryResult{}, err
	}
	p := storage.QueryParams{QuerySpec: q.spec, Args: args}
	if q.Mode == Scoped {
		if p.Scopes, err = covered(q, args); err != nil {
			return QueryResult{}, err
		}
	}
	res, err := rd.Query(ctx, p)
	if err != nil {
		return QueryResult{}, err
	}
	return q.result(res)
}

// lookup finds the registered query id and checks its positional params
// given in Go (an int is an int64).
func (r *Registry) lookup(id string, params []any) (*query, []any, error) {
	q, ok := r.queries[id]
	if !ok {
		return nil, nil, errorf(CodeUnknown, "no query %q is registered", id)
	}
	vals := make([]any, len(params))
	for i, p := range params {
		if n, ok := p.(int); ok {
			p = int64(n)
		}
		vals[i] = p
	}
	args, err := queryArgs(vals, q.params)
	if err != nil {
		return nil, nil, err
	}
	return q, args, nil
}

// covered returns a scoped query's relation restriction: per table and
// scope variable, the distinct values of the parameters its coverage
// names, rendered as stored scopes are.
func covered(q *query, args []any) (map[string]map[string][]string, error) {
	out := make(map[string]map[string][]string, len(q.Coverage))
	for _, cv := range q.Coverage {
		m := make(map[string][]string, len(cv.Scopes))
		for v, params := range cv.Scopes {
			for _, pi := range params {
				val, ok := storage.RenderScopeValue(args[pi])
				if !ok {
					return nil, errorf(CodeInvalidRequest, "params[%d] covers scope %q and is not a string, integer or boolean", pi, v)
				}
				if !slices.Contains(m[v], val) {
					m[v] = append(m[v], val)
				}
			}
		}
		out[cv.Table] = m
	}
	return out, nil
}

// result is a store's result as the query's success: maxRows enforced
// (the store read maxRows+1), each row keyed by the declared columns.
func (q *query) result(res storage.QueryResult) (QueryResult, error) {
	if len(res.Rows) > q.MaxRows {
		return QueryResult{}, errorf(CodeResultTooLarge, "the result exceeds maxRows %d", q.MaxRows)
	}
	return q.objects(res.MaxCommitSeq, len(res.Rows), func(i int) []any { return res.Rows[i] }), nil
}

// objects builds a result of n rows, row(i) holding row i's values.
func (q *query) objects(maxCommitSeq int64, n int, row func(i int) []any) QueryResult {
	out := QueryResult{MaxCommitSeq: maxCommitSeq, Rows: make([]Object, n)}
	fields := make([]Field, n*len(q.columns)) // one block for every row's fields
	for i := range n {
		o := Object(fields[:len(q.columns):len(q.columns)])
		fields = fields[len(q.columns):]
		for j, v := range row(i) {
			o[j] = Field{q.columns[j].Name, v}
		}
		out.Rows[i] = o
	}
	return out
}

// flatRows is a run's values, row after row, as a store's QueryEach
// hands them over: one buffer per run, pooled, so a run allocates only
// its result.
type flatRows struct {
	vals []any
	n    int // rows
}

var flatRowsPool = sync.Pool{New: func() any { return new(flatRows) }}

// maxPooledValues bounds the buffer a run puts back in the pool.
const maxPooledValues = 1 << 14

func (f *flatRows) add(row []any) error {
	f.vals = append(f.vals, row...)
	f.n++
	return nil
}

func (f *flatRows) release() {
	if cap(f.vals) > maxPooledValues {
		return
	}
	clear(f.vals) // hold no values past the run
	f.vals, f.n = f.vals[:0], 0
	flatRowsPool.Put(f)
}

// flatResult is result for rows collected in f.
func (q *query) flatResult(maxCommitSeq int64, f *flatRows) (QueryResult, error) {
	if f.n > q.MaxRows {
		return QueryResult{}, errorf(CodeResultTooLarge, "the result exceeds maxRows %d", q.MaxRows)
	}
	w := len(q.columns)
	return q.objects(maxCommitSeq, f.n, func(i int) []any { return f.vals[i*w : (i+1)*w] }), nil
}
