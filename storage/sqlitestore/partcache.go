package sqlitestore

import (
	"context"
	"reflect"
	"slices"
	"sync"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/gatecore"
)

// The partition cache serves a pull section's partition row and gate
// state (tx.Partition, then GateRead) without the statement that reads
// them, when the section planned its window (storage.WindowPlanner: its
// fn may run twice). Unlike the start cache (startcache, which may lag
// on MaxCommitSeq and HorizonSeq because the engine reads them again),
// an entry here is exact: the serving snapshot must hold exactly the row
// and the gate state it answers with, or a prune, a rotation or a gate
// change could be served around.
//
// Exactness comes from the writer, which makes every commit of this
// store, and a check after the snapshot began:
//
//   - Every member of a group transaction says what it may have changed
//     of partition rows and gate state (writeReq.touch; a write that does
//     not say is taken to change them all). A WriteTx member changes its
//     own partition's only, and, unless it wrote the row itself (rawTx:
//     prune, rotation, rebase, wipe, seed), only its max commitSeq, which
//     the transaction counts (tx.maxSeq). Before its COMMIT the
//     coordinator moves begun on; once committed it applies the members'
//     changes (groupTouches: new max commitSeqs, dropped entries) and sets
//     done to begun. Between the two, begun != done: no answer is taken
//     from the cache while a COMMIT may be becoming visible.
//   - A commit from outside (another process, another Store on the file)
//     is seen by checkForeign (fresh.go), which clears the cache and
//     moves begun and done on.
//   - A section served from the cache noted done (d0) with the entry.
//     After fn ran, and so after its snapshot began (SQLite fixes a
//     deferred transaction's snapshot at its first read), the store makes
//     sure every commit from outside before now was seen (Store.current)
//     and that begun is still d0. Then nothing committed between taking
//     the entry and now, so the snapshot holds what the entry says. If
//     not (the writer was committing, or a commit came in), the section
//     reads the row in its own snapshot, and keeps its answer if the row
//     and the gate state are the same as the cached ones; else fn runs
//     again in the same snapshot, without the cache.
//   - A section that read the row itself fills the cache with it when
//     begun is still the done it noted before its first read: no commit
//     began since, so the row is the one of state d0. A commit from
//     outside after its snapshot began is seen by the next check of a
//     section served from it, which clears the entry first.
//
// PostgreSQL has no such cache: its pull section is one pipelined round
// trip already (pgstore, plan.go).

// maxPartEntries bounds the cache; past it, it forgets everything.
const maxPartEntries = 4096

type partEntry struct {
	p    storage.Partition
	gate *gatecore.Prefetch
}

type partCache struct {
	mu    sync.Mutex
	begun uint64 // commits (and commits from outside seen) begun
	done  uint64 // ... and finished: the state entries are exact for
	// sig counts the commits begun that did more than append commits to
	// partitions (drops, a write that does not say, commits from outside);
	// pendingSig marks one begun and not finished.
	sig        uint64
	pendingSig bool
	parts      map[string]partEntry
	// Counters for tests and the stats: sections served from the cache,
	// checks that failed but found the same row, and reruns.
	hits, verified, reruns uint64
}

// touch is what a write may change of partition rows and gate state.
type touch struct {
	none      bool   // neither
	partition string // only this partition's (when not none)
	// out, for a WriteTx member, is what its fn did, once it returned.
	out *partWrite
}

// partWrite is what a WriteTx member's fn did to its partition's row: a
// plain one (not rowChanged) moved its max commitSeq alone, to maxSeq.
type partWrite struct {
	set        bool
	rowChanged bool
	maxSeq     int64
}

var (
	touchAll  = touch{}
	touchNone = touch{none: true}
)

func touchOf(partition string) touch { return touch{partition: partition} }

// get returns the entry of partition, the state it is exact for and the
// count of significant commits; none while a significant commit is under
// way (a commit that appends only may be: the entry is then the state
// before it).
func (c *partCache) get(partition string) (e partEntry, done, sig uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok = c.parts[partition]
	return e, c.done, c.sig, ok && !c.pendingSig
}

// state is done, to note before a section's first read.
func (c *partCache) state() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

// fill caches what a section read in a snapshot that began after state
// returned d0, if no commit finished since and none significant is under
// way. The snapshot may hold a commit that is under way (appends only):
// end applies its max commitSeq to the entry as to any other.
func (c *partCache) fill(d0 uint64, e partEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != d0 || c.pendingSig {
		return
	}
	if c.parts == nil || len(c.parts) >= maxPartEntries {
		c.parts = map[string]partEntry{}
	}
	c.parts[e.p.ID] = e
}

// since reports whether nothing began to commit since state d0, and
// whether nothing but appends of commits began since sig was sig0.
func (c *partCache) since(d0, sig0 uint64) (unchanged, appended bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.begun == d0, c.sig == sig0
}

// begin marks a COMMIT (or a commit from outside) about to be visible;
// significant when it does more than append commits.
func (c *partCache) begin(significant bool) {
	c.mu.Lock()
	c.begun++
	if significant {
		c.sig++
		c.pendingSig = true
	}
	c.mu.Unlock()
}

