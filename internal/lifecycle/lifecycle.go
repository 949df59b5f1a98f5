// Package lifecycle writes the Start/Stop rule of ARCHITECTURE.md once,
// for components that need nothing more: a component starts once, a
// failed Start leaves it stopped, and Stop is idempotent, does nothing
// before Start and returns the first stop's result (Once). Tasks counts
// the work callbacks start, so that Stop can wait for it without racing
// a callback that is still arriving.
package lifecycle

import (
	"errors"
	"sync"
)

// ErrStarted is returned by Once.Start after the first call.
var ErrStarted = errors.New("a component starts once")

// Once guards a component's start and stop. The zero Once is ready. The
// functions it runs hold its lock: they must not call Start or Stop.
type Once struct {
	mu      sync.Mutex
	state   int // 0 new, 1 started, 2 stopped
	stopErr error
}

// Start runs start, the first time only; when start fails, the
// component counts as stopped (start cleans up after itself).
func (o *Once) Start(start func() error) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.state != 0 {
		return ErrStarted
	}
	if err := start(); err != nil {
		o.state = 2
		return err
	}
	o.state = 1
	return nil
}

// Stop runs stop if the component is running, and returns the result of
// the one stop that ran (nil if none did).
func (o *Once) Stop(stop func() error) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.state == 1 {
		o.stopErr = stop()
	}
	o.state = 2
	return o.stopErr
}
