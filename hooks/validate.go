package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/engine"
)

// ValidateRequest is what the node asks on
// syncnode.hook.validate.<partition>, once per new commit, inside the
// commit's transaction (the partition's write lock is held meanwhile).
type ValidateRequest struct {
	Partition      string      `json:"partition"`
	ActorID        string      `json:"actorId"`
	ClientID       string      `json:"clientId"`
	ClientCommitID string      `json:"clientCommitId"`
	Operations     []Operation `json:"operations"`
	// ReadSubject (with ValidateConfig.Reads) is where the hook may read
	// the commit's candidate state until it replies: see ReadRequest.
	ReadSubject string `json:"readSubject,omitempty"`
}

// ReadRequest is a read a validate hook sends to its request's
// ReadSubject, answered from inside the commit's transaction — the
// stored rows of the partition with the commit's writes applied, the
// state the hook is judging — never from another snapshot, and without
// waiting on the writer the commit holds (a remote operation from the
// hook would, on SQLite, until the hook's deadline):
//
//	{"kind": "query", "operationId": "<registered query>", "params": [...]}
//	  → {"rows": [{column: value}], "maxCommitSeq": n}
//	{"kind": "getRow", "table": "...", "rowId": "..."}
//	  → {"row": {...} | null, "serverVersion": n}
//
// or {"error": {"code", "message"}} (operation.* codes for a query). A
// query is the server's own read, as a Go validator's: a scoped query's
// relations hold the rows of the values its coverage names in params,
// granted to the pushing actor or not. Params are JSON scalars (integers
// without a fraction or exponent are integers); values in answers are
// rendered like the request's rows. At most MaxValidateReads per request.
type ReadRequest struct {
	Kind        string            `json:"kind"`
	OperationID string            `json:"operationId,omitempty"`
	Params      []json.RawMessage `json:"params,omitempty"`
	Table       string            `json:"table,omitempty"`
	RowID       string            `json:"rowId,omitempty"`
}

// MaxValidateReads bounds the reads of one validate request.
const MaxValidateReads = 1000

// QueryResult is a registered query's result over the candidate state.
type QueryResult struct {
	Rows         []engine.Row `json:"rows"`
	MaxCommitSeq int64        `json:"maxCommitSeq"`
}

// CandidateQuery runs the registered query id over a push's candidate
// state (the node wires operations.Registry.QueryCandidate); a refusal
// or failure is a ReplyError with its operation code.
type CandidateQuery func(ctx context.Context, rd engine.CandidateReader, id string, params []any) (QueryResult, *ReplyError)

type readReply struct {
	ErrorReply
	*QueryResult
	Row           *engine.Row `json:"row,omitempty"`
	ServerVersion int64       `json:"serverVersion,omitempty"`
}

// Operation is one operation of the commit, after the scope-column strip
// and CRDT merge: Row is the row that will persist (null for a delete),
// Stored the row before (null when it did not exist). Row values are
// JSON: integers and floats as numbers (non-finite floats as null),
// bytes as base64 strings, json columns embedded.
type Operation struct {
	OpIndex             int        `json:"opIndex"`
	Op                  string     `json:"op"`
	Table               string     `json:"table"`
	RowID               string     `json:"rowId"`
	Row                 engine.Row `json:"row"`
	Stored              engine.Row `json:"stored"`
	StoredServerVersion *int64     `json:"storedServerVersion,omitempty"`
	NextServerVersion   *int64     `json:"nextServerVersion,omitempty"`
}

// ValidateReply accepts the commit ({"accept": true}) or rejects it
// ({"reject": {...}}); exactly one of the two.
type ValidateReply struct {
	ErrorReply
	Accept bool       `json:"accept,omitempty"`
	Reject *Rejection `json:"reject,omitempty"`
}

// Rejection is a hook's rejection: the client receives Code (a host code,
// not sync.*, blob.*, …), Message and Details on operation OpIndex, and
// the whole commit rolls back.
type Rejection struct {
	OpIndex int                      `json:"opIndex"`
	Code    string                   `json:"code"`
	Message string                   `json:"message,omitempty"`
	Details *engine.RejectionDetails `json:"details,omitempty"`
}

func (r *ValidateReply) check() error {
	switch {
	case r.Accept && r.Reject != nil:
		return errors.New(`both "accept" and "reject"`)
	case !r.Accept && r.Reject == nil:
		return errors.New(`neither "accept": true nor "reject"`)
	case r.Reject != nil:
		return engine.ValidateHostCode(r.Reject.Code)
	}
	return nil
}

// DefaultValidateTimeout bounds one validate request. It is short: the
// partition's writes wait while the hook thinks.
const DefaultValidateTimeout = 500 * time.Millisecond

// ValidateConfig configures the write-validator hook.
type ValidateConfig struct {
	// Conn is the node's NATS connection. Required.
	Conn *nats.Conn
	// Timeout bounds one request (default DefaultValidateTimeout), the
	// hook's reads included.
	Timeout time.Duration
	// Reads sends each request a ReadSubject the hook may read the
	// candidate state through (ReadRequest); Query runs its registered
	// queries (nil: a query read is operation.unknown).
	Reads   bool
	Query   CandidateQuery
	Metrics *Metrics
}

