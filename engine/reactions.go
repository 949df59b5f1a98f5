package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// ReactionPlanner plans the durable reactions of a new commit (SPEC.md
// §6.9). It runs once per commit, inside the push transaction, after every
// operation and validator accepted the commit and before it is appended;
// it sees what a whole-commit validator sees, including the candidate
// state. It must be pure: it may read the candidate state and return
// data, but it must not send mail, call a webhook, publish a message or
// have any other effect outside the transaction — the reactions it plans
// do that, after the commit is durable.
//
// A returned error (or a panic) aborts the transaction: the push fails
// with sync.internal_error, nothing is persisted, and a later delivery of
// the commit plans again. A plan outside the limits of SPEC.md §6.9
// rejects the commit with one of the Code* reaction codes.
type ReactionPlanner func(ctx context.Context, v CommitValidation) ([]PlannedReaction, error)

// PlannedReaction is one reaction a planner asks for.
type PlannedReaction struct {
	// Key is unique within the commit (1..256 bytes of UTF-8). The stored
	// idempotency key is [partition, clientId, clientCommitId, Key].
	Key string
	// Type names the handler: dot-separated [A-Za-z0-9_-] tokens starting
	// with a letter, at most 128 bytes ("email.send").
	Type string
	// Version is the payload's version (a positive int32); handlers treat
	// versions they do not know as permanent failures.
	Version int32
	// Payload is encoded with encoding/json (a json.RawMessage as is): at
	// most 64 KiB of compact JSON, nested at most 16 deep, with finite
	// numbers.
	Payload any
	// MaxAttempts is 1..100; 0 means storage.DefaultReactionMaxAttempts.
	MaxAttempts int
}

// Push rejection codes of a reaction plan outside the limits. They are
// host codes (no protocol prefix), not retryable: the same commit plans
// the same reactions again.
const (
	CodeReactionTooMany            = "reaction.too_many"
	CodeReactionInvalidKey         = "reaction.invalid_key"
	CodeReactionInvalidType        = "reaction.invalid_type"
	CodeReactionInvalidVersion     = "reaction.invalid_version"
	CodeReactionInvalidPayload     = "reaction.invalid_payload"
	CodeReactionPayloadTooLarge    = "reaction.payload_too_large"
	CodeReactionPayloadTooDeep     = "reaction.payload_too_deep"
	CodeReactionInvalidMaxAttempts = "reaction.invalid_max_attempts"
)

// reactionCodes maps the store's refusal reasons to push codes.
var reactionCodes = map[string]string{
	storage.ReasonReactionCount:       CodeReactionTooMany,
	storage.ReasonReactionKey:         CodeReactionInvalidKey,
	storage.ReasonReactionType:        CodeReactionInvalidType,
	storage.ReasonReactionVersion:     CodeReactionInvalidVersion,
	storage.ReasonReactionPayload:     CodeReactionInvalidPayload,
	storage.ReasonReactionPayloadSize: CodeReactionPayloadTooLarge,
	storage.ReasonReactionDepth:       CodeReactionPayloadTooDeep,
	storage.ReasonReactionAttempts:    CodeReactionInvalidMaxAttempts,
}

// reactionRejection rejects the commit for plan i with the code of reason.
func reactionRejection(i int, reason, msg string) *rejection {
	code, ok := reactionCodes[reason]
	if !ok {
		code = CodeReactionInvalidPayload
	}
	details, _ := json.Marshal(RejectionDetails{Reason: "reaction_" + reason, RequiredAction: "inspect_server"})
	return &rejection{
		result:  ssp2.OpResult{OpIndex: 0, Status: ssp2.OpError, Code: code, Message: fmt.Sprintf("reaction %d: %s", i, msg)},
		details: &ssp2.DetailsEntry{OpIndex: 0, DetailsJSON: details},
	}
}

// planReactions runs the planner and checks its plan. A plan outside the
// limits is a rejection; a failing planner is an error of the server.
func (e *Engine) planReactions(ctx context.Context, r *request, tx storage.Tx, pc *ssp2.PushCommit, ops []OperationEvidence) ([]storage.ReactionNew, *rejection, error) {
	cand := &candidate{e: e, tx: tx, partition: r.id.Partition}
	var plans []PlannedReaction
	err := callValidator(func() (err error) {
		plans, err = e.cfg.ReactionPlanner(ctx, CommitValidation{
			ClientID: r.req.Header.ClientID, ClientCommitID: pc.ClientCommitID,
			ActorID: r.id.ActorID, Partition: r.id.Partition,
			Operations: ops, Candidate: cand,
		})
		return err
	})
	if cand.err != nil {
		return nil, nil, internal("candidate read", cand.err)
	}
	if err != nil {
		return nil, nil, internal("reaction planner", err)
	}
	if len(plans) == 0 {
		return nil, nil, nil
	}
	if len(plans) > storage.MaxReactionsPerCommit {
		return nil, reactionRejection(storage.MaxReactionsPerCommit, storage.ReasonReactionCount,
			fmt.Sprintf("%d reactions exceed %d per commit", len(plans), storage.MaxReactionsPerCommit)), nil
	}
	out := make([]storage.ReactionNew, len(plans))
	keys := make(map[string]bool, len(plans))
	for i, p := range plans {
		if p.Key == "" || len(p.Key) > storage.MaxReactionKeyBytes || !utf8.ValidString(p.Key) {
			return nil, reactionRejection(i, storage.ReasonReactionKey,
				fmt.Sprintf("key must be 1..%d bytes of UTF-8", storage.MaxReactionKeyBytes)), nil
		}
		if keys[p.Key] {
			return nil, reactionRejection(i, storage.ReasonReactionKey, fmt.Sprintf("key %q is planned twice", p.Key)), nil
		}
		keys[p.Key] = true
		attempts := p.MaxAttempts
		if attempts == 0 {
			attempts = storage.DefaultReactionMaxAttempts
		}
		if attempts < 1 || attempts > storage.MaxReactionAttempts {
			return nil, reactionRejection(i, storage.ReasonReactionAttempts,
				fmt.Sprintf("maxAttempts %d is outside 1..%d", p.MaxAttempts, storage.MaxReactionAttempts)), nil
		}
		payload, err := json.Marshal(p.Payload)
		if err != nil {
			return nil, reactionRejection(i, storage.ReasonReactionPayload, "payload does not encode as JSON"), nil
		}
		out[i] = storage.ReactionNew{
			IdempotencyKey: storage.ReactionIdempotencyKey(r.id.Partition, r.req.Header.ClientID, pc.ClientCommitID, p.Key),
			Type:           p.Type, Version: p.Version, Payload: payload, MaxAttempts: int32(attempts),
		}
		if err := out[i].Validate(); err != nil {
			msg := err.Error()
			var se *ssp2.Error
			if errors.As(err, &se) {
				msg = se.Message
			}
			return nil, reactionRejection(i, storage.ReactionErrorReason(err), msg), nil
		}
	}
	return out, nil, nil
}
