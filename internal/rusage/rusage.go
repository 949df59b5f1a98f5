// Package rusage reads this process's own resource usage: the CPU time it
// has used (user + system, all threads) and its peak resident set size.
// The load fixture reports the server's with it and the load generator its
// own, so each side of a load run measures itself the same way.
package rusage

import "time"

// Usage is a reading of the process's resource usage.
type Usage struct {
	// CPU is user plus system time since the process started.
	CPU time.Duration
	// MaxRSSBytes is the peak resident set size, 0 where unknown.
	MaxRSSBytes int64
}

// Self returns the calling process's usage; zero where the platform has
// no getrusage.
func Self() Usage { return self() }
