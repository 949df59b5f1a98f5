package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/syncnode/syncnode/internal/ids"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// errEpochChanged aborts a request whose partition log epoch rotated
// while it ran: nothing may be written under the old epoch.
var errEpochChanged = ssp2.Errorf(ssp2.CodeInternalError, "the partition's log epoch changed during the request")

// push processes one PUSH_COMMIT and writes its PUSH_RESULT (SPEC.md §6).
// appended reports whether a new commit landed in the log.
func (e *Engine) push(ctx context.Context, r *request, pc *ssp2.PushCommit) (appended bool, err error) {
	key := pc.ClientCommitID
	if err := ids.Check("the client commit id", key); err != nil {
		// Not even a key to store a rejection under.
		return false, e.refuse(r, key, ssp2.CodeInvalidRequest, err.Error())
	}
	if rec, ok := r.done[key]; ok {
		return false, e.replay(r, key, rec)
	}
	if rec, ok := r.forwarded[key]; ok {
		// Applied (or rejected) at the partition's home just now: answer
		// it as this node would have.
		r.done[key] = rec
		return false, e.answer(r, rec)
	}
	if e.failLookup.CompareAndSwap(true, false) {
		return false, e.cacheMiss(r, key, "the idempotency lookup of this commit failed (injected)")
	}
	rec, ok, err := e.lookup(ctx, r, key)
	if err != nil {
		return false, internal("idempotency lookup", err)
	}
	if ok {
		if foreign(r, rec) {
			return false, e.refuse(r, key, ssp2.CodeInvalidClientID, "this commit id holds another actor's commit")
		}
		r.done[key] = rec
		return false, e.replay(r, key, rec)
	}
	if r.remote {
		return false, e.homeMiss(r, key)
	}

	var (
		out      applied
		replayed bool
	)
	err = e.writeTx(ctx, r.id.Partition, pushRows(pc), func(tx storage.Tx) error {
		if err := r.ticket.Check(ctx, tx); err != nil {
			return internal("serve gate", err)
		}
		if tx.Locked().LogEpoch != r.part.LogEpoch {
			return errEpochChanged
		}
		rec, ok, err := tx.IdempotencyGet(ctx, r.req.Header.ClientID, key)
		if err != nil {
			return internal("locked idempotency lookup", err)
		}
		if ok { // another delivery won the race while we waited for the lock
			out, replayed = applied{rec: rec}, true
			return nil
		}
		out, err = e.apply(ctx, r, tx, pc)
		return err
	})
	if err != nil {
		return false, err
	}
	if replayed && foreign(r, out.rec) {
		return false, e.refuse(r, key, ssp2.CodeInvalidClientID, "this commit id holds another actor's commit")
	}
	e.enqueued(r.id.Partition, &out)
	r.done[key] = out.rec
	if replayed {
		return false, e.replay(r, key, out.rec)
	}
	if out.appended {
		e.metrics.Commits.Add(1)
		if e.cfg.OnAppend != nil {
			reactions := 0
			if out.enqueued != nil {
				reactions = len(out.enqueued.Reactions)
			}
			e.cfg.OnAppend(r.id.Partition, r.part.LogEpoch, out.commit, reactions)
		}
	}
	if out.res != nil {
		// The result just stored, as the record's bytes would decode.
		err = e.send(r, out.res, nil)
	} else {
		err = e.answer(r, out.rec)
	}
	if err != nil {
		return false, err
	}
	return out.appended, nil
}

// writeTx is Store.WriteTx, naming the rows fn will read to a store that
// reads them ahead (storage.RowPrefetcher).
func (e *Engine) writeTx(ctx context.Context, partition string, rows []storage.RowRef, fn func(tx storage.Tx) error) error {
	if rp, ok := e.cfg.Store.(storage.RowPrefetcher); ok && len(rows) > 0 {
		return rp.WriteTxRows(ctx, partition, rows, fn)
	}
	return e.cfg.Store.WriteTx(ctx, partition, fn)
}

// pushRows names the rows a commit's operations read first.
func pushRows(pc *ssp2.PushCommit) []storage.RowRef {
	rows := make([]storage.RowRef, 0, len(pc.Operations))
	for _, op := range pc.Operations {
		if op.Table != "" && op.RowID != "" {
			rows = append(rows, storage.RowRef{Table: op.Table, RowID: op.RowID})
		}
	}
	return rows
}

