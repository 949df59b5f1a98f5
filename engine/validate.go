package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Row is a decoded row keyed by column name. Values are string, int64,
// float64, bool, []byte (bytes and crdt columns), json.RawMessage (json
// and blob_ref columns) or nil for NULL.
type Row map[string]any

// RowValidation is what a per-table write validator sees (SPEC.md §6.7):
// the full row that will persist (a wire version 3 patch's present columns
// over the stored row; after the scope-column strip and CRDT merge; nil
// for a delete) and the stored row (nil for an insert).
type RowValidation struct {
	Op        ssp2.Op
	Table     string
	RowID     string
	Row       Row
	Stored    Row
	ActorID   string
	Partition string
	// Candidate reads the candidate state as this operation finds it: the
	// stored rows with the commit's earlier operations applied (this one
	// not yet).
	Candidate CandidateReader
}

// RowValidator accepts a write by returning nil and rejects it by
// returning a *Rejection. Any other error, or a panic, rejects the commit
// with sync.constraint_violation ("write validator failed").
type RowValidator func(ctx context.Context, v RowValidation) error

// OperationEvidence is one operation of a commit as the whole-commit
// validator sees it (SPEC.md §6.8).
type OperationEvidence struct {
	OpIndex             int
	Op                  ssp2.Op
	Table               string
	RowID               string
	Row                 Row // nil for a delete
	Stored              Row // nil when the row did not exist
	StoredServerVersion *int64
	NextServerVersion   *int64
	// Appended marks an operation the server appended while enforcing a
	// declared reference (SPEC.md §6.11): a cascaded delete or a SET NULL
	// update of a child. Its OpIndex is the originating client delete's.
	Appended bool
}

// CommitValidation is what a whole-commit validator sees.
type CommitValidation struct {
	ClientID       string
	ClientCommitID string
	ActorID        string
	Partition      string
	Operations     []OperationEvidence
	// Candidate reads the candidate state: the stored rows with this
	// commit's writes applied.
	Candidate CandidateReader
}

// CandidateReader reads the candidate state inside the push transaction:
// the push's partition as the transaction sees it. It is the only safe
// way for a validator or a reaction planner to read authoritative state —
// a read of the store from inside the push would wait on the partition's
// writer (SQLite's only writer is the push itself) or miss the push's
// writes. Reads are not restricted to the pushing actor's scopes: the
// validator is the server's own judgement.
type CandidateReader interface {
	// GetRow returns one row and its server version.
	GetRow(ctx context.Context, table, rowID string) (row Row, version int64, ok bool, err error)
	// ScanRows returns rows matching scopeFilter (required) after
	// afterRowID, ascending by row id, at most limit (1..1000, default 100).
	ScanRows(ctx context.Context, table string, scopeFilter map[string][]string, afterRowID string, limit int) ([]Row, error)
	// Query runs a registered authoritative query (REMOTE.md §2) over the
	// candidate state, through the partition-filtered relations of a
	// remote query (p.Partition is set to the push's partition). p comes
	// from the registry that validated its SQL
	// (operations.Registry.QueryCandidate), never from request text. A
	// store whose transactions run no registered queries returns
	// ErrCandidateQueryUnsupported; a failing statement or an unfit value
	// is a *storage.QueryError, which leaves the push usable.
	Query(ctx context.Context, p storage.QueryParams) (storage.QueryResult, error)
}

// ErrCandidateQueryUnsupported is returned by CandidateReader.Query on a
// store whose transactions do not implement storage.TxQuerier.
var ErrCandidateQueryUnsupported = errors.New("the store runs no registered queries inside a push")

// CommitValidator accepts a commit by returning nil and rejects it with a
// *Rejection (attributed to Rejection.OpIndex). Any other error, or a
// panic, rejects the commit with sync.constraint_violation
// ("whole-commit validator failed").
type CommitValidator func(ctx context.Context, v CommitValidation) error

// Rejection is a deliberate validator rejection with a host code.
type Rejection struct {
	// OpIndex attributes a whole-commit rejection to an operation; per-row
	// validators ignore it.
	OpIndex int
	Code    string
	Message string
	// Details are optional recovery hints sent in PUSH_RESULT_DETAILS
	// (SPEC.md §6.3.1): fieldPaths, reason, requiredAction, references.
	Details *RejectionDetails
}

