package engine

import (
	"context"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// ServeGate is the serve gate the engine consults: a request is admitted
// once, and its Ticket is checked again inside every transaction that
// serves it — each push commit's write transaction, each pull section's
// read transaction, each authoritative write's transaction. A segment
// download, which has no transaction, is verified in SQL. A refusal is
// sync.schema_not_ready: HTTP 503 before the response starts, an in-band
// ERROR after. *gate.Gate implements it through GateOf.
type ServeGate interface {
	// AdmitAt admits a request; logEpoch is the partition's epoch as the
	// request just read it.
	AdmitAt(ctx context.Context, partition, logEpoch string) (Ticket, error)
	Verify(ctx context.Context, partition string) error
}

// Ticket is one request's admission (gate.Ticket).
type Ticket interface {
	// Check re-reads the gate in tx, the transaction that serves, and
	// refuses when the partition may no longer be served.
	Check(ctx context.Context, tx storage.GateReader) error
}

// TicketGate is a serve gate whose AdmitAt returns its own ticket type T,
// as *gate.Gate does.
type TicketGate[T Ticket] interface {
	AdmitAt(ctx context.Context, partition, logEpoch string) (T, error)
	Verify(ctx context.Context, partition string) error
}

// GateOf adapts a TicketGate to ServeGate: engine.GateOf(g) for a
// *gate.Gate g.
func GateOf[T Ticket](g TicketGate[T]) ServeGate { return gateOf[T]{g} }

type gateOf[T Ticket] struct{ g TicketGate[T] }

func (a gateOf[T]) AdmitAt(ctx context.Context, partition, logEpoch string) (Ticket, error) {
	t, err := a.g.AdmitAt(ctx, partition, logEpoch)
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (a gateOf[T]) Verify(ctx context.Context, partition string) error {
	return a.g.Verify(ctx, partition)
}

// noGate is the ticket of a request served without a gate: it checks
// nothing.
type noGate struct{}

func (noGate) Check(context.Context, storage.GateReader) error { return nil }

// admit admits a request for the partition just touched; without a gate
// it returns a ticket that checks nothing.
func (e *Engine) admit(ctx context.Context, p storage.Partition) (Ticket, error) {
	if e.cfg.Gate == nil {
		return noGate{}, nil
	}
	t, err := e.cfg.Gate.AdmitAt(ctx, p.ID, p.LogEpoch)
	if err != nil {
		return nil, internal("serve gate", err)
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
