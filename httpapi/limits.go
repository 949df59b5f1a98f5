package httpapi

import (
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// DefaultMaxInflightBodyBytes bounds the request bodies held by in-flight
// requests, after decompression.
const DefaultMaxInflightBodyBytes = 128 << 20

// writeChunk is the largest piece written under one write deadline.
const writeChunk = 64 << 10

// deadlineWriter writes a response in pieces of at most writeChunk bytes,
// extending the connection's write deadline before each and before every
// flush: a client that accepts nothing for timeout is cut, while one that
// reads slowly but steadily streams for as long as it takes. (Extending
// is skipped while the deadline is still at least 7/8 of timeout away.)
type deadlineWriter struct {
	w       http.ResponseWriter
	rc      http.ResponseController // a value: one allocation less per request
	timeout time.Duration
	at      time.Time // when the deadline was last extended
}

func newDeadlineWriter(w http.ResponseWriter, timeout time.Duration) *deadlineWriter {
	return &deadlineWriter{w: w, rc: *http.NewResponseController(w), timeout: timeout}
}

func (d *deadlineWriter) extend() {
	if d.timeout <= 0 {
		return
	}
	now := time.Now()
	if now.Sub(d.at) < d.timeout/8 {
		return
	}
	d.at = now
	_ = d.rc.SetWriteDeadline(now.Add(d.timeout))
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		piece := p[:min(len(p), writeChunk)]
		d.extend()
		m, err := d.w.Write(piece)
		n += m
		if err != nil {
			return n, err
		}
		p = p[len(piece):]
	}
	return n, nil
}

// Flush sends what the ResponseWriter buffers.
func (d *deadlineWriter) Flush() error {
	d.extend()
	return d.rc.Flush()
}

// bodyBudget is the memory the bodies of in-flight requests may hold.
// A request takes what its buffer grows to and gives it back when it
// ends; past the budget it is refused rather than queued.
type bodyBudget struct {
	sem  *semaphore.Weighted
	held atomic.Int64
}

func newBodyBudget(n int64) *bodyBudget { return &bodyBudget{sem: semaphore.NewWeighted(n)} }

// lease is one request's share of the budget.
type lease struct {
	b *bodyBudget
	n int64
}

// grow takes n more bytes, reporting false (and taking nothing) when the
// budget does not have them.
func (l *lease) grow(n int64) bool {
	if !l.b.sem.TryAcquire(n) {
		return false
	}
	l.n += n
	l.b.held.Add(n)
	return true
}

// release gives everything back.
func (l *lease) release() {
	if l.n > 0 {
		l.b.sem.Release(l.n)
		l.b.held.Add(-l.n)
		l.n = 0
	}
}
