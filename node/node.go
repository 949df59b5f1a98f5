// Package node assembles a running syncnode: the SQL store, the embedded
// (or external) NATS server, the commit relay, the segment store, the sync
// engine and the HTTP server. `syncnode serve` is a thin shell around it,
// and end-to-end tests start real nodes through it.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/syncnode/syncnode/admin"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/gate"
	"github.com/syncnode/syncnode/hooks"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/reactions"
	"github.com/syncnode/syncnode/realtime"
	"github.com/syncnode/syncnode/relay"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/segments"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// Config configures a node.
type Config struct {
	// DataDir holds the SQLite file (unless PostgresURL is set) and the
	// embedded JetStream store.
	DataDir string
	Schema  *schema.Schema
	// Name names the node in CloudEvents sources (default: hostname).
	Name string

	// HTTPAddr is the HTTP listen address (default 127.0.0.1:8080).
	HTTPAddr        string
	MaxRequestBytes int64
	// HTTP server bounds; zero selects the default (see the Default*
	// constants). ReadTimeout bounds reading a request, body included;
	// WriteTimeout bounds each chunk of a response, so a reader that
	// accepts nothing for that long is cut; IdleTimeout closes idle
	// keep-alive connections. MaxConnections caps open connections (past
	// it a new one is answered 503 and closed); MaxInflightBodyBytes caps
	// the request bodies held by in-flight requests (past it 503; default
	// httpapi.DefaultMaxInflightBodyBytes).
	ReadHeaderTimeout    time.Duration
	ReadTimeout          time.Duration
	WriteTimeout         time.Duration
	IdleTimeout          time.Duration
	MaxConnections       int
	MaxInflightBodyBytes int64

	// NATS configures the embedded server or the external connection.
	// DataDir and Logger are filled in from the node's.
	NATS embedded.Config

	// PostgresURL selects PostgreSQL; empty means SQLite in DataDir.
	PostgresURL string
	// PostgresSchema is the PostgreSQL schema (search_path) to use.
	PostgresSchema string
	// SQLiteSynchronous is "FULL" (default) or "NORMAL".
	SQLiteSynchronous string

	// Auth authenticates requests. Required unless Hooks.Token is set,
	// which replaces it.
	Auth httpapi.Authenticator
	// Hooks selects the host hooks the node asks over NATS (package
	// hooks): scope resolution, write validation, token verification.
	Hooks hooks.Config
	// NoAdmin turns the admin API (package admin) off.
	NoAdmin bool
	// Version is the build version the admin API reports.
	Version string

	MaxOperations         int
	MaxSubscriptions      int
	InlineSegmentMaxBytes int
	SegmentTTL            time.Duration
	// StreamSegmentsAbove: larger segment downloads are streamed from the
	// Object Store rather than served from memory (default 8 MiB).
	StreamSegmentsAbove int64

	// Engine hooks for hosts embedding syncnode as a library.
	Validators      map[string]engine.RowValidator
	CommitValidator engine.CommitValidator

	// Reactions configures durable reactions: the planner of every new
	// commit and this node's runner.
	Reactions ReactionsConfig

	// Checkpoints are the build's backfill checkpoint declarations
	// (package gate), installed with the schema; the node serves their
	// partitions while they backfill.
	Checkpoints []storage.CheckpointKey
	// OnGateChange is called when another process changed a partition's
	// serve gate ("" for every partition); see gate.Config.OnChange.
	OnGateChange func(partition string)

	// Realtime tunes the realtime channel (GET /realtime); the node fills
	// in its engine, store, auth, gate, NATS, clock and logger.
	// RealtimeOff leaves the route unanswered.
	Realtime    realtime.Config
	RealtimeOff bool

	// Now is the clock (default wall clock), in Unix ms.
	Now    func() int64
	Logger *slog.Logger

	// Routes, when set, runs once every component is up and before HTTP
	// serves: it returns the handler to serve in place of the protocol
	// handler h (the test-control and load modes mount their routes around
	// it), and a stop function that Stop calls after HTTP has shut down and
	// before the components close.
	Routes func(ctx context.Context, n *Node, h http.Handler) (http.Handler, func(context.Context) error, error)
}

