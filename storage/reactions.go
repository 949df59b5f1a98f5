package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/syncnode/syncnode/ssp2"
)

// ReactionStore is the SQL half of durable reactions (package reactions,
// SPEC.md §6.9): follow-up work planned inside a push transaction and run
// at least once afterwards.
//
// A reaction is keyed by (partition, idempotency key) and moves
//
//	pending ──claim──▶ leased ──complete──▶ completed
//	   ▲                 │ │
//	   └──fail (retry)───┘ └──fail (final)──▶ dead-letter ──retry──▶ pending
//
// A claim hands due pending rows and rows whose lease expired to a fresh
// owner token and increments their attempts; complete, extend and fail
// change a row only while that token still holds its lease, so a runner
// whose lease expired and was reclaimed cannot touch the row any more.
// Completed and dead-lettered rows are terminal until an operator retries
// a dead letter or pruning removes aged terminal rows. The table lives
// outside the commit log: commit-log pruning never touches it.
//
// None of these methods takes a partition lock; reactions are enqueued
// only by the push transaction (ReactionEnqueuer).
type ReactionStore interface {
	// ReactionClaim leases up to p.Limit rows to p.Owner in one atomic
	// statement: due pending rows (AvailableAtMs ≤ NowMs) and leased rows
	// whose lease expired (LeaseExpiresAtMs ≤ NowMs), oldest due first.
	// Each claimed row gets status leased, attempts + 1 and a lease until
	// NowMs + LeaseMs. Concurrent claims, in this process or another on
	// the same database, get disjoint rows. An expired lease whose
	// attempts already reached MaxAttempts is not claimed again: it is
	// dead-lettered with code ReactionCodeLeaseExpired and returned in
	// DeadLettered (a reaction that kills its runner every time must not
	// run forever). Parameters outside their ranges are refused with
	// CodeStorageInvalidLimit or CodeStorageInvalidReaction.
	ReactionClaim(ctx context.Context, p ReactionClaimParams) (ReactionClaimResult, error)

	// ReactionComplete marks each leased row completed at p.NowMs if its
	// lease owner is still the given one, in one transaction. done[i]
	// reports whether p.Leases[i] was completed.
	ReactionComplete(ctx context.Context, p ReactionCompleteParams) (done []bool, err error)

	// ReactionExtend moves the lease expiry of each row to p.UntilMs if
	// its lease owner is still the given one (a heartbeat). ok[i] reports
	// whether p.Leases[i] is still held.
	ReactionExtend(ctx context.Context, p ReactionExtendParams) (ok []bool, err error)

	// ReactionFail records a failed attempt if the lease owner is still
	// p.Owner: the row becomes dead-letter when p.DeadLetter is set or its
	// attempts reached MaxAttempts, else pending again at p.RetryAtMs. The
	// lease is released either way. It returns the new status and
	// ok=false (changing nothing) when the lease was lost.
	ReactionFail(ctx context.Context, p ReactionFailParams) (status ReactionStatus, ok bool, err error)

	// ReactionRetry is the operator's retry of a dead letter: the row
	// becomes pending and due at nowMs, with attempts 0 and no failure. It
	// reports false, changing nothing, for a row that is absent or not
	// dead-lettered.
	ReactionRetry(ctx context.Context, key ReactionKey, nowMs int64) (bool, error)

	// ReactionGet returns one row.
	ReactionGet(ctx context.Context, key ReactionKey) (Reaction, bool, error)

	// ReactionList returns rows matching every given filter, newest first
	// (by creation time, then partition and key, descending), at most
	// p.Limit (1..MaxReactionBatch).
	ReactionList(ctx context.Context, p ReactionListParams) ([]Reaction, error)

	// ReactionPrune deletes at most p.Limit terminal rows: completed rows
	// completed strictly before CompletedBeforeMs and dead letters whose
	// failure is strictly older than DeadLetterBeforeMs. It never deletes
	// a pending or leased row, expired leases included, and serializes
	// with ReactionRetry: a dead letter being retried is either deleted or
	// retried, never both.
	ReactionPrune(ctx context.Context, p ReactionPruneParams) (ReactionPruneResult, error)

	// ReactionCounts counts the rows of every partition by status.
	ReactionCounts(ctx context.Context) (ReactionCounts, error)
}