// answer writes the result of a commit just processed, as stored.
func (e *Engine) answer(r *request, rec storage.PushRecord) error {
	res, details, err := decodeRecord(rec)
	if err != nil {
		return internal("decode push result", err)
	}
	return e.send(r, res, details)
}

// send writes a commit's result in the request's wire version.
func (e *Engine) send(r *request, res *ssp2.PushResult, details *ssp2.PushResultDetails) error {
	fitWire(res, r.req.WireVersion)
	e.countPush(res)
	if err := r.enc.WriteFrame(res); err != nil {
		return err
	}
	if details != nil {
		return r.enc.WriteFrame(details)
	}
	return nil
}

// lookup is the optimistic idempotency lookup of a commit id that
// ids.Check passed: from the request's first read when the store made it
// (prepare), else from the store.
func (e *Engine) lookup(ctx context.Context, r *request, key string) (storage.PushRecord, bool, error) {
	if r.looked {
		rec, ok := r.pushes[key]
		return rec, ok, nil
	}
	return e.cfg.Store.IdempotencyGet(ctx, r.id.Partition, r.req.Header.ClientID, key)
}

// lookupIDs returns the commit ids of a request that can be looked up
// (push refuses the others before any lookup); a repeated id is harmless.
func lookupIDs(commits []*ssp2.PushCommit) []string {
	if len(commits) == 0 {
		return nil
	}
	out := make([]string, 0, len(commits))
	for _, c := range commits {
		if ids.Check("the client commit id", c.ClientCommitID) == nil {
			out = append(out, c.ClientCommitID)
		}
	}
	return out
}

// foreign reports whether a stored result belongs to another actor's
// commit: it is never replayed to this one. (A client id binds to one
// actor, but an epoch rotation frees client ids and keeps results.)
// Records too old to name their actor are trusted.
func foreign(r *request, rec storage.PushRecord) bool {
	return rec.ActorID != "" && rec.ActorID != r.id.ActorID
}

// refuse answers a commit that cannot even be looked up or stored under
// its key with a rejection that is not persisted: the same input is
// refused the same way every time.
func (e *Engine) refuse(r *request, key string, code ssp2.Code, msg string) error {
	res := &ssp2.PushResult{ClientCommitID: key, Status: ssp2.PushRejected, Results: []ssp2.OpResult{opError(0, code, msg).result}}
	e.countPush(res)
	return r.enc.WriteFrame(res)
}

// enqueued reports a durable commit's reactions to OnReactions, and to
// OnSilentReactions when no commit event will announce them.
func (e *Engine) enqueued(partition string, a *applied) {
	if a.enqueued == nil {
		return
	}
	if e.cfg.OnReactions != nil {
		e.cfg.OnReactions(partition, *a.enqueued)
	}
	if len(a.commit.Changes) == 0 && e.cfg.OnSilentReactions != nil {
		e.cfg.OnSilentReactions(partition)
	}
}

func (e *Engine) countPush(res *ssp2.PushResult) {
	switch res.Status {
	case ssp2.PushApplied:
		e.metrics.PushApplied.Add(1)
	case ssp2.PushCached:
		e.metrics.PushCached.Add(1)
	case ssp2.PushRejected:
		e.metrics.PushRejected.Add(1)
		for _, o := range res.Results {
			if o.Status == ssp2.OpConflict {
				e.metrics.PushConflicted.Add(1)
			}
		}
	}
}

// cacheMiss answers a commit with the retryable
// sync.idempotency_cache_miss, persisting nothing (SPEC.md §6.3): the
// client keeps the commit queued and sends it again.
func (e *Engine) cacheMiss(r *request, key, msg string) error {
	e.metrics.PushRejected.Add(1)
	return r.enc.WriteFrame(&ssp2.PushResult{
		ClientCommitID: key,
		Status:         ssp2.PushRejected,
		Results: []ssp2.OpResult{{
			OpIndex: 0, Status: ssp2.OpError,
			Code: string(ssp2.CodeIdempotencyCacheMiss), Message: msg, Retryable: true,
		}},
	})
}

