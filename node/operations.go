package node

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/operations"
)

// startOperations validates the registered operations against the schema
// and the store, and returns the HTTP binding (nil when none is
// registered).
func (n *Node) startOperations(ctx context.Context, authn httpapi.Authenticator) (http.Handler, error) {
	oc := n.cfg.Operations
	if !oc.enabled() {
		return nil, nil
	}
	f := operations.File{Queries: slices.Clone(oc.Registry.Queries), Commands: slices.Clone(oc.Registry.Commands)}
	if oc.File != "" {
		ff, err := operations.LoadFile(oc.File)
		if err != nil {
			return nil, err
		}
		f.Queries = append(f.Queries, ff.Queries...)
		f.Commands = append(f.Commands, ff.Commands...)
	}
	reg, err := operations.NewRegistry(ctx, n.cfg.Schema, f)
	if err != nil {
		return nil, err
	}
	if err := reg.Prepare(ctx, n.Store); err != nil {
		return nil, err
	}
	svc, err := operations.New(operations.Config{Schema: n.cfg.Schema, Store: n.Store, Engine: n.Engine, Registry: reg,
		Conn: n.NATS.Conn(), Names: n.cfg.Names, Logger: n.log})
	if err != nil {
		return nil, err
	}
	hub, err := operations.NewHub(operations.HubConfig{Service: svc, JetStream: n.NATS.JetStream(), Names: n.cfg.Names, Logger: n.log})
	if err != nil {
		return nil, err
	}
	if err := hub.Start(ctx); err != nil {
		return nil, fmt.Errorf("operations watch: %w", err)
	}
	n.opsHub = hub
	h, err := operations.NewHandler(operations.HandlerConfig{Service: svc, Auth: authn.Authenticate, Hub: hub,
		MaxBodyBytes: oc.MaxBodyBytes, OriginPatterns: n.cfg.Realtime.Hub.OriginPatterns, Logger: n.log})
	if err != nil {
		return nil, err
	}
	nb, err := operations.NewNATSBinding(operations.NATSConfig{Service: svc, Conn: n.NATS.Conn(), Names: n.cfg.Names, Logger: n.log,
		Auth: func(authorization string) (engine.Identity, error) {
			// The same authenticator as HTTP, over the one header it reads.
			r, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "/operations", nil)
			if err != nil {
				return engine.Identity{}, err
			}
			r.Header.Set("Authorization", authorization)
			return authn.Authenticate(r)
		}})
	if err != nil {
		return nil, err
	}
	if err := nb.Start(ctx); err != nil {
		return nil, err
	}
	n.opsNATS = nb
	n.Operations = svc
	return h, nil
}
