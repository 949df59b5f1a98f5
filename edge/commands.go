package edge

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/ssp2"
)

// Commands runs a remote command another node forwarded (call as its
// RemoteHome sent it) and returns the reply to send back:
// (*operations.Service).RunForwarded on a node with operations.
type Commands func(ctx context.Context, id engine.Identity, call []byte) []byte

// ServeCommands makes the edge run the commands its hub forwards with
// fn. Until it is called (a node without remote operations) they are
// refused with sync.schema_not_ready (reason no_operations): nothing ran.
func (h *Home) ServeCommands(fn Commands) { h.commandsFn.Store(&fn) }

func (h *Home) command(ctx context.Context, body []byte) any {
	var req commandRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return commandReply{Error: errorToWire(ssp2.Errorf(ssp2.CodeInvalidRequest, "command request: %v", err))}
	}
	if h.homes.Of(req.Partition) != h.cfg.Name {
		return commandReply{Error: errorToWire(ssp2.Errorf(ssp2.CodeForbidden, "partition is not homed at edge %s", h.cfg.Name))}
	}
	fn := h.commandsFn.Load()
	if fn == nil {
		return commandReply{Error: errorToWire(ssp2.Errorf(ssp2.CodeSchemaNotReady, "edge %s runs no remote operations", h.cfg.Name).
			WithDetails(map[string]string{"reason": "no_operations", "home": h.cfg.Name}))}
	}
	id := engine.Identity{Partition: req.Partition, ActorID: req.ActorID, Scopes: engine.StaticScopes(req.Scopes)}
	return commandReply{Reply: (*fn)(ctx, id, req.Call)}
}

// ForwardCommand implements operations.RemoteHome: the command goes to
// the partition's edge over the leaf link, refused with the retryable
// sync.schema_not_ready while the edge cannot be reached.
func (h *Hub) ForwardCommand(ctx context.Context, id engine.Identity, call []byte) ([]byte, error) {
	l := h.links[h.homes.Of(id.Partition)]
	if l == nil {
		return nil, ssp2.Errorf(ssp2.CodeInternalError, "partition %q is not homed at an edge", id.Partition)
	}
	var reply commandReply
	if err := h.ask(ctx, "forward command", bus.EdgeCommandSubject(l.edge), id, func(scopes map[string][]string) any {
		return commandRequest{Partition: id.Partition, ActorID: id.ActorID, Scopes: scopes, Call: call}
	}, &reply); err != nil {
		return nil, err
	}
	h.metrics.Forwarded.Add(1)
	l.poke()
	return reply.Reply, nil
}

// forwardedReply is a reply of the edge to a forwarded write.
type forwardedReply interface{ failure() *wireError }

func (r *pushReply) failure() *wireError    { return r.Error }
func (r *commandReply) failure() *wireError { return r.Error }

// ask sends a write of id's partition to its edge — the request build
// makes with the scopes resolved here for the caller — and decodes the
// edge's answer into reply. An edge that cannot be reached is the
// retryable sync.schema_not_ready (reason home_unreachable): nothing was
// applied; an edge's refusal is returned as the edge's error.
func (h *Hub) ask(ctx context.Context, what, subject string, id engine.Identity, build func(scopes map[string][]string) any, reply forwardedReply) error {
	l := h.links[h.homes.Of(id.Partition)]
	allowed, err := id.Scopes.ResolveScopes(ctx, id.Partition, id.ActorID)
	if err != nil {
		return ssp2.Wrap(ssp2.CodeInternalError, "resolve scopes", err)
	}
	b, err := json.Marshal(build(allowed))
	if err != nil {
		return ssp2.Wrap(ssp2.CodeInternalError, what, err)
	}
	rctx, cancel := context.WithTimeout(ctx, h.cfg.RequestTimeout)
	defer cancel()
	m, err := h.cfg.Conn.RequestWithContext(rctx, subject, b)
	if err != nil {
		h.metrics.ForwardRefused.Add(1)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			l.poke()
			return notReady(l.edge, "home_unreachable", "this partition's home, edge "+l.edge+", is not reachable from the hub; retry")
		}
		return ssp2.Wrap(ssp2.CodeInternalError, what, err)
	}
	if err := json.Unmarshal(m.Data, reply); err != nil {
		return ssp2.Wrap(ssp2.CodeInternalError, what, err)
	}
	if e := reply.failure(); e != nil {
		h.metrics.ForwardRefused.Add(1)
		return e.err()
	}
	return nil
}

// WaitReplica implements operations.RemoteHome: it waits, at most
// ForwardWait, for the replica of partition to hold seq.
func (h *Hub) WaitReplica(ctx context.Context, partition string, seq int64) {
	if l := h.links[h.homes.Of(partition)]; l != nil {
		h.waitApplied(ctx, l, partition, seq)
	}
}
