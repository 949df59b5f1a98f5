package sqlitestore

import (
	"errors"
	"fmt"
	"runtime"
	"time"
)

// Synchronous is SQLite's synchronous setting in WAL mode.
type Synchronous string

const (
	// SynchronousFull fsyncs the WAL on every commit: an acknowledged
	// commit survives power loss. The default.
	SynchronousFull Synchronous = "FULL"
	// SynchronousNormal fsyncs only at checkpoints: a power loss or OS
	// crash may drop the last commits, never corrupts (see the package
	// doc).
	SynchronousNormal Synchronous = "NORMAL"
)

// Defaults.
const (
	DefaultBusyTimeout = 5 * time.Second
	// MaxReaders bounds the reader pool.
	MaxReaders = 64
)

// Config configures Open.
type Config struct {
	// Path is the database file; it is created if absent.
	Path string
	// Synchronous is FULL (default) or NORMAL.
	Synchronous Synchronous
	// BusyTimeout is how long a statement waits for a lock held by another
	// process before SQLITE_BUSY (default 5s).
	BusyTimeout time.Duration
	// Readers is the size of the reader connection pool (default
	// max(4, GOMAXPROCS)).
	Readers int
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Synchronous == "" {
		c.Synchronous = SynchronousFull
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = DefaultBusyTimeout
	}
	if c.Readers == 0 {
		c.Readers = max(4, runtime.GOMAXPROCS(0))
	}
	return c
}

// Validate refuses bad values with field-specific errors.
func (c Config) Validate() error {
	var errs []error
	if c.Path == "" {
		errs = append(errs, errors.New("sqlitestore config: Path is empty"))
	}
	if c.Synchronous != SynchronousFull && c.Synchronous != SynchronousNormal {
		errs = append(errs, fmt.Errorf("sqlitestore config: Synchronous %q is neither FULL nor NORMAL", c.Synchronous))
	}
	if c.BusyTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("sqlitestore config: BusyTimeout %v is below 1ms", c.BusyTimeout))
	}
	if c.Readers < 1 || c.Readers > MaxReaders {
		errs = append(errs, fmt.Errorf("sqlitestore config: Readers %d outside 1..%d", c.Readers, MaxReaders))
	}
	return errors.Join(errs...)
}