// WithDefaults returns c with unset fields defaulted.
func (c ValidateConfig) WithDefaults() ValidateConfig {
	if c.Timeout == 0 {
		c.Timeout = DefaultValidateTimeout
	}
	return c
}

// Validate reports every invalid field.
func (c ValidateConfig) Validate() error {
	return validateCommon(bus.HookValidate, c.Conn, c.Timeout, CacheConfig{})
}

// Validator asks a host process to accept or reject every new commit. Its
// Validate method is an engine.CommitValidator: a rejection becomes the
// commit's rejection with the hook's code and details; a timeout, an
// error answer or a malformed one rejects the commit with
// sync.constraint_violation. Either way the commit rolls back whole.
type Validator struct {
	c     caller
	m     *Metrics
	reads bool
	query CandidateQuery
}

// NewValidator validates cfg and returns the hook client.
func NewValidator(cfg ValidateConfig) (*Validator, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Validator{c: caller{nc: cfg.Conn, hook: bus.HookValidate, timeout: cfg.Timeout, m: cfg.Metrics}, m: cfg.Metrics,
		reads: cfg.Reads, query: cfg.Query}, nil
}

// Validate implements engine.CommitValidator.
func (v *Validator) Validate(ctx context.Context, cv engine.CommitValidation) error {
	p, err := bus.NewPartition(cv.Partition)
	if err != nil {
		return fmt.Errorf("hook validate: %w", err)
	}
	req := ValidateRequest{Partition: cv.Partition, ActorID: cv.ActorID, ClientID: cv.ClientID, ClientCommitID: cv.ClientCommitID,
		Operations: make([]Operation, len(cv.Operations))}
	for i, o := range cv.Operations {
		req.Operations[i] = Operation{OpIndex: o.OpIndex, Op: o.Op.String(), Table: o.Table, RowID: o.RowID,
			Row: jsonRow(o.Row), Stored: jsonRow(o.Stored), StoredServerVersion: o.StoredServerVersion, NextServerVersion: o.NextServerVersion}
	}
	var r ValidateReply
	if v.reads && cv.Candidate != nil {
		req.ReadSubject = bus.HookReadSubject(bus.ReadToken())
		n := 0
		err = v.c.callServing(ctx, bus.HookValidateSubject(p), req.ReadSubject, req, &r, func(data []byte) any {
			if n++; n > MaxValidateReads {
				return ErrorReply{Error: &ReplyError{Code: "operation.invalid_request", Message: fmt.Sprintf("a validate request reads at most %d times", MaxValidateReads)}}
			}
			return v.read(ctx, cv.Candidate, data)
		})
	} else {
		err = v.c.call(ctx, bus.HookValidateSubject(p), req, &r)
	}
	if err != nil {
		return err
	}
	if r.Reject == nil {
		return nil
	}
	v.m.rejected(bus.HookValidate)
	return &engine.Rejection{OpIndex: r.Reject.OpIndex, Code: r.Reject.Code, Message: r.Reject.Message, Details: r.Reject.Details}
}

// jsonRow replaces the values JSON cannot carry (non-finite floats) with
// null, copying the row only when it has one.
func jsonRow(r engine.Row) engine.Row {
	var out engine.Row
	for k, v := range r {
		if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			if out == nil {
				out = maps.Clone(r)
			}
			out[k] = nil
		}
	}
	if out == nil {
		return r
	}
	return out
}

// read answers one ReadRequest from the candidate state.
func (v *Validator) read(ctx context.Context, rd engine.CandidateReader, data []byte) any {
	var rq ReadRequest
	bad := func(format string, args ...any) any {
		return ErrorReply{Error: &ReplyError{Code: "operation.invalid_request", Message: fmt.Sprintf(format, args...)}}
	}
	if err := json.Unmarshal(data, &rq); err != nil {
		return bad("a read is a JSON ReadRequest: %v", err)
	}
	switch rq.Kind {
	case "query":
		params := make([]any, len(rq.Params))
		for i, raw := range rq.Params {
			p, err := jsonParam(raw)
			if err != nil {
				return bad("params[%d]: %v", i, err)
			}
			params[i] = p
		}
		if v.query == nil {
			return ErrorReply{Error: &ReplyError{Code: "operation.unknown", Message: "this node registers no queries"}}
		}
		res, rerr := v.query(ctx, rd, rq.OperationID, params)
		if rerr != nil {
			return ErrorReply{Error: rerr}
		}
		for i, row := range res.Rows {
			res.Rows[i] = jsonRow(row)
		}
		return readReply{QueryResult: &res}
	case "getRow":
		row, version, ok, err := rd.GetRow(ctx, rq.Table, rq.RowID)
		if err != nil {
			return bad("%v", err)
		}
		if !ok {
			return json.RawMessage(`{"row":null}`)
		}
		row = jsonRow(row)
		return readReply{Row: &row, ServerVersion: version}
	}
	return bad("a read is of kind query or getRow, not %q", rq.Kind)
}

// jsonParam reads one JSON scalar param: an integer literal is an int64.
func jsonParam(raw json.RawMessage) (any, error) {
	var x any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&x); err != nil {
		return nil, err
	}
	switch n := x.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
			return i, nil
		}
		return n.Float64()
	case nil, bool, string:
		return x, nil
	}
	return nil, errors.New("not a JSON scalar")
}
