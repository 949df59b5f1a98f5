package node

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncnode/syncnode/admin"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/hooks"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/reactions"
)

// startHooks builds the configured host hooks and returns the request
// authenticator and the whole-commit validator with them in place: the
// token hook authenticates, the scopes hook replaces the identity's
// resolver, and the validate hook runs after the host's own validator.
func (n *Node) startHooks(authn httpapi.Authenticator, cv engine.CommitValidator, reg prometheus.Registerer, query hooks.CandidateQuery) (httpapi.Authenticator, engine.CommitValidator, error) {
	m, err := hooks.NewMetrics(reg)
	if err != nil {
		return nil, nil, fmt.Errorf("hook metrics: %w", err)
	}
	hc := n.cfg.Hooks
	if hc.Validate != nil && hc.Validate.Reads {
		vc := *hc.Validate
		vc.Query = query
		hc.Validate = &vc
	}
	if n.Hooks, err = hooks.New(n.NATS.Conn(), hc, m, n.cfg.Clock); err != nil {
		return nil, nil, err
	}
	if n.Hooks.Tokens != nil {
		authn = n.Hooks.Tokens
	}
	if sc := n.Hooks.Scopes; sc != nil {
		inner := authn
		authn = httpapi.AuthenticatorFunc(func(r *http.Request) (engine.Identity, error) {
			id, err := inner.Authenticate(r)
			id.Scopes = sc
			return id, err
		})
	}
	if v := n.Hooks.Validator; v != nil {
		cv = engine.ChainCommitValidators(cv, v.Validate)
	}
	return authn, cv, nil
}

// startAdmin serves the admin API on a connection of its own.
func (n *Node) startAdmin(ctx context.Context) error {
	nc, err := n.NATS.Connect()
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	n.adminConn = nc
	storage := "sqlite"
	if n.cfg.Store.isPostgres() {
		storage = "postgres"
	}
	// The reactions endpoints answer whether or not this node runs a
	// runner: the table is the deployment's.
	rx, err := reactions.NewAdmin(reactions.AdminConfig{Store: n.Store, Conn: nc, Names: n.cfg.Names, Node: n.cfg.Name,
		Runner: n.Reactions, Clock: n.cfg.Clock, Logger: n.log.With("component", "admin")})
	if err != nil {
		return err
	}
	var ls admin.Leases
	if n.Leases != nil {
		ls = n.Leases
	}
	if n.Admin, err = admin.New(admin.Config{
		Conn: nc, Node: n.cfg.Name, Version: n.cfg.Admin.Version, Storage: storage, Hooks: n.Hooks.Names(),
		Store: n.Store, Gate: n.Gate, Segments: n.Segments, Relay: n.Relay, JetStream: n.NATS.JetStream(), Names: n.cfg.Names,
		Leases: ls, Ready: n.ready, Extensions: n.adminExtensions(rx), Clock: n.cfg.Clock, Logger: n.log.With("component", "admin"),
	}); err != nil {
		return err
	}
	return n.Admin.Start(ctx)
}