// ReactionsConfig configures durable reactions (package reactions).
type ReactionsConfig struct {
	// Planner plans the reactions of every new commit, inside its push
	// transaction (rules.CompileReactions builds one from declarative
	// rules).
	Planner engine.ReactionPlanner
	// Disabled runs no runner on this node: reactions are still planned
	// and enqueued, and a runner on another node sharing the database
	// runs them.
	Disabled bool
	// Runner configures the runner; Store, Conn, Node, Now and Logger are
	// the node's.
	Runner reactions.Config
}

// Node is a running syncnode.
type Node struct {
	cfg      Config
	log      *slog.Logger
	Store    storage.Store
	NATS     *embedded.Server
	Relay    *relay.Relay
	Segments *segments.Store
	Engine   *engine.Engine
	Handler  *httpapi.Handler
	Gate     *gate.Gate
	// Reactions is the reaction runner (nil when disabled).
	Reactions *reactions.Runner
	Hooks     *hooks.Set
	Admin     *admin.Admin

	adminConn *nats.Conn
	// Realtime is nil when Config.RealtimeOff is set.
	Realtime *realtime.Hub

	hub        atomic.Pointer[realtime.Hub] // for the gate's callback, set once started
	ln         net.Listener
	srv        *http.Server
	routesStop func(context.Context) error
	serveErr   chan error
	stopOnce   sync.Once
	stopErr    error
}

// Start opens every component, in dependency order, and starts serving
// HTTP. On failure it closes whatever it had opened.
func Start(ctx context.Context, cfg Config) (n *Node, err error) {
	if cfg.Schema == nil || (cfg.Auth == nil && cfg.Hooks.Token == nil) {
		return nil, errors.New("node: Schema and Auth (or a token hook) are required")
	}
	if cfg.DataDir == "" {
		return nil, errors.New("node: DataDir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:8080"
	}
	if cfg.Name == "" {
		cfg.Name = defaultName()
	}
	if cfg.Now == nil {
		cfg.Now = func() int64 { return time.Now().UnixMilli() }
	}
	cfg.withHTTPDefaults()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	n = &Node{cfg: cfg, log: cfg.Logger, serveErr: make(chan error, 1)}
	started := n // a failing return sets n to nil before this runs
	defer func() {
		if err != nil {
			_ = started.Stop(context.WithoutCancel(ctx))
		}
	}()

	// HTTP first: a port that is taken should fail before anything heavy.
	if n.ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("HTTP address %s is already in use: stop the other process or pick another with --http", cfg.HTTPAddr)
		}
		return nil, fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	n.ln = &limitListener{Listener: n.ln, max: int64(cfg.MaxConnections)}

	if n.Store, err = openStore(ctx, cfg); err != nil {
		return nil, err
	}
	if err = n.Store.EnsureSchemaWithCheckpoints(ctx, cfg.Schema, cfg.Checkpoints); err != nil {
		return nil, fmt.Errorf("install schema: %w", err)
	}

	natsCfg := cfg.NATS
	natsCfg.DataDir, natsCfg.Logger = cfg.DataDir, cfg.Logger.With("component", "nats")
	if n.NATS, err = embedded.Start(ctx, natsCfg); err != nil {
		return nil, fmt.Errorf("start NATS: %w", err)
	}

	if n.Relay, err = relay.New(n.NATS.JetStream(), n.Store, relay.Config{
		Node: cfg.Name, Schema: cfg.Schema, Logger: cfg.Logger.With("component", "relay"),
	}); err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	if err = n.Relay.Start(ctx); err != nil {
		return nil, fmt.Errorf("start relay: %w", err)
	}

	if n.Gate, err = gate.New(gate.Config{
		Store: n.Store, Schema: cfg.Schema, Declared: cfg.Checkpoints,
		Conn: n.NATS.Conn(), JetStream: n.NATS.JetStream(), Node: cfg.Name,
		OnChange: n.gateChanged, Now: cfg.Now, Logger: cfg.Logger.With("component", "gate"),
	}); err != nil {
		return nil, err
	}
	if err = n.Gate.Start(ctx); err != nil {
		return nil, fmt.Errorf("start gate: %w", err)
	}

	if n.Segments, err = segments.Open(ctx, segments.Config{
		JetStream: n.NATS.JetStream(), Store: n.Store, TTL: cfg.SegmentTTL,
		Now: cfg.Now, Logger: cfg.Logger.With("component", "segments"),
	}); err != nil {
		return nil, fmt.Errorf("segment store: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	authn, commitValidator, err := n.startHooks(cfg, reg)
	if err != nil {
		return nil, err
	}

	if n.Engine, err = engine.New(engine.Config{
		Schema: cfg.Schema, Store: n.Store, Segments: n.Segments,
		Now: cfg.Now, OnCommit: n.Relay.Notify, Gate: engine.GateOf(n.Gate), Logger: cfg.Logger.With("component", "engine"),
		MaxOperations: cfg.MaxOperations, MaxSubscriptions: cfg.MaxSubscriptions, InlineSegmentMaxBytes: cfg.InlineSegmentMaxBytes,
		Validators: cfg.Validators, CommitValidator: commitValidator,
		ReactionPlanner: cfg.Reactions.Planner, OnReactions: n.reactionsEnqueued,
	}); err != nil {
		return nil, err
	}
	if err = n.startReactions(ctx); err != nil {
		return nil, err
	}

	if n.Reactions != nil {
		reg.MustRegister(n.Reactions.Collector())
	}
	var rt http.Handler
	if !cfg.RealtimeOff {
		if err = n.startRealtime(ctx, reg, authn); err != nil {
			return nil, err
		}
		rt = n.Realtime
	}
	if n.Handler, err = httpapi.New(httpapi.Config{
		Engine: n.Engine, Auth: authn, Segments: n.Segments,
		MaxRequestBytes: cfg.MaxRequestBytes, Ready: n.ready, StreamSegmentsAbove: cfg.StreamSegmentsAbove,
		WriteTimeout: cfg.WriteTimeout, MaxInflightBodyBytes: cfg.MaxInflightBodyBytes,
		Logger: cfg.Logger.With("component", "http"), Registry: reg, Realtime: rt,
	}); err != nil {
		return nil, err
	}
	var handler http.Handler = n.Handler
	if cfg.Routes != nil {
		if handler, n.routesStop, err = cfg.Routes(ctx, n, handler); err != nil {
			return nil, fmt.Errorf("routes: %w", err)
		}
	}
	if !cfg.NoAdmin {
		if err = n.startAdmin(ctx, cfg); err != nil {
			return nil, err
		}
	}
	n.srv = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		// The read deadline ends once the body is read (net/http clears
		// it for its background read), so it never cuts a long response;
		// httpapi extends the write deadline before every chunk it sends.
		ReadTimeout:  cfg.ReadTimeout,
		WriteTimeout: cfg.WriteTimeout,
		IdleTimeout:  cfg.IdleTimeout,
		ErrorLog:     slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	go func() { n.serveErr <- n.srv.Serve(n.ln) }()
	return n, nil
}

// HTTP defaults.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 60 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxConnections    = 4096
)

func (c *Config) withHTTPDefaults() {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.ReadHeaderTimeout, DefaultReadHeaderTimeout}, {&c.ReadTimeout, DefaultReadTimeout}, {&c.WriteTimeout, DefaultWriteTimeout}, {&c.IdleTimeout, DefaultIdleTimeout}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
}

