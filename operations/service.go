// Package operations is the remote operation protocol of REMOTE.md rev 1:
// registered authoritative queries and server commands, run for an
// authenticated actor, over HTTP (http.go) and over NATS request-reply
// (nats.go).
//
// A query is validated at registration by SQLite's parser
// (sqlitestore.CheckQuery) and runs through the store's storage.Querier
// over relations of the application columns of the caller's partition;
// a command runs through engine.PushCommand, so its commit takes the
// ordinary push path under the key
// clientId = ["remote-command", actorId, clientId],
// clientCommitId = [operationId, requestId].
package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/ids"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Revision is the protocol revision served.
const Revision = 1

// Config configures a Service.
type Config struct {
	Schema   *schema.Schema
	Store    storage.Store
	Engine   *engine.Engine
	Registry *Registry
	// Conn and Names reach the NATS command handlers (nats.go); without
	// Conn a NATS command fails with operation.execution_failed.
	Conn  *nats.Conn
	Names bus.Names
	// Remote, when set, runs the commands of partitions homed on another
	// node at their home (remote.go).
	Remote RemoteHome
	Logger *slog.Logger
}

// Service runs operations. It is safe for concurrent use.
type Service struct {
	cfg     Config
	log     *slog.Logger
	metrics Metrics
}