// FailNextIdempotencyLookup makes the next optimistic idempotency lookup
// fail, answering that commit with sync.idempotency_cache_miss: a fault
// hook for the test-control surface (POST faults/idempotency-lookup).
func (e *Engine) FailNextIdempotencyLookup() { e.failLookup.Store(true) }

// replay writes a persisted result again: applied becomes cached, a
// rejection replays as itself; an unreadable record answers
// sync.idempotency_cache_miss without persisting anything (SPEC.md §6.3).
func (e *Engine) replay(r *request, key string, rec storage.PushRecord) error {
	res, details, err := decodeRecord(rec)
	if err != nil {
		e.log.Error("stored push result unreadable", "partition", r.id.Partition, "clientCommitId", key, "err", err)
		return e.cacheMiss(r, key, "the stored result of this commit could not be read")
	}
	if res.Status == ssp2.PushApplied {
		res.Status = ssp2.PushCached
	}
	fitWire(res, r.req.WireVersion)
	e.countPush(res)
	if err := r.enc.WriteFrame(res); err != nil {
		return err
	}
	if details != nil {
		return r.enc.WriteFrame(details)
	}
	return nil
}

// rejection is the terminating result of a commit that will not apply.
type rejection struct {
	result  ssp2.OpResult
	details *ssp2.DetailsEntry
}

func opError(i int, code ssp2.Code, msg string) *rejection {
	info, _ := code.Info()
	return &rejection{result: ssp2.OpResult{OpIndex: int32(i), Status: ssp2.OpError, Code: string(code), Message: msg, Retryable: info.Retryable}}
}

// applied is what apply did with a new commit: its stored result,
// whether it went into the log, and the reactions it enqueued.
type applied struct {
	rec storage.PushRecord
	// res is the applied result rec holds, decoded as its bytes would
	// (TestAppliedResultAsStored): push sends it without decoding the
	// record it just encoded. Nil for a rejection, sent from rec.
	res      *ssp2.PushResult
	appended bool
	commit   storage.Commit // the appended commit, when appended
	enqueued *storage.ReactionEnqueueParams
}

