package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncnode/syncnode/internal/ids"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// AuthoritativeCommit is a server-authoritative write: a commit the
// server makes on its own behalf (a backfill batch, a migration step),
// through the ordinary push pipeline — row reads, conflict rules,
// validators, the commit log, the idempotency record, the relay — with
// every scope granted. Its idempotency key is (Partition, ClientID,
// ClientCommitID): a replay returns the stored result and applies
// nothing.
type AuthoritativeCommit struct {
	Partition string
	// ActorID is recorded as the commit's actor.
	ActorID        string
	ClientID       string
	ClientCommitID string
	// Operations returns the commit's operations. It runs inside the
	// commit's write transaction, holding the partition lock, after the
	// serve gate passed and before the operations are staged: what it
	// reads and writes through tx (a checkpoint advance, say) commits or
	// rolls back with the commit. An error rolls everything back and is
	// returned. No operations commits tx's own writes and appends no
	// commit.
	Operations func(ctx context.Context, tx storage.Tx) ([]ssp2.Operation, error)
}

// AuthoritativeResult is the outcome of an applied authoritative commit.
type AuthoritativeResult struct {
	// Applied is false when Operations returned none (or on a replay of a
	// commit that applied nothing).
	Applied bool
	// Replayed is true when the key was already stored: nothing ran.
	Replayed  bool
	CommitSeq int64
}

// RejectedError is returned when an authoritative commit's operation was
// refused (a conflict, a validator, a constraint): the whole transaction,
// Operations' own writes included, is rolled back and nothing is stored
// under the key, so a corrected retry can use it.
type RejectedError struct {
	Result ssp2.OpResult
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("authoritative commit rejected at operation %d: %s: %s", e.Result.OpIndex, e.Result.Code, e.Result.Message)
}

// PushAuthoritative applies one server-authoritative commit. The serve
// gate admits it and checks it again inside its transaction, like a
// client's push.
func (e *Engine) PushAuthoritative(ctx context.Context, c AuthoritativeCommit) (AuthoritativeResult, error) {
	if c.Operations == nil || c.ClientID == "" || c.ClientCommitID == "" {
		return AuthoritativeResult{}, errors.New("push authoritative: Operations, ClientID and ClientCommitID are required")
	}
	for _, id := range []struct{ what, v string }{{"the partition id", c.Partition}, {"the actor id", c.ActorID},
		{"the client id", c.ClientID}, {"the client commit id", c.ClientCommitID}} {
		if err := ids.Check(id.what, id.v); err != nil {
			return AuthoritativeResult{}, fmt.Errorf("push authoritative: %w", err)
		}
	}
	if err := e.guardRemote(ctx, c.Partition, true); err != nil {
		return AuthoritativeResult{}, err
	}
	part, err := e.cfg.Store.PartitionTouch(ctx, c.Partition, e.nowMs())
	if err != nil {
		return AuthoritativeResult{}, fmt.Errorf("push authoritative: %w", err)
	}
	ticket, err := e.admit(ctx, part)
	if err != nil {
		return AuthoritativeResult{}, err
	}
	r := &request{
		id:     Identity{Partition: c.Partition, ActorID: c.ActorID},
		req:    &ssp2.Request{WireVersion: 2, Header: &ssp2.ReqHeader{ClientID: c.ClientID, SchemaVersion: e.cfg.Schema.Version}},
		part:   part,
		scopes: e.everyScope(),
		ticket: ticket,
		now:    e.nowMs(),
	}
	if rec, ok, err := e.cfg.Store.IdempotencyGet(ctx, c.Partition, c.ClientID, c.ClientCommitID); err != nil {
		return AuthoritativeResult{}, fmt.Errorf("push authoritative: %w", err)
	} else if ok {
		return replayed(c, rec)
	}
	var (
		out  AuthoritativeResult
		done applied
	)
	err = e.cfg.Store.WriteTx(ctx, c.Partition, func(tx storage.Tx) error {
		if err := ticket.Check(ctx, tx); err != nil {
			return err
		}
		if tx.Locked().LogEpoch != part.LogEpoch {
			return errEpochChanged
		}
		if rec, ok, err := tx.IdempotencyGet(ctx, c.ClientID, c.ClientCommitID); err != nil {
			return err
		} else if ok {
			out, err = replayed(c, rec)
			return err
		}
		ops, err := c.Operations(ctx, tx)
		if err != nil || len(ops) == 0 {
			return err
		}
		done, err = e.apply(ctx, r, tx, &ssp2.PushCommit{ClientCommitID: c.ClientCommitID, Operations: ops})
		if err != nil {
			return err
		}
		if rec := done.rec; rec.Status == storage.PushRejected {
			res, _, derr := decodeRecord(rec)
			if derr != nil || len(res.Results) == 0 {
				return fmt.Errorf("rejected, and the result is unreadable: %w", derr)
			}
			return &RejectedError{Result: res.Results[len(res.Results)-1]}
		}
		out = AuthoritativeResult{Applied: true, CommitSeq: done.rec.CommitSeq}
		return nil
	})
	if err != nil {
		var rej *RejectedError
		if errors.As(err, &rej) || notReady(err) {
			return AuthoritativeResult{}, err
		}
		return AuthoritativeResult{}, fmt.Errorf("push authoritative: %w", err)
	}
	if out.Applied && !out.Replayed {
		e.metrics.PushApplied.Add(1)
	}
	e.enqueued(c.Partition, &done)
	if done.appended {
		e.metrics.Commits.Add(1)
		e.notify(c.Partition)
	}
	return out, nil
}

// ErrForeignCommit is returned by PushAuthoritative when its key holds the
// stored result of another actor's commit (a client pushed under the
// server's client id first): that result is not this commit's.
var ErrForeignCommit = errors.New("the idempotency key holds another actor's commit")

func replayed(c AuthoritativeCommit, rec storage.PushRecord) (AuthoritativeResult, error) {
	if rec.ActorID != "" && rec.ActorID != c.ActorID {
		return AuthoritativeResult{}, ErrForeignCommit
	}
	return AuthoritativeResult{Applied: rec.Status == storage.PushApplied, Replayed: true, CommitSeq: rec.CommitSeq}, nil
}

// everyScope grants every scope variable of the schema: an authoritative
// write is authorized by the server itself.
func (e *Engine) everyScope() resolvedScopes {
	allowed := Allowed{}
	for _, t := range e.cfg.Schema.Tables {
		for _, s := range t.Scopes {
			allowed[s.Variable] = []string{Wildcard}
		}
	}
	return resolvedScopes{allowed: allowed}
}