// Metrics count a Service's work.
type Metrics struct {
	Queries  atomic.Int64
	Commands atomic.Int64
	Errors   atomic.Int64
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Schema == nil || cfg.Store == nil || cfg.Engine == nil || cfg.Registry == nil {
		return nil, errors.New("operations: Schema, Store, Engine and Registry are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, log: cfg.Logger}, nil
}

// Metrics returns the service's counters.
func (s *Service) Metrics() *Metrics { return &s.metrics }

// Registry returns the registry served.
func (s *Service) Registry() *Registry { return s.cfg.Registry }

// Request is a decoded operation request.
type Request struct {
	Kind        string // "query" or "command"
	ClientID    string
	OperationID string
	RequestID   string // commands
	Params      any
}

// DecodeRequest decodes an encoded request object.
func DecodeRequest(b []byte) (Request, error) {
	v, err := Decode(b)
	if err != nil {
		return Request{}, errorf(CodeInvalidRequest, "%v", err)
	}
	return requestFrom(v, "query", "command")
}

// requestFrom reads a request object of one of kinds.
func requestFrom(v any, kinds ...string) (Request, error) {
	o, ok := v.(Object)
	if !ok {
		return Request{}, errorf(CodeInvalidRequest, "the request is not an object")
	}
	var r Request
	if rev, _ := o.Get("revision"); !isRevision(rev) {
		return Request{}, errorf(CodeInvalidRequest, "revision must be %d", Revision)
	}
	kind, _ := o.Get("kind")
	r.Kind, _ = kind.(string)
	if !slices.Contains(kinds, r.Kind) {
		return Request{}, errorf(CodeInvalidRequest, "kind %v is not one of %v", kind, kinds)
	}
	allowed := map[string]bool{"revision": true, "kind": true, "clientId": true, "operationId": true, "params": true}
	str := func(key string, dst *string) error {
		x, ok := o.Get(key)
		s, isStr := x.(string)
		if !ok || !isStr || s == "" {
			return errorf(CodeInvalidRequest, "%s must be a non-empty string", key)
		}
		if err := ids.Check(key, s); err != nil {
			return errorf(CodeInvalidRequest, "%v", err)
		}
		*dst = s
		return nil
	}
	if r.Kind == "query" || r.Kind == "command" {
		if err := str("clientId", &r.ClientID); err != nil {
			return Request{}, err
		}
		if err := str("operationId", &r.OperationID); err != nil {
			return Request{}, err
		}
		p, ok := o.Get("params")
		if !ok {
			return Request{}, errorf(CodeInvalidRequest, "params is missing")
		}
		r.Params = p
	}
	if r.Kind == "command" {
		allowed["requestId"] = true
		if err := str("requestId", &r.RequestID); err != nil {
			return Request{}, err
		}
	}
	for _, f := range o {
		if !allowed[f.Key] {
			return Request{}, errorf(CodeInvalidRequest, "unknown request field %q", f.Key)
		}
	}
	return r, nil
}

func isRevision(v any) bool {
	switch x := v.(type) {
	case float64:
		return x == Revision
	case int64:
		return x == Revision
	}
	return false
}

// Do runs one request and returns the encoded response object: a
// success, or an error response.
func (s *Service) Do(ctx context.Context, id engine.Identity, req Request) Object {
	var (
		out Object
		err error
	)
	switch req.Kind {
	case "query":
		var res QueryResult
		res, err = s.Query(ctx, id, req)
		out = res.object(req.OperationID)
	case "command":
		var res CommandResult
		res, err = s.Command(ctx, id, req)
		out = res.object(req.OperationID, req.RequestID)
	default:
		err = errorf(CodeInvalidRequest, "kind %q is not a request kind", req.Kind)
	}
	if err != nil {
		return s.errorObject(id, req, err)
	}
	return out
}

func (s *Service) errorObject(id engine.Identity, req Request, err error) Object {
	s.metrics.Errors.Add(1)
	e := toError(err)
	if e.Code == CodeExecutionFailed || e.Code == string(ssp2.CodeInternalError) {
		s.log.Error("operation failed", "partition", id.Partition, "actor", id.ActorID, "operation", req.OperationID, "err", err)
	}
	return ErrorObject(e)
}

// ErrorObject is the encoded error response of e.
func ErrorObject(e *Error) Object {
	return Object{{"revision", int64(Revision)}, {"kind", "error"}, {"code", e.Code}, {"message", e.Message}, {"retryable", e.Retryable}}
}

// QueryResult is a query's success.
type QueryResult struct {
	Rows         []Object
	MaxCommitSeq int64
}

func (r QueryResult) object(opID string) Object {
	rows := make([]any, len(r.Rows))
	for i, row := range r.Rows {
		rows[i] = row
	}
	return Object{{"revision", int64(Revision)}, {"kind", "query"}, {"operationId", opID}, {"rows", rows}, {"maxCommitSeq", float64(r.MaxCommitSeq)}}
}

// Query runs a registered query for id.
func (s *Service) Query(ctx context.Context, id engine.Identity, req Request) (QueryResult, error) {
	s.metrics.Queries.Add(1)
	q, ok := s.cfg.Registry.queries[req.OperationID]
	if !ok {
		return QueryResult{}, errorf(CodeUnknown, "no query %q is registered", req.OperationID)
	}
	qs, ok := s.cfg.Store.(storage.Querier)
	if !ok {
		return QueryResult{}, errorf(CodeStorageUnsupported, "the store does not run authoritative queries")
	}
	args, err := queryArgs(req.Params, q.params)
	if err != nil {
		return QueryResult{}, err
	}
	if err := engine.CheckCaller(id, req.ClientID); err != nil {
		return QueryResult{}, err
	}
	p := storage.QueryParams{QuerySpec: q.spec, Partition: id.Partition, Args: args, ClientID: req.ClientID}
	if q.Mode == Scoped {
		if p.Scopes, err = s.cover(ctx, id, q, args); err != nil {
			return QueryResult{}, err
		}
	} else if err := authorizeQuery(ctx, id, q, args); err != nil {
		return QueryResult{}, err
	}
	// The caller's partition row and client record come from the query's
	// own snapshot: the caller is admitted on them before any row leaves.
	var (
		res  storage.QueryResult
		flat *flatRows // the rows, when the store hands them over one by one
	)
	if eq, ok := qs.(storage.EachQuerier); ok {
		flat = flatRowsPool.Get().(*flatRows)
		defer flat.release()
		res, err = eq.QueryEach(ctx, p, flat.add)
	} else {
		res, err = qs.Query(ctx, p)
	}
	if err != nil {
		// A caller who may not be served hears that, not the failure.
		if aerr := s.cfg.Engine.AdmitCaller(ctx, id, req.ClientID); aerr != nil {
			return QueryResult{}, aerr
		}
		return QueryResult{}, err
	}
	if err := s.cfg.Engine.AdmitRead(ctx, id, req.ClientID, res.Start, res.HasPartition); err != nil {
		return QueryResult{}, err
	}
	if flat != nil {
		return q.flatResult(res.MaxCommitSeq, flat)
	}
	return q.result(res)
}

// queryArgs checks a query's params: an array of n scalar values.
func queryArgs(params any, n int) ([]any, error) {
	arr, ok := params.([]any)
	if !ok {
		return nil, errorf(CodeInvalidRequest, "a query's params are an array of its %d positional values", n)
	}
	if len(arr) != n {
		return nil, errorf(CodeInvalidRequest, "the query takes %d params, the request has %d", n, len(arr))
	}
	for i, a := range arr {
		switch a.(type) {
		case nil, bool, float64, string, int64, []byte:
		default:
			return nil, errorf(CodeInvalidRequest, "params[%d] is not a scalar value", i)
		}
	}
	return arr, nil
}

// cover verifies a scoped query's covered values against the caller's
// allowed scopes and returns them as the relations' restriction.
func (s *Service) cover(ctx context.Context, id engine.Identity, q *query, args []any) (map[string]map[string][]string, error) {
	allowed, err := s.cfg.Engine.ResolveAllowed(ctx, id)
	if err != nil {
		if ssp2.CodeOf(err) == ssp2.CodeForbidden {
			return nil, errorf(CodeForbidden, "the caller's scopes could not be resolved")
		}
		return nil, err
	}
	return grantedCoverage(allowed, q, args)
}

// grantedCoverage is a scoped query's relation restriction (covered)
// once every covered value is granted by allowed; an ungranted value is
// operation.forbidden.
func grantedCoverage(allowed engine.Allowed, q *query, args []any) (map[string]map[string][]string, error) {
	out, err := covered(q, args)
	if err != nil {
		return nil, err
	}
	for _, m := range out {
		for v, vals := range m {
			grant := allowed[v]
			if slices.Contains(grant, engine.Wildcard) {
				continue
			}
			for _, val := range vals {
				if !slices.Contains(grant, val) {
					return nil, errorf(CodeForbidden, "scope %s=%q is not granted", v, val)
				}
			}
		}
	}
	return out, nil
}

func authorizeQuery(ctx context.Context, id engine.Identity, q *query, args []any) error {
	ok := allowActor(q.AllowActors, id.ActorID)
	if q.Authorize != nil {
		var err error
		if ok, err = callAuthorize(func() (bool, error) { return q.Authorize(ctx, id, args) }); err != nil {
			return &engine.CommandError{Err: err}
		}
	}
	if !ok {
		return errorf(CodeForbidden, "the caller may not run query %q", q.ID)
	}
	return nil
}

func allowActor(list []string, actor string) bool {
	return slices.Contains(list, actor) || slices.Contains(list, "*")
}

// callAuthorize runs a host callback, turning a panic into an error.
func callAuthorize(f func() (bool, error)) (ok bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			ok, err = false, fmt.Errorf("authorize panicked: %v", p)
		}
	}()
	return f()
}

