package relay

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/syncnode/syncnode/internal/clock"
)

func newManualClock() *clock.Manual {
	return clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

// The periodic resync closes a gap nobody notified about (another node
// died between its SQL commit and its publish), on the injected clock.
func TestRelayPeriodicResync(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	clk := newManualClock()
	r := e.relay(Config{Clock: clk, ResyncInterval: time.Minute})
	e.start(r)
	e.flush(r)
	e.commit("p", "todos") // committed, never notified
	waitFor(t, 10*time.Second, "the sweeper waits on the clock", func() error {
		if clk.Waiters() == 0 {
			return errors.New("no timer yet")
		}
		return nil
	})
	if n := len(e.streamEvents()); n != 0 {
		t.Fatalf("published %d events before the resync", n)
	}
	clk.Advance(time.Minute)
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
	clk := newManualClock()
	r := e.relay(Config{Clock: clk, ResyncInterval: -1, RetryMin: time.Second, RetryMax: 10 * time.Second})
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
		if r.Stats().Failures != 1 || clk.Waiters() == 0 {
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
	clk.Advance(2 * time.Second)
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