// apply runs one new commit under the partition lock and persists its
// result in the same transaction. A rejected commit's writes are rolled
// back to a savepoint and its rejection stored while the lock is still
// held (SPEC.md §6.4, §6.8). An applied commit's planned reactions are
// written with it (§6.9). An applied commit that changed nothing and
// planned nothing is not appended to the log.
func (e *Engine) apply(ctx context.Context, r *request, tx storage.Tx, pc *ssp2.PushCommit) (applied, error) {
	sp, err := tx.Savepoint(ctx)
	if err != nil {
		return applied{}, internal("savepoint", err)
	}
	// One validator set serves the whole commit, even if SetValidators
	// swaps it meanwhile.
	vs := e.validators.Load()
	st := stager{e: e, r: r, tx: tx, vs: vs}
	changes, evidence, rej, err := st.stage(ctx, pc)
	if err != nil {
		return applied{}, err
	}
	if st.cand != nil && st.cand.err != nil { // the server failed, not the validator
		return applied{}, internal("candidate read", st.cand.err)
	}
	if rej == nil && vs.commit != nil {
		rej, err = e.validateCommit(ctx, r, tx, pc, evidence, vs.commit)
		if err != nil {
			return applied{}, err
		}
	}
	var planned []storage.ReactionNew
	if rej == nil && e.cfg.ReactionPlanner != nil {
		if planned, rej, err = e.planReactions(ctx, r, tx, pc, evidence); err != nil {
			return applied{}, err
		}
	}
	rec := storage.PushRecord{
		ClientID:       r.req.Header.ClientID,
		ClientCommitID: pc.ClientCommitID,
		ActorID:        r.id.ActorID,
		CreatedAtMs:    r.now,
	}
	if rej != nil {
		if err := sp.Rollback(ctx); err != nil {
			return applied{}, internal("roll back rejected commit", err)
		}
		res := &ssp2.PushResult{ClientCommitID: pc.ClientCommitID, Status: ssp2.PushRejected, Results: []ssp2.OpResult{rej.result}}
		var details *ssp2.PushResultDetails
		if rej.details != nil {
			details = &ssp2.PushResultDetails{ClientCommitID: pc.ClientCommitID, Entries: []ssp2.DetailsEntry{*rej.details}}
		}
		rec.Status = storage.PushRejected
		if rec.Result, err = encodeRecord(res, details); err != nil {
			return applied{}, internal("encode push result", err)
		}
		stored, err := tx.IdempotencyPut(ctx, rec)
		if err != nil {
			return applied{}, internal("persist rejection", err)
		}
		return applied{rec: stored}, nil
	}
	if err := sp.Release(ctx); err != nil {
		return applied{}, internal("release savepoint", err)
	}
	// A commit whose every operation deleted an absent row changed
	// nothing and emits nothing (SPEC.md §6.2); logging it would let an
	// actor whose grants cover nothing grow the log without limit. It is
	// applied at the head seq, where its empty effect is visible. Only an
	// empty log, which has no head (commitSeq ≥ 1, §2.1), appends it, and
	// a commit that planned reactions, whose source it is (§6.9).
	var out applied
	seq := tx.Locked().MaxCommitSeq
	if len(changes) > 0 || len(planned) > 0 || seq == 0 {
		seq, err = tx.CommitAppend(ctx, storage.CommitParams{
			CreatedAtMs:    r.now,
			ActorID:        r.id.ActorID,
			ClientID:       r.req.Header.ClientID,
			ClientCommitID: pc.ClientCommitID,
			SchemaVersion:  e.cfg.Schema.Version,
			Changes:        changes,
		})
		if err != nil {
			return applied{}, internal("append commit", err)
		}
		out.appended = true
		out.commit = storage.Commit{CommitSeq: seq, CreatedAtMs: r.now, ActorID: r.id.ActorID,
			ClientID: r.req.Header.ClientID, ClientCommitID: pc.ClientCommitID,
			SchemaVersion: e.cfg.Schema.Version, Changes: changes}
	}
	if len(planned) > 0 {
		out.enqueued = &storage.ReactionEnqueueParams{
			SourceClientID: r.req.Header.ClientID, SourceClientCommitID: pc.ClientCommitID,
			SourceCommitSeq: seq, CreatedAtMs: r.now, Reactions: planned,
		}
		if err := tx.ReactionEnqueue(ctx, *out.enqueued); err != nil {
			return applied{}, internal("enqueue reactions", err)
		}
	}
	res := appliedResult(pc, seq)
	rec.Status, rec.CommitSeq = storage.PushApplied, seq
	if rec.Result, err = encodeRecord(res, nil); err != nil {
		return applied{}, internal("encode push result", err)
	}
	if out.rec, err = tx.IdempotencyPut(ctx, rec); err != nil {
		return applied{}, internal("persist push result", err)
	}
	if bytes.Equal(out.rec.Result, rec.Result) {
		// Ours, not an earlier writer's (IdempotencyPut keeps the first).
		out.res = res
	}
	return out, nil
}

// appliedResult is the PUSH_RESULT of a commit applied at seq.
func appliedResult(pc *ssp2.PushCommit, seq int64) *ssp2.PushResult {
	results := make([]ssp2.OpResult, len(pc.Operations))
	for i := range results {
		results[i] = ssp2.OpResult{OpIndex: int32(i), Status: ssp2.OpApplied}
	}
	return &ssp2.PushResult{ClientCommitID: pc.ClientCommitID, Status: ssp2.PushApplied, CommitSeq: &seq, Results: results}
}

// stager applies a commit's operations inside the write transaction.
type stager struct {
	e       *Engine
	r       *request
	tx      storage.Tx
	vs      *validatorSet
	vals    []ssp2.Value
	stored  []ssp2.Value
	payload []byte
	// cand is the row validators' candidate reader, made on first use.
	cand *candidate
	// Wire version 3 and reference enforcement (v3push.go,
	// references.go): rows this commit deleted, the staged changes of
	// reference tables, and scratch.
	deleted    map[rowKey]bool
	refs       refState
	merged     []ssp2.Value
	versions   []int64
	versionBuf []byte
}