// CommandResult is a command's success.
type CommandResult struct {
	Status    string // applied, cached or rejected
	CommitSeq int64  // 0: none
	Results   []ssp2.OpResult
}

func (r CommandResult) object(opID, reqID string) Object {
	o := Object{{"revision", int64(Revision)}, {"kind", "command"}, {"operationId", opID}, {"requestId", reqID}, {"status", r.Status}}
	if r.CommitSeq > 0 {
		o = append(o, Field{"commitSeq", float64(r.CommitSeq)})
	}
	results := make([]any, len(r.Results))
	for i, res := range r.Results {
		ro := Object{{"opIndex", float64(res.OpIndex)}, {"status", opStatus(res.Status)}}
		if res.Code != "" {
			ro = append(ro, Field{"code", res.Code}, Field{"message", res.Message}, Field{"retryable", res.Retryable})
		}
		if res.ServerVersion > 0 {
			ro = append(ro, Field{"serverVersion", float64(res.ServerVersion)})
		}
		results[i] = ro
	}
	return append(o, Field{"results", results})
}

func opStatus(s ssp2.OpStatus) string {
	switch s {
	case ssp2.OpApplied:
		return "applied"
	case ssp2.OpConflict:
		return "conflict"
	}
	return "error"
}

// CommandKey is the push idempotency key of a command (REMOTE.md §3).
func CommandKey(actorID, clientID, operationID, requestID string) (cid, ccid string) {
	a, _ := json.Marshal([]string{"remote-command", actorID, clientID})
	b, _ := json.Marshal([]string{operationID, requestID})
	return string(a), string(b)
}

