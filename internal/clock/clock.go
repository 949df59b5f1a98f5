// Package clock is the one time source of syncnode's packages. Every
// component that reads the time or waits on it takes a Clock in its
// Config (nil means System), so lease, TTL, retry and expiry logic is
// tested by moving a Manual clock instead of sleeping.
//
// A component uses its clock for the times it writes or compares (commit
// timestamps, segment expiry, checkpoint updates) and, where it says so,
// for the waits that pace its background work (the relay's retries and
// resync). A Manual clock never moves on its own: give one only to
// components whose waits should follow it.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and waits on it.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// After delivers the time once d has passed on this clock, like
	// time.After. d <= 0 delivers at once.
	After(d time.Duration) <-chan time.Time
}

// System is the wall clock.
var System Clock = system{}

type system struct{}

func (system) Now() time.Time                         { return time.Now() }
func (system) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Or returns c, or System when c is nil: a Config's WithDefaults calls it.
func Or(c Clock) Clock {
	if c == nil {
		return System
	}
	return c
}

// Manual is a Clock that moves only when told: by Advance or Set. Its
// After channels fire when the clock reaches their time. It is safe for
// concurrent use.
type Manual struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewManual returns a Manual clock reading t.
func NewManual(t time.Time) *Manual { return &Manual{now: t} }

// Now is the clock's time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// After delivers once the clock has been moved d past now.
func (m *Manual) After(d time.Duration) <-chan time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- m.now
		return ch
	}
	m.waiters = append(m.waiters, waiter{at: m.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock forward by d (d < 0 is ignored) and fires the
// waits it reached. It returns the new time.
func (m *Manual) Advance(d time.Duration) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d > 0 {
		m.now = m.now.Add(d)
	}
	m.fireLocked()
	return m.now
}

// Set moves the clock to t, forward or back, and fires the waits it
// reached.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = t
	m.fireLocked()
}

func (m *Manual) fireLocked() {
	kept := m.waiters[:0]
	for _, w := range m.waiters {
		if w.at.After(m.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- m.now
	}
	clear(m.waiters[len(kept):])
	m.waiters = kept
}

// Waiters is how many After channels have not fired yet: a test waits
// for a component to reach its wait before advancing past it.
func (m *Manual) Waiters() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.waiters)
}
