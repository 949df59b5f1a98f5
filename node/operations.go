package node

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/hooks"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/operations"
)

// loadOperations validates the registered operations against the schema
// and the store (nil when none is registered). It runs before the hooks
// start: the validate hook's reads run the registry's queries.
func (n *Node) loadOperations(ctx context.Context) (*operations.Registry, error) {
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
	return reg, nil
}

// candidateQuery runs reg's queries for the validate hook's reads.
func candidateQuery(reg *operations.Registry) hooks.CandidateQuery {
	if reg == nil {
		return nil
	}
	return func(ctx context.Context, rd engine.CandidateReader, id string, params []any) (hooks.QueryResult, *hooks.ReplyError) {
		res, err := reg.QueryCandidate(ctx, rd, id, params...)
		if err != nil {
			e := operations.ErrorOf(err)
			return hooks.QueryResult{}, &hooks.ReplyError{Code: e.Code, Message: e.Message}
		}
		out := hooks.QueryResult{MaxCommitSeq: res.MaxCommitSeq, Rows: make([]engine.Row, len(res.Rows))}
		for i, row := range res.Rows {
			r := make(engine.Row, len(row))
			for _, f := range row {
				r[f.Key] = f.Value
			}
			out.Rows[i] = r
		}
		return out, nil
	}
}

// startOperations serves the registered operations (reg, from
// loadOperations) and returns the HTTP binding (nil when none is
// registered).
func (n *Node) startOperations(ctx context.Context, reg *operations.Registry, authn httpapi.Authenticator, prom prometheus.Registerer) (http.Handler, error) {
	if reg == nil {
		return nil, nil
	}
	oc := n.cfg.Operations
	svc, err := operations.New(operations.Config{Schema: n.cfg.Schema, Store: n.Store, Engine: n.Engine, Registry: reg,
		Conn: n.NATS.Conn(), Names: n.cfg.Names, Remote: n.remoteHome(), Logger: n.log})
	if err != nil {
		return nil, err
	}
	n.serveForwardedCommands(svc)
	hub, err := operations.NewHub(operations.HubConfig{Service: svc, Conn: n.NATS.Conn(), Names: n.cfg.Names, Logger: n.log})
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
	m, hm := svc.Metrics(), hub.Metrics()
	for _, c := range []struct {
		name, help string
		v          func() int64
	}{
		{"syncnode_operations_queries_total", "Remote queries run.", m.Queries.Load},
		{"syncnode_operations_commands_total", "Remote commands run.", m.Commands.Load},
		{"syncnode_operations_errors_total", "Remote operations answered with an error.", m.Errors.Load},
		{"syncnode_operations_watch_snapshots_total", "Watch snapshots sent.", hm.Snapshots.Load},
		{"syncnode_operations_watch_reruns_total", "Watch reruns asked by commits.", hm.Reruns.Load},
	} {
		v := c.v
		if err := prom.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help}, func() float64 { return float64(v()) })); err != nil {
			return nil, err
		}
	}
	if err := prom.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "syncnode_operations_watches", Help: "Active watches."},
		func() float64 { return float64(hm.Watches.Load()) })); err != nil {
		return nil, err
	}
	return h, nil
}
