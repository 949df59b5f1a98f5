package hooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/clock"
)

// TokenRequest is what the node asks on syncnode.hook.token: the bearer
// token of a request, without the "Bearer " prefix.
type TokenRequest struct {
	Token string `json:"token"`
}

// TokenReply is a verified token: the actor, the partition and the
// allowed scopes (absent: none; the scopes hook, when configured, decides
// instead). ExpiresAtMs, when set, bounds how long the node may reuse the
// answer. A token the hook refuses is an error reply.
type TokenReply struct {
	ErrorReply
	ActorID     string              `json:"actorId"`
	Partition   string              `json:"partition"`
	Scopes      map[string][]string `json:"scopes,omitempty"`
	ExpiresAtMs int64               `json:"expiresAtMs,omitempty"`
}

func (r *TokenReply) check() error {
	if r.ActorID == "" || r.Partition == "" {
		return errors.New(`"actorId" and "partition" are required`)
	}
	return nil
}

// Defaults of the token hook.
const (
	DefaultTokenTimeout  = 250 * time.Millisecond
	DefaultTokenCacheTTL = 30 * time.Second
)

// TokenConfig configures the token-verification hook.
type TokenConfig struct {
	// Conn is the node's NATS connection. Required.
	Conn *nats.Conn
	// Timeout bounds one request (default DefaultTokenTimeout).
	Timeout time.Duration
	// Cache keeps a verified token (its TTL defaults to
	// DefaultTokenCacheTTL), never past the answer's ExpiresAtMs.
	Cache   CacheConfig
	Metrics *Metrics
}

// WithDefaults returns c with unset fields defaulted.
func (c TokenConfig) WithDefaults() TokenConfig {
	if c.Timeout == 0 {
		c.Timeout = DefaultTokenTimeout
	}
	c.Cache = c.Cache.withDefaults(DefaultTokenCacheTTL)
	return c
}

// Validate reports every invalid field.
func (c TokenConfig) Validate() error {
	return validateCommon(bus.HookToken, c.Conn, c.Timeout, c.Cache)
}

// Tokens verifies bearer tokens by asking a host process on
// syncnode.hook.token, for deployments whose identity service is on the
// bus. It is an httpapi.Authenticator: any failure — a refusal, a
// timeout, no hook process — is unauthenticated (401
// sync.auth_required), never a pass.
type Tokens struct {
	c     caller
	cache *cache[auth.Principal]
	clock clock.Clock
	m     *Metrics
}

// NewTokens validates cfg and returns the hook client.
func NewTokens(cfg TokenConfig) (*Tokens, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Tokens{
		c:     caller{nc: cfg.Conn, hook: bus.HookToken, timeout: cfg.Timeout, m: cfg.Metrics},
		cache: newCache[auth.Principal](cfg.Cache),
		clock: cfg.Cache.Clock,
		m:     cfg.Metrics,
	}, nil
}

// errExpired is a hook answer whose expiry has passed.
var errExpired = errors.New("the hook's answer has already expired")

// Verify asks the hook about token (or reuses a recent answer). Every
// failure matches auth.ErrUnauthenticated.
func (t *Tokens) Verify(ctx context.Context, token string) (auth.Principal, error) {
	if token == "" {
		return auth.Principal{}, fmt.Errorf("%w: empty token", auth.ErrUnauthenticated)
	}
	p, hit, err := t.cache.get(ctx, token, func(ctx context.Context) (auth.Principal, time.Duration, error) {
		var r TokenReply
		if err := t.c.call(ctx, bus.HookTokenSubject(), TokenRequest{Token: token}, &r); err != nil {
			return auth.Principal{}, 0, err
		}
		var keep time.Duration
		if r.ExpiresAtMs > 0 {
			if keep = time.UnixMilli(r.ExpiresAtMs).Sub(t.clock.Now()); keep <= 0 {
				return auth.Principal{}, 0, errExpired
			}
		}
		return auth.Principal{ActorID: r.ActorID, Partition: r.Partition, Scopes: r.Scopes}, keep, nil
	})
	if err != nil {
		return auth.Principal{}, fmt.Errorf("%w: %w", auth.ErrUnauthenticated, err)
	}
	if hit {
		t.m.cacheHit(bus.HookToken)
	}
	return p, nil
}

// Authenticate implements httpapi.Authenticator: the Authorization
// header's bearer token, verified by the hook; its scopes are the
// request's allowed scopes.
func (t *Tokens) Authenticate(r *http.Request) (engine.Identity, error) {
	tok, err := auth.BearerToken(r.Header.Get("Authorization"))
	if err != nil {
		return engine.Identity{}, err
	}
	p, err := t.Verify(r.Context(), tok)
	if err != nil {
		return engine.Identity{}, err
	}
	return engine.Identity{Partition: p.Partition, ActorID: p.ActorID, Scopes: engine.StaticScopes(p.Scopes)}, nil
}
