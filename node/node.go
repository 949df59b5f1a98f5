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
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/gate"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/clock"
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

	// NATS configures the embedded server or the external connection.
	// DataDir and Logger are filled in from the node's.
	NATS embedded.Config

	// PostgresURL selects PostgreSQL; empty means SQLite in DataDir.
	PostgresURL string
	// PostgresSchema is the PostgreSQL schema (search_path) to use.
	PostgresSchema string
	// SQLiteSynchronous is "FULL" (default) or "NORMAL".
	SQLiteSynchronous string

	// Auth authenticates requests. Required.
	Auth httpapi.Authenticator

	MaxOperations         int
	InlineSegmentMaxBytes int
	SegmentTTL            time.Duration
	// StreamSegmentsAbove: larger segment downloads are streamed from the
	// Object Store rather than served from memory (default 8 MiB).
	StreamSegmentsAbove int64

	// Engine hooks for hosts embedding syncnode as a library.
	Validators      map[string]engine.RowValidator
	CommitValidator engine.CommitValidator

	// Checkpoints are the build's backfill checkpoint declarations
	// (package gate), installed with the schema; the node serves their
	// partitions while they backfill.
	Checkpoints []storage.CheckpointKey
	// OnGateChange is called when another process changed a partition's
	// serve gate ("" for every partition); see gate.Config.OnChange.
	OnGateChange func(partition string)

	// Clock is the node's clock (default clock.System).
	Clock  clock.Clock
	Logger *slog.Logger

	// Routes, when set, runs once every component is up and before HTTP
	// serves: it returns the handler to serve in place of the protocol
	// handler h (the test-control and load modes mount their routes around
	// it), and a stop function that Stop calls after HTTP has shut down and
	// before the components close.
	Routes func(ctx context.Context, n *Node, h http.Handler) (http.Handler, func(context.Context) error, error)
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
	if cfg.Schema == nil || cfg.Auth == nil {
		return nil, errors.New("node: Schema and Auth are required")
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
	cfg.Clock = clock.Or(cfg.Clock)
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	n = &Node{cfg: cfg, log: cfg.Logger, serveErr: make(chan error, 1)}
	defer func() {
		if err != nil {
			_ = n.Stop(context.WithoutCancel(ctx))
		}
	}()

	// HTTP first: a port that is taken should fail before anything heavy.
	if n.ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("HTTP address %s is already in use: stop the other process or pick another with --http", cfg.HTTPAddr)
		}
		return nil, fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}

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
		OnChange: cfg.OnGateChange, Clock: cfg.Clock, Logger: cfg.Logger.With("component", "gate"),
	}); err != nil {
		return nil, err
	}
	if err = n.Gate.Start(ctx); err != nil {
		return nil, fmt.Errorf("start gate: %w", err)
	}

	if n.Segments, err = segments.Open(ctx, segments.Config{
		JetStream: n.NATS.JetStream(), Store: n.Store, TTL: cfg.SegmentTTL,
		Clock: cfg.Clock, Logger: cfg.Logger.With("component", "segments"),
	}); err != nil {
		return nil, fmt.Errorf("segment store: %w", err)
	}

	if n.Engine, err = engine.New(engine.Config{
		Schema: cfg.Schema, Store: n.Store, Segments: n.Segments,
		Clock: cfg.Clock, OnCommit: n.Relay.Notify, Gate: engine.GateOf(n.Gate), Logger: cfg.Logger.With("component", "engine"),
		MaxOperations: cfg.MaxOperations, InlineSegmentMaxBytes: cfg.InlineSegmentMaxBytes,
		Validators: cfg.Validators, CommitValidator: cfg.CommitValidator,
	}); err != nil {
		return nil, err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if n.Handler, err = httpapi.New(httpapi.Config{
		Engine: n.Engine, Auth: cfg.Auth, Segments: n.Segments,
		MaxRequestBytes: cfg.MaxRequestBytes, Ready: n.ready, StreamSegmentsAbove: cfg.StreamSegmentsAbove,
		Logger: cfg.Logger.With("component", "http"), Registry: reg,
	}); err != nil {
		return nil, err
	}
	var handler http.Handler = n.Handler
	if cfg.Routes != nil {
		if handler, n.routesStop, err = cfg.Routes(ctx, n, handler); err != nil {
			return nil, fmt.Errorf("routes: %w", err)
		}
	}
	n.srv = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	go func() { n.serveErr <- n.srv.Serve(n.ln) }()
	return n, nil
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
// in-flight ones finish, flush the relay, close NATS and the store. Every
// acknowledged commit is already in SQL; the relay republishes anything
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
		if n.routesStop != nil {
			if err := n.routesStop(ctx); err != nil {
				errs = append(errs, fmt.Errorf("routes stop: %w", err))
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
