package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/syncnode/syncnode/blobs"
	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/edge"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/gate"
	"github.com/syncnode/syncnode/hooks"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/leases"
	"github.com/syncnode/syncnode/operations"
	"github.com/syncnode/syncnode/reactions"
	"github.com/syncnode/syncnode/realtime"
	"github.com/syncnode/syncnode/relay"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/segments"
	"github.com/syncnode/syncnode/signedurl"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// Config configures a node. The nested component configs carry their
// settings; the node fills their wiring (store, schema, NATS connection,
// bus namespace, node name, declared checkpoints, clock, logger) and
// overwrites whatever those fields hold. WithDefaults is idempotent.
type Config struct {
	// Name names the node in CloudEvents sources (default: hostname).
	Name string
	// DataDir holds the SQLite file (unless Store selects PostgreSQL or
	// another path) and the embedded JetStream store. Required.
	DataDir string
	// Schema is the served schema. Required.
	Schema *schema.Schema
	// Checkpoints are the build's backfill checkpoint declarations
	// (package gate), installed with the schema; the node serves their
	// partitions while they backfill.
	Checkpoints []storage.CheckpointKey
	// Names is the bus namespace of every stream, bucket and subject the
	// node uses (the zero Names is production).
	Names bus.Names
	// Clock is the node's clock: commit times, segment expiry, checkpoint
	// updates (default clock.System). The relay paces itself on
	// Relay.Clock instead.
	Clock  clock.Clock
	Logger *slog.Logger

	// Store selects and configures the SQL store.
	Store StoreConfig
	// NATS configures the node's own NATS: an embedded server or a
	// connection to an external one. DataDir and Logger are the node's.
	// Its Replicas (or the detected factor of Bus) becomes the Replicas of
	// the relay's streams, the gate's bucket and the segment store.
	NATS embedded.Config
	// Bus, when set, is a running NATS the node uses instead of starting
	// its own (NATS must then be empty); the node never stops it. The
	// test-control instances share the process's server this way.
	Bus *embedded.Server
	// HTTP is the node's own HTTP listener.
	HTTP HTTPConfig

	API      httpapi.Config  // the protocol handler; API.Auth is required unless Hooks.Token is set
	Engine   engine.Config   // limits, validators, mergers, wire window
	Segments segments.Config // segment bucket, TTL, caches
	Blobs    blobs.Config    // blob bucket, size cap, orphan grace and sweep (SPEC.md §5.9)
	Gate     gate.Config     // serve gate: resync, timeouts, OnChange
	Relay    relay.Config    // commit relay: streams, batching, retries

	// Images configures the SQLite-image bootstrap lane (SPEC.md §5.3).
	Images ImagesConfig
	// SignedURLs configures signed segment URLs (SPEC.md §5.4), and
	// presigned blob uploads and downloads (§5.9; Engine.BlobPresign, on
	// by default once a key is set); without a key none are minted and
	// every ?st= request is refused.
	SignedURLs SignedURLsConfig

	// Reactions configures durable reactions: the planner of every new
	// commit and this node's runner.
	Reactions ReactionsConfig
	// Realtime configures the realtime channel, GET /realtime.
	Realtime RealtimeConfig
	// Hooks selects the host hooks the node asks over NATS (package
	// hooks): token verification (which replaces API.Auth), scope
	// resolution, write validation. Hooks are per deployment: they need
	// the production namespace.
	Hooks hooks.Config
	// Admin configures the admin API (package admin), which answers on
	// the production admin subjects: a node in another namespace must
	// disable it.
	Admin AdminConfig
	// Operations configures the remote operations (REMOTE.md): POST
	// /operations, GET /operations/realtime and their NATS binding.
	Operations OperationsConfig
	// Edge places the node in an edge/hub topology (package edge): with
	// Edge.Name it is that edge, else with Edge.Homes naming edges it is
	// their hub. The wiring fields are the node's.
	Edge edge.Config
	// Leases turns auth leases on (SPEC.md §7.3) when Leases.TTL is set;
	// the zero value leaves them off.
	Leases LeasesConfig

	// Routes, when set, runs once every component is up and before HTTP
	// serves: it returns the handler to serve in place of the protocol
	// handler h (the test-control and load modes mount their routes around
	// it), and a stop function that Stop calls after HTTP has shut down and
	// before the components stop.
	Routes func(ctx context.Context, n *Node, h http.Handler) (http.Handler, func(context.Context) error, error)
}

