//go:build unix

package ssp2

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) the test process has used.
// Benchmarks divide by it as well as by wall time: on a shared machine
// wall time also counts the time other processes held the CPU.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
