package pgstore

import (
	"context"
	"sync"
	"time"
)

// analyzer keeps planner statistics current as tables grow, so prepared
// statements are re-planned for the data they actually meet.
//
// pgx prepares every statement once per connection, and PostgreSQL then
// reuses a generic plan, re-planning only when the table's statistics
// change. A plan made while a table was nearly empty can be ruinous later:
// a lookup by (partition, row id) may walk a scope index that also starts
// with the partition, a lookup by key may scan the table. Autovacuum
// normally re-analyzes growing tables, which re-plans; when it is off (or
// slow to start on a fresh table), nothing does. The store therefore runs
// ANALYZE itself, in the background, each time a table has taken another
// growthFactor times the writes it had at its last analysis. Failures are
// ignored: statistics are an optimization, and the next threshold retries.
type analyzer struct {
	s       *Store
	mu      sync.Mutex
	writes  map[string]int64
	next    map[string]int64
	running map[string]bool
	wg      sync.WaitGroup
	closed  bool
}

const (
	firstAnalyze = 100
	growthFactor = 4
)

func newAnalyzer(s *Store) *analyzer {
	return &analyzer{s: s, writes: map[string]int64{}, next: map[string]int64{}, running: map[string]bool{}}
}

// wrote records n written rows of table and starts an ANALYZE when the
// table crossed its next threshold.
func (a *analyzer) wrote(table string, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.writes[table] + int64(n)
	a.writes[table] = w
	next, ok := a.next[table]
	if !ok {
		next = firstAnalyze
	}
	if w < next || a.running[table] || a.closed {
		a.next[table] = next
		return
	}
	a.next[table] = w * growthFactor
	a.running[table] = true
	a.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = a.s.pool.Exec(ctx, "ANALYZE "+quote(table))
		a.mu.Lock()
		a.running[table] = false
		a.mu.Unlock()
	})
}

// close stops new analyses and waits for running ones.
func (a *analyzer) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.wg.Wait()
}
