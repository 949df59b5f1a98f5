package segments

import (
	"container/list"
	"context"
	"fmt"
	"sync"
)

// lru is a least-recently-used cache bounded by the summed cost of its
// values. A value costing more than the bound is not kept. max < 0
// disables it.
type lru[K comparable, V any] struct {
	mu   sync.Mutex
	max  int64
	size int64
	cost func(V) int64
	ll   *list.List // of *lruEntry, most recent first
	m    map[K]*list.Element
}

type lruEntry[K comparable, V any] struct {
	key  K
	val  V
	cost int64
}

func newLRU[K comparable, V any](max int64, cost func(V) int64) *lru[K, V] {
	return &lru[K, V]{max: max, cost: cost, ll: list.New(), m: map[K]*list.Element{}}
}

func (c *lru[K, V]) get(k K) (v V, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return v, false
	}
	c.ll.MoveToFront(e)
	return e.Value.(*lruEntry[K, V]).val, true
}

func (c *lru[K, V]) put(k K, v V) {
	cost := c.cost(v)
	if c.max < 0 || cost > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		c.removeElement(e)
	}
	c.m[k] = c.ll.PushFront(&lruEntry[K, V]{key: k, val: v, cost: cost})
	c.size += cost
	for c.size > c.max {
		c.removeElement(c.ll.Back())
	}
}

// removeIf drops every entry for which drop returns true.
func (c *lru[K, V]) removeIf(drop func(K, V) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.ll.Front(); e != nil; {
		next := e.Next()
		ent := e.Value.(*lruEntry[K, V])
		if drop(ent.key, ent.val) {
			c.removeElement(e)
		}
		e = next
	}
}

func (c *lru[K, V]) remove(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		c.removeElement(e)
	}
}

func (c *lru[K, V]) removeElement(e *list.Element) {
	ent := c.ll.Remove(e).(*lruEntry[K, V])
	delete(c.m, ent.key)
	c.size -= ent.cost
}

// usage returns the entries and their summed cost.
func (c *lru[K, V]) usage() (n int, cost int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.size
}

// flight runs one function per key at a time and shares its result with
// every caller that asks for the same key meanwhile. Unlike
// x/sync/singleflight, each caller waits under its own context, and the
// caller that started the work is told so (leader), which is how a build
// is counted once.
type flight[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]*flightCall[V]
	wg sync.WaitGroup // running functions
}

type flightCall[V any] struct {
	done chan struct{}
	val  V
	err  error
}

// do returns fn's result for k, running fn in its own goroutine unless a
// call for k is already running. fn must honour its own deadline: it is
// not cancelled when the callers give up.
func (g *flight[K, V]) do(ctx context.Context, k K, fn func() (V, error)) (v V, leader bool, err error) {
	g.mu.Lock()
	if g.m == nil {
		g.m = map[K]*flightCall[V]{}
	}
	c, running := g.m[k]
	if !running {
		c = &flightCall[V]{done: make(chan struct{})}
		g.m[k] = c
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer func() {
				g.mu.Lock()
				delete(g.m, k)
				g.mu.Unlock()
				close(c.done)
			}()
			defer func() {
				// A panicking build fails its callers, not the node.
				if r := recover(); r != nil {
					c.err = fmt.Errorf("panic: %v", r)
				}
			}()
			c.val, c.err = fn()
		}()
	}
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.val, !running, c.err
	case <-ctx.Done():
		return v, false, ctx.Err()
	}
}

// wait blocks until every running function has returned.
func (g *flight[K, V]) wait() { g.wg.Wait() }
