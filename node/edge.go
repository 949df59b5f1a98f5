package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncnode/syncnode/admin"
	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/edge"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/gate"
	"github.com/syncnode/syncnode/operations"
	"github.com/syncnode/syncnode/realtime"
)

// ErrEdgeTopology wraps a node configured as an edge whose NATS does not
// make it one: its JetStream domain is not its name, it has no leaf
// remote, or a remote lets the node's subjects cross the link.
var ErrEdgeTopology = errors.New("edge topology")

// checkEdge refuses to run an edge whose embedded server is not a leaf
// of its hub in its own domain, before anything publishes.
func (n *Node) checkEdge() error {
	name := n.cfg.Edge.Name
	if name == "" {
		return nil
	}
	if d := n.NATS.Domain(); d != name {
		return fmt.Errorf("%w: edge %s runs in JetStream domain %q: set jetstream { domain: %s } in nats.conf", ErrEdgeTopology, name, d, name)
	}
	if len(n.NATS.LeafRemotes()) == 0 {
		return fmt.Errorf("%w: edge %s has no leafnodes { remotes } to its hub in nats.conf", ErrEdgeTopology, name)
	}
	if err := n.NATS.CheckLeafIsolation(n.cfg.Names.LeafIsolated()); err != nil {
		return fmt.Errorf("%w: %w", ErrEdgeTopology, err)
	}
	return nil
}

// edgeConfig is cfg.Edge wired with the node's components.
func (n *Node) edgeConfig() edge.Config {
	c := n.cfg.Edge
	c.Conn, c.JetStream, c.Store, c.Schema, c.Names = n.NATS.Conn(), n.NATS.JetStream(), n.Store, n.cfg.Schema, n.cfg.Names
	c.Replicas = max(n.NATS.Replicas(), 1)
	c.Logger = n.log.With("component", "edge")
	return c
}

// newEdgeHub builds the hub side when the homes name edges and this node
// is none of them: it becomes the engine's Router. On an edge the Router
// is edge.Guard, which refuses the partitions homed elsewhere.
func (n *Node) newEdgeHub(ec *engine.Config) error {
	if n.cfg.Edge.Name != "" {
		g, err := edge.NewGuard(n.cfg.Edge)
		if err != nil {
			return err
		}
		ec.Router = g
		return nil
	}
	if len(n.cfg.Edge.Homes) == 0 {
		return nil
	}
	c := n.edgeConfig()
	c.OnApply = n.Relay.Notify
	c.OnReset = n.replicaReset
	c.Blobs = n.Blobs
	h, err := edge.NewHub(c)
	if err != nil {
		return err
	}
	n.EdgeHub, ec.Router = h, h
	return nil
}

// realtimeGate is the serve gate this node's realtime deltas pass. On a
// hub an edge partition's replica must also be servable, as for its
// pulls (edge.Hub.Ready: no migration running at its home, no rebuild):
// the deltas of a home migration's batch commits are refused, and the
// sessions answered reset-required as the home's own are, instead of
// being handed a half-backfilled projection.
func (n *Node) realtimeGate() realtime.Gate {
	if n.EdgeHub == nil {
		return n.Gate
	}
	return replicaGate{n.Gate, n.EdgeHub}
}

type replicaGate struct {
	g   *gate.Gate
	hub *edge.Hub
}

func (r replicaGate) AdmitAt(ctx context.Context, partition, logEpoch string) (gate.Ticket, error) {
	if r.hub.Remote(partition) {
		if err := r.hub.Ready(ctx, partition); err != nil {
			return gate.Ticket{}, err
		}
	}
	return r.g.AdmitAt(ctx, partition, logEpoch)
}

// replicaReset follows a replica rebuilt under an edge's new epoch as
// an epoch rotation here: the partition's token is rewritten (the hub's
// other nodes re-read it) and this node's realtime sessions of it are
// answered with reset-required.
func (n *Node) replicaReset(ctx context.Context, partition string) {
	if err := n.Gate.Publish(ctx, partition); err != nil {
		n.log.Warn("edge: serve-gate token not rewritten after a replica rebuild; the next resync repairs it", "partition", partition, "err", err)
	}
	n.gateChanged(partition)
}

// startEdge starts the edge side (with the engine it runs forwarded
// pushes on) or the hub side.
func (n *Node) startEdge(ctx context.Context, reg prometheus.Registerer) error {
	if n.EdgeHub != nil {
		if err := n.EdgeHub.Start(ctx); err != nil {
			return fmt.Errorf("start edge hub: %w", err)
		}
		return reg.Register(n.EdgeHub.Collector())
	}
	if n.cfg.Edge.Name == "" {
		return nil
	}
	c := n.edgeConfig()
	c.Engine = n.Engine
	h, err := edge.NewHome(c)
	if err != nil {
		return err
	}
	if err := h.Start(ctx); err != nil {
		return fmt.Errorf("start edge: %w", err)
	}
	n.EdgeHome = h
	return nil
}

func (n *Node) stopEdge(ctx context.Context) error {
	var errs []error
	if n.EdgeHome != nil {
		errs = append(errs, n.EdgeHome.Stop(ctx))
	}
	if n.EdgeHub != nil {
		errs = append(errs, n.EdgeHub.Stop(ctx))
	}
	return errors.Join(errs...)
}

// readyDetail is what /readyz adds on a hub: every edge's link and
// replica lag. A cut edge does not make the hub unready: it serves the
// edge's replica read-only meanwhile.
func (n *Node) readyDetail() map[string]any {
	if n.EdgeHub == nil {
		return map[string]any{"edge": n.cfg.Edge.Name, "leafConnections": n.NATS.LeafConnections()}
	}
	return map[string]any{"edges": n.EdgeHub.Status()}
}

// adminExtensions adds the hub's edge.status endpoint to the others.
func (n *Node) adminExtensions(others ...admin.Extension) []admin.Extension {
	if n.EdgeHub != nil {
		others = append(others, edgeAdmin{n.EdgeHub})
	}
	return others
}

// edgeAdmin serves syncnode.admin.edge.status on a hub.
type edgeAdmin struct{ h *edge.Hub }

func (e edgeAdmin) AdminEndpoints() []admin.Endpoint {
	return []admin.Endpoint{{Name: bus.AdminEdgeStatus, EveryNode: true, Handler: admin.Handle(func(context.Context, admin.Empty) ([]edge.LinkStatus, error) {
		return e.h.Status(), nil
	})}}
}

// remoteHome is the hub side as the operations' RemoteHome (commands of
// edge partitions run at the edge), nil on any other node.
func (n *Node) remoteHome() operations.RemoteHome {
	if n.EdgeHub == nil {
		return nil
	}
	return n.EdgeHub
}

// serveForwardedCommands has an edge run the commands its hub forwards.
func (n *Node) serveForwardedCommands(svc *operations.Service) {
	if n.EdgeHome != nil {
		n.EdgeHome.ServeCommands(svc.RunForwarded)
	}
}
