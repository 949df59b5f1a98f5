package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// manualClock only moves when the test advances it.
type manualClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []clockWaiter
}

type clockWaiter struct {
	at time.Time
	ch chan time.Time
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, clockWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

func (c *manualClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// The periodic resync closes a gap nobody notified about (another node
// died between its SQL commit and its publish), on the injected clock.
func TestRelayPeriodicResync(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	clock := newManualClock()
	r := e.relay(Config{Clock: clock, ResyncInterval: time.Minute})
	e.start(r)
	e.flush(r)
	e.commit("p", "todos") // committed, never notified
	waitFor(t, 10*time.Second, "the sweeper waits on the clock", func() error {
		if clock.pending() == 0 {
			return errors.New("no timer yet")
		}
		return nil
	})
	if n := len(e.streamEvents()); n != 0 {
		t.Fatalf("published %d events before the resync", n)
	}
	clock.Advance(time.Minute)
	waitFor(t, 10*time.Second, "the resync publishes the commit", func() error {
		if n := len(e.streamEvents()); n != 1 {
			return fmt.Errorf("%d events", n)
		}
		return nil
	})
	e.checkLogInStream("p")
}

// A failing partition waits for its backoff on the injected clock, and
// its notification is not lost.
func TestRelayBackoffOnClock(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	clock := newManualClock()
	r := e.relay(Config{Clock: clock, ResyncInterval: -1, RetryMin: time.Second, RetryMax: 10 * time.Second})
	fail := make(chan bool, 1)
	fail <- true
	r.testHookAfterAck = func(context.Context) error {
		select {
		case <-fail:
			return errors.New("injected failure")
		default:
			return nil
		}
	}
	e.start(r)
	e.commit("p", "todos")
	r.Notify("p")
	waitFor(t, 10*time.Second, "the failure is scheduled for retry", func() error {
		if r.Stats().Failures != 1 || clock.pending() == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	// Nothing happens until the clock passes the backoff (at most 1.2 s
	// with jitter) …
	ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
	defer cancel()
	if err := r.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("flush before the backoff = %v, want a timeout", err)
	}
	// … then the retry meets the stale compare-and-set and resyncs.
	clock.Advance(2 * time.Second)
	e.flush(r)
	e.checkLogInStream("p")
	if st := r.Stats(); st.Conflicts == 0 {
		t.Errorf("stats %+v", st)
	}
	// After Stop, Notify is a no-op and Flush says so.
	if err := r.Stop(e.ctx); err != nil {
		t.Fatal(err)
	}
	r.Notify("p")
	if err := r.Flush(e.ctx); !errors.Is(err, ErrNotRunning) {
		t.Errorf("flush after stop = %v", err)
	}
}
