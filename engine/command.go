package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/syncnode/syncnode/internal/ids"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Command is a server command of REMOTE.md §3: a commit the server builds
// for an authenticated actor, through the ordinary push pipeline with the
// actor's resolved scopes (scope authorization, validators, references,
// the commit log, the idempotency record, reactions, OnCommit). Its
// idempotency key is (Identity.Partition, ClientID, ClientCommitID); the
// operations package derives both from the caller's ids.
type Command struct {
	Identity Identity
	// CallerClientID is the client id the caller supplied: it is bound to
	// the actor like any request's, and an id bound to another actor or
	// carrying the reserved prefix is refused (sync.invalid_client_id).
	CallerClientID string
	ClientID       string
	ClientCommitID string
	// Operations builds the commit. It runs inside the commit's write
	// transaction, holding the partition lock, after the locked
	// idempotency re-check, and reads rows through r (only rows the
	// actor's resolved scopes authorize). An error rolls back and is
	// returned as a *CommandError; no operations is ErrEmptyCommand.
	Operations func(ctx context.Context, r CommandReader) ([]ssp2.Operation, error)
	// Rows are the rows Operations will probably read (a NATS command's
	// declared reads): a store that reads rows ahead
	// (storage.RowPrefetcher) reads them with the lock. Optional.
	Rows []storage.RowRef
}

// CommandReader reads the locked partition's rows for a command, inside
// the command's transaction: what it reads is what the commit is judged
// against, and a read through it never waits on the writer the command
// is (a store read from inside the command would, on SQLite).
type CommandReader interface {
	// GetRow returns one row, ok=false when it is absent or its scopes
	// are not granted to the actor.
	GetRow(ctx context.Context, table, rowID string) (row Row, ok bool, err error)
	// Allowed returns the actor's resolved scopes, the ones the command's
	// writes are authorized by; a failed resolution is sync.forbidden
	// (fail closed).
	Allowed() (Allowed, error)
	// Query runs a registered authoritative query (REMOTE.md §2) over the
	// transaction's state, as CandidateReader.Query does (p.Partition is
	// set to the command's partition). The caller authorizes p first:
	// the operations package restricts a scoped query's relations to
	// covered values it checked against Allowed. A store whose
	// transactions run no registered queries returns
	// ErrCandidateQueryUnsupported; a failing statement is a
	// *storage.QueryError, which leaves the command usable.
	Query(ctx context.Context, p storage.QueryParams) (storage.QueryResult, error)
}

// CommandResult is a command's outcome: applied, or a stored result
// replayed (cached, or rejected again).
type CommandResult struct {
	Status    ssp2.PushStatus // PushApplied, PushCached or PushRejected
	CommitSeq int64           // applied and cached
	Results   []ssp2.OpResult
}

// CommandError is a failure of a command's own Operations: a request
// failure, never a stored outcome.
type CommandError struct{ Err error }

func (e *CommandError) Error() string { return "command failed: " + e.Err.Error() }
func (e *CommandError) Unwrap() error { return e.Err }

// ErrEmptyCommand is returned when Operations returned no operations.
var ErrEmptyCommand = errors.New("the command returned no operations")

// CheckCallerClientID refuses a caller-supplied client id that an
// ordinary request would refuse, or that carries the prefix reserved for
// command keys.
func CheckCallerClientID(id string) error {
	if strings.HasPrefix(id, reservedClientIDPrefix) {
		return ssp2.Errorf(ssp2.CodeInvalidClientID, "client ids starting with %s are reserved for server commands", reservedClientIDPrefix)
	}
	if err := ids.Check("the client id", id); err != nil {
		return ssp2.Errorf(ssp2.CodeInvalidClientID, "%v", err)
	}
	return nil
}

