package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

// Wildcard in an allowed-scope list means "any value" (SPEC.md §3.2). It is
// never valid in requested scopes.
const Wildcard = "*"

// Allowed is what a resolver grants an actor: scope variable → values,
// where Wildcard grants any value. One map covers every table.
type Allowed map[string][]string

// Resolver resolves an actor's allowed scopes. It is called at most once
// per request; the result is memoized for the request's pulls and writes.
//
// Returning an error fails closed: every subscription of the request is
// revoked and every write is refused with sync.forbidden (SPEC.md §3.2
// rule 5, §3.4 step 4).
type Resolver interface {
	ResolveScopes(ctx context.Context, partition, actorID string) (Allowed, error)
}

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func(ctx context.Context, partition, actorID string) (Allowed, error)

// ResolveScopes calls f.
func (f ResolverFunc) ResolveScopes(ctx context.Context, partition, actorID string) (Allowed, error) {
	return f(ctx, partition, actorID)
}

// StaticScopes is a Resolver that grants the same scopes to everyone it is
// asked about; the JWT transport builds one per request from the token's
// scopes claim.
type StaticScopes Allowed

// ResolveScopes returns the static grant.
func (s StaticScopes) ResolveScopes(context.Context, string, string) (Allowed, error) {
	return Allowed(s), nil
}

// errResolverFailed marks a failed resolution inside a request.
var errResolverFailed = errors.New("scope resolver failed")

// ErrResolverOutage is how a resolver signals that the live authority is
// unavailable rather than that resolution failed (SPEC.md §7.3.3): return
// an error wrapping it. With auth leases on (Config.Leases) the request is
// then served with the client's valid lease, or refused with
// sync.auth_lease_required / sync.auth_lease_revoked; without leases it
// fails closed like any failed resolution.
var ErrResolverOutage = errors.New("scope resolver outage")

// LeaseAuthority issues and consults auth leases (SPEC.md §7.3);
// *leases.Leases implements it.
type LeaseAuthority interface {
	// Refresh issues or slides the client's lease after the resolver
	// granted allowed; ok=false sends no LEASE frame (a revoked lease).
	Refresh(ctx context.Context, partition, clientID, actorID string, allowed Allowed, nowMs int64) (lease ssp2.Lease, ok bool, err error)
	// Authorize returns the scopes of the client's valid lease during an
	// outage, or an *ssp2.Error with the lease code that refuses it.
	Authorize(ctx context.Context, partition, clientID, actorID string, nowMs int64) (Allowed, error)
}

// resolvedScopes is the memoized outcome of one request's resolution.
type resolvedScopes struct {
	allowed Allowed
	err     error // non-nil: fail closed
	outage  bool  // err wraps ErrResolverOutage
}

// resolve runs the resolver once and validates its result: a key no table
// declares is a server bug that fails the whole request (SPEC.md §3.2 rule
// 3) — reported as a request-level error rather than a closed failure.
func resolve(ctx context.Context, r Resolver, s *schema.Schema, partition, actor string) (resolvedScopes, error) {
	if r == nil {
		return resolvedScopes{err: errResolverFailed}, nil
	}
	allowed, err := r.ResolveScopes(ctx, partition, actor)
	if err != nil {
		if ctx.Err() != nil {
			return resolvedScopes{}, ctx.Err()
		}
		return resolvedScopes{err: fmt.Errorf("%w: %w", errResolverFailed, err), outage: errors.Is(err, ErrResolverOutage)}, nil
	}
	for k := range allowed {
		if !s.HasVariable(k) {
			return resolvedScopes{}, ssp2.Errorf(ssp2.CodeInvalidSubscription, "the scope resolver returned the undeclared scope variable %q", k)
		}
	}
	return resolvedScopes{allowed: allowed}, nil
}

// withLease resolves a request's scopes for clientID (SPEC.md §7.3.3): an
// outage with leases on is answered from the client's valid lease (or
// refused with its code); otherwise the resolution stands.
func (e *Engine) withLease(ctx context.Context, rs resolvedScopes, id Identity, clientID string) (resolvedScopes, bool, error) {
	if !rs.outage || e.cfg.Leases == nil {
		return rs, false, nil
	}
	allowed, err := e.cfg.Leases.Authorize(ctx, id.Partition, clientID, id.ActorID, e.nowMs())
	if err != nil {
		return resolvedScopes{}, false, internal("authorize by lease", err)
	}
	return resolvedScopes{allowed: allowed}, true, nil
}

// effectiveScopes intersects requested scopes with allowed ones (SPEC.md
// §3.2 rules 4–5). It returns ok=false when the subscription is revoked:
// the resolver failed, a requested key lost every value, or nothing was
// requested. Values keep the request's order, deduplicated.
func (r resolvedScopes) effectiveScopes(requested map[string][]string) (map[string][]string, bool) {
	if r.err != nil || len(requested) == 0 {
		return nil, false
	}
	eff := make(map[string][]string, len(requested))
	for k, want := range requested {
		grant, ok := r.allowed[k]
		if !ok {
			return nil, false
		}
		wild := slices.Contains(grant, Wildcard)
		var vals []string
		for _, v := range want {
			if (wild || slices.Contains(grant, v)) && !slices.Contains(vals, v) {
				vals = append(vals, v)
			}
		}
		if len(vals) == 0 {
			return nil, false
		}
		eff[k] = vals
	}
	return eff, true
}

// authorizes reports whether the actor may write a row whose stored scopes
// are scopes: every variable the table declares must carry a value the
// actor holds, or the actor holds Wildcard for it (SPEC.md §3.4 step 3).
func (r resolvedScopes) authorizes(t *schema.Table, scopes map[string]string) bool {
	if r.err != nil {
		return false
	}
	for _, sc := range t.Scopes {
		v, ok := scopes[sc.Variable]
		if !ok || v == "" {
			return false
		}
		grant := r.allowed[sc.Variable]
		if !slices.Contains(grant, Wildcard) && !slices.Contains(grant, v) {
			return false
		}
	}
	return true
}

// validateRequested checks a subscription's requested scopes against its
// table (SPEC.md §3.2 rule 2): every key must be a variable the table
// declares and no value may be Wildcard.
func validateRequested(t *schema.Table, requested map[string][]string) error {
	for k, vals := range requested {
		if _, ok := t.Scope(k); !ok {
			return ssp2.Errorf(ssp2.CodeInvalidSubscription, "table %s declares no scope variable %q", t.Name, k)
		}
		if slices.Contains(vals, Wildcard) {
			return ssp2.Errorf(ssp2.CodeInvalidSubscription, "requested scope %q must not contain %q", k, Wildcard)
		}
	}
	return nil
}
