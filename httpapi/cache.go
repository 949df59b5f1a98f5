package httpapi

import (
	"bytes"
	"compress/gzip"
	"container/list"
	"context"
	"sync"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/singleflight"
)

// bodyCache keeps recently served segment bodies per content encoding.
// Segments are immutable, so a body compressed once serves every later
// download of the same address — the bootstrap-storm path compresses and
// reads each segment once per node.
type bodyCache struct {
	mu    sync.Mutex
	max   int64
	size  int64
	lru   *list.List // of *cacheEntry, most recent first
	items map[cacheKey]*list.Element
	group singleflight.Group
}

type cacheKey struct {
	id  string
	enc encoding
}

type cacheEntry struct {
	key  cacheKey
	body []byte
}

func newBodyCache(max int64) *bodyCache {
	return &bodyCache{max: max, lru: list.New(), items: make(map[cacheKey]*list.Element)}
}

// get returns the segment body in encoding enc, loading the raw bytes with
// load on a miss. Concurrent misses for one key load and compress once.
func (c *bodyCache) get(ctx context.Context, id string, enc encoding, load func(context.Context) ([]byte, error)) ([]byte, error) {
	k := cacheKey{id, enc}
	if b, ok := c.lookup(k); ok {
		return b, nil
	}
	v, err, _ := c.group.Do(id+"\x00"+enc.String(), func() (any, error) {
		if b, ok := c.lookup(k); ok {
			return b, nil
		}
		raw, err := c.raw(ctx, id, load)
		if err != nil {
			return nil, err
		}
		body, err := compress(raw, enc)
		if err != nil {
			return nil, err
		}
		c.add(k, body)
		return body, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]byte), nil
}

// raw returns the identity body, from the cache when present.
func (c *bodyCache) raw(ctx context.Context, id string, load func(context.Context) ([]byte, error)) ([]byte, error) {
	k := cacheKey{id, encIdentity}
	if b, ok := c.lookup(k); ok {
		return b, nil
	}
	b, err := load(ctx)
	if err != nil {
		return nil, err
	}
	c.add(k, b)
	return b, nil
}

func (c *bodyCache) lookup(k cacheKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[k]
	if !ok {
		return nil, false
	}
	c.lru.MoveToFront(el)
	return el.Value.(*cacheEntry).body, true
}

func (c *bodyCache) add(k cacheKey, body []byte) {
	n := int64(len(body))
	if n > c.max/4 { // one huge body must not flush the whole cache
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[k]; ok {
		return
	}
	c.items[k] = c.lru.PushFront(&cacheEntry{key: k, body: body})
	c.size += n
	for c.size > c.max {
		el := c.lru.Back()
		e := el.Value.(*cacheEntry)
		c.lru.Remove(el)
		delete(c.items, e.key)
		c.size -= int64(len(e.body))
	}
}

func compress(raw []byte, enc encoding) ([]byte, error) {
	switch enc {
	case encGzip:
		var buf bytes.Buffer
		zw := gzipPool.Get().(*gzip.Writer)
		zw.Reset(&buf)
		if _, err := zw.Write(raw); err != nil {
			return nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, err
		}
		gzipPool.Put(zw)
		return buf.Bytes(), nil
	case encZstd:
		zw := zstdPool.Get().(*zstd.Encoder)
		out := zw.EncodeAll(raw, make([]byte, 0, len(raw)/3))
		zstdPool.Put(zw)
		return out, nil
	}
	return raw, nil
}
