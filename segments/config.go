package segments

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

// Index is the part of storage.Store the segment store uses.
type Index = storage.SegmentIndex

// Config configures a Store.
type Config struct {
	// JetStream is the connection of the domain that owns the bucket:
	// Object Store writes do not cross JetStream domains.
	JetStream jetstream.JetStream
	// Store is the SQL index of addresses and publications.
	Store Index

	// Names is the bus namespace of the segment bucket and of the lease
	// bucket holding upload claims (the zero Names is production). Both
	// are created if absent.
	Names bus.Names
	// Replicas of the bucket and the lease bucket when they are created
	// (default 1).
	Replicas int

	// TTL is how long a publication stays downloadable (default 24 h).
	TTL time.Duration
	// ReuseMargin: GetOrBuild reuses a publication only while it has
	// more than this left, so a client handed a reference has time to
	// fetch it (default min(15 min, TTL/4); below TTL).
	ReuseMargin time.Duration

	// ChunkSize is the Object Store chunk size (default 1 MiB, lowered to
	// the server's max payload).
	ChunkSize int
	// SpillBytes: a segment being built stays in memory up to this size,
	// then moves to a temporary file (default 4 MiB).
	SpillBytes int
	// TempDir holds spilled builds (default os.TempDir()).
	TempDir string
	// CacheBytes bounds the in-memory cache of segment bytes (default 64
	// MiB; -1 disables it).
	CacheBytes int64
	// CacheMaxSegment: larger segments are read but not cached (default
	// 16 MiB, at most CacheBytes: the SQLite image of a 100k-row table fits).
	CacheMaxSegment int64
	// KeyCacheEntries bounds the in-memory key → publication cache that
	// GetOrBuild checks before SQL (default 10 000; -1 disables it).
	KeyCacheEntries int

	// ClaimTTL is how long an upload claim outlives a crashed holder
	// (default 30 s; whole seconds, at least 1 s).
	ClaimTTL time.Duration
	// UploadTimeout bounds one upload (default 2 min).
	UploadTimeout time.Duration
	// BuildTimeout bounds one build shared by concurrent requests
	// (default 5 min).
	BuildTimeout time.Duration
	// GCGrace: GC removes unreferenced chunks and unindexed objects only
	// when they are older than this (default 15 min; above UploadTimeout,
	// so an upload in flight is never collected).
	GCGrace time.Duration
	// MaintenanceInterval runs Prune and GC in the background (default
	// 10 min; -1 disables it, then the owner calls them).
	MaintenanceInterval time.Duration

	// Clock decides publication expiry (default clock.System).
	Clock  clock.Clock
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultTTL                 = 24 * time.Hour
	DefaultChunkSize           = 1 << 20
	DefaultSpillBytes          = 4 << 20
	DefaultCacheBytes          = 64 << 20
	DefaultCacheMaxSegment     = 16 << 20
	DefaultKeyCacheEntries     = 10_000
	DefaultClaimTTL            = 30 * time.Second
	DefaultUploadTimeout       = 2 * time.Minute
	DefaultBuildTimeout        = 5 * time.Minute
	DefaultGCGrace             = 15 * time.Minute
	DefaultMaintenanceInterval = 10 * time.Minute
	maxDefaultReuseMargin      = 15 * time.Minute
)

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.ReuseMargin == 0 {
		c.ReuseMargin = min(maxDefaultReuseMargin, c.TTL/4)
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = DefaultChunkSize
	}
	if c.SpillBytes == 0 {
		c.SpillBytes = DefaultSpillBytes
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.CacheMaxSegment == 0 {
		c.CacheMaxSegment = min(DefaultCacheMaxSegment, max(c.CacheBytes, 0))
	}
	if c.KeyCacheEntries == 0 {
		c.KeyCacheEntries = DefaultKeyCacheEntries
	}
	if c.ClaimTTL == 0 {
		c.ClaimTTL = DefaultClaimTTL
	}
	if c.UploadTimeout == 0 {
		c.UploadTimeout = DefaultUploadTimeout
	}
	if c.BuildTimeout == 0 {
		c.BuildTimeout = DefaultBuildTimeout
	}
	if c.GCGrace == 0 {
		c.GCGrace = DefaultGCGrace
	}
	if c.MaintenanceInterval == 0 {
		c.MaintenanceInterval = DefaultMaintenanceInterval
	}
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports invalid settings (call after WithDefaults). New also
// requires the wiring: JetStream and Store.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("segments config: "+format, args...)) }
	if err := bus.CheckReplicas(c.Replicas); err != nil {
		bad("Replicas %w", err)
	}
	if c.TTL < time.Second {
		bad("TTL %v below 1s", c.TTL)
	}
	if c.ReuseMargin < 0 || c.ReuseMargin >= c.TTL {
		bad("ReuseMargin %v outside [0, TTL %v)", c.ReuseMargin, c.TTL)
	}
	if err := bus.CheckChunkSize(c.ChunkSize); err != nil {
		bad("ChunkSize %w", err)
	}
	if c.SpillBytes < 0 {
		bad("SpillBytes %d negative", c.SpillBytes)
	}
	if c.CacheBytes < -1 {
		bad("CacheBytes %d below -1", c.CacheBytes)
	}
	if c.CacheMaxSegment < 0 || c.CacheMaxSegment > max(c.CacheBytes, 0) {
		bad("CacheMaxSegment %d outside 0..CacheBytes", c.CacheMaxSegment)
	}
	if c.KeyCacheEntries < -1 {
		bad("KeyCacheEntries %d below -1", c.KeyCacheEntries)
	}
	if c.ClaimTTL < time.Second || c.ClaimTTL%time.Second != 0 {
		bad("ClaimTTL %v must be whole seconds, at least 1s", c.ClaimTTL)
	}
	if c.UploadTimeout <= 0 || c.BuildTimeout <= 0 {
		bad("UploadTimeout %v and BuildTimeout %v must be positive", c.UploadTimeout, c.BuildTimeout)
	}
	if c.GCGrace <= c.UploadTimeout {
		bad("GCGrace %v must exceed UploadTimeout %v", c.GCGrace, c.UploadTimeout)
	}
	if c.MaintenanceInterval < 0 && c.MaintenanceInterval != -1 {
		bad("MaintenanceInterval %v: use -1 to disable", c.MaintenanceInterval)
	}
	if c.MaintenanceInterval > 0 && c.MaintenanceInterval < time.Second {
		bad("MaintenanceInterval %v below 1s", c.MaintenanceInterval)
	}
	return errors.Join(errs...)
}