// RejectionDetails is the bounded recovery metadata of a rejection.
type RejectionDetails struct {
	FieldPaths     []string          `json:"fieldPaths,omitempty"`
	Reason         string            `json:"reason,omitempty"`
	RequiredAction string            `json:"requiredAction,omitempty"`
	References     map[string]string `json:"references,omitempty"`
}

func (r *Rejection) Error() string { return "validation rejected: " + r.Code + ": " + r.Message }

// reservedCodePrefixes are the protocol's own code families; host codes
// may not use them (SPEC.md §6.7).
var reservedCodePrefixes = []string{"sync.", "blob.", "operation.", "presence.", "client."}

// ValidateHostCode reports whether code may be used by a host validator.
func ValidateHostCode(code string) error {
	if code == "" {
		return errors.New("a rejection code must not be empty")
	}
	for _, p := range reservedCodePrefixes {
		if strings.HasPrefix(code, p) {
			return fmt.Errorf("rejection code %q uses the reserved prefix %q", code, p)
		}
	}
	return nil
}

// Reject returns a rejection with a host code. It panics when the code is
// reserved: that is a server bug, caught where the code is written.
func Reject(code, message string) *Rejection {
	if err := ValidateHostCode(code); err != nil {
		panic(err)
	}
	return &Rejection{Code: code, Message: message}
}

// toRejection maps a validator's outcome to a commit rejection.
func (e *Engine) toRejection(opIndex int, err error, generic string) *rejection {
	var rj *Rejection
	if !errors.As(err, &rj) || ValidateHostCode(rj.Code) != nil {
		e.log.Warn("validator failed", "err", err)
		return opError(opIndex, ssp2.CodeConstraintViolation, generic)
	}
	msg := rj.Message
	if msg == "" {
		msg = rj.Code
	}
	out := &rejection{result: ssp2.OpResult{OpIndex: int32(opIndex), Status: ssp2.OpError, Code: rj.Code, Message: msg}}
	if rj.Details != nil {
		b, jerr := json.Marshal(rj.Details)
		if jerr != nil || string(b) == "{}" {
			e.log.Error("invalid rejection details", "code", rj.Code, "err", jerr)
			return opError(opIndex, ssp2.CodeConstraintViolation, generic)
		}
		out.details = &ssp2.DetailsEntry{OpIndex: int32(opIndex), DetailsJSON: b}
		if _, verr := encodeRecord(&ssp2.PushResult{ClientCommitID: "x", Status: ssp2.PushRejected, Results: []ssp2.OpResult{out.result}},
			&ssp2.PushResultDetails{ClientCommitID: "x", Entries: []ssp2.DetailsEntry{*out.details}}); verr != nil {
			e.log.Error("rejection details outside the §6.3.1 bounds", "code", rj.Code, "err", verr)
			return opError(opIndex, ssp2.CodeConstraintViolation, generic)
		}
	}
	return out
}

const (
	rowValidatorFailed    = "write validator failed"
	commitValidatorFailed = "whole-commit validator failed"
)

// validateRow runs the table's validator v, if any. A failed candidate
// read is kept in st.cand.err; apply fails the push on it.
func (st *stager) validateRow(ctx context.Context, i int, t *schema.Table, op *ssp2.Operation, row, stored Row, v RowValidator) *rejection {
	if v == nil {
		return nil
	}
	if st.cand == nil {
		st.cand = &candidate{e: st.e, tx: st.tx, partition: st.r.id.Partition}
	}
	r := st.r
	err := callValidator(func() error {
		return v(ctx, RowValidation{Op: op.Op, Table: t.Name, RowID: op.RowID, Row: row, Stored: stored, ActorID: r.id.ActorID, Partition: r.id.Partition, Candidate: st.cand})
	})
	if err == nil {
		return nil
	}
	return st.e.toRejection(i, err, rowValidatorFailed)
}