// end finishes what begin started, for a group that committed: every
// entry is dropped, or the group's changes are applied to them.
func (c *partCache) end(g *groupTouches) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case g == nil || g.all:
		c.parts = nil
	default:
		for id, seq := range g.seqs {
			if e, ok := c.parts[id]; ok {
				e.p.MaxCommitSeq = seq
				c.parts[id] = e
			}
		}
		for _, id := range g.drop {
			delete(c.parts, id)
		}
	}
	c.done, c.pendingSig = c.begun, false
}

// foreign handles a commit from outside: forget everything.
func (c *partCache) foreign() {
	c.begin(true)
	c.end(nil)
}

func (c *partCache) count(hit, verified, rerun bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case rerun:
		c.reruns++
	case verified:
		c.verified++
	case hit:
		c.hits++
	}
}

// partCacheCounts are the partition cache's counters (tests).
type partCacheCounts struct{ Hits, Verified, Reruns uint64 }

// partCacheStats returns the partition cache's counters.
func (s *Store) partCacheStats() partCacheCounts {
	c := &s.parts
	c.mu.Lock()
	defer c.mu.Unlock()
	return partCacheCounts{Hits: c.hits, Verified: c.verified, Reruns: c.reruns}
}

// sameGate reports whether two prefetched gate states are the same.
func sameGate(a, b *gatecore.Prefetch) bool {
	return reflect.DeepEqual(a, b)
}

// groupTouches collects what the members of a group that succeeded
// changed, in their order: a plain WriteTx member's partition row has
// the member's max commitSeq (seqs), any other write of a partition row
// drops its entry for good (drop), and a write that does not say what it
// touches drops them all.
type groupTouches struct {
	all  bool
	seqs map[string]int64
	drop []string
}

// significant reports whether the group did more than append commits.
func (g *groupTouches) significant() bool { return g.all || len(g.drop) > 0 }

func (g *groupTouches) add(t touch) {
	switch {
	case t.none || g.all:
	case t.partition == "":
		g.all = true
	case t.out != nil && t.out.set && !t.out.rowChanged && !slices.Contains(g.drop, t.partition):
		if g.seqs == nil {
			g.seqs = map[string]int64{}
		}
		g.seqs[t.partition] = t.out.maxSeq
	default:
		g.drop = append(g.drop, t.partition)
	}
}

// checkCached finishes a section fn served from the cache (t.fromCache):
// it reports whether fn's answer is the one of its snapshot, checking it
// with a read in the snapshot when the writer cannot say.
//
// Two cases need no read, once every commit from outside before now has
// been seen (Store.current): nothing began to commit since the entry was
// taken, so the snapshot holds that state; or fn ran nothing but the
// planned window and nothing but appends of commits began since (no
// entry dropped, nothing from outside). Then the snapshot may hold newer
// commits, but the window was bounded by the cached max commitSeq, and
// every commit up to it, the horizon, the epoch and the gate state are as
// they were when the entry was taken (each of them changes only by a
// significant commit): fn answered as of that moment, which came after
// the request began. A client cannot hold a cursor past that max
// commitSeq: the entry was exact then (get requires begun == done).
func (s *Store) checkCached(ctx context.Context, t *tx) (bool, error) {
	cur, err := s.current(ctx, false)
	if err != nil {
		return false, err
	}
	if cur {
		unchanged, appended := s.parts.since(t.d0, t.sig0)
		onlyWindow := t.c.ran-t.ran0 == t.windowRan
		if unchanged || appended && onlyWindow {
			s.parts.count(true, false, false)
			return true, nil
		}
	}
	p, gate, ok, err := readPartitionGate(ctx, t.c, t.cachedFrom.p.ID, t.inst)
	if err != nil {
		return false, err
	}
	same := ok && p == t.cachedFrom.p && sameGate(gate, t.cachedFrom.gate)
	s.parts.count(false, same, !same)
	return same, nil
}

// lockedPartition reads the partition row and gate state a WriteTx
// member starts from, or takes them from the partition cache: under the
// write lock, checked for commits from outside when the group began
// (fresh.go), an entry is exact for what the store committed, and the
// group's earlier members changed the row only as s.group says (a max
// commitSeq, or a drop that makes the member read it).
func (s *Store) lockedPartition(ctx context.Context, c *conn, partition string, inst *installed) (storage.Partition, *gatecore.Prefetch, bool, error) {
	if g := s.group; inst != nil && g != nil && !g.all && !slices.Contains(g.drop, partition) {
		if e, ok := s.parts.peek(partition); ok {
			if _, gok := e.gate.Get(partition, inst.schema.Version); gok {
				if seq, ok := g.seqs[partition]; ok {
					e.p.MaxCommitSeq = seq
				}
				return e.p, e.gate, true, nil
			}
		}
	}
	return readPartitionGate(ctx, c, partition, inst)
}

// peek returns partition's entry, for the writer inside a group.
func (c *partCache) peek(partition string) (partEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.parts[partition]
	return e, ok
}