// ReactionEnqueuer writes reactions in a push transaction. Every Tx
// implements it, so the reactions commit or roll back with their source
// commit.
type ReactionEnqueuer interface {
	// ReactionEnqueue inserts p.Reactions as pending rows of the locked
	// partition, due at p.CreatedAtMs. A row whose idempotency key already
	// exists is left as it is. Invalid input (see ReactionNew.Validate,
	// more than MaxReactionsPerCommit rows) is refused with
	// CodeStorageInvalidReaction before anything is written.
	ReactionEnqueue(ctx context.Context, p ReactionEnqueueParams) error
}

// ReactionStatus is a reaction's state (SPEC.md §6.9).
type ReactionStatus string

// Reaction states.
const (
	ReactionPending    ReactionStatus = "pending"
	ReactionLeased     ReactionStatus = "leased"
	ReactionCompleted  ReactionStatus = "completed"
	ReactionDeadLetter ReactionStatus = "dead-letter"
)

// ReactionStatuses lists every state, in lifecycle order.
var ReactionStatuses = []ReactionStatus{ReactionPending, ReactionLeased, ReactionCompleted, ReactionDeadLetter}

// Valid reports whether s is one of the four states.
func (s ReactionStatus) Valid() bool {
	switch s {
	case ReactionPending, ReactionLeased, ReactionCompleted, ReactionDeadLetter:
		return true
	}
	return false
}

// Limits of SPEC.md §6.9.
const (
	// MaxReactionsPerCommit bounds the reactions one commit plans.
	MaxReactionsPerCommit = 100
	// MaxReactionKeyBytes bounds a planner key (unique within a commit).
	MaxReactionKeyBytes = 256
	// MaxReactionTypeBytes bounds a type, and a failure code.
	MaxReactionTypeBytes = 128
	// MaxReactionPayloadBytes bounds a payload's compact JSON.
	MaxReactionPayloadBytes = 64 << 10
	// MaxReactionJSONDepth bounds the nesting of arrays and objects in a
	// payload or failure details.
	MaxReactionJSONDepth = 16
	// MaxReactionAttempts bounds MaxAttempts (1..100).
	MaxReactionAttempts = 100
	// DefaultReactionMaxAttempts is the MaxAttempts of a plan that sets none.
	DefaultReactionMaxAttempts = 10
	// MaxReactionFailureDetailsBytes bounds a failure's details.
	MaxReactionFailureDetailsBytes = 8 << 10
	// MaxReactionBatch bounds the limits of claim, list, prune and the
	// leases of one complete or extend.
	MaxReactionBatch = 1000
)

// ReactionCodeLeaseExpired is the failure code of a reaction dead-lettered
// by ReactionClaim: its last attempt's lease expired without an outcome.
const ReactionCodeLeaseExpired = "reaction.lease_expired"

// ReactionKey names a reaction.
type ReactionKey struct {
	Partition string
	// IdempotencyKey is the JSON array [partition, clientId,
	// clientCommitId, key] (ReactionIdempotencyKey), passed to handlers
	// so the systems they call can collapse repeated deliveries.
	IdempotencyKey string
}

// Reaction is a stored reaction.
type Reaction struct {
	ReactionKey
	Type    string
	Version int32
	// Payload is compact JSON.
	Payload              json.RawMessage
	SourceClientID       string
	SourceClientCommitID string
	SourceCommitSeq      int64
	CreatedAtMs          int64
	// AvailableAtMs is when a pending row is due (its retry time after a
	// failure); for a dead letter, the time it was dead-lettered.
	AvailableAtMs int64
	Status        ReactionStatus
	// Attempts counts claims since creation or the last operator retry.
	Attempts    int32
	MaxAttempts int32
	// LeaseOwner and LeaseExpiresAtMs are set while leased.
	LeaseOwner       string
	LeaseExpiresAtMs int64
	// CompletedAtMs is set once completed.
	CompletedAtMs int64
	// Failure is the last failed attempt, nil when none (or after an
	// operator retry).
	Failure *ReactionFailure
}

// ReactionFailure is a persisted failure: a stable code, its time and
// optional bounded details; never exception text.
type ReactionFailure struct {
	Code string `json:"code"`
	AtMs int64  `json:"atMs"`
	// Details is a JSON object of at most MaxReactionFailureDetailsBytes,
	// or nil.
	Details json.RawMessage `json:"details,omitempty"`
}

