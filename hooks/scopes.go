package hooks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/clock"
)

// ScopesRequest is what the node asks on syncnode.hook.scopes.<partition>.
type ScopesRequest struct {
	Partition string `json:"partition"`
	ActorID   string `json:"actorId"`
}

// ScopesReply grants the actor's allowed scopes: scope variable → values,
// "*" granting any value; {} grants nothing. The scopes field is
// required.
type ScopesReply struct {
	ErrorReply
	Scopes map[string][]string `json:"scopes"`
}

func (r *ScopesReply) check() error {
	if r.Scopes == nil {
		return errors.New(`no "scopes" object`)
	}
	return nil
}

// Defaults of the scopes hook.
const (
	DefaultScopesTimeout  = 250 * time.Millisecond
	DefaultScopesCacheTTL = 30 * time.Second
	DefaultCacheSize      = 10_000
)

// ScopesConfig configures the scope-resolution hook.
type ScopesConfig struct {
	// Conn is the node's NATS connection. Required.
	Conn *nats.Conn
	// Timeout bounds one request (default DefaultScopesTimeout).
	Timeout time.Duration
	// Cache keeps an answer per (partition, actor); its TTL defaults to
	// DefaultScopesCacheTTL. A revoked grant takes effect within it.
	Cache   CacheConfig
	Metrics *Metrics
}

// WithDefaults returns c with unset fields defaulted.
func (c ScopesConfig) WithDefaults() ScopesConfig {
	if c.Timeout == 0 {
		c.Timeout = DefaultScopesTimeout
	}
	c.Cache = c.Cache.withDefaults(DefaultScopesCacheTTL)
	return c
}

// Validate reports every invalid field.
func (c ScopesConfig) Validate() error {
	return validateCommon(bus.HookScopes, c.Conn, c.Timeout, c.Cache)
}

// CacheConfig is the answer cache of the scopes and token hooks.
type CacheConfig struct {
	// TTL is how long an answer is reused (zero: the hook's default;
	// negative: ask on every request).
	TTL time.Duration
	// Size bounds the cached entries (default DefaultCacheSize).
	Size  int
	Clock clock.Clock
}

func (c CacheConfig) withDefaults(ttl time.Duration) CacheConfig {
	if c.TTL == 0 {
		c.TTL = ttl
	}
	if c.Size == 0 {
		c.Size = DefaultCacheSize
	}
	c.Clock = clock.Or(c.Clock)
	return c
}

func validateCommon(hook string, nc *nats.Conn, timeout time.Duration, cache CacheConfig) error {
	var errs []error
	if nc == nil {
		errs = append(errs, fmt.Errorf("hooks config: %s: Conn is required", hook))
	}
	if timeout < 0 {
		errs = append(errs, fmt.Errorf("hooks config: %s: Timeout must not be negative", hook))
	}
	if cache.Size < 0 {
		errs = append(errs, fmt.Errorf("hooks config: %s: Cache.Size must not be negative", hook))
	}
	return errors.Join(errs...)
}

// Scopes resolves allowed scopes by asking a host process on
// syncnode.hook.scopes.<partition>. It implements engine.Resolver: a
// timeout, an error answer or a malformed one is returned as an error,
// and the engine fails the request closed (every subscription revoked,
// every write refused with sync.forbidden), exactly as for any failing
// resolver. Answers are cached per (partition, actor) for CacheTTL;
// failures are not.
type Scopes struct {
	c     caller
	cache *cache[engine.Allowed]
	m     *Metrics
}

var _ engine.Resolver = (*Scopes)(nil)

// NewScopes validates cfg and returns the hook client.
func NewScopes(cfg ScopesConfig) (*Scopes, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Scopes{
		c:     caller{nc: cfg.Conn, hook: bus.HookScopes, timeout: cfg.Timeout, m: cfg.Metrics},
		cache: newCache[engine.Allowed](cfg.Cache),
		m:     cfg.Metrics,
	}, nil
}

// ResolveScopes implements engine.Resolver. The returned map is shared by
// every request served from the cache and must not be modified.
func (s *Scopes) ResolveScopes(ctx context.Context, partition, actorID string) (engine.Allowed, error) {
	// The raw ids key the cache, the partition's length first so that no
	// two pairs share a key; a hit costs a map lookup, and the partition
	// is escaped into its subject only to ask.
	key := strconv.Itoa(len(partition)) + ":" + partition + actorID
	allowed, hit, err := s.cache.get(ctx, key, func(ctx context.Context) (engine.Allowed, time.Duration, error) {
		p, err := bus.NewPartition(partition)
		if err != nil {
			return nil, 0, fmt.Errorf("hook scopes: %w", err)
		}
		var r ScopesReply
		if err := s.c.call(ctx, bus.HookScopesSubject(p), ScopesRequest{Partition: partition, ActorID: actorID}, &r); err != nil {
			return nil, 0, err
		}
		return engine.Allowed(r.Scopes), 0, nil
	})
	if hit {
		s.m.cacheHit(bus.HookScopes)
	}
	var he *Error
	if errors.As(err, &he) && he.Code == OutageCode {
		// The host says its authority is down: auth leases may serve.
		return nil, fmt.Errorf("%w: %w", engine.ErrResolverOutage, err)
	}
	return allowed, err
}

// OutageCode is the error code a scopes hook answers to signal that the
// live authority is unavailable rather than that the actor has no
// grant: {"error": {"code": "outage"}}. With auth leases on, the request
// is then served with the client's valid lease (SPEC.md §7.3.3); any other
// error fails closed.
const OutageCode = "outage"
