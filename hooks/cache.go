package hooks

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/syncnode/syncnode/internal/clock"
)

// cache remembers successful hook answers per key until they expire, and
// lets concurrent misses of one key share one request. Failures are never
// cached: the next call asks again. When full it is cleared.
type cache[V any] struct {
	ttl   time.Duration // <= 0: no caching (requests are still shared)
	max   int
	clock clock.Clock

	mu      sync.Mutex
	entries map[string]entry[V]
	group   singleflight.Group
}

type entry[V any] struct {
	v   V
	exp time.Time
}

func newCache[V any](c CacheConfig) *cache[V] {
	return &cache[V]{ttl: c.TTL, max: c.Size, clock: c.Clock, entries: map[string]entry[V]{}}
}

// get returns the cached value of key, or fetches it. fetch returns the
// value and how long it may be kept at most (0: the cache's TTL). hit
// reports a cached answer.
func (c *cache[V]) get(ctx context.Context, key string, fetch func(ctx context.Context) (V, time.Duration, error)) (v V, hit bool, err error) {
	now := c.clock.Now()
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && now.Before(e.exp) {
		return e.v, true, nil
	}
	// The shared request must not die with the first caller's context
	// (the hook's deadline bounds it); each caller waits on its own.
	ch := c.group.DoChan(key, func() (any, error) {
		v, keep, err := fetch(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
		ttl := c.ttl
		if keep > 0 && keep < ttl {
			ttl = keep
		}
		if ttl > 0 {
			c.mu.Lock()
			if len(c.entries) >= c.max {
				clear(c.entries)
			}
			c.entries[key] = entry[V]{v: v, exp: c.clock.Now().Add(ttl)}
			c.mu.Unlock()
		}
		return v, nil
	})
	select {
	case <-ctx.Done():
		return v, false, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return v, false, r.Err
		}
		return r.Val.(V), false, nil
	}
}