// ReactionNew is a reaction to enqueue.
type ReactionNew struct {
	IdempotencyKey string
	Type           string
	Version        int32
	Payload        json.RawMessage
	MaxAttempts    int32
}

// ReactionEnqueueParams are the reactions of one applied commit.
type ReactionEnqueueParams struct {
	SourceClientID       string
	SourceClientCommitID string
	SourceCommitSeq      int64
	CreatedAtMs          int64
	Reactions            []ReactionNew
}

// ReactionLease is a row and the owner token that claimed it.
type ReactionLease struct {
	ReactionKey
	Owner string
}

// ReactionClaimParams selects the rows of one claim.
type ReactionClaimParams struct {
	// Partition restricts the claim to one partition unless
	// AllPartitions is set.
	Partition     string
	AllPartitions bool
	// Types restricts the claim to these types; nil claims every type.
	Types []string
	// Owner is the fresh lease-owner token of this claim (non-empty, at
	// most 256 bytes).
	Owner   string
	NowMs   int64
	LeaseMs int64 // positive
	Limit   int   // 1..MaxReactionBatch
}

// ReactionClaimResult is what one claim changed.
type ReactionClaimResult struct {
	// Claimed are leased to the claim's owner, oldest due first.
	Claimed []Reaction
	// DeadLettered are expired leases of a final attempt, dead-lettered
	// instead of claimed.
	DeadLettered []Reaction
}

// ReactionCompleteParams completes a batch of leases.
type ReactionCompleteParams struct {
	Leases []ReactionLease // at most MaxReactionBatch
	NowMs  int64
}

// ReactionExtendParams extends a batch of leases.
type ReactionExtendParams struct {
	Leases  []ReactionLease // at most MaxReactionBatch
	UntilMs int64
}

// ReactionFailParams records one failed attempt.
type ReactionFailParams struct {
	ReactionLease
	Failure ReactionFailure
	// DeadLetter ends the reaction now (a permanent failure); otherwise
	// it is retried at RetryAtMs unless its attempts are exhausted.
	DeadLetter bool
	RetryAtMs  int64
}

// ReactionListParams filters a listing.
type ReactionListParams struct {
	Partition     string
	AllPartitions bool
	// Statuses and Types restrict the listing; nil means any.
	Statuses []ReactionStatus
	Types    []string
	Limit    int // 1..MaxReactionBatch
}

// ReactionPruneParams bounds one pruning pass.
type ReactionPruneParams struct {
	Partition          string
	AllPartitions      bool
	CompletedBeforeMs  int64
	DeadLetterBeforeMs int64
	Limit              int // 1..MaxReactionBatch
}

// ReactionPruneResult reports one pruning pass.
type ReactionPruneResult struct {
	Completed  int64
	DeadLetter int64
	// MayHaveMore is set when the pass hit its limit.
	MayHaveMore bool
}

// ReactionCounts are row counts by status.
type ReactionCounts struct {
	Pending, Leased, Completed, DeadLetter int64
}

// Add counts n rows of status s (for Store implementations).
func (c *ReactionCounts) Add(s ReactionStatus, n int64) {
	switch s {
	case ReactionPending:
		c.Pending += n
	case ReactionLeased:
		c.Leased += n
	case ReactionCompleted:
		c.Completed += n
	case ReactionDeadLetter:
		c.DeadLetter += n
	}
}

// ReactionIdempotencyKey is the stored idempotency key of a planned
// reaction: the JSON array [partition, clientId, clientCommitId, key],
// strings written as JavaScript's JSON.stringify writes them, so the key
// is the same byte string a Syncular server derives.
func ReactionIdempotencyKey(partition, clientID, clientCommitID, key string) string {
	b := make([]byte, 0, len(partition)+len(clientID)+len(clientCommitID)+len(key)+12)
	b = append(b, '[')
	for i, s := range [...]string{partition, clientID, clientCommitID, key} {
		if i > 0 {
			b = append(b, ',')
		}
		b = ssp2.AppendJSONString(b, s)
	}
	return string(append(b, ']'))
}

