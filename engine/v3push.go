package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Wire version 3 pushes (SPEC.md §6.1, §6.2) and how they share one stored
// state with versions 1 and 2.
//
// A version 3 upsert is a sparse row: it names the columns it writes. Every
// stored column carries a column version (storage.DecodeColumnVersions), so
// a v3 conflict is per column — only a present column written after the
// operation's baseVersion conflicts — and absent columns keep their stored
// values. A v1/v2 upsert is a full row: a write of every column, which sets
// every column version to the row's new server version, and its conflict
// check stays row-level (baseVersion ≠ server_version). So after any write,
// from any version, the stored row, its server version and its column
// versions are exactly what a v3 server would hold, and v2 and v3 clients
// of one partition converge on the same rows.
//
// Deletes are the same in every version. Each applied delete leaves a
// tombstone (written by CommitAppend) that refuses a later unversioned v3
// upsert of the row with sync.row_deleted until pruning passes it; a v1/v2
// upsert keeps its old meaning and recreates the row.

// errVersionSkew guards the version the store assigns against the one the
// column versions were computed for.
var errVersionSkew = errors.New("the store assigned another server version than the one read under the lock")

// stageAny stages one operation in the semantics of the request's wire
// version, and keeps what tombstone and reference enforcement need.
func (st *stager) stageAny(ctx context.Context, i int, op *ssp2.Operation) (*storage.Change, OperationEvidence, *rejection, error) {
	var (
		ch      *storage.Change
		ev      OperationEvidence
		rej     *rejection
		err     error
		present ssp2.ColumnBitmap
	)
	if op.Op == ssp2.OpUpsert && ssp2.SparsePayloads(st.r.req.WireVersion) {
		ch, ev, present, rej, err = st.stageSparse(ctx, i, op)
	} else {
		ch, ev, rej, err = st.stageOp(ctx, i, op)
	}
	if ch != nil {
		st.staged(i, ch, present)
	}
	return ch, ev, rej, err
}

// staged records a staged change: a row deleted by this commit counts as
// tombstoned for the commit's later operations, as if its tombstone were
// written by the delete itself, and an insert clears that again.
func (st *stager) staged(i int, ch *storage.Change, present ssp2.ColumnBitmap) {
	k := rowKey{ch.Table, ch.RowID}
	if ch.Op == storage.OpDelete {
		if st.deleted == nil {
			st.deleted = map[rowKey]bool{}
		}
		st.deleted[k] = true
	} else {
		delete(st.deleted, k)
	}
	st.refs.note(st.e.cfg.Schema, i, ch, present)
}

type rowKey struct{ table, rowID string }

// stageSparse stages a version 3 upsert: decode the sparse row, then the
// §6.2 rules for an existing or an absent row. present is the decoded
// presence bitmap (a copy).
func (st *stager) stageSparse(ctx context.Context, i int, op *ssp2.Operation) (*storage.Change, OperationEvidence, ssp2.ColumnBitmap, *rejection, error) {
	ev := OperationEvidence{OpIndex: i, Op: op.Op, Table: op.Table, RowID: op.RowID}
	t, ok := st.e.cfg.Schema.Table(op.Table)
	if !ok {
		return nil, ev, nil, opError(i, ssp2.CodeUnknownTable, fmt.Sprintf("unknown table %q", op.Table)), nil
	}
	if rej := checkRowID(i, op.RowID); rej != nil {
		return nil, ev, nil, rej, nil
	}
	sr, err := t.Sparse.DecodeSparseRow(op.Payload, st.vals[:0])
	if err != nil {
		return nil, ev, nil, opError(i, ssp2.CodeInvalidRequest, "the payload does not decode as a sparse row of this table"), nil
	}
	st.vals = sr.Values
	if rid, err := t.RowID(sr.Values); err != nil || rid != op.RowID {
		return nil, ev, nil, opError(i, ssp2.CodeInvalidRequest, "rowId does not match the payload's primary key"), nil
	}
	if rej := checkStrings(i, t, sr.Values); rej != nil {
		return nil, ev, nil, rej, nil
	}
	present := append(ssp2.ColumnBitmap(nil), sr.Present...)
	stored, exists, err := st.tx.RowGet(ctx, st.r.id.Partition, t.Name, op.RowID)
	if err != nil {
		return nil, ev, nil, nil, internal("read row", err)
	}
	validator := st.vs.rows[t.Name]
	want := st.wantsRows(validator)
	var w sparseWrite
	var rej *rejection
	if exists {
		v := stored.ServerVersion
		ev.StoredServerVersion = &v
		if st.stored, err = t.Codec.DecodeRow(stored.Payload, st.stored[:0]); err != nil {
			return nil, ev, nil, nil, internal("decode stored row", err)
		}
		if want {
			ev.Stored = rowMap(t, st.stored)
		}
		w, rej, err = st.update(i, t, op, sr, stored)
	} else {
		w, rej, err = st.insert(ctx, i, t, op, sr)
	}
	if err != nil || rej != nil {
		return nil, ev, nil, rej, err
	}
	if want {
		ev.Row = rowMap(t, w.vals)
	}
	ch, rej, err := st.write(ctx, i, t, op.Op, op.RowID, w, ev.Row, ev.Stored, validator)
	if err != nil || rej != nil {
		return nil, ev, nil, rej, err
	}
	next := ch.RowVersion
	ev.NextServerVersion = &next
	return ch, ev, present, nil, nil
}

