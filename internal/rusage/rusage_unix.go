//go:build unix

package rusage

import (
	"runtime"
	"syscall"
	"time"
)

func self() Usage {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return Usage{}
	}
	rss := ru.Maxrss // kilobytes on Linux and the BSDs, bytes on macOS
	if runtime.GOOS != "darwin" && runtime.GOOS != "ios" {
		rss <<= 10
	}
	return Usage{CPU: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), MaxRSSBytes: int64(rss)}
}