// Reasons in the Details of CodeStorageInvalidReaction; the engine
// turns them into push rejection codes.
const (
	ReasonReactionKey         = "key"
	ReasonReactionType        = "type"
	ReasonReactionVersion     = "version"
	ReasonReactionPayload     = "payload"
	ReasonReactionPayloadSize = "payload_size"
	ReasonReactionDepth       = "payload_depth"
	ReasonReactionAttempts    = "max_attempts"
	ReasonReactionCount       = "count"
	ReasonReactionFailure     = "failure"
	ReasonReactionParams      = "params"
)

// ReactionError is a reaction refused by the limits of SPEC.md §6.9, with
// the reason (Reason*) that says which.
func ReactionError(reason, format string, args ...any) error {
	e := ssp2.Errorf(ssp2.CodeStorageInvalidReaction, format, args...)
	e.Details, _ = json.Marshal(map[string]string{"reason": reason})
	return e
}

// ReactionErrorReason returns the reason of a ReactionError, or "".
func ReactionErrorReason(err error) string {
	var e *ssp2.Error
	if !errors.As(err, &e) || e.Code != ssp2.CodeStorageInvalidReaction {
		return ""
	}
	var d struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(e.Details, &d)
	return d.Reason
}

// Validate checks r against the limits of SPEC.md §6.9: a non-empty
// idempotency key, a type (CheckReactionType), a positive version, a
// payload of compact-enough, shallow-enough JSON, and MaxAttempts in
// 1..MaxReactionAttempts. It returns a ReactionError.
func (r *ReactionNew) Validate() error {
	if r.IdempotencyKey == "" || !utf8.ValidString(r.IdempotencyKey) {
		return ReactionError(ReasonReactionKey, "reaction idempotency key must be non-empty UTF-8")
	}
	if err := CheckReactionType(r.Type); err != nil {
		return err
	}
	if r.Version < 1 {
		return ReactionError(ReasonReactionVersion, "reaction %s: version %d is not a positive int32", r.Type, r.Version)
	}
	if r.MaxAttempts < 1 || r.MaxAttempts > MaxReactionAttempts {
		return ReactionError(ReasonReactionAttempts, "reaction %s: maxAttempts %d is outside 1..%d", r.Type, r.MaxAttempts, MaxReactionAttempts)
	}
	return CheckReactionJSON(r.Payload, MaxReactionPayloadBytes, false)
}

// Validate checks a failure: a code of the type grammar, and details that
// are absent or a JSON object of at most MaxReactionFailureDetailsBytes.
func (f *ReactionFailure) Validate() error {
	if !validDottedName(f.Code) {
		return ReactionError(ReasonReactionFailure, "failure code %q is not a code-like name of at most %d bytes", f.Code, MaxReactionTypeBytes)
	}
	if f.Details == nil {
		return nil
	}
	if err := CheckReactionJSON(f.Details, MaxReactionFailureDetailsBytes, true); err != nil {
		return ReactionError(ReasonReactionFailure, "failure details: %v", err)
	}
	return nil
}

// CheckReactionType refuses a type that is not a code-like name: 1 to
// MaxReactionTypeBytes bytes, dot-separated tokens of [A-Za-z0-9_-]
// starting with a letter ("email.send", "charge_card"). Types name NATS
// subjects (one token per dotted part), so nothing else is allowed.
func CheckReactionType(t string) error {
	if !validDottedName(t) {
		return ReactionError(ReasonReactionType, "reaction type %q is not dot-separated [A-Za-z0-9_-] tokens starting with a letter, at most %d bytes", t, MaxReactionTypeBytes)
	}
	return nil
}

func validDottedName(s string) bool {
	if s == "" || len(s) > MaxReactionTypeBytes {
		return false
	}
	if c := s[0]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
		return false
	}
	prev := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if prev == '.' || i == len(s)-1 {
				return false
			}
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
		prev = c
	}
	return true
}