// AdmitCaller binds the caller's client id to the actor, as every
// request does (refusing an id bound to another actor), then admits it
// as Admit does, with one read of the partition and client records: the
// entry of a registered query.
func (e *Engine) AdmitCaller(ctx context.Context, id Identity, clientID string) error {
	if err := checkIdentity(id); err != nil {
		return err
	}
	if err := CheckCallerClientID(clientID); err != nil {
		return err
	}
	if err := e.guardRemote(ctx, id.Partition, false); err != nil {
		return err
	}
	part, c, ok, err := e.cfg.Store.PartitionTouchClient(ctx, id.Partition, clientID, e.nowMs())
	if err != nil {
		return internal("touch partition", err)
	}
	if err := e.bindCaller(ctx, id, clientID, c, ok); err != nil {
		return err
	}
	_, err = e.admit(ctx, part)
	return err
}

// CheckCaller checks an identity and a caller's client id as AdmitCaller
// does, without reading anything: a registered query refuses a bad
// caller before it runs (AdmitRead admits it after).
func CheckCaller(id Identity, clientID string) error {
	if err := checkIdentity(id); err != nil {
		return err
	}
	return CheckCallerClientID(clientID)
}

// AdmitRead is AdmitCaller for a caller that read the partition row and
// its client record itself (a registered query reads them in its own
// snapshot, storage.QueryResult.Start; hasPartition false when there was
// no row): a current partition row and a record bound to the actor are
// admitted with no read of the engine's own; otherwise it takes
// AdmitCaller's path, which creates or refreshes the row and binds the
// client. Neither write changes what the caller read: a partition
// without a row has no commits, and a bind or a last-seen time is no
// application row.
func (e *Engine) AdmitRead(ctx context.Context, id Identity, clientID string, st storage.RequestStart, hasPartition bool) error {
	if err := CheckCaller(id, clientID); err != nil {
		return err
	}
	if !hasPartition || !st.HasClient || st.Partition.LastSeenMs < e.nowMs()-storage.TouchGranularityMs {
		return e.AdmitCaller(ctx, id, clientID)
	}
	if err := e.bindCaller(ctx, id, clientID, st.Client, true); err != nil {
		return err
	}
	_, err := e.admit(ctx, st.Partition)
	return err
}

// bindCaller completes a bind after the read of the client record c
// (ok: it exists, in a partition that exists).
func (e *Engine) bindCaller(ctx context.Context, id Identity, clientID string, c storage.Client, ok bool) error {
	if !ok {
		var err error
		c, err = e.cfg.Store.ClientBind(ctx, storage.Client{Partition: id.Partition, ClientID: clientID, ActorID: id.ActorID,
			WireVersion: 2, Cursor: -1, UpdatedAtMs: e.nowMs()})
		if err != nil {
			return internal("bind client id", err)
		}
	}
	if c.ActorID != id.ActorID {
		return ssp2.Errorf(ssp2.CodeInvalidClientID, "client id is bound to another actor")
	}
	return nil
}

// ResolveAllowed resolves an identity's allowed scopes the way a request
// does; a failed resolution fails closed with sync.forbidden.
func (e *Engine) ResolveAllowed(ctx context.Context, id Identity) (Allowed, error) {
	rs, err := resolve(ctx, id.Scopes, e.cfg.Schema, id.Partition, id.ActorID)
	if err != nil {
		return nil, err
	}
	if rs.err != nil {
		e.log.Warn("scope resolution failed; failing closed", "partition", id.Partition, "actor", id.ActorID, "err", rs.err)
		return nil, ssp2.Errorf(ssp2.CodeForbidden, "scope resolution failed")
	}
	return rs.allowed, nil
}

// Admit admits a request of the partition through the serve gate, as
// every sync request is (registering the partition on first touch).
func (e *Engine) Admit(ctx context.Context, partition string) error {
	if err := e.guardRemote(ctx, partition, false); err != nil {
		return err
	}
	part, err := e.cfg.Store.PartitionTouch(ctx, partition, e.nowMs())
	if err != nil {
		return internal("touch partition", err)
	}
	_, err = e.admit(ctx, part)
	return err
}

