package realtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/gate"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/storage"
)

// Store is what the hub reads and writes in SQL; storage.Store satisfies
// it.
type Store interface {
	PartitionGet(ctx context.Context, partition string) (storage.Partition, error)
	CommitRange(ctx context.Context, partition string, afterSeq int64, limit int) ([]storage.Commit, error)
	ClientAck(ctx context.Context, p storage.ClientAckParams) (bool, error)
}

var _ Store = storage.Store(nil)

// Gate is the serve gate a delta must pass, like a pull (implemented by
// *gate.Gate).
type Gate interface {
	AdmitAt(ctx context.Context, partition, logEpoch string) (gate.Ticket, error)
}

// Defaults.
const (
	DefaultHeartbeatInterval       = 30 * time.Second
	DefaultMaxConnections          = 10_000
	DefaultMaxConnectionsPerClient = 3
	DefaultMaxDeltaBytes           = 1 << 20
	DefaultMaxPresenceBytes        = 16 << 10
	DefaultMaxRequestBytes         = 32 << 20
	DefaultSendQueueMessages       = 256
	DefaultSendQueueBytes          = 4 << 20
	DefaultWriteTimeout            = 10 * time.Second
	DefaultFallbackPollInterval    = time.Second
	DefaultResyncInterval          = time.Minute
	DefaultPresenceAliveInterval   = 5 * time.Second
	DefaultWorkers                 = 4
)

