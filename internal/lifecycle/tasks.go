package lifecycle

import (
	"context"
	"sync"
)

// Tasks tracks goroutines started from callbacks that can still run
// while their owner stops: a NATS message handler runs on its
// subscription's goroutine and may be mid-call after Unsubscribe has
// returned. A bare sync.WaitGroup must not see an Add race a Wait that
// began at zero; Tasks refuses new work once Wait has been called
// instead. The zero Tasks is ready.
type Tasks struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Go runs f on a new goroutine and reports true, or reports false
// without running f once Wait has been called.
func (t *Tasks) Go(f func()) bool {
	if !t.Enter() {
		return false
	}
	go func() {
		defer t.Done()
		f()
	}()
	return true
}

// Enter counts work the caller runs itself and reports true (the caller
// calls Done when it ends), or reports false once Wait has been called.
func (t *Tasks) Enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	return true
}

// Done ends work counted by Enter.
func (t *Tasks) Done() { t.wg.Done() }

// Wait refuses new work and waits, within ctx, for the work running; it
// returns ctx's error when ctx ends first (the work goes on).
func (t *Tasks) Wait(ctx context.Context) error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	done := make(chan struct{})
	go func() { t.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
