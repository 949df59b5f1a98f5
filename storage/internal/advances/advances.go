// Package advances holds the cursor advances (storage.Store.ClientAdvance)
// that wait in memory until their store writes them together. How they
// are written is the store's: the queue only collects them, keeps the
// furthest cursor of each client, and calls the store's FlushFunc when
// the first of a batch has waited storage.ClientAdvanceDelay.
package advances

import (
	"cmp"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/syncnode/syncnode/storage"
)

// Max bounds the queue; past it Add refuses a new client with ErrFull and
// the store writes that advance at once.
const Max = 16384

var (
	// ErrFull is returned by Add for a client not yet queued when Max are.
	ErrFull = errors.New("advances: queue full")
	// ErrClosed is returned by Add after Close.
	ErrClosed = errors.New("advances: queue closed")
)

type key struct{ partition, clientID string }

// Queue is the pending advances of one store. The zero value is empty and
// ready once FlushFunc is set.
type Queue struct {
	// FlushFunc is called on a goroutine of its own
	// storage.ClientAdvanceDelay after an advance entered an empty queue;
	// it writes what Take returns, directly or through a write that calls
	// Take.
	FlushFunc func()

	mu      sync.Mutex
	pending map[key]storage.ClientAckParams
	timer   *time.Timer // armed while pending is not empty
	closed  bool
}

// Add queues p. The same client again before a Take keeps the furthest
// cursor and time (an epoch rotation in between fails both).
func (q *Queue) Add(p storage.ClientAckParams) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	if q.pending == nil {
		q.pending = map[key]storage.ClientAckParams{}
	}
	k := key{p.Partition, p.ClientID}
	if prev, ok := q.pending[k]; ok {
		p.Cursor, p.NowMs = max(p.Cursor, prev.Cursor), max(p.NowMs, prev.NowMs)
	} else if len(q.pending) >= Max {
		return ErrFull
	}
	q.pending[k] = p
	if q.timer == nil {
		q.timer = time.AfterFunc(storage.ClientAdvanceDelay, q.FlushFunc)
	}
	return nil
}

// Supersede drops the pending advance of a client whose record is being
// replaced: written later it could raise the new record's cursor.
func (q *Queue) Supersede(partition, clientID string) {
	q.mu.Lock()
	delete(q.pending, key{partition, clientID})
	q.mu.Unlock()
}

// Take empties the queue and returns what it held in (partition, client)
// order, so that writers lock the records in one order.
func (q *Queue) Take() []storage.ClientAckParams {
	q.mu.Lock()
	pending := q.pending
	q.pending = nil
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	q.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	ps := make([]storage.ClientAckParams, 0, len(pending))
	for _, p := range pending {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(x, y storage.ClientAckParams) int {
		return cmp.Or(cmp.Compare(x.Partition, y.Partition), cmp.Compare(x.ClientID, y.ClientID))
	})
	return ps
}

// Len is the number of pending advances.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// Close refuses further advances; what is pending stays for Take.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
}