// PushCommand runs one command. A stored result of the key is replayed
// without running Operations: applied as cached, a rejection as itself.
func (e *Engine) PushCommand(ctx context.Context, c Command) (CommandResult, error) {
	if c.Operations == nil || c.ClientID == "" || c.ClientCommitID == "" {
		return CommandResult{}, errors.New("push command: Operations, ClientID and ClientCommitID are required")
	}
	for _, id := range []struct{ what, v string }{{"the client id", c.ClientID}, {"the client commit id", c.ClientCommitID}} {
		if err := ids.Check(id.what, id.v); err != nil {
			return CommandResult{}, ssp2.Errorf(ssp2.CodeInvalidRequest, "%v", err)
		}
	}
	if err := CheckCaller(c.Identity, c.CallerClientID); err != nil {
		return CommandResult{}, err
	}
	if err := e.guardRemote(ctx, c.Identity.Partition, true); err != nil {
		return CommandResult{}, err
	}
	now := e.nowMs()
	st, err := e.commandStart(ctx, c, now, false)
	if err == nil && st.Cached && st.HasClient && st.Client.ActorID != c.Identity.ActorID {
		// A refusal is answered only on what the database says.
		st, err = e.commandStart(ctx, c, now, true)
	}
	if err != nil {
		return CommandResult{}, err
	}
	part := st.Partition
	if err := e.bindCaller(ctx, c.Identity, c.CallerClientID, st.Client, st.HasClient); err != nil {
		return CommandResult{}, err
	}
	ticket, err := e.admit(ctx, part)
	if err != nil {
		return CommandResult{}, err
	}
	rs, err := resolve(ctx, c.Identity.Scopes, e.cfg.Schema, c.Identity.Partition, c.Identity.ActorID)
	if err != nil {
		return CommandResult{}, err
	}
	r := &request{
		id:     c.Identity,
		req:    &ssp2.Request{WireVersion: 2, Header: &ssp2.ReqHeader{ClientID: c.ClientID, SchemaVersion: e.cfg.Schema.Version}},
		part:   part,
		scopes: rs,
		ticket: ticket,
		now:    now,
	}
	replay := func(rec storage.PushRecord) (CommandResult, error) {
		if foreign(r, rec) {
			return CommandResult{}, ssp2.Errorf(ssp2.CodeInvalidClientID, "this command key holds another actor's commit")
		}
		out, err := commandResult(rec)
		if out.Status == ssp2.PushApplied {
			out.Status = ssp2.PushCached
		}
		return out, err
	}
	if rec, ok := st.Pushes[c.ClientCommitID]; ok {
		e.metrics.PushCached.Add(1)
		return replay(rec)
	}
	var (
		done     applied
		replayed *storage.PushRecord
	)
	err = e.writeTx(ctx, part.ID, c.Rows, func(tx storage.Tx) error {
		if err := ticket.Check(ctx, tx); err != nil {
			return internal("serve gate", err)
		}
		if tx.Locked().LogEpoch != part.LogEpoch {
			return errEpochChanged
		}
		if rec, ok, err := tx.IdempotencyGet(ctx, c.ClientID, c.ClientCommitID); err != nil {
			return internal("locked idempotency lookup", err)
		} else if ok {
			replayed = &rec
			return nil
		}
		rd := &commandReader{e: e, tx: tx, r: r}
		ops, err := c.Operations(ctx, rd)
		if rd.err != nil {
			// The store failed under a read: the transaction is not
			// usable whatever the command made of the error.
			return internal("command read", rd.err)
		}
		if err != nil {
			return &CommandError{Err: err}
		}
		if len(ops) == 0 {
			return ErrEmptyCommand
		}
		if len(ops) > *e.cfg.MaxOperations {
			return ssp2.Errorf(ssp2.CodeTooManyOperations, "%d operations exceed the cap of %d per request", len(ops), *e.cfg.MaxOperations)
		}
		pc := &ssp2.PushCommit{ClientCommitID: c.ClientCommitID, Operations: ops}
		if rp, ok := tx.(storage.TxRowPrefetcher); ok && len(ops) > 1 {
			// The rows the operations read first, in one round trip
			// rather than one each (a push names them ahead; a command
			// knows them only now).
			if err := rp.PrefetchRows(ctx, pushRows(pc)); err != nil {
				return internal("read rows ahead", err)
			}
		}
		done, err = e.apply(ctx, r, tx, pc)
		return err
	})
	if err != nil {
		return CommandResult{}, err
	}
	if replayed != nil {
		e.metrics.PushCached.Add(1)
		return replay(*replayed)
	}
	e.enqueued(part.ID, &done)
	if done.appended {
		e.metrics.Commits.Add(1)
		e.notify(part.ID)
	}
	out, err := commandResult(done.rec)
	if err == nil {
		if out.Status == ssp2.PushApplied {
			e.metrics.PushApplied.Add(1)
		} else {
			e.metrics.PushRejected.Add(1)
		}
	}
	return out, err
}

