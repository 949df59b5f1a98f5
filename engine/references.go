package engine

import (
	"context"
	"encoding/json"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Declared references (SPEC.md §6.11), enforced once per commit after
// every client operation is staged and before whole-commit validation,
// against the candidate state:
//
//   - a row the commit upserts whose reference column, presented by the
//     commit and not NULL, names an absent parent is refused
//     (sync.reference_violation, reason missing_parent);
//   - a parent the commit deletes with remaining children is refused under
//     RESTRICT (restricted_delete); under CASCADE every child is deleted,
//     recursively; under SET NULL every child gets a sparse update setting
//     only the reference column to NULL (only that column's version
//     moves);
//   - more appended operations than Config.CascadeLimit refuse the commit
//     (cascade_limit).
//
// Appended operations are ordinary: they run the row validators, join the
// whole-commit validator's operation list (OperationEvidence.Appended),
// write tombstones and emit changes with the child's stored scopes, so
// they reach the log, the bus, realtime and reactions like any change. A
// rejection they cause is attributed to the originating client delete.
// They are the server's own writes: the actor's scopes are not checked
// against the children, exactly as the database enforces a foreign key.

// Reference-violation reasons, carried in PUSH_RESULT_DETAILS.
const (
	reasonMissingParent    = "missing_parent"
	reasonRestrictedDelete = "restricted_delete"
	reasonCascadeLimit     = "cascade_limit"
)

// refPage is how many children one lookup reads.
const refPage = 500

// refState collects the staged changes reference enforcement looks at.
type refState struct {
	ops []refOp
}

// refOp is a staged change of a child (upsert) or parent (delete) table.
type refOp struct {
	opIndex int
	change  storage.Change
	present ssp2.ColumnBitmap // upsert: the columns presented; nil is all
}

func (rs *refState) note(s *schema.Schema, i int, ch *storage.Change, present ssp2.ColumnBitmap) {
	if ch.Op == storage.OpDelete {
		if len(s.Referencing(ch.Table)) == 0 {
			return
		}
	} else if t, ok := s.Table(ch.Table); !ok || len(t.References) == 0 {
		return
	}
	rs.ops = append(rs.ops, refOp{opIndex: i, change: *ch, present: present})
}

// refEnforcer runs the enforcement of one commit.
type refEnforcer struct {
	st       *stager
	changes  []storage.Change
	evidence []OperationEvidence
	appended int
	// gone holds rows the enforcement deleted; nulled the (row, column)
	// pairs it set to NULL.
	gone   map[rowKey]bool
	nulled map[nulledKey]bool
	// parents caches parent existence in the candidate state.
	parents map[rowKey]bool
}

type nulledKey struct {
	row    rowKey
	column int
}

type pendingDelete struct {
	t      *schema.Table
	rowID  string
	origin int
}

// enforceReferences enforces the declared references over the commit's
// staged operations and returns the appended changes and their evidence,
// or the rejection.
func (st *stager) enforceReferences(ctx context.Context) ([]storage.Change, []OperationEvidence, *rejection, error) {
	if len(st.refs.ops) == 0 {
		return nil, nil, nil, nil
	}
	en := &refEnforcer{st: st, gone: map[rowKey]bool{}, nulled: map[nulledKey]bool{}, parents: map[rowKey]bool{}}
	sc := st.e.cfg.Schema
	var queue []pendingDelete
	for _, o := range st.refs.ops {
		k := rowKey{o.change.Table, o.change.RowID}
		if o.change.Op == storage.OpDelete && st.deleted[k] {
			t, _ := sc.Table(o.change.Table)
			queue = append(queue, pendingDelete{t: t, rowID: o.change.RowID, origin: o.opIndex})
		}
	}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		more, rej, err := en.deleteChildren(ctx, d)
		if err != nil || rej != nil {
			return nil, nil, rej, err
		}
		queue = append(queue, more...)
	}
	if rej, err := en.checkParents(ctx); err != nil || rej != nil {
		return nil, nil, rej, err
	}
	return en.changes, en.evidence, nil, nil
}