// Config configures a Hub.
type Config struct {
	// Engine runs socket rounds and resolves registrations. Required.
	Engine *engine.Engine
	// Store is the SQL the hub reads commits from. Required.
	Store Store
	// Auth authenticates the upgrade request. Required.
	Auth httpapi.Authenticator
	// Gate, when set, must admit a partition before a delta is sent; a
	// refusal answers reset-required.
	Gate Gate

	// Conn is the node's NATS connection: the hub follows the live tail of
	// commit events on it (core NATS, see Hub.Start) and presence travels
	// on it. Required.
	Conn *nats.Conn
	// Node names this node in logs and presence messages (default
	// "syncnode").
	Node string
	// Names is the bus namespace of the commit stream followed and of the
	// presence subjects (the zero Names is production).
	Names bus.Names

	// HeartbeatInterval is how often every socket gets a heartbeat
	// (default 30s).
	HeartbeatInterval time.Duration
	// MaxConnections caps this node's sockets (default 10000), and
	// MaxConnectionsPerClient the sockets of one (partition, client id)
	// (default 3); beyond either a connect is refused with
	// sync.websocket_connection_limit.
	MaxConnections          int
	MaxConnectionsPerClient int
	// MaxDeltaBytes bounds one delta; a larger one becomes a
	// delta-too-large wake-up (default 1 MiB).
	MaxDeltaBytes int
	// MaxPresenceBytes bounds a published presence document (default 16
	// KiB).
	MaxPresenceBytes int
	// MaxRequestBytes bounds a socket round's request (default 32 MiB).
	MaxRequestBytes int64
	// SendQueueMessages and SendQueueBytes bound what waits for one
	// socket (defaults 256 messages, 4 MiB).
	SendQueueMessages int
	SendQueueBytes    int
	// WriteTimeout is how long one message may take to reach a socket
	// before the connection is dropped as a slow consumer (default 10s).
	WriteTimeout time.Duration
	// FallbackPollInterval is how often partitions are read in SQL while
	// the bus is unreachable, to wake sessions (default 1s).
	FallbackPollInterval time.Duration
	// ResyncInterval is how often every partition with sessions is checked
	// for commits that no event brought (default 1m; negative disables).
	ResyncInterval time.Duration
	// PresenceAliveInterval is how often a node announces itself to the
	// others; a node silent for three intervals loses its presence
	// documents (default 5s).
	PresenceAliveInterval time.Duration
	// TailPendingMsgs and TailPendingBytes bound the commit events
	// waiting for the hub (defaults bus.DefaultTailPendingMsgs, 64Ki, and
	// bus.DefaultTailPendingBytes, 32 MiB); past either, events are
	// dropped and every partition is re-read in SQL instead.
	TailPendingMsgs  int
	TailPendingBytes int
	// Workers is how many partitions are processed concurrently (default
	// 4); one partition's commits are always processed in order.
	Workers int
	// OriginPatterns restricts the Origin of upgrade requests (patterns as
	// in path.Match, e.g. "app.example.com"); empty accepts any origin,
	// which is safe while authentication does not rely on cookies.
	OriginPatterns []string
	// InBandRefusals is the test-control convention: a refused connect
	// completes the upgrade, sends {"event":"error","data":{…}} and closes
	// with 1008, instead of answering HTTP with the JSON error.
	InBandRefusals bool

	// Clock stamps acks, hellos and presence (default clock.System); the
	// hub's timers pace themselves on the wall clock.
	Clock  clock.Clock
	Logger *slog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	set := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	set(&c.MaxConnections, DefaultMaxConnections)
	set(&c.MaxConnectionsPerClient, DefaultMaxConnectionsPerClient)
	set(&c.MaxDeltaBytes, DefaultMaxDeltaBytes)
	set(&c.MaxPresenceBytes, DefaultMaxPresenceBytes)
	set(&c.SendQueueMessages, DefaultSendQueueMessages)
	set(&c.SendQueueBytes, DefaultSendQueueBytes)
	set(&c.Workers, DefaultWorkers)
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	setD(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	setD(&c.WriteTimeout, DefaultWriteTimeout)
	setD(&c.FallbackPollInterval, DefaultFallbackPollInterval)
	setD(&c.ResyncInterval, DefaultResyncInterval)
	setD(&c.PresenceAliveInterval, DefaultPresenceAliveInterval)
	if c.Node == "" {
		c.Node = "syncnode"
	}
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every invalid setting (call after WithDefaults). New
// also requires the wiring: Engine, Store, Auth and Conn.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("realtime config: "+format, args...)) }
	if c.HeartbeatInterval < time.Millisecond {
		bad("HeartbeatInterval %v is below 1ms", c.HeartbeatInterval)
	}
	if c.MaxConnections < 1 || c.MaxConnectionsPerClient < 1 {
		bad("MaxConnections (%d) and MaxConnectionsPerClient (%d) must be positive", c.MaxConnections, c.MaxConnectionsPerClient)
	}
	if c.MaxDeltaBytes < 1<<10 {
		bad("MaxDeltaBytes %d is below 1 KiB", c.MaxDeltaBytes)
	}
	if c.MaxPresenceBytes < 2 {
		bad("MaxPresenceBytes %d is below 2", c.MaxPresenceBytes)
	}
	if c.MaxRequestBytes < 1<<10 {
		bad("MaxRequestBytes %d is below 1 KiB", c.MaxRequestBytes)
	}
	if c.SendQueueMessages < 4 || c.SendQueueBytes < c.MaxDeltaBytes {
		bad("SendQueueMessages %d must be at least 4 and SendQueueBytes %d at least MaxDeltaBytes %d", c.SendQueueMessages, c.SendQueueBytes, c.MaxDeltaBytes)
	}
	if c.WriteTimeout < time.Millisecond || c.FallbackPollInterval < time.Millisecond || c.PresenceAliveInterval < time.Millisecond {
		bad("WriteTimeout, FallbackPollInterval and PresenceAliveInterval must be at least 1ms")
	}
	if c.Workers < 1 || c.Workers > 256 {
		bad("Workers %d outside 1..256", c.Workers)
	}
	return errors.Join(errs...)
}

func (c Config) checkWiring() error {
	var errs []error
	if c.Engine == nil || c.Store == nil || c.Auth == nil {
		errs = append(errs, errors.New("realtime config: Engine, Store and Auth are required"))
	}
	if c.Conn == nil {
		errs = append(errs, errors.New("realtime config: Conn is required"))
	}
	return errors.Join(errs...)
}