// sparseWrite is a row about to be written: the merged full row, its
// stored scopes, column versions and expected new server version.
type sparseWrite struct {
	vals     []ssp2.Value
	scopes   map[string]string
	versions []byte
	next     int64
}

// update applies a sparse upsert to an existing row (SPEC.md §6.2, in
// order): authorize against the stored row; a present scope column must
// keep its stored value; baseVersion may not be ahead of the row; baseVersion
// 0 is a lost insert and conflicts; otherwise a present non-crdt column
// written after baseVersion conflicts, and conflictColumns marks exactly
// those. The write overlays the present columns on the stored row, merges
// present crdt columns, and moves the present columns' versions.
func (st *stager) update(i int, t *schema.Table, op *ssp2.Operation, sr ssp2.SparseRow, stored storage.Row) (sparseWrite, *rejection, error) {
	if len(stored.Scopes) == 0 {
		return sparseWrite{}, opError(i, ssp2.CodeMissingScopes, "the stored row has no scopes"), nil
	}
	if !st.r.scopes.authorizes(t, stored.Scopes) {
		return sparseWrite{}, opError(i, ssp2.CodeForbidden, "forbidden"), nil
	}
	for _, sc := range t.Scopes {
		if sr.Present.Has(sc.ColumnIndex) && !sameValue(sr.Values[sc.ColumnIndex], st.stored[sc.ColumnIndex]) {
			return sparseWrite{}, opError(i, ssp2.CodeInvalidRequest, "a scope column cannot change on update"), nil
		}
	}
	sv := stored.ServerVersion
	if op.BaseVersion != nil && *op.BaseVersion > sv {
		return sparseWrite{}, opError(i, ssp2.CodeInvalidRequest, "baseVersion is ahead of the row's server version"), nil
	}
	n := len(t.Columns)
	if cap(st.versions) < n {
		st.versions = make([]int64, n)
	}
	versions := st.versions[:n]
	if err := storage.DecodeColumnVersions(stored.ColumnVersions, sv, versions); err != nil {
		return sparseWrite{}, nil, internal("read column versions", err)
	}
	if base := op.BaseVersion; base != nil {
		moved := ssp2.NewColumnBitmap(n)
		conflict := *base == 0
		for ci, c := range t.Columns {
			if ci == t.PKIndex || c.Type == ssp2.TypeCrdt || !sr.Present.Has(ci) {
				continue
			}
			if *base == 0 || versions[ci] > *base {
				moved.Set(ci)
				conflict = true
			}
		}
		if conflict {
			return sparseWrite{}, &rejection{result: ssp2.OpResult{
				OpIndex: int32(i), Status: ssp2.OpConflict,
				Code: string(ssp2.CodeVersionConflict), Message: "present columns moved past baseVersion",
				ServerVersion: sv, ServerRow: stored.Payload, ConflictColumns: moved,
			}}, nil
		}
	}
	// The merged row: present columns over the stored ones.
	merged := append(st.merged[:0], st.stored...)
	for ci := range merged {
		if sr.Present.Has(ci) {
			merged[ci] = sr.Values[ci]
		}
	}
	st.merged = merged
	if _, rej := st.e.mergeCrdt(i, t, merged, st.stored, sr.Present); rej != nil {
		return sparseWrite{}, rej, nil
	}
	next := sv + 1
	for ci := range versions {
		if ci != t.PKIndex && sr.Present.Has(ci) {
			versions[ci] = next
		}
	}
	st.versionBuf = storage.AppendColumnVersions(st.versionBuf[:0], versions, next, t.PKIndex)
	return sparseWrite{vals: merged, scopes: stored.Scopes, versions: st.versionBuf, next: next}, nil, nil
}