// stage applies every operation in order, stopping at the first that does
// not apply. It returns the changes to log and the evidence for the
// whole-commit validator, or the terminating rejection. err is reserved
// for failures of the server itself.
func (st *stager) stage(ctx context.Context, pc *ssp2.PushCommit) ([]storage.Change, []OperationEvidence, *rejection, error) {
	changes := make([]storage.Change, 0, len(pc.Operations))
	var evidence []OperationEvidence
	wantEvidence := st.wantsEvidence()
	for i := range pc.Operations {
		op := &pc.Operations[i]
		ch, ev, rej, err := st.stageAny(ctx, i, op)
		if err != nil || rej != nil {
			return nil, nil, rej, err
		}
		if ch != nil {
			changes = append(changes, *ch)
		}
		if wantEvidence {
			evidence = append(evidence, ev)
		}
	}
	more, moreEvidence, rej, err := st.enforceReferences(ctx)
	if err != nil || rej != nil {
		return nil, nil, rej, err
	}
	changes = append(changes, more...)
	if wantEvidence {
		evidence = append(evidence, moreEvidence...)
	}
	return changes, evidence, nil, nil
}

// wantsEvidence reports whether anything reads the commit's operation
// evidence: a whole-commit validator or the reaction planner.
func (st *stager) wantsEvidence() bool {
	return st.vs.commit != nil || st.e.cfg.ReactionPlanner != nil
}

// wantsRows reports whether an operation's rows must be decoded by column
// name: for its table's row validator, or for the evidence.
func (st *stager) wantsRows(validator RowValidator) bool {
	return validator != nil || st.wantsEvidence()
}