// deleteChildren applies every reference naming d's table to the
// children of the deleted row d, and returns the cascaded deletes to
// follow.
func (en *refEnforcer) deleteChildren(ctx context.Context, d pendingDelete) ([]pendingDelete, *rejection, error) {
	st := en.st
	key, ok := keyValue(d.t, d.rowID)
	if !ok {
		return nil, nil, nil // no row can reference a key that has no typed form
	}
	var next []pendingDelete
	for _, ref := range st.e.cfg.Schema.Referencing(d.t.Name) {
		child, _ := st.e.cfg.Schema.Table(ref.Child)
		limit := refPage
		if ref.OnDelete == schema.Restrict {
			limit = 1
		}
		after := ""
		for {
			rows, err := st.tx.RowScanByColumn(ctx, storage.ColumnScanParams{Partition: st.r.id.Partition, Table: child.Name,
				Column: ref.Column, Value: key, AfterRowID: after, Limit: limit})
			if err != nil {
				return nil, nil, internal("read children", err)
			}
			if len(rows) > 0 && ref.OnDelete == schema.Restrict {
				return nil, en.violation(d.origin, reasonRestrictedDelete, nil, map[string]string{"child": child.Name}), nil
			}
			for _, row := range rows {
				if en.appended++; en.appended > st.e.cfg.CascadeLimit {
					return nil, en.violation(d.origin, reasonCascadeLimit, nil, nil), nil
				}
				var rej *rejection
				if ref.OnDelete == schema.Cascade {
					rej, err = en.cascade(ctx, d.origin, child, row)
					next = append(next, pendingDelete{t: child, rowID: row.RowID, origin: d.origin})
				} else {
					rej, err = en.setNull(ctx, d.origin, child, ref.ColumnIndex, row)
				}
				if err != nil || rej != nil {
					return nil, rej, err
				}
			}
			if len(rows) < limit {
				break
			}
			after = rows[len(rows)-1].RowID
		}
	}
	return next, nil, nil
}

// cascade deletes one child.
func (en *refEnforcer) cascade(ctx context.Context, origin int, t *schema.Table, row storage.Row) (*rejection, error) {
	st := en.st
	k := rowKey{t.Name, row.RowID}
	if en.gone[k] { // the visited set: a row is deleted once
		return nil, nil
	}
	en.gone[k] = true
	validator := st.vs.rows[t.Name]
	ev := OperationEvidence{OpIndex: origin, Op: ssp2.OpDelete, Table: t.Name, RowID: row.RowID, Appended: true}
	sv := row.ServerVersion
	ev.StoredServerVersion = &sv
	if st.wantsRows(validator) {
		vals, err := t.Codec.DecodeRow(row.Payload, nil)
		if err != nil {
			return nil, internal("decode stored row", err)
		}
		ev.Stored = rowMap(t, vals)
	}
	if rej := st.validateRow(ctx, origin, t, &ssp2.Operation{Table: t.Name, RowID: row.RowID, Op: ssp2.OpDelete}, nil, ev.Stored, validator); rej != nil {
		return rej, nil
	}
	if _, err := st.tx.RowDelete(ctx, t.Name, row.RowID); err != nil {
		return nil, internal("delete row", err)
	}
	en.changes = append(en.changes, storage.Change{Table: t.Name, RowID: row.RowID, Op: storage.OpDelete, Scopes: row.Scopes})
	en.evidence = append(en.evidence, ev)
	return nil, nil
}

// setNull writes one child's reference column to NULL: a sparse update
// presenting only that column.
func (en *refEnforcer) setNull(ctx context.Context, origin int, t *schema.Table, column int, row storage.Row) (*rejection, error) {
	st := en.st
	vals, err := t.Codec.DecodeRow(row.Payload, nil)
	if err != nil {
		return nil, internal("decode stored row", err)
	}
	validator := st.vs.rows[t.Name]
	want := st.wantsRows(validator)
	ev := OperationEvidence{OpIndex: origin, Op: ssp2.OpUpsert, Table: t.Name, RowID: row.RowID, Appended: true}
	sv := row.ServerVersion
	ev.StoredServerVersion = &sv
	if want {
		ev.Stored = rowMap(t, vals)
	}
	versions := make([]int64, len(t.Columns))
	if err := storage.DecodeColumnVersions(row.ColumnVersions, sv, versions); err != nil {
		return nil, internal("read column versions", err)
	}
	next := sv + 1
	versions[column] = next
	vals[column] = ssp2.Value{Null: true}
	if want {
		ev.Row = rowMap(t, vals)
	}
	w := sparseWrite{vals: vals, scopes: row.Scopes, versions: storage.AppendColumnVersions(nil, versions, next, t.PKIndex), next: next}
	ch, rej, err := st.write(ctx, origin, t, ssp2.OpUpsert, row.RowID, w, ev.Row, ev.Stored, validator)
	if err != nil || rej != nil {
		return rej, err
	}
	ev.NextServerVersion = &next
	en.nulled[nulledKey{rowKey{t.Name, row.RowID}, column}] = true
	en.changes = append(en.changes, *ch)
	en.evidence = append(en.evidence, ev)
	return nil, nil
}