// commandStart reads what a command starts with — the partition row
// (touched), the caller's client record and the optimistic lookup of the
// command's key — in one read on a storage.RequestStarter, as a sync
// request's start is read (engine.start). A start the store's cache
// answered holds no result (storage.RequestStart): the locked re-check
// finds a stored one.
func (e *Engine) commandStart(ctx context.Context, c Command, now int64, fresh bool) (st storage.RequestStart, err error) {
	p := c.Identity.Partition
	if rs, ok := e.cfg.Store.(storage.RequestStarter); ok {
		st, err = rs.RequestStart(ctx, storage.RequestStartParams{Partition: p, ClientID: c.CallerClientID,
			PushClientID: c.ClientID, CommitIDs: []string{c.ClientCommitID}, NowMs: now, Fresh: fresh})
		if err != nil {
			return st, internal("start command", err)
		}
		if st.Cached {
			e.metrics.StartsCached.Add(1)
		}
		return st, nil
	}
	if st.Partition, st.Client, st.HasClient, err = e.cfg.Store.PartitionTouchClient(ctx, p, c.CallerClientID, now); err != nil {
		return st, internal("touch partition", err)
	}
	rec, ok, err := e.cfg.Store.IdempotencyGet(ctx, p, c.ClientID, c.ClientCommitID)
	if err != nil {
		return st, internal("idempotency lookup", err)
	}
	if ok {
		st.Pushes = map[string]storage.PushRecord{c.ClientCommitID: rec}
	}
	return st, nil
}

func commandResult(rec storage.PushRecord) (CommandResult, error) {
	res, _, err := decodeRecord(rec)
	if err != nil {
		return CommandResult{}, internal("decode push result", err)
	}
	out := CommandResult{Status: res.Status, Results: res.Results}
	if res.CommitSeq != nil {
		out.CommitSeq = *res.CommitSeq
	}
	return out, nil
}

// commandReader is a CommandReader over the command's transaction.
type commandReader struct {
	e   *Engine
	tx  storage.Tx
	r   *request
	err error // a store failure under a registered query
}

func (c *commandReader) Allowed() (Allowed, error) {
	if c.r.scopes.err != nil {
		return nil, ssp2.Errorf(ssp2.CodeForbidden, "scope resolution failed")
	}
	return c.r.scopes.allowed, nil
}

func (c *commandReader) Query(ctx context.Context, p storage.QueryParams) (storage.QueryResult, error) {
	tq, ok := c.tx.(storage.TxQuerier)
	if !ok {
		return storage.QueryResult{}, ErrCandidateQueryUnsupported
	}
	p.Partition = c.r.id.Partition
	res, err := tq.TxQuery(ctx, p)
	var qe *storage.QueryError
	if err != nil && !errors.As(err, &qe) {
		c.err = err
	}
	return res, err
}

func (c *commandReader) GetRow(ctx context.Context, table, rowID string) (Row, bool, error) {
	t, ok := c.e.cfg.Schema.Table(table)
	if !ok {
		return nil, false, fmt.Errorf("get row: unknown table %q", table)
	}
	row, ok, err := c.tx.RowGet(ctx, c.r.id.Partition, table, rowID)
	if err != nil || !ok {
		return nil, false, err
	}
	if !c.r.scopes.authorizes(t, row.Scopes) {
		return nil, false, nil
	}
	vals, err := t.Codec.DecodeRow(row.Payload, nil)
	if err != nil {
		return nil, false, err
	}
	return rowMap(t, vals), true, nil
}