// ImagesConfig configures the SQLite-image lane: a bootstrap of a table
// larger than one rows page, for a client that accepts images, is one
// SQLite database built with sqlitestore.WriteImage.
type ImagesConfig struct {
	// Disabled serves every bootstrap on the rows lane.
	Disabled bool
	// TempDir is where images are built (default Segments.TempDir, else
	// the system's temporary directory).
	TempDir string
}

// SignedURLsConfig configures signed segment URLs (package signedurl).
type SignedURLsConfig struct {
	// Key is the HMAC key (at least 32 bytes), shared by every node of the
	// deployment; empty disables signed URLs.
	Key []byte
	// TTL is a URL's lifetime (default 5 minutes, at most 15).
	TTL time.Duration
	// BaseURL is the absolute base the URLs' "segments/{id}?st=…" goes
	// under (a CDN in front of the nodes; ends with /); empty uses the
	// URL each request came in on.
	BaseURL string
}

func (c SignedURLsConfig) enabled() bool { return len(c.Key) > 0 }

func (c SignedURLsConfig) validate() error {
	if !c.enabled() {
		if c.TTL != 0 || c.BaseURL != "" {
			return errors.New("node config: SignedURLs: TTL and BaseURL need a Key")
		}
		return nil
	}
	var errs []error
	if err := (signedurl.Config{Key: c.Key, TTL: c.TTL}).WithDefaults().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("node config: SignedURLs: %w", err))
	}
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.HasSuffix(c.BaseURL, "/") {
			errs = append(errs, fmt.Errorf("node config: SignedURLs.BaseURL %q must be an absolute http(s) URL ending with /", c.BaseURL))
		}
	}
	return errors.Join(errs...)
}

// LeasesConfig configures auth leases (package leases): off unless TTL
// is set; Key signs the stored records. Store and Logger are the node's.
type LeasesConfig = leases.Config

// ReactionsConfig configures durable reactions (package reactions).
type ReactionsConfig struct {
	// Planner plans the reactions of every new commit, inside its push
	// transaction (rules.CompileReactions builds one from declarative
	// rules); it becomes Engine.ReactionPlanner.
	Planner engine.ReactionPlanner
	// Disabled runs no runner on this node: reactions are still planned
	// and enqueued, and a runner on another node sharing the database
	// runs them.
	Disabled bool
	// Runner configures the runner; Store, Conn, Node, Names, Clock and
	// Logger are the node's.
	Runner reactions.Config
}

// RealtimeConfig configures the realtime channel (package realtime).
type RealtimeConfig struct {
	// Disabled leaves GET /realtime unanswered (404).
	Disabled bool
	// Hub tunes the hub; Engine, Store, Auth, Gate, Conn, JetStream,
	// Node, Names, Clock and Logger are the node's, and MaxRequestBytes
	// defaults to API.MaxRequestBytes.
	Hub realtime.Config
}

// OperationsConfig configures the remote operations (package
// operations). They are served when File or Registry names any.
type OperationsConfig struct {
	// File is an operations file (JSON, operations.File) loaded at start;
	// its operations join Registry's.
	File string
	// Registry holds operations registered in Go.
	Registry operations.File
	// MaxBodyBytes bounds one request (default 1 MiB).
	MaxBodyBytes int64
}

func (c OperationsConfig) enabled() bool {
	return c.File != "" || len(c.Registry.Queries) > 0 || len(c.Registry.Commands) > 0
}

// AdminConfig configures the admin API.
type AdminConfig struct {
	// Disabled runs no admin service on this node.
	Disabled bool
	// Version is the build version node.info reports.
	Version string
}

// StoreConfig selects the SQL store: PostgreSQL when Postgres.URL is set,
// else SQLite (Path default <DataDir>/syncnode.db).
type StoreConfig struct {
	Postgres pgstore.Config
	SQLite   sqlitestore.Config
}

// SQLiteFile is the SQLite database's name in the data directory.
const SQLiteFile = "syncnode.db"

