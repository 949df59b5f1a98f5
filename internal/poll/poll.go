// Package poll waits in tests for a condition another goroutine or
// process makes true, with a deadline — never a fixed sleep.
package poll

import (
	"testing"
	"time"
)

// Interval is how often Until re-checks its condition.
const Interval = time.Millisecond

// Until checks cond on a ticker until it holds, failing tb when d passes
// first; what names the awaited condition in the failure.
func Until(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	if cond() {
		return
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		select {
		case <-deadline.C:
			if cond() {
				return
			}
			tb.Fatalf("timed out after %s waiting for %s", d, what)
		case <-tick.C:
			if cond() {
				return
			}
		}
	}
}
