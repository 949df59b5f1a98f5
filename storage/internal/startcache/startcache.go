// Package startcache holds the partition rows and client records a store
// serves the start of a request from (storage.RequestStarter) without
// reading them, on a node whose store can tell when anything else wrote.
//
// The cache is only ever behind the database by writes it has not been
// told of yet; the store's duty is to tell it: every write of its own
// that changes a cached field updates or drops the entry once it
// committed, and a write of another process (or another store on the
// same database) clears the whole cache before a request can be served
// from it (sqlitestore: PRAGMA data_version on the writer connection).
//
// Fills race with writes: a request that read the database before a
// write committed must not put its older view back after the write
// updated or dropped the entry. Every fill and every update made from a
// write therefore carries the generation taken before its read (Gen) and
// is ignored when a drop or a significant update (a binding, a new
// subscription list) came in between. Cursor advances and last-seen
// refreshes do not move the generation: an older cursor or last-seen
// time only costs one more advance or refresh, never a wrong answer.
package startcache

import (
	"sync"

	"github.com/syncnode/syncnode/storage"
)

// Bounds: past MaxPartitions partitions or MaxClients client records in
// all, the cache forgets everything (it is only a cache: the next
// request of each reads the database again).
const (
	MaxPartitions = 4096
	MaxClients    = 16384
)

type entry struct {
	p       storage.Partition
	clients map[string]storage.Client
}

// Cache is one store's cache. The zero value is empty and ready.
type Cache struct {
	mu      sync.Mutex
	gen     uint64
	parts   map[string]*entry
	clients int
}

// Gen is the generation to give Fill, SetPartition or SetClient for what
// the caller is about to read (or write).
func (c *Cache) Gen() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// Has reports whether the partition row and the client record are both
// cached, without copying them: whether it is worth making the cache
// current (the store's freshness check) before Get.
func (c *Cache) Has(partition, clientID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.parts[partition]
	if e == nil {
		return false
	}
	_, ok := e.clients[clientID]
	return ok
}

// Get returns the cached partition row and client record; ok only when
// both are cached.
func (c *Cache) Get(partition, clientID string) (storage.Partition, storage.Client, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.parts[partition]
	if e == nil {
		return storage.Partition{}, storage.Client{}, false
	}
	cl, ok := e.clients[clientID]
	if !ok {
		return storage.Partition{}, storage.Client{}, false
	}
	return e.p, cl, true
}

// Fill caches what a read found, read after Gen returned gen: the
// partition row and, when hasClient, the client record. It does nothing
// when the generation moved on since.
func (c *Cache) Fill(gen uint64, p storage.Partition, cl storage.Client, hasClient bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	e := c.partition(p)
	if hasClient {
		c.putClient(e, cl)
	}
}

// SetPartition caches a partition row a write of the store read after
// Gen returned gen (a last-seen refresh): as Fill, without a client.
func (c *Cache) SetPartition(gen uint64, p storage.Partition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	c.partition(p)
}

// SetClient caches the client record a write of the store stored (a
// binding, a new subscription list) after Gen returned gen, in a
// partition whose row is cached, and moves the generation on so no older
// read is filled over it. A record whose partition row is not cached is
// only dropped.
func (c *Cache) SetClient(gen uint64, cl storage.Client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stale := gen != c.gen
	c.gen++
	e := c.parts[cl.Partition]
	if e == nil {
		return
	}
	if stale {
		c.dropClient(e, cl.ClientID)
		return
	}
	c.putClient(e, cl)
}

// Advance applies a cursor advance the store accepted
// (storage.Store.ClientAdvance) to a cached record of the same actor in
// the same epoch, as the store will apply it: the furthest cursor and
// time.
func (c *Cache) Advance(p storage.ClientAckParams) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.parts[p.Partition]
	if e == nil {
		return
	}
	cl, ok := e.clients[p.ClientID]
	if !ok {
		return
	}
	if cl.ActorID != p.ActorID || e.p.LogEpoch != p.LogEpoch {
		// The store's conditional update will not apply it either.
		return
	}
	cl.Cursor, cl.UpdatedAtMs = max(cl.Cursor, p.Cursor), max(cl.UpdatedAtMs, p.NowMs)
	e.clients[p.ClientID] = cl
}

// DropClient forgets one client record.
func (c *Cache) DropClient(partition, clientID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if e := c.parts[partition]; e != nil {
		c.dropClient(e, clientID)
	}
}

// Drop forgets a partition row and its client records: after a write
// that changed the row (epoch, horizon, adoption) or removed records.
func (c *Cache) Drop(partition string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if e := c.parts[partition]; e != nil {
		c.clients -= len(e.clients)
		delete(c.parts, partition)
	}
}

// Clear forgets everything: another process wrote.
func (c *Cache) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.parts, c.clients = nil, 0
}

// partition caches p's row, keeping the client records of an entry that
// exists.
func (c *Cache) partition(p storage.Partition) *entry {
	if e := c.parts[p.ID]; e != nil {
		e.p = p
		return e
	}
	if c.parts == nil || len(c.parts) >= MaxPartitions {
		c.parts, c.clients = map[string]*entry{}, 0
	}
	e := &entry{p: p, clients: map[string]storage.Client{}}
	c.parts[p.ID] = e
	return e
}

func (c *Cache) putClient(e *entry, cl storage.Client) {
	if _, ok := e.clients[cl.ClientID]; !ok {
		if c.clients >= MaxClients {
			// Forget every record; this partition's row stays.
			c.parts = map[string]*entry{e.p.ID: e}
			clear(e.clients)
			c.clients = 0
		}
		c.clients++
	}
	e.clients[cl.ClientID] = cl
}

func (c *Cache) dropClient(e *entry, clientID string) {
	if _, ok := e.clients[clientID]; ok {
		delete(e.clients, clientID)
		c.clients--
	}
}