// isPostgres reports whether the store is PostgreSQL.
func (c StoreConfig) isPostgres() bool { return c.Postgres.URL != "" }

// HTTPConfig is the node's own HTTP server and listener. Zero durations
// and limits take the Default* values.
type HTTPConfig struct {
	// Listen is the listen address, e.g. 127.0.0.1:8080 (port 0 picks a
	// free one). Empty serves no HTTP: mount Node.Handler elsewhere.
	Listen string
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds each chunk of a response (it becomes
	// API.WriteTimeout): a reader that accepts nothing for that long is
	// cut. A realtime socket is exempt once upgraded.
	WriteTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections.
	IdleTimeout time.Duration
	// MaxConnections caps open connections, realtime sockets included;
	// past it a new one is answered 503 and closed. It must exceed the
	// realtime hub's MaxConnections, or that limit never applies and
	// sockets starve plain requests.
	MaxConnections int
}

// HTTPConfig defaults.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 60 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	// DefaultMaxConnections leaves room for realtime's default 10,000
	// sockets and as many plain requests as the body budget admits.
	DefaultMaxConnections = 16384
)

func (c HTTPConfig) withDefaults() HTTPConfig {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.ReadHeaderTimeout, DefaultReadHeaderTimeout}, {&c.ReadTimeout, DefaultReadTimeout},
		{&c.WriteTimeout, DefaultWriteTimeout}, {&c.IdleTimeout, DefaultIdleTimeout}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	return c
}

func (c HTTPConfig) validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ReadHeaderTimeout", c.ReadHeaderTimeout}, {"ReadTimeout", c.ReadTimeout},
		{"WriteTimeout", c.WriteTimeout}, {"IdleTimeout", c.IdleTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("node config: HTTP.%s %v must not be negative", d.name, d.v))
		}
	}
	if c.MaxConnections < 0 {
		errs = append(errs, fmt.Errorf("node config: HTTP.MaxConnections %d must not be negative", c.MaxConnections))
	}
	return errors.Join(errs...)
}

// WithDefaults returns c with unset fields defaulted and the nested
// configs wired with what the node knows before it starts.
func (c Config) WithDefaults() Config {
	if c.Name == "" {
		c.Name = defaultName()
	}
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if !c.Store.isPostgres() {
		if c.Store.SQLite.Path == "" && c.DataDir != "" {
			c.Store.SQLite.Path = filepath.Join(c.DataDir, SQLiteFile)
		}
		c.Store.SQLite = c.Store.SQLite.WithDefaults()
	} else {
		c.Store.Postgres = c.Store.Postgres.WithDefaults()
	}
	c.HTTP = c.HTTP.withDefaults()
	if c.Bus == nil {
		c.NATS.DataDir, c.NATS.Logger = c.DataDir, c.Logger.With("component", "nats")
		c.NATS = c.NATS.WithDefaults()
	}

	c.Engine.Schema, c.Engine.Clock, c.Engine.Logger = c.Schema, c.Clock, c.Logger.With("component", "engine")
	c.Engine.ReactionPlanner = c.Reactions.Planner
	c.Engine = c.Engine.WithDefaults()
	c.API.Logger = c.Logger.With("component", "http")
	if c.HTTP.Listen != "" {
		// The handler extends the write deadlines of our own server.
		c.API.WriteTimeout = c.HTTP.WriteTimeout
	}
	c.API = c.API.WithDefaults()
	c.Segments.Names, c.Segments.Clock, c.Segments.Logger = c.Names, c.Clock, c.Logger.With("component", "segments")
	c.Segments = c.Segments.WithDefaults()
	c.Blobs.Names, c.Blobs.Clock, c.Blobs.Logger = c.Names, c.Clock, c.Logger.With("component", "blobs")
	c.Blobs = c.Blobs.WithDefaults()
	c.Gate.Schema, c.Gate.Names, c.Gate.Node = c.Schema, c.Names, c.Name
	c.Gate.Declared = c.Checkpoints
	c.Gate.Clock, c.Gate.Logger = c.Clock, c.Logger.With("component", "gate")
	c.Gate = c.Gate.WithDefaults()
	c.Relay.Node, c.Relay.Schema, c.Relay.Names = c.Name, c.Schema, c.Names
	c.Relay.Logger = c.Logger.With("component", "relay")
	c.Relay = c.Relay.WithDefaults()
	rc := &c.Reactions.Runner
	rc.Node, rc.Names, rc.Clock, rc.Logger = c.Name, c.Names, c.Clock, c.Logger.With("component", "reactions")
	*rc = rc.WithDefaults()
	hc := &c.Realtime.Hub
	hc.Node, hc.Names, hc.Clock, hc.Logger = c.Name, c.Names, c.Clock, c.Logger.With("component", "realtime")
	if hc.MaxRequestBytes == 0 {
		hc.MaxRequestBytes = c.API.MaxRequestBytes
	}
	*hc = hc.WithDefaults()
	return c
}