// Command runs a registered command for id.
func (s *Service) Command(ctx context.Context, id engine.Identity, req Request) (CommandResult, error) {
	s.metrics.Commands.Add(1)
	c, ok := s.cfg.Registry.commands[req.OperationID]
	if !ok {
		return CommandResult{}, errorf(CodeUnknown, "no command %q is registered", req.OperationID)
	}
	if req.RequestID == "" {
		return CommandResult{}, errorf(CodeInvalidRequest, "requestId must not be empty")
	}
	allowedActor := allowActor(c.AllowActors, id.ActorID)
	if c.Authorize != nil {
		var err error
		if allowedActor, err = callAuthorize(func() (bool, error) { return c.Authorize(ctx, id, req.Params) }); err != nil {
			return CommandResult{}, &engine.CommandError{Err: err}
		}
	}
	if !allowedActor {
		return CommandResult{}, errorf(CodeForbidden, "the caller may not run command %q", c.ID)
	}
	if s.cfg.Remote != nil && s.cfg.Remote.Remote(id.Partition) {
		return s.forwardCommand(ctx, id, req)
	}
	cid, ccid := CommandKey(id.ActorID, req.ClientID, req.OperationID, req.RequestID)
	res, err := s.cfg.Engine.PushCommand(ctx, engine.Command{
		Identity: id, CallerClientID: req.ClientID, ClientID: cid, ClientCommitID: ccid, Rows: declaredReads(c, req.Params),
		Operations: func(ctx context.Context, rows engine.CommandReader) ([]ssp2.Operation, error) {
			call := CommandCall{Identity: id, ClientID: req.ClientID, OperationID: req.OperationID, RequestID: req.RequestID, Params: req.Params, Rows: rows,
				reg: s.cfg.Registry}
			var muts []Mutation
			var err error
			if c.NATS {
				muts, err = s.natsCommand(ctx, c, call)
			} else {
				muts, err = runCommand(ctx, c.Run, call)
			}
			if err != nil {
				return nil, err
			}
			return s.operations(muts)
		},
	})
	if err != nil {
		return CommandResult{}, err
	}
	out := CommandResult{CommitSeq: res.CommitSeq, Results: res.Results}
	switch res.Status {
	case ssp2.PushApplied:
		out.Status = "applied"
	case ssp2.PushCached:
		out.Status = "cached"
	default:
		out.Status = "rejected"
	}
	return out, nil
}

// declaredReads names the rows a NATS command declares it reads, to be
// read with the lock; a row id param that is not a string is refused when
// the command runs (natsCommand), not here.
func declaredReads(c *command, params any) []storage.RowRef {
	if !c.NATS || len(c.Reads) == 0 {
		return nil
	}
	p, _ := params.(Object)
	var rows []storage.RowRef
	for _, rd := range c.Reads {
		v, _ := p.Get(rd.RowIDParam)
		if id, ok := v.(string); ok {
			rows = append(rows, storage.RowRef{Table: rd.Table, RowID: id})
		}
	}
	return rows
}