// validateCommit runs the whole-commit validator cv over the candidate
// state.
func (e *Engine) validateCommit(ctx context.Context, r *request, tx storage.Tx, pc *ssp2.PushCommit, ops []OperationEvidence, cv CommitValidator) (*rejection, error) {
	cand := &candidate{e: e, tx: tx, partition: r.id.Partition}
	err := callValidator(func() error {
		return cv(ctx, CommitValidation{
			ClientID: r.req.Header.ClientID, ClientCommitID: pc.ClientCommitID,
			ActorID: r.id.ActorID, Partition: r.id.Partition,
			Operations: ops, Candidate: cand,
		})
	})
	if cand.err != nil { // the server failed, not the validator
		return nil, internal("candidate read", cand.err)
	}
	if err == nil {
		return nil, nil
	}
	idx := 0
	var rj *Rejection
	if errors.As(err, &rj) {
		if rj.OpIndex < 0 || rj.OpIndex >= len(pc.Operations) {
			e.log.Error("whole-commit rejection names an operation outside the commit", "opIndex", rj.OpIndex)
			return opError(0, ssp2.CodeConstraintViolation, commitValidatorFailed), nil
		}
		idx = rj.OpIndex
	}
	return e.toRejection(idx, err, commitValidatorFailed), nil
}

// callValidator runs a host callback, turning a panic into an error.
func callValidator(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("validator panicked: %v", p)
		}
	}()
	return f()
}

// candidate is the CandidateReader over a push transaction.
type candidate struct {
	e         *Engine
	tx        storage.Tx
	partition string
	err       error
}

func (c *candidate) table(name string) (*schema.Table, error) {
	t, ok := c.e.cfg.Schema.Table(name)
	if !ok {
		return nil, fmt.Errorf("candidate read: unknown table %q", name)
	}
	return t, nil
}

func (c *candidate) GetRow(ctx context.Context, table, rowID string) (Row, int64, bool, error) {
	t, err := c.table(table)
	if err != nil {
		return nil, 0, false, err
	}
	row, ok, err := c.tx.RowGet(ctx, c.partition, table, rowID)
	if err != nil {
		c.err = err
		return nil, 0, false, err
	}
	if !ok {
		return nil, 0, false, nil
	}
	vals, err := t.Codec.DecodeRow(row.Payload, nil)
	if err != nil {
		c.err = err
		return nil, 0, false, err
	}
	return rowMap(t, vals), row.ServerVersion, true, nil
}

func (c *candidate) ScanRows(ctx context.Context, table string, scopeFilter map[string][]string, afterRowID string, limit int) ([]Row, error) {
	t, err := c.table(table)
	if err != nil {
		return nil, err
	}
	if limit == 0 {
		limit = 100
	}
	if limit < 1 || limit > 1000 {
		return nil, ssp2.Errorf(ssp2.CodeStorageInvalidLimit, "scan limit %d is outside 1..1000", limit)
	}
	rows, err := c.tx.RowScan(ctx, storage.ScanParams{Partition: c.partition, Table: table, Scopes: scopeFilter, AfterRowID: afterRowID, Limit: limit})
	if err != nil {
		if ssp2.CodeOf(err) == "" {
			c.err = err
		}
		return nil, err
	}
	out := make([]Row, 0, len(rows))
	var vals []ssp2.Value
	for _, r := range rows {
		if vals, err = t.Codec.DecodeRow(r.Payload, vals[:0]); err != nil {
			c.err = err
			return nil, err
		}
		out = append(out, rowMap(t, vals))
	}
	return out, nil
}

// Query implements CandidateReader over the push transaction
// (storage.TxQuerier).
func (c *candidate) Query(ctx context.Context, p storage.QueryParams) (storage.QueryResult, error) {
	tq, ok := c.tx.(storage.TxQuerier)
	if !ok {
		return storage.QueryResult{}, ErrCandidateQueryUnsupported
	}
	p.Partition = c.partition
	res, err := tq.TxQuery(ctx, p)
	var qe *storage.QueryError
	if err != nil && !errors.As(err, &qe) {
		c.err = err
	}
	return res, err
}

// rowMap renders decoded values by column name, copying byte slices so the
// map outlives the decode buffers.
func rowMap(t *schema.Table, vals []ssp2.Value) Row {
	m := make(Row, len(vals))
	for i, c := range t.Columns {
		v := vals[i]
		if v.Null {
			m[c.Name] = nil
			continue
		}
		switch c.Type {
		case ssp2.TypeString:
			m[c.Name] = string(v.Bytes)
		case ssp2.TypeInteger:
			m[c.Name] = v.Int
		case ssp2.TypeFloat:
			m[c.Name] = v.Float
		case ssp2.TypeBoolean:
			m[c.Name] = v.Bool
		case ssp2.TypeJSON, ssp2.TypeBlobRef:
			m[c.Name] = json.RawMessage(append([]byte(nil), v.Bytes...))
		default:
			m[c.Name] = append([]byte(nil), v.Bytes...)
		}
	}
	return m
}
