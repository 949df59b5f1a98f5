package engine

import (
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
	rec, ok, err := e.cfg.Store.IdempotencyGet(ctx, r.id.Partition, r.req.Header.ClientID, key)
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

	var out storage.PushRecord
	replayed, appended := false, false
	err = e.cfg.Store.WriteTx(ctx, r.id.Partition, func(tx storage.Tx) error {
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
			out, replayed = rec, true
			return nil
		}
		out, appended, err = e.apply(ctx, r, tx, pc)
		return err
	})
	if err != nil {
		return false, err
	}
	if replayed && foreign(r, out) {
		return false, e.refuse(r, key, ssp2.CodeInvalidClientID, "this commit id holds another actor's commit")
	}
	r.done[key] = out
	if replayed {
		return false, e.replay(r, key, out)
	}
	res, details, err := decodeRecord(out)
	if err != nil {
		return false, internal("decode push result", err)
	}
	e.countPush(res)
	if appended {
		e.metrics.Commits.Add(1)
	}
	if err := r.enc.WriteFrame(res); err != nil {
		return false, err
	}
	if details != nil {
		if err := r.enc.WriteFrame(details); err != nil {
			return false, err
		}
	}
	return appended, nil
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

// replay writes a persisted result again: applied becomes cached, a
// rejection replays as itself; an unreadable record answers
// sync.idempotency_cache_miss without persisting anything (SPEC.md §6.3).
func (e *Engine) replay(r *request, key string, rec storage.PushRecord) error {
	res, details, err := decodeRecord(rec)
	if err != nil {
		e.log.Error("stored push result unreadable", "partition", r.id.Partition, "clientCommitId", key, "err", err)
		miss := &ssp2.PushResult{
			ClientCommitID: key,
			Status:         ssp2.PushRejected,
			Results: []ssp2.OpResult{{
				OpIndex: 0, Status: ssp2.OpError,
				Code:      string(ssp2.CodeIdempotencyCacheMiss),
				Message:   "the stored result of this commit could not be read",
				Retryable: true,
			}},
		}
		e.metrics.PushRejected.Add(1)
		return r.enc.WriteFrame(miss)
	}
	if res.Status == ssp2.PushApplied {
		res.Status = ssp2.PushCached
	}
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

// apply runs one new commit under the partition lock and persists its
// result in the same transaction. A rejected commit's writes are rolled
// back to a savepoint and its rejection stored while the lock is still
// held (SPEC.md §6.4, §6.8). appended reports whether the commit went
// into the log: an applied commit that changed nothing does not.
func (e *Engine) apply(ctx context.Context, r *request, tx storage.Tx, pc *ssp2.PushCommit) (rec storage.PushRecord, appended bool, err error) {
	sp, err := tx.Savepoint(ctx)
	if err != nil {
		return storage.PushRecord{}, false, internal("savepoint", err)
	}
	// One validator set serves the whole commit, even if SetValidators
	// swaps it meanwhile.
	vs := e.validators.Load()
	st := stager{e: e, r: r, tx: tx, vs: vs}
	changes, evidence, rej, err := st.stage(ctx, pc)
	if err != nil {
		return storage.PushRecord{}, false, err
	}
	if rej == nil && vs.commit != nil {
		rej, err = e.validateCommit(ctx, r, tx, pc, evidence, vs.commit)
		if err != nil {
			return storage.PushRecord{}, false, err
		}
	}
	rec = storage.PushRecord{
		ClientID:       r.req.Header.ClientID,
		ClientCommitID: pc.ClientCommitID,
		ActorID:        r.id.ActorID,
		CreatedAtMs:    r.now,
	}
	if rej != nil {
		if err := sp.Rollback(ctx); err != nil {
			return storage.PushRecord{}, false, internal("roll back rejected commit", err)
		}
		res := &ssp2.PushResult{ClientCommitID: pc.ClientCommitID, Status: ssp2.PushRejected, Results: []ssp2.OpResult{rej.result}}
		var details *ssp2.PushResultDetails
		if rej.details != nil {
			details = &ssp2.PushResultDetails{ClientCommitID: pc.ClientCommitID, Entries: []ssp2.DetailsEntry{*rej.details}}
		}
		rec.Status = storage.PushRejected
		if rec.Result, err = encodeRecord(res, details); err != nil {
			return storage.PushRecord{}, false, internal("encode push result", err)
		}
		stored, err := tx.IdempotencyPut(ctx, rec)
		if err != nil {
			return storage.PushRecord{}, false, internal("persist rejection", err)
		}
		return stored, false, nil
	}
	if err := sp.Release(ctx); err != nil {
		return storage.PushRecord{}, false, internal("release savepoint", err)
	}
	// A commit whose every operation deleted an absent row changed
	// nothing and emits nothing (SPEC.md §6.2); logging it would let an
	// actor whose grants cover nothing grow the log without limit. It is
	// applied at the head seq, where its empty effect is visible. Only an
	// empty log, which has no head (commitSeq ≥ 1, §2.1), appends it.
	seq := tx.Locked().MaxCommitSeq
	if len(changes) > 0 || seq == 0 {
		seq, err = tx.CommitAppend(ctx, storage.CommitParams{
			CreatedAtMs:    r.now,
			ActorID:        r.id.ActorID,
			ClientID:       r.req.Header.ClientID,
			ClientCommitID: pc.ClientCommitID,
			SchemaVersion:  e.cfg.Schema.Version,
			Changes:        changes,
		})
		if err != nil {
			return storage.PushRecord{}, false, internal("append commit", err)
		}
		appended = true
	}
	results := make([]ssp2.OpResult, len(pc.Operations))
	for i := range results {
		results[i] = ssp2.OpResult{OpIndex: int32(i), Status: ssp2.OpApplied}
	}
	res := &ssp2.PushResult{ClientCommitID: pc.ClientCommitID, Status: ssp2.PushApplied, CommitSeq: &seq, Results: results}
	rec.Status, rec.CommitSeq = storage.PushApplied, seq
	if rec.Result, err = encodeRecord(res, nil); err != nil {
		return storage.PushRecord{}, false, internal("encode push result", err)
	}
	stored, err := tx.IdempotencyPut(ctx, rec)
	if err != nil {
		return storage.PushRecord{}, false, internal("persist push result", err)
	}
	return stored, appended, nil
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
}

// stage applies every operation in order, stopping at the first that does
// not apply. It returns the changes to log and the evidence for the
// whole-commit validator, or the terminating rejection. err is reserved
// for failures of the server itself.
func (st *stager) stage(ctx context.Context, pc *ssp2.PushCommit) ([]storage.Change, []OperationEvidence, *rejection, error) {
	changes := make([]storage.Change, 0, len(pc.Operations))
	var evidence []OperationEvidence
	wantEvidence := st.vs.commit != nil
	for i := range pc.Operations {
		op := &pc.Operations[i]
		ch, ev, rej, err := st.stageOp(ctx, i, op)
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
	return changes, evidence, nil, nil
}

func (st *stager) stageOp(ctx context.Context, i int, op *ssp2.Operation) (*storage.Change, OperationEvidence, *rejection, error) {
	ev := OperationEvidence{OpIndex: i, Op: op.Op, Table: op.Table, RowID: op.RowID}
	t, ok := st.e.cfg.Schema.Table(op.Table)
	if !ok {
		return nil, ev, opError(i, ssp2.CodeUnknownTable, fmt.Sprintf("unknown table %q", op.Table)), nil
	}
	if err := ids.Check("the row id", op.RowID); err != nil {
		return nil, ev, opError(i, ssp2.CodeInvalidRequest, err.Error()), nil
	}
	// Decoded rows by column name are built only for validators.
	validator := st.vs.rows[t.Name]
	want := st.vs.commit != nil || validator != nil
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
		for ci, c := range t.Columns {
			if c.Type == ssp2.TypeString && !vals[ci].Null && !ids.Storable(vals[ci].Bytes) {
				return nil, ev, opError(i, ssp2.CodeInvalidRequest, fmt.Sprintf("column %q contains U+0000", c.Name)), nil
			}
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
		if rej := st.e.validateRow(ctx, st.r, i, t, op, nil, ev.Stored, validator); rej != nil {
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
		merged, rej := st.e.mergeCrdt(i, t, vals, st.stored)
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
		for k, v := range scopes {
			if err := ids.Check("the value of scope "+k, v); err != nil {
				return nil, ev, opError(i, ssp2.CodeInvalidRequest, err.Error()), nil
			}
		}
		if op.BaseVersion != nil && *op.BaseVersion != 0 {
			return nil, ev, opError(i, ssp2.CodeRowMissing, "the row does not exist"), nil
		}
		merged, rej := st.e.mergeCrdt(i, t, vals, nil)
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
	if rej := st.e.validateRow(ctx, st.r, i, t, op, ev.Row, ev.Stored, validator); rej != nil {
		return nil, ev, rej, nil
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

// mergeCrdt replaces every pushed crdt value with merge(stored, incoming)
// (SPEC.md §5.10.3). merged reports whether any value changed.
func (e *Engine) mergeCrdt(i int, t *schema.Table, vals, stored []ssp2.Value) (merged bool, rej *rejection) {
	for ci, c := range t.Columns {
		if c.Type != ssp2.TypeCrdt || vals[ci].Null {
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

// encodeRecord stores a push result as a small SSP2 v1 response message:
// RESP_HEADER, PUSH_RESULT, optional PUSH_RESULT_DETAILS, END. Replays
// decode it back, so the bytes the client sees are the ones persisted.
func encodeRecord(res *ssp2.PushResult, details *ssp2.PushResultDetails) ([]byte, error) {
	m := &ssp2.Message{WireVersion: 1, Kind: ssp2.KindResponse, Frames: []ssp2.Frame{&ssp2.RespHeader{}, res}}
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
