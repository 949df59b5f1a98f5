package client

import (
	"context"
	"errors"
	"fmt"
)

// Op is one write of a commit: an upsert of a full row given by column
// name, a patch of some of its columns, or a delete by rowId. Build it
// with Upsert, Patch or Delete.
type Op struct {
	Table string
	// Values is the row of an upsert or patch (see rowValues for accepted
	// types); nil for a delete.
	Values map[string]any
	// Patch writes only the columns Values names (the primary key among
	// them), leaving the others as the server holds them.
	Patch bool
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

// Upsert writes a full row. At wire version 3 it is sent as a sparse row
// of the columns that differ from the row the client expects the server
// to hold (its replica with the queued commits applied); a row it does not
// hold is sent whole.
func Upsert(table string, values map[string]any) Op {
	return Op{Table: table, Values: values}
}

// Patch writes the columns values names, the primary key among them. At
// wire version 3 it is sent as a sparse row of exactly those columns; at
// wire version 2, which pushes full rows, the other columns are filled
// from the expected row, so the client must hold the row.
func Patch(table string, values map[string]any) Op {
	return Op{Table: table, Values: values, Patch: true}
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
	// The lock covers encoding, which reads the queued commits, and the
	// append, so a concurrent Commit cannot slip between them.
	c.mu.Lock()
	for i, o := range ops {
		if err := c.encodeOp(&pc.Operations[i], o, pc.Operations[:i]); err != nil {
			c.mu.Unlock()
			return "", fmt.Errorf("commit: operation %d: %w", i, err)
		}
	}
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

// Patch queues a one-operation commit writing some columns of a row.
func (c *Client) Patch(ctx context.Context, table string, values map[string]any) (string, error) {
	return c.Commit(ctx, Patch(table, values))
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