// Validate reports every invalid field (call after WithDefaults),
// including the nested configs'.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("node config: "+format, args...)) }
	if c.DataDir == "" {
		bad("DataDir is required")
	}
	if c.Schema == nil {
		bad("Schema is required")
	}
	if c.API.Auth == nil && c.Hooks.Token == nil {
		bad("API.Auth (or Hooks.Token) is required")
	}
	if c.Names != (bus.Names{}) {
		if !c.Admin.Disabled {
			bad("Admin: the admin API answers on the production subjects; disable it in namespace %s", c.Names)
		}
		if c.Hooks != (hooks.Config{}) {
			bad("Hooks: host hooks are asked on the production subjects; none may be set in namespace %s", c.Names)
		}
	}
	errs = append(errs, c.Store.validate())
	if c.Bus != nil && (c.NATS.Mode != "" || c.NATS.ConfigFile != "" || len(c.NATS.URLs) > 0 || c.NATS.Port != 0) {
		bad("NATS: set either Bus or NATS, not both")
	}
	if c.Bus == nil {
		errs = append(errs, c.NATS.Validate())
	}
	if c.Edge.Enabled() {
		errs = append(errs, c.Edge.WithDefaults().Validate())
		if c.Names != (bus.Names{}) {
			bad("Edge: the edge service answers on the deployment's subjects; an edge topology needs the production namespace")
		}
	}
	errs = append(errs, c.SignedURLs.validate())
	if c.Leases.TTL != 0 || c.Leases.Key != nil {
		errs = append(errs, c.Leases.Validate())
	}
	errs = append(errs, c.HTTP.validate(), c.Engine.Validate(), c.API.Validate(), c.Segments.Validate(), c.Blobs.Validate(), c.Gate.Validate(), c.Relay.Validate())
	if !c.Reactions.Disabled {
		errs = append(errs, c.Reactions.Runner.Validate())
	}
	if !c.Realtime.Disabled {
		errs = append(errs, c.Realtime.Hub.Validate())
		if c.HTTP.Listen != "" && c.Realtime.Hub.MaxConnections >= c.HTTP.MaxConnections {
			bad("Realtime.Hub.MaxConnections %d must be below HTTP.MaxConnections %d: every socket is a connection of the listener",
				c.Realtime.Hub.MaxConnections, c.HTTP.MaxConnections)
		}
	}
	return errors.Join(errs...)
}

func (c StoreConfig) validate() error {
	if !c.isPostgres() {
		return c.SQLite.Validate()
	}
	if c.SQLite.Path != "" {
		return errors.New("node config: Store: set either Postgres or SQLite, not both")
	}
	return c.Postgres.Validate()
}

// OpenStore opens the store cfg.Store selects (after cfg.WithDefaults),
// without installing a schema. The caller closes it.
func OpenStore(ctx context.Context, cfg Config) (storage.Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Store.validate(); err != nil {
		return nil, err
	}
	if cfg.Store.isPostgres() {
		st, err := pgstore.Open(ctx, cfg.Store.Postgres)
		if err != nil {
			return nil, fmt.Errorf("open PostgreSQL: %w", err)
		}
		return st, nil
	}
	st, err := sqlitestore.Open(ctx, cfg.Store.SQLite)
	if err != nil {
		return nil, fmt.Errorf("open SQLite: %w", err)
	}
	return st, nil
}

func defaultName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "syncnode"
	}
	var b strings.Builder
	for _, r := range h {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "syncnode"
	}
	return b.String()
}