// insert applies a sparse upsert to an absent row: the baseVersion ×
// tombstone table of SPEC.md §6.2. The payload is authorized first
// whenever it carries every scope column, so the outcome discloses
// nothing to an actor without the scope; a baseVersion above 0 must be
// authorized (a payload without its scope columns is denied). An insert
// needs every column present.
func (st *stager) insert(ctx context.Context, i int, t *schema.Table, op *ssp2.Operation, sr ssp2.SparseRow) (sparseWrite, *rejection, error) {
	scopesPresent := true
	for _, sc := range t.Scopes {
		if !sr.Present.Has(sc.ColumnIndex) {
			scopesPresent = false
		}
	}
	var scopes map[string]string
	if scopesPresent {
		var ok bool
		scopes, _, ok = t.StoredScopes(sr.Values)
		if !ok || !st.r.scopes.authorizes(t, scopes) {
			return sparseWrite{}, opError(i, ssp2.CodeForbidden, "forbidden"), nil
		}
		if rej := checkScopeValues(i, scopes); rej != nil {
			return sparseWrite{}, rej, nil
		}
	}
	base := op.BaseVersion
	if base != nil && *base > 0 {
		if !scopesPresent {
			return sparseWrite{}, opError(i, ssp2.CodeForbidden, "forbidden"), nil
		}
		return sparseWrite{}, opError(i, ssp2.CodeRowMissing, "the row does not exist"), nil
	}
	if base == nil {
		deleted := st.deleted[rowKey{t.Name, op.RowID}]
		if !deleted {
			var err error
			if _, deleted, err = st.tx.TombstoneGet(ctx, t.Name, op.RowID); err != nil {
				return sparseWrite{}, nil, internal("read tombstone", err)
			}
		}
		if deleted {
			return sparseWrite{}, opError(i, ssp2.CodeRowDeleted, "the row was deleted"), nil
		}
	}
	if sr.Present.Count() != len(t.Columns) {
		return sparseWrite{}, opError(i, ssp2.CodeRowMissing, "the row does not exist, and a partial payload cannot insert it"), nil
	}
	if _, rej := st.e.mergeCrdt(i, t, sr.Values, nil, nil); rej != nil {
		return sparseWrite{}, rej, nil
	}
	// A new row has every column at version 1: no blob.
	return sparseWrite{vals: sr.Values, scopes: scopes, next: 1}, nil, nil
}

// write validates and writes a staged row and returns its change: an
// upsert of the full row, the payload re-encoded from the merged values.
func (st *stager) write(ctx context.Context, i int, t *schema.Table, op ssp2.Op, rowID string, w sparseWrite, row, stored Row, validator RowValidator) (*storage.Change, *rejection, error) {
	if rej := st.validateRow(ctx, i, t, &ssp2.Operation{Table: t.Name, RowID: rowID, Op: op}, row, stored, validator); rej != nil {
		return nil, rej, nil
	}
	if rej, err := st.checkBlobs(ctx, i, t, w.vals); err != nil || rej != nil {
		return nil, rej, err
	}
	payload, err := t.Codec.AppendRow(nil, w.vals)
	if err != nil {
		return nil, nil, internal("encode row", err)
	}
	version, err := st.tx.RowUpsert(ctx, t.Name, storage.RowWrite{RowID: rowID, Values: w.vals, Scopes: w.scopes, Payload: payload, ColumnVersions: w.versions})
	if err != nil {
		var ce *storage.ConstraintError
		if errors.As(err, &ce) {
			st.e.log.Info("push refused by a database constraint", "table", t.Name, "kind", ce.Kind)
			return nil, opError(i, ssp2.CodeConstraintViolation, "constraint violation"), nil
		}
		return nil, nil, internal("write row", err)
	}
	if version != w.next {
		return nil, nil, internal("write row", errVersionSkew)
	}
	return &storage.Change{Table: t.Name, RowID: rowID, Op: storage.OpUpsert, RowVersion: version, Scopes: w.scopes, Row: payload}, nil, nil
}

// recordEnvelope is the wire version and header a push result is
// persisted with: version 3 when it carries conflictColumns, which only
// version 3 can hold, else version 1, as every record was before. The
// header is never sent; version 3 requires its logEpoch to be non-empty.
func recordEnvelope(res *ssp2.PushResult) (uint16, *ssp2.RespHeader) {
	for _, o := range res.Results {
		if o.ConflictColumns != nil {
			return 3, &ssp2.RespHeader{LogEpoch: "record"}
		}
	}
	return 1, &ssp2.RespHeader{}
}

// fitWire adapts a persisted result to the wire version it is sent in: a
// commit replayed by a client of a version below 3 under the same key
// gets its conflict without conflictColumns, which that version lacks.
func fitWire(res *ssp2.PushResult, version uint16) {
	if version >= 3 {
		return
	}
	for i := range res.Results {
		res.Results[i].ConflictColumns = nil
	}
}

// keyValue is the typed primary-key value of rowID in table t, the value a
// child's reference column holds.
func keyValue(t *schema.Table, rowID string) (ssp2.Value, bool) {
	switch t.Columns[t.PKIndex].Type {
	case ssp2.TypeString, ssp2.TypeJSON:
		return ssp2.Value{Bytes: []byte(rowID)}, true
	case ssp2.TypeInteger:
		n, err := strconv.ParseInt(rowID, 10, 64)
		return ssp2.Value{Int: n}, err == nil
	case ssp2.TypeBoolean:
		b, err := strconv.ParseBool(rowID)
		return ssp2.Value{Bool: b}, err == nil
	}
	return ssp2.Value{}, false
}