// checkParents refuses the commit when a row it upserts, still present,
// references through a column the commit presented a parent absent from
// the candidate state. The final row is that of the row's last upsert; a
// column counts when any of the commit's upserts of the row presented it,
// and the rejection goes to the last of those.
func (en *refEnforcer) checkParents(ctx context.Context) (*rejection, error) {
	st := en.st
	type final struct {
		change storage.Change
		// by is, per column, the index of the last operation presenting
		// it (-1: none).
		by []int
	}
	rows := map[rowKey]*final{}
	var order []rowKey
	for _, o := range st.refs.ops {
		if o.change.Op != storage.OpUpsert {
			continue
		}
		k := rowKey{o.change.Table, o.change.RowID}
		t, _ := st.e.cfg.Schema.Table(k.table)
		f := rows[k]
		if f == nil {
			f = &final{by: make([]int, len(t.Columns))}
			for i := range f.by {
				f.by[i] = -1
			}
			rows[k] = f
			order = append(order, k)
		}
		f.change = o.change
		for _, r := range t.References {
			if o.present == nil || o.present.Has(r.ColumnIndex) {
				f.by[r.ColumnIndex] = o.opIndex
			}
		}
	}
	for _, k := range order {
		f := rows[k]
		if st.deleted[k] || en.gone[k] {
			continue
		}
		t, _ := st.e.cfg.Schema.Table(k.table)
		var vals []ssp2.Value
		for _, r := range t.References {
			if f.by[r.ColumnIndex] < 0 || en.nulled[nulledKey{k, r.ColumnIndex}] {
				continue
			}
			if vals == nil {
				var err error
				if vals, err = t.Codec.DecodeRow(f.change.Row, nil); err != nil {
					return nil, internal("decode staged row", err)
				}
			}
			id, ok := schema.RenderValue(t.Columns[r.ColumnIndex].Type, vals[r.ColumnIndex])
			if !ok {
				continue // NULL references nothing
			}
			exists, err := en.parentExists(ctx, r.ParentTable, id)
			if err != nil {
				return nil, err
			}
			if !exists {
				return en.violation(f.by[r.ColumnIndex], reasonMissingParent, []string{r.Column},
					map[string]string{"parent": r.ParentTable, "row": id}), nil
			}
		}
	}
	return nil, nil
}

func (en *refEnforcer) parentExists(ctx context.Context, table, rowID string) (bool, error) {
	k := rowKey{table, rowID}
	if ok, seen := en.parents[k]; seen {
		return ok, nil
	}
	_, ok, err := en.st.tx.RowGet(ctx, en.st.r.id.Partition, table, rowID)
	if err != nil {
		return false, internal("read parent", err)
	}
	en.parents[k] = ok
	return ok, nil
}

// violation is the sync.reference_violation rejection of operation i, its
// reason and references in PUSH_RESULT_DETAILS and its message static. A
// referenced row id that is not a safe details value (too long, control
// characters) is left out of the details.
func (en *refEnforcer) violation(i int, reason string, fieldPaths []string, refs map[string]string) *rejection {
	rej := opError(i, ssp2.CodeReferenceViolation, "a declared reference is violated")
	for {
		b, err := json.Marshal(RejectionDetails{FieldPaths: fieldPaths, Reason: reason, References: refs})
		if err != nil {
			return rej
		}
		rej.details = &ssp2.DetailsEntry{OpIndex: int32(i), DetailsJSON: b}
		_, err = encodeRecord(&ssp2.PushResult{ClientCommitID: "x", Status: ssp2.PushRejected, Results: []ssp2.OpResult{rej.result}},
			&ssp2.PushResultDetails{ClientCommitID: "x", Entries: []ssp2.DetailsEntry{*rej.details}})
		if err == nil {
			return rej
		}
		if _, ok := refs["row"]; !ok {
			rej.details = nil // cannot happen with the tokens above; send the code alone
			return rej
		}
		delete(refs, "row")
	}
}
