package blobs

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/storage"
)

// Index is the part of storage.Store the blob store uses.
type Index = storage.BlobIndex

// Config configures a Store.
type Config struct {
	// JetStream is the connection of the domain that owns the bucket.
	JetStream jetstream.JetStream
	// Store holds the blob rows and the reference index.
	Store Index

	// Names is the bus namespace of the blobs bucket (created if absent).
	Names bus.Names
	// Replicas of the bucket when it is created (default 1).
	Replicas int

	// MaxBytes caps one blob (SPEC.md §5.9.3; default 64 MiB): a larger
	// upload or upload grant is refused with blob.too_large.
	MaxBytes int64
	// ChunkSize is the Object Store chunk size (default 1 MiB).
	ChunkSize int
	// UploadTimeout bounds one upload from its first byte to its
	// object's meta (default 1 h: 64 MiB at ~150 kbit/s). It is what
	// lets the sweep tell a dead upload's chunks from a live one's: an
	// upload's chunks are collected only once their first chunk is older
	// than UploadTimeout plus MinObjectAge.
	UploadTimeout time.Duration

	// OrphanGrace: a blob no row references is swept once it was last
	// uploaded longer ago than this (SPEC.md §5.9.2). nil means the
	// default, 24 h; 0 sweeps every unreferenced blob.
	OrphanGrace *time.Duration
	// SweepInterval runs the orphan sweep in the background (default 10
	// min; -1 disables it, then the owner calls Sweep).
	SweepInterval time.Duration
	// SweepBatch is how many orphans one sweep pass lists at a time
	// (default 1000).
	SweepBatch int

	// Clock stamps uploads and decides the grace period (default
	// clock.System).
	Clock clock.Clock
	// Wall is the clock the sweep compares Object Store timestamps with
	// (default clock.System): they are the server's, whatever Clock says.
	Wall   clock.Clock
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultMaxBytes      = 64 << 20
	DefaultChunkSize     = 1 << 20
	DefaultUploadTimeout = time.Hour
	DefaultOrphanGrace   = 24 * time.Hour
	DefaultSweepInterval = 10 * time.Minute
	DefaultSweepBatch    = 1000
)

// WithDefaults returns c with unset fields defaulted.
func (c Config) WithDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = DefaultChunkSize
	}
	if c.UploadTimeout == 0 {
		c.UploadTimeout = DefaultUploadTimeout
	}
	if c.OrphanGrace == nil {
		c.OrphanGrace = new(DefaultOrphanGrace)
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.SweepBatch == 0 {
		c.SweepBatch = DefaultSweepBatch
	}
	c.Clock, c.Wall = clock.Or(c.Clock), clock.Or(c.Wall)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every invalid setting (call after WithDefaults). New
// also requires the wiring: JetStream and Store.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("blobs config: "+format, args...)) }
	if err := bus.CheckReplicas(c.Replicas); err != nil {
		bad("Replicas %w", err)
	}
	if c.MaxBytes < 1 {
		bad("MaxBytes %d must be positive", c.MaxBytes)
	}
	if err := bus.CheckChunkSize(c.ChunkSize); err != nil {
		bad("ChunkSize %w", err)
	}
	if c.UploadTimeout < 0 {
		bad("UploadTimeout %v must be positive", c.UploadTimeout)
	}
	if c.OrphanGrace != nil && *c.OrphanGrace < 0 {
		bad("OrphanGrace %v must not be negative", *c.OrphanGrace)
	}
	if c.SweepInterval < 0 && c.SweepInterval != -1 {
		bad("SweepInterval %v: use -1 to disable", c.SweepInterval)
	}
	if c.SweepBatch < 1 || c.SweepBatch > storage.MaxBlobListLimit {
		bad("SweepBatch %d outside 1..%d", c.SweepBatch, storage.MaxBlobListLimit)
	}
	return errors.Join(errs...)
}
