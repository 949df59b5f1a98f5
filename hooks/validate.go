package hooks

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
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
	// Timeout bounds one request (default DefaultValidateTimeout).
	Timeout time.Duration
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
	c caller
	m *Metrics
}

// NewValidator validates cfg and returns the hook client.
func NewValidator(cfg ValidateConfig) (*Validator, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Validator{c: caller{nc: cfg.Conn, hook: bus.HookValidate, timeout: cfg.Timeout, m: cfg.Metrics}, m: cfg.Metrics}, nil
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
	if err := v.c.call(ctx, bus.HookValidateSubject(p), req, &r); err != nil {
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