// Addr is the HTTP listen address (with the real port when 0 was asked).
func (n *Node) Addr() string { return n.ln.Addr().String() }

// URL is the node's base URL.
func (n *Node) URL() string { return "http://" + n.Addr() }

// Done reports a fatal HTTP serve error.
func (n *Node) Done() <-chan error { return n.serveErr }

// ready is /readyz: the store and NATS must answer, and the serve gate
// must not refuse the node (gate.Gate.Ready says why).
func (n *Node) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, _, err := n.Store.SchemaMarker(ctx); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	if !n.NATS.Conn().IsConnected() {
		return errors.New("nats: not connected")
	}
	return n.Gate.Ready(ctx)
}

// Stop shuts down in reverse order: stop accepting requests and let
// in-flight ones finish, drain the relay (every commit notified so far is
// published, within ctx), close NATS and the store. Every acknowledged
// commit is already in SQL; the relay republishes anything left
// unpublished on the next start.
func (n *Node) Stop(ctx context.Context) error {
	n.stopOnce.Do(func() {
		var errs []error
		if n.srv != nil {
			if err := n.srv.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("http shutdown: %w", err))
			}
		} else if n.ln != nil {
			n.ln.Close()
		}
		if n.Realtime != nil {
			if err := n.Realtime.Stop(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if n.Admin != nil {
			if err := n.Admin.Stop(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if n.adminConn != nil {
			n.adminConn.Close()
		}
		if n.routesStop != nil {
			if err := n.routesStop(ctx); err != nil {
				errs = append(errs, fmt.Errorf("routes stop: %w", err))
			}
		}
		if n.Reactions != nil {
			if err := n.Reactions.Stop(ctx); err != nil {
				errs = append(errs, fmt.Errorf("reactions stop: %w", err))
			}
		}
		if n.Segments != nil {
			if err := n.Segments.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if n.Gate != nil {
			if err := n.Gate.Stop(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if n.Relay != nil && n.srv != nil {
			// No request runs any more: publish what was committed before
			// NATS closes, within ctx. What is left (NATS unavailable, the
			// shutdown timeout) the next start publishes from the log.
			if err := n.Relay.Flush(ctx); err != nil {
				n.log.Warn("relay not drained at shutdown; the next start publishes the rest", "err", err)
			}
		}
		if n.Relay != nil {
			if err := n.Relay.Stop(ctx); err != nil {
				errs = append(errs, fmt.Errorf("relay stop: %w", err))
			}
		}
		if n.NATS != nil {
			if err := n.NATS.Close(ctx); err != nil {
				errs = append(errs, fmt.Errorf("nats stop: %w", err))
			}
		}
		if n.Store != nil {
			if err := n.Store.Close(); err != nil {
				errs = append(errs, fmt.Errorf("store close: %w", err))
			}
		}
		n.stopErr = errors.Join(errs...)
	})
	return n.stopErr
}

// startReactions starts the reaction runner unless disabled. It is woken
// by commit events on the bus, like a runner on any other node.
func (n *Node) startReactions(ctx context.Context) error {
	if n.cfg.Reactions.Disabled {
		return nil
	}
	rc := n.cfg.Reactions.Runner
	rc.Store, rc.Conn, rc.Node = n.Store, n.NATS.Conn(), n.cfg.Name
	rc.Now = func() time.Time { return time.UnixMilli(n.cfg.Now()) }
	rc.Logger = n.log.With("component", "reactions")
	r, err := reactions.New(rc)
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return fmt.Errorf("start reactions: %w", err)
	}
	n.Reactions = r
	return nil
}

// reactionsEnqueued publishes the enqueued events of a durable commit.
func (n *Node) reactionsEnqueued(partition string, p storage.ReactionEnqueueParams) {
	reactions.PublishEnqueued(n.NATS.Conn(), n.cfg.Name, n.log, partition, p)
}

// startRealtime starts the realtime hub on the node's components.
func (n *Node) startRealtime(ctx context.Context, reg prometheus.Registerer, authn httpapi.Authenticator) error {
	rc := n.cfg.Realtime
	rc.Engine, rc.Store, rc.Auth, rc.Gate = n.Engine, n.Store, authn, n.Gate
	rc.Conn, rc.JetStream, rc.Node = n.NATS.Conn(), n.NATS.JetStream(), n.cfg.Name
	if rc.MaxRequestBytes == 0 {
		rc.MaxRequestBytes = n.cfg.MaxRequestBytes
	}
	rc.Now, rc.Logger = n.cfg.Now, n.log.With("component", "realtime")
	hub, err := realtime.New(rc)
	if err != nil {
		return err
	}
	if err := hub.Start(ctx); err != nil {
		return err
	}
	n.Realtime = hub
	n.hub.Store(hub)
	return realtime.RegisterMetrics(reg, hub.Metrics())
}

// gateChanged passes serve-gate changes to the realtime hub and the
// configured hook.
func (n *Node) gateChanged(partition string) {
	if hub := n.hub.Load(); hub != nil {
		hub.GateChanged(partition)
	}
	if n.cfg.OnGateChange != nil {
		n.cfg.OnGateChange(partition)
	}
}

func openStore(ctx context.Context, cfg Config) (storage.Store, error) {
	if cfg.PostgresURL != "" {
		st, err := pgstore.Open(ctx, pgstore.Config{URL: cfg.PostgresURL, Schema: cfg.PostgresSchema})
		if err != nil {
			return nil, fmt.Errorf("open PostgreSQL: %w", err)
		}
		return st, nil
	}
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{
		Path:        filepath.Join(cfg.DataDir, "syncnode.db"),
		Synchronous: sqlitestore.Synchronous(strings.ToUpper(cfg.SQLiteSynchronous)),
	})
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