// CheckReactionJSON refuses b unless it is one JSON value (an object
// when object is set) of at most maxBytes bytes, with arrays and objects
// nested at most MaxReactionJSONDepth deep.
func CheckReactionJSON(b []byte, maxBytes int, object bool) error {
	if len(b) > maxBytes {
		return ReactionError(ReasonReactionPayloadSize, "JSON of %d bytes exceeds %d", len(b), maxBytes)
	}
	if !json.Valid(b) {
		return ReactionError(ReasonReactionPayload, "not a JSON value")
	}
	if d := jsonDepth(b); d > MaxReactionJSONDepth {
		return ReactionError(ReasonReactionDepth, "JSON nested %d deep exceeds %d", d, MaxReactionJSONDepth)
	}
	if object {
		for _, c := range b {
			if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
				continue
			}
			if c != '{' {
				return ReactionError(ReasonReactionPayload, "not a JSON object")
			}
			break
		}
	}
	return nil
}

// jsonDepth is the deepest nesting of arrays and objects in valid JSON.
func jsonDepth(b []byte) int {
	depth, deepest := 0, 0
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ']', '}':
			depth--
		}
	}
	return deepest
}

// CheckReactionLimit refuses a batch limit outside 1..MaxReactionBatch.
func CheckReactionLimit(op string, n int) error {
	if n < 1 || n > MaxReactionBatch {
		return ssp2.Errorf(ssp2.CodeStorageInvalidLimit, "%s: limit %d outside 1..%d", op, n, MaxReactionBatch)
	}
	return nil
}

// Validate checks a claim's parameters.
func (p *ReactionClaimParams) Validate() error {
	if err := CheckReactionLimit("claim reactions", p.Limit); err != nil {
		return err
	}
	if p.LeaseMs < 1 {
		return ssp2.Errorf(ssp2.CodeStorageInvalidLimit, "claim reactions: lease %d ms is not positive", p.LeaseMs)
	}
	if p.Owner == "" || len(p.Owner) > 256 {
		return ReactionError(ReasonReactionParams, "claim reactions: owner token must be 1..256 bytes")
	}
	for _, t := range p.Types {
		if err := CheckReactionType(t); err != nil {
			return err
		}
	}
	return nil
}

// checkLeases refuses an empty owner or more leases than MaxReactionBatch.
func checkLeases(op string, ls []ReactionLease) error {
	if len(ls) > MaxReactionBatch {
		return ssp2.Errorf(ssp2.CodeStorageInvalidLimit, "%s: %d leases exceed %d", op, len(ls), MaxReactionBatch)
	}
	for _, l := range ls {
		if l.Owner == "" {
			return ReactionError(ReasonReactionParams, "%s: empty lease owner", op)
		}
	}
	return nil
}

// Validate checks a completion batch.
func (p *ReactionCompleteParams) Validate() error { return checkLeases("complete reactions", p.Leases) }

// Validate checks an extension batch.
func (p *ReactionExtendParams) Validate() error { return checkLeases("extend reactions", p.Leases) }

// Validate checks a failure record.
func (p *ReactionFailParams) Validate() error {
	if err := checkLeases("fail reaction", []ReactionLease{p.ReactionLease}); err != nil {
		return err
	}
	return p.Failure.Validate()
}

// Validate checks a listing's filters.
func (p *ReactionListParams) Validate() error {
	if err := CheckReactionLimit("list reactions", p.Limit); err != nil {
		return err
	}
	for _, s := range p.Statuses {
		if !s.Valid() {
			return ReactionError(ReasonReactionParams, "list reactions: unknown status %q", s)
		}
	}
	for _, t := range p.Types {
		if err := CheckReactionType(t); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks a pruning pass.
func (p *ReactionPruneParams) Validate() error { return CheckReactionLimit("prune reactions", p.Limit) }

// Validate checks an enqueue batch: at most MaxReactionsPerCommit valid
// reactions with distinct keys.
func (p *ReactionEnqueueParams) Validate() error {
	if len(p.Reactions) > MaxReactionsPerCommit {
		return ReactionError(ReasonReactionCount, "%d reactions exceed %d per commit", len(p.Reactions), MaxReactionsPerCommit)
	}
	seen := make(map[string]bool, len(p.Reactions))
	for i := range p.Reactions {
		r := &p.Reactions[i]
		if err := r.Validate(); err != nil {
			return fmt.Errorf("reaction %d: %w", i, err)
		}
		if seen[r.IdempotencyKey] {
			return ReactionError(ReasonReactionKey, "reaction %d: duplicate idempotency key", i)
		}
		seen[r.IdempotencyKey] = true
	}
	return nil
}
