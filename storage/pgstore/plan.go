package pgstore

import (
	"errors"
	"maps"
	"math"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/commitlog"
)

// Planned windows (storage.WindowPlanner). A steady pull section is a read
// transaction of three statements: the partition row with its gate state,
// the window's first candidates, and nothing more. With the window named
// in advance they go in one pipeline with BEGIN and COMMIT, so the section
// costs one round trip instead of three (BEGIN and the row; the window;
// COMMIT). The first read ends the transaction, so a read that the plan
// did not cover cannot be answered from its snapshot: it fails with
// errPlanMissed, and ReadTx runs fn again without the plan.

var _ storage.WindowPlanner = (*tx)(nil)

// errPlanMissed is what a read returns in a read transaction that its
// planned first pipeline already ended.
var errPlanMissed = errors.New("read transaction: a read past the planned window")

type plannedWindow struct {
	p    storage.WindowParams
	vars []string
	w    *commitlog.Window
	// first is what the pipeline's window statement offered to w.
	first firstRead
	read  bool // the pipeline carried it
}

// PlanWindow implements storage.WindowPlanner: kept only in a read
// transaction before its first read, and only for a valid window.
func (t *tx) PlanWindow(p storage.WindowParams) {
	if !t.snapshot || t.noPlan || t.plan != nil || t.spent || t.pending == nil || len(t.pending.QueuedQueries) != 1 {
		return
	}
	if commitlog.CheckWindow(&p) != nil {
		return
	}
	vars, empty := commitlog.Variables(p.Scopes)
	if empty {
		return // CommitWindow reads nothing
	}
	t.plan = &plannedWindow{p: p, vars: vars, w: commitlog.NewWindow(&p)}
}

// queuePlan queues, behind the partition read that is about to be sent,
// the planned window's first statement and COMMIT, when the read is of the
// planned partition and the transaction's first. It reports whether it did.
func (t *tx) queuePlan(partition string) bool {
	pw := t.plan
	if pw == nil || pw.read || t.spent || pw.p.Partition != partition || t.pending == nil || len(t.pending.QueuedQueries) != 1 {
		return false
	}
	// The snapshot bounds the candidates: every commit it holds is at
	// most the partition's max commitSeq, which is read in the same
	// pipeline and not known yet.
	q, args, read := t.firstQuery(pw.w, &pw.p, pw.vars, math.MaxInt64, &pw.first)
	t.trail = &pgx.Batch{}
	t.trail.Queue(q, args...).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		if err := read(rows); err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	})
	t.trail.Queue("COMMIT")
	return true
}

// planned returns the window the pipeline read for p, if it covers p.
func (t *tx) planned(p *storage.WindowParams) (*plannedWindow, bool) {
	pw := t.plan
	if pw == nil || !pw.read || pw.p.Partition != p.Partition || pw.p.Table != p.Table || pw.p.AfterSeq != p.AfterSeq ||
		pw.p.Limit != p.Limit || !maps.EqualFunc(pw.p.Scopes, p.Scopes, slices.Equal[[]string]) {
		return nil, false
	}
	return pw, true
}

// miss marks the transaction for running again and returns errPlanMissed.
func (t *tx) miss() error {
	t.missed = true
	return errPlanMissed
}

// live refuses a statement in a read transaction that has ended.
func (t *tx) live() error {
	if t.spent {
		return t.miss()
	}
	return nil
}
