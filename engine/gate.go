package engine

import (
	"context"

	"github.com/syncnode/syncnode/gate"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// ServeGate is the serve gate the engine consults (implemented by
// *gate.Gate): a request is admitted once, and its Ticket is checked again
// inside every transaction that serves it — each push commit's write
// transaction, each pull section's read transaction, each authoritative
// write's transaction. A segment download, which has no transaction, is
// verified in SQL. A refusal is sync.schema_not_ready: HTTP 503 before the
// response starts, an in-band ERROR after.
type ServeGate interface {
	// AdmitAt admits a request; logEpoch is the partition's epoch as the
	// request just read it.
	AdmitAt(ctx context.Context, partition, logEpoch string) (gate.Ticket, error)
	Verify(ctx context.Context, partition string) error
}

// admit admits a request for the partition just touched; without a gate
// it returns the zero Ticket, which checks nothing.
func (e *Engine) admit(ctx context.Context, p storage.Partition) (gate.Ticket, error) {
	if e.cfg.Gate == nil {
		return gate.Ticket{}, nil
	}
	t, err := e.cfg.Gate.AdmitAt(ctx, p.ID, p.LogEpoch)
	if err != nil {
		return t, internal("serve gate", err)
	}
	return t, nil
}

// verifyGate reads the gate in SQL for a request without a transaction.
func (e *Engine) verifyGate(ctx context.Context, partition string) error {
	if e.cfg.Gate == nil {
		return nil
	}
	if err := e.cfg.Gate.Verify(ctx, partition); err != nil {
		return internal("serve gate", err)
	}
	return nil
}

// notReady reports a serve-gate refusal, which internal passes through.
func notReady(err error) bool { return ssp2.CodeOf(err) == ssp2.CodeSchemaNotReady }