func runCommand(ctx context.Context, run func(context.Context, CommandCall) ([]Mutation, error), call CommandCall) (muts []Mutation, err error) {
	defer func() {
		if p := recover(); p != nil {
			muts, err = nil, fmt.Errorf("command panicked: %v", p)
		}
	}()
	return run(ctx, call)
}

// operations turns a command's mutations into push operations: full rows
// encoded by the table's codec, written without a base version (the
// command is authoritative over the rows it read under the lock).
func (s *Service) operations(muts []Mutation) ([]ssp2.Operation, error) {
	ops := make([]ssp2.Operation, 0, len(muts))
	for i, m := range muts {
		t, ok := s.cfg.Schema.Table(m.Table)
		if !ok {
			return nil, errorf(CodeInvalidRequest, "mutation %d: unknown table %q", i, m.Table)
		}
		switch m.Op {
		case "delete":
			if m.RowID == "" {
				return nil, errorf(CodeInvalidRequest, "mutation %d: a delete needs a rowId", i)
			}
			ops = append(ops, ssp2.Operation{Table: t.Name, RowID: m.RowID, Op: ssp2.OpDelete})
		case "upsert":
			vals := make([]ssp2.Value, len(t.Columns))
			for name := range m.Row {
				if _, ok := t.ColumnIndex(name); !ok {
					return nil, errorf(CodeInvalidRequest, "mutation %d: table %s has no column %q", i, t.Name, name)
				}
			}
			for j, c := range t.Columns {
				v, err := toValue(c, m.Row[c.Name])
				if err != nil {
					return nil, errorf(CodeInvalidRequest, "mutation %d: column %s: %v", i, c.Name, err)
				}
				vals[j] = v
			}
			rowID, err := t.RowID(vals)
			if err != nil {
				return nil, errorf(CodeInvalidRequest, "mutation %d: %v", i, err)
			}
			if m.RowID != "" && m.RowID != rowID {
				return nil, errorf(CodeInvalidRequest, "mutation %d: rowId %q is not the row's primary key %q", i, m.RowID, rowID)
			}
			payload, err := t.Codec.AppendRow(nil, vals)
			if err != nil {
				return nil, errorf(CodeInvalidRequest, "mutation %d: %v", i, err)
			}
			ops = append(ops, ssp2.Operation{Table: t.Name, RowID: rowID, Op: ssp2.OpUpsert, Payload: payload})
		default:
			return nil, errorf(CodeInvalidRequest, "mutation %d: op %q is neither upsert nor delete", i, m.Op)
		}
	}
	return ops, nil
}

// toValue converts a mutation's column value to the column's type.
func toValue(c schema.Column, v any) (ssp2.Value, error) {
	if v == nil {
		if !c.Nullable {
			return ssp2.Value{}, errors.New("null for a non-nullable column")
		}
		return ssp2.Value{Null: true}, nil
	}
	switch c.Type {
	case ssp2.TypeString, ssp2.TypeJSON, ssp2.TypeBlobRef:
		switch x := v.(type) {
		case string:
			return ssp2.Value{Bytes: []byte(x)}, nil
		case json.RawMessage:
			return ssp2.Value{Bytes: []byte(x)}, nil
		}
	case ssp2.TypeInteger:
		switch x := v.(type) {
		case int64:
			return ssp2.Value{Int: x}, nil
		case int:
			return ssp2.Value{Int: int64(x)}, nil
		case float64:
			if x == float64(int64(x)) {
				return ssp2.Value{Int: int64(x)}, nil
			}
		}
	case ssp2.TypeFloat:
		switch x := v.(type) {
		case float64:
			return ssp2.Value{Float: x}, nil
		case int64:
			return ssp2.Value{Float: float64(x)}, nil
		}
	case ssp2.TypeBoolean:
		if x, ok := v.(bool); ok {
			return ssp2.Value{Bool: x}, nil
		}
	case ssp2.TypeBytes, ssp2.TypeCrdt:
		if x, ok := v.([]byte); ok {
			return ssp2.Value{Bytes: x}, nil
		}
	}
	return ssp2.Value{}, fmt.Errorf("a %T value is not of type %s", v, c.Type)
}