func (st *stager) stageOp(ctx context.Context, i int, op *ssp2.Operation) (*storage.Change, OperationEvidence, *rejection, error) {
	ev := OperationEvidence{OpIndex: i, Op: op.Op, Table: op.Table, RowID: op.RowID}
	t, ok := st.e.cfg.Schema.Table(op.Table)
	if !ok {
		return nil, ev, opError(i, ssp2.CodeUnknownTable, fmt.Sprintf("unknown table %q", op.Table)), nil
	}
	if rej := checkRowID(i, op.RowID); rej != nil {
		return nil, ev, rej, nil
	}
	// Decoded rows by column name are built only for validators.
	validator := st.vs.rows[t.Name]
	want := st.wantsRows(validator)
	var vals []ssp2.Value
	if op.Op == ssp2.OpUpsert {
		var err error
		if vals, err = t.Codec.DecodeRow(op.Payload, st.vals[:0]); err != nil {
			return nil, ev, opError(i, ssp2.CodeInvalidRequest, "the payload does not decode with this table's row codec"), nil
		}
		st.vals = vals
		rid, err := t.RowID(vals)
		if err != nil || rid != op.RowID {
			return nil, ev, opError(i, ssp2.CodeInvalidRequest, "rowId does not match the payload's primary key"), nil
		}
		if rej := checkStrings(i, t, vals); rej != nil {
			return nil, ev, rej, nil
		}
	}
	stored, exists, err := st.tx.RowGet(ctx, st.r.id.Partition, t.Name, op.RowID)
	if err != nil {
		return nil, ev, nil, internal("read row", err)
	}
	if exists {
		v := stored.ServerVersion
		ev.StoredServerVersion = &v
		if st.stored, err = t.Codec.DecodeRow(stored.Payload, st.stored[:0]); err != nil {
			return nil, ev, nil, internal("decode stored row", err)
		}
		if want {
			ev.Stored = rowMap(t, st.stored)
		}
	}

	if op.Op == ssp2.OpDelete {
		if !exists { // idempotent: no authorization, no change (SPEC.md §6.2)
			return nil, ev, nil, nil
		}
		if len(stored.Scopes) == 0 {
			return nil, ev, opError(i, ssp2.CodeMissingScopes, "the stored row has no scopes"), nil
		}
		if !st.r.scopes.authorizes(t, stored.Scopes) {
			return nil, ev, opError(i, ssp2.CodeForbidden, "forbidden"), nil
		}
		if rej := st.validateRow(ctx, i, t, op, nil, ev.Stored, validator); rej != nil {
			return nil, ev, rej, nil
		}
		if _, err := st.tx.RowDelete(ctx, t.Name, op.RowID); err != nil {
			return nil, ev, nil, internal("delete row", err)
		}
		return &storage.Change{Table: t.Name, RowID: op.RowID, Op: storage.OpDelete, Scopes: stored.Scopes}, ev, nil, nil
	}

	payload := op.Payload
	var scopes map[string]string
	if exists {
		if len(stored.Scopes) == 0 {
			return nil, ev, opError(i, ssp2.CodeMissingScopes, "the stored row has no scopes"), nil
		}
		if !st.r.scopes.authorizes(t, stored.Scopes) {
			return nil, ev, opError(i, ssp2.CodeForbidden, "forbidden"), nil
		}
		if op.BaseVersion != nil && *op.BaseVersion != stored.ServerVersion {
			return nil, ev, &rejection{result: ssp2.OpResult{
				OpIndex: int32(i), Status: ssp2.OpConflict,
				Code: string(ssp2.CodeVersionConflict), Message: "version conflict",
				ServerVersion: stored.ServerVersion, ServerRow: stored.Payload,
			}}, nil
		}
		// Scope columns are immutable on update: the stored values win
		// (SPEC.md §3.4 step 5). A differing value is replaced, not refused.
		changed := false
		for _, sc := range t.Scopes {
			if !sameValue(vals[sc.ColumnIndex], st.stored[sc.ColumnIndex]) {
				vals[sc.ColumnIndex] = st.stored[sc.ColumnIndex]
				changed = true
			}
		}
		merged, rej := st.e.mergeCrdt(i, t, vals, st.stored, nil)
		if rej != nil {
			return nil, ev, rej, nil
		}
		if changed || merged {
			if payload, err = t.Codec.AppendRow(st.payload[:0], vals); err != nil {
				return nil, ev, nil, internal("encode row", err)
			}
			st.payload = payload
		}
		scopes = stored.Scopes
	} else {
		var ok bool
		scopes, _, ok = t.StoredScopes(vals)
		if !ok || !st.r.scopes.authorizes(t, scopes) {
			return nil, ev, opError(i, ssp2.CodeForbidden, "forbidden"), nil
		}
		if rej := checkScopeValues(i, scopes); rej != nil {
			return nil, ev, rej, nil
		}
		if op.BaseVersion != nil && *op.BaseVersion != 0 {
			return nil, ev, opError(i, ssp2.CodeRowMissing, "the row does not exist"), nil
		}
		merged, rej := st.e.mergeCrdt(i, t, vals, nil, nil)
		if rej != nil {
			return nil, ev, rej, nil
		}
		if merged {
			if payload, err = t.Codec.AppendRow(st.payload[:0], vals); err != nil {
				return nil, ev, nil, internal("encode row", err)
			}
			st.payload = payload
		}
	}
	if want {
		ev.Row = rowMap(t, vals)
	}
	if rej := st.validateRow(ctx, i, t, op, ev.Row, ev.Stored, validator); rej != nil {
		return nil, ev, rej, nil
	}
	if rej, err := st.checkBlobs(ctx, i, t, vals); err != nil || rej != nil {
		return nil, ev, rej, err
	}
	version, err := st.tx.RowUpsert(ctx, t.Name, storage.RowWrite{RowID: op.RowID, Values: vals, Scopes: scopes, Payload: payload})
	if err != nil {
		var ce *storage.ConstraintError
		if errors.As(err, &ce) {
			st.e.log.Info("push refused by a database constraint", "table", t.Name, "kind", ce.Kind)
			return nil, ev, opError(i, ssp2.CodeConstraintViolation, "constraint violation"), nil
		}
		return nil, ev, nil, internal("write row", err)
	}
	next := version
	ev.NextServerVersion = &next
	// The change keeps its own copy: the staging buffers are reused.
	row := append([]byte(nil), payload...)
	return &storage.Change{Table: t.Name, RowID: op.RowID, Op: storage.OpUpsert, RowVersion: version, Scopes: scopes, Row: row}, ev, nil, nil
}

