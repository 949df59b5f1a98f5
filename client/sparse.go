package client

import (
	"errors"
	"fmt"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

// Wire version 3 writes (SPEC.md §2.4, §6.1): an upsert names the columns
// it writes. The client sends the columns a write changes against the row
// it expects the server to hold — its replica with the queued commits
// applied over it, as an optimistic read would see it (§7.1) — so two
// clients editing different columns of one row from the same base both
// apply, and a conflict names exactly the columns that moved.

// errPatchNeedsRow is returned for a patch at wire version 2 of a row the
// client does not hold: a full-row push cannot leave columns alone.
var errPatchNeedsRow = errors.New("a patch at wire version 2 needs the row in the replica: a full-row push cannot leave columns unchanged")

// encodeOp encodes o into po for the client's wire version. c.mu is held;
// earlier are the operations before o in its commit.
func (c *Client) encodeOp(po *PendingOperation, o Op, earlier []PendingOperation) error {
	t, ok := c.schema.Table(o.Table)
	if !ok {
		return fmt.Errorf("unknown table %q", o.Table)
	}
	po.Table, po.BaseVersion = o.Table, o.BaseVersion
	if o.Values == nil {
		if o.RowID == "" {
			return errors.New("a delete needs a rowId")
		}
		po.Op, po.RowID = ssp2.OpDelete, o.RowID
	} else {
		vals, present, rowID, err := rowValues(t, o.Values, o.Patch)
		if err != nil {
			return err
		}
		po.Op, po.RowID = ssp2.OpUpsert, rowID
		expected, held := c.expected(t, rowID, earlier)
		if c.cfg.WireVersion < 3 {
			if o.Patch {
				if !held {
					return errPatchNeedsRow
				}
				for i := range vals {
					if !present.Has(i) {
						vals[i] = expected[i]
					}
				}
			}
			if po.Payload, err = t.Codec.AppendRow(nil, vals); err != nil {
				return fmt.Errorf("encode %s row: %w", t.Name, err)
			}
		} else {
			if !o.Patch && held {
				present = changed(t, vals, expected)
			}
			if po.Payload, err = t.Sparse.AppendSparseRow(nil, ssp2.SparseRow{Present: present, Values: vals}); err != nil {
				return fmt.Errorf("encode %s row: %w", t.Name, err)
			}
			po.Sparse = true
		}
	}
	if o.ReplicaVersion {
		v := c.rep.version(o.Table, po.RowID)
		po.BaseVersion = &v
	}
	return nil
}

// changed returns the columns of a full row that differ from the expected
// one, with the primary key, and every crdt column it sets: a crdt value
// is an update to merge, not a state to compare.
func changed(t *schema.Table, vals, expected []ssp2.Value) ssp2.ColumnBitmap {
	out := ssp2.NewColumnBitmap(len(t.Columns))
	out.Set(t.PKIndex)
	for i, c := range t.Columns {
		if c.Type == ssp2.TypeCrdt && !vals[i].Null || !sameValue(vals[i], expected[i]) {
			out.Set(i)
		}
	}
	return out
}

func sameValue(a, b ssp2.Value) bool {
	if a.Null || b.Null {
		return a.Null == b.Null
	}
	return a.Int == b.Int && a.Bool == b.Bool && string(a.Bytes) == string(b.Bytes) &&
		(a.Float == b.Float || a.Float != a.Float && b.Float != b.Float)
}

// expected returns the full row the client expects the server to hold
// once the outbox drains: the replica's row with the queued operations on
// it, then the commit's earlier ones, applied in order (a delete removes
// it, an upsert overlays the columns it writes). held is false when no
// row is expected. c.mu is held.
func (c *Client) expected(t *schema.Table, rowID string, earlier []PendingOperation) (vals []ssp2.Value, held bool) {
	c.rep.mu.RLock()
	e, held := c.rep.tables[t.Name].get(rowID)
	c.rep.mu.RUnlock()
	if held {
		var err error
		if vals, err = t.Codec.DecodeRow(e.data, nil); err != nil {
			held = false
		}
	}
	apply := func(o *PendingOperation) {
		if o.Table != t.Name || o.RowID != rowID {
			return
		}
		if o.Op == ssp2.OpDelete {
			vals, held = nil, false
			return
		}
		if !o.Sparse {
			if v, err := t.Codec.DecodeRow(o.Payload, nil); err == nil {
				vals, held = v, true
			}
			return
		}
		sr, err := t.Sparse.DecodeSparseRow(o.Payload, nil)
		if err != nil {
			return
		}
		if !held {
			if sr.Present.Count() != len(t.Columns) {
				return // a patch of an absent row: the server refuses it
			}
			vals = make([]ssp2.Value, len(t.Columns))
		}
		for i := range vals {
			if sr.Present.Has(i) {
				vals[i] = sr.Values[i]
			}
		}
		held = true
	}
	for _, pc := range c.outbox {
		for i := range pc.Operations {
			apply(&pc.Operations[i])
		}
	}
	for i := range earlier {
		apply(&earlier[i])
	}
	return vals, held
}

// pushPayload is an operation's payload as the client's wire version
// sends it: a full row queued at version 2 goes out at version 3 as the
// sparse row presenting every column, the presence bitmap before the same
// bytes.
func (c *Client) pushPayload(o *PendingOperation) []byte {
	if o.Op != ssp2.OpUpsert || o.Sparse || c.cfg.WireVersion < 3 {
		return o.Payload
	}
	t, _ := c.schema.Table(o.Table)
	return append(ssp2.FullColumnBitmap(len(t.Columns)), o.Payload...)
}

// decodePending decodes a queued upsert: its full values and the columns
// it writes.
func decodePending(t *schema.Table, o *PendingOperation) ([]ssp2.Value, ssp2.ColumnBitmap, error) {
	if !o.Sparse {
		vals, err := t.Codec.DecodeRow(o.Payload, nil)
		return vals, ssp2.FullColumnBitmap(len(t.Columns)), err
	}
	sr, err := t.Sparse.DecodeSparseRow(o.Payload, nil)
	return sr.Values, sr.Present, err
}

// conflictColumns names the columns of a conflict record's bitmap; nil for
// a record without one (wire version 2) or one that does not fit.
func conflictColumns(t *schema.Table, b []byte) []string {
	bm := ssp2.ColumnBitmap(b)
	if b == nil || !bm.Fits(len(t.Columns)) {
		return nil
	}
	out := []string{}
	for i, c := range t.Columns {
		if bm.Has(i) {
			out = append(out, c.Name)
		}
	}
	return out
}
