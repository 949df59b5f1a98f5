package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncnode/syncnode/ssp2"
)

// Op is one write of a commit: an upsert of a full row given by column
// name, or a delete by rowId. Build it with Upsert or Delete.
type Op struct {
	Table string
	// Values is the row of an upsert (see encodeRow for accepted types);
	// nil for a delete.
	Values map[string]any
	// RowID is the target of a delete; an upsert's comes from its values.
	RowID string
	// BaseVersion, when set, is sent as the operation's baseVersion: the
	// server rejects the commit if the row's version differs (0 = the row
	// must not exist).
	BaseVersion *int64
	// ReplicaVersion asks for optimistic concurrency against the replica:
	// the row's last-known serverVersion (0 when the replica does not hold
	// it) becomes the baseVersion when the commit is queued.
	ReplicaVersion bool
}

// Upsert writes a full row.
func Upsert(table string, values map[string]any) Op {
	return Op{Table: table, Values: values}
}

// Delete deletes a row by rowId.
func Delete(table, rowID string) Op {
	return Op{Table: table, RowID: rowID}
}

// WithBaseVersion returns o with an explicit baseVersion.
func (o Op) WithBaseVersion(v int64) Op {
	o.BaseVersion, o.ReplicaVersion = &v, false
	return o
}

// IfUnchanged returns o checked against the replica's version of the row
// (see Op.ReplicaVersion).
func (o Op) IfUnchanged() Op {
	o.BaseVersion, o.ReplicaVersion = nil, true
	return o
}

// Commit queues ops as one atomic commit at the end of the outbox and
// returns its clientCommitId. The outbox is saved before Commit returns;
// the commit is pushed by the next rounds, under the same id on every
// attempt, until the server answers it applied, cached or rejected.
func (c *Client) Commit(ctx context.Context, ops ...Op) (string, error) {
	if len(ops) == 0 {
		return "", errors.New("commit: no operations")
	}
	if len(ops) > c.cfg.MaxOperations {
		return "", fmt.Errorf("commit: %d operations exceed MaxOperations %d", len(ops), c.cfg.MaxOperations)
	}
	pc := PendingCommit{Operations: make([]PendingOperation, len(ops))}
	for i, o := range ops {
		t, ok := c.schema.Table(o.Table)
		if !ok {
			return "", fmt.Errorf("commit: operation %d: unknown table %q", i, o.Table)
		}
		po := &pc.Operations[i]
		po.Table, po.BaseVersion = o.Table, o.BaseVersion
		if o.Values != nil {
			payload, rowID, err := encodeRow(t, o.Values)
			if err != nil {
				return "", fmt.Errorf("commit: operation %d: %w", i, err)
			}
			po.Op, po.RowID, po.Payload = ssp2.OpUpsert, rowID, payload
		} else {
			if o.RowID == "" {
				return "", fmt.Errorf("commit: operation %d: a delete needs a rowId", i)
			}
			po.Op, po.RowID = ssp2.OpDelete, o.RowID
		}
		if o.ReplicaVersion {
			v := c.rep.version(o.Table, po.RowID)
			po.BaseVersion = &v
		}
	}
	c.mu.Lock()
	c.counter++
	if c.cfg.CommitID != nil {
		pc.ClientCommitID = c.cfg.CommitID(c.counter)
	} else {
		pc.ClientCommitID = randomID()
	}
	id := pc.ClientCommitID
	if id == "" {
		c.counter--
		c.mu.Unlock()
		return "", errors.New("commit: CommitID returned an empty id")
	}
	c.outbox = append(c.outbox, &pc)
	c.mu.Unlock()
	if err := c.save(ctx); err != nil {
		// Not durable: take it back so the caller's error is the truth.
		c.mu.Lock()
		for i, p := range c.outbox {
			if p == &pc {
				c.outbox = append(c.outbox[:i], c.outbox[i+1:]...)
				break
			}
		}
		c.mu.Unlock()
		return "", fmt.Errorf("commit: %w", err)
	}
	return id, nil
}

// Upsert queues a one-operation commit writing a full row.
func (c *Client) Upsert(ctx context.Context, table string, values map[string]any) (string, error) {
	return c.Commit(ctx, Upsert(table, values))
}

// Delete queues a one-operation commit deleting a row.
func (c *Client) Delete(ctx context.Context, table, rowID string) (string, error) {
	return c.Commit(ctx, Delete(table, rowID))
}

// Pending returns a copy of the outbox, oldest first.
func (c *Client) Pending() []PendingCommit {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]PendingCommit, len(c.outbox))
	for i, pc := range c.outbox {
		out[i] = *pc
	}
	return out
}