// checkRowID, checkStrings and checkScopeValues refuse, in every wire
// version, what the stores cannot hold (package ids): the rejection is
// persisted like any other, so the commit does not block the outbox.
func checkRowID(i int, rowID string) *rejection {
	if err := ids.Check("the row id", rowID); err != nil {
		return opError(i, ssp2.CodeInvalidRequest, err.Error())
	}
	return nil
}

// checkStrings refuses a string value holding U+0000; absent columns of
// a sparse row hold no bytes.
func checkStrings(i int, t *schema.Table, vals []ssp2.Value) *rejection {
	for ci, c := range t.Columns {
		if c.Type == ssp2.TypeString && !vals[ci].Null && !ids.Storable(vals[ci].Bytes) {
			return opError(i, ssp2.CodeInvalidRequest, fmt.Sprintf("column %q contains U+0000", c.Name))
		}
	}
	return nil
}

func checkScopeValues(i int, scopes map[string]string) *rejection {
	for k, v := range scopes {
		if err := ids.Check("the value of scope "+k, v); err != nil {
			return opError(i, ssp2.CodeInvalidRequest, err.Error())
		}
	}
	return nil
}

// mergeCrdt replaces every pushed crdt value with merge(stored, incoming)
// (SPEC.md §5.10.3); with present set, only those of present columns.
// merged reports whether any value changed.
func (e *Engine) mergeCrdt(i int, t *schema.Table, vals, stored []ssp2.Value, present ssp2.ColumnBitmap) (merged bool, rej *rejection) {
	for ci, c := range t.Columns {
		if c.Type != ssp2.TypeCrdt || vals[ci].Null || present != nil && !present.Has(ci) {
			continue
		}
		m := e.cfg.Mergers[c.CrdtType]
		if m == nil {
			return false, opError(i, ssp2.CodeCrdtMergeFailed, "CRDT merger failed")
		}
		var prev []byte
		if stored != nil && !stored[ci].Null {
			prev = stored[ci].Bytes
		}
		out, err := safeMerge(m, prev, vals[ci].Bytes)
		if err != nil {
			e.log.Warn("crdt merger failed", "table", t.Name, "column", c.Name, "err", err)
			return false, opError(i, ssp2.CodeCrdtMergeFailed, "CRDT merger failed")
		}
		vals[ci].Bytes = out
		merged = true
	}
	return merged, nil
}

func safeMerge(m CrdtMerger, stored, incoming []byte) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("merger panicked: %v", p)
		}
	}()
	return m(stored, incoming)
}

// sameValue compares two values of one column's type.
func sameValue(a, b ssp2.Value) bool {
	if a.Null || b.Null {
		return a.Null == b.Null
	}
	return a.Int == b.Int && a.Bool == b.Bool && string(a.Bytes) == string(b.Bytes) &&
		(a.Float == b.Float || a.Float != a.Float && b.Float != b.Float)
}

// encodeRecord stores a push result as a small SSP2 response message:
// RESP_HEADER, PUSH_RESULT, optional PUSH_RESULT_DETAILS, END, of wire
// version 1, or 3 for a conflict with conflictColumns (recordEnvelope).
// Replays decode it back, so the bytes the client sees are the ones
// persisted.
func encodeRecord(res *ssp2.PushResult, details *ssp2.PushResultDetails) ([]byte, error) {
	version, hdr := recordEnvelope(res)
	m := &ssp2.Message{WireVersion: version, Kind: ssp2.KindResponse, Frames: []ssp2.Frame{hdr, res}}
	if details != nil {
		m.Frames = append(m.Frames, details)
	}
	return m.AppendEncode(nil)
}

func decodeRecord(rec storage.PushRecord) (*ssp2.PushResult, *ssp2.PushResultDetails, error) {
	m, err := ssp2.DecodeMessage(rec.Result)
	if err != nil {
		return nil, nil, err
	}
	var res *ssp2.PushResult
	var details *ssp2.PushResultDetails
	for _, f := range m.Frames {
		switch f := f.(type) {
		case *ssp2.PushResult:
			res = f
		case *ssp2.PushResultDetails:
			details = f
		}
	}
	if res == nil || res.ClientCommitID != rec.ClientCommitID {
		return nil, nil, errors.New("stored result does not hold this commit's PUSH_RESULT")
	}
	return res, details, nil
}
