// Package node is the only place that assembles a running syncnode: the
// SQL store, the embedded (or external, or shared) NATS server, the commit
// relay, the serve gate, the segment store, the sync engine and the HTTP
// handler and listener. `syncnode serve` is a thin shell around it, the
// operator commands open a node's data through OpenStore and OpenAdmin,
// each test-control instance is a node, and end-to-end tests start real
// nodes through it.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/gate"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/lifecycle"
	"github.com/syncnode/syncnode/relay"
	"github.com/syncnode/syncnode/segments"
	"github.com/syncnode/syncnode/storage"
)

// ErrSchemaInstall wraps a failure to install the schema (and the
// declared checkpoints) at Start: the store refused it.
var ErrSchemaInstall = errors.New("install schema")

// Node is a running syncnode. Its component fields are set by Start.
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

	ownNATS    bool // NATS was started by this node (not Config.Bus)
	ln         net.Listener
	srv        *http.Server
	routesStop func(context.Context) error
	serveErr   chan error

	life lifecycle.Once
}

// New validates cfg (every field, the nested configs' included) and
// returns a node; Start starts it.
func New(cfg Config) (*Node, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Node{cfg: cfg, log: cfg.Logger, serveErr: make(chan error, 1)}, nil
}

// Start opens every component, in dependency order, and starts serving
// HTTP (when HTTP.Listen is set). On failure it stops whatever it had
// started. A node starts once.
func (n *Node) Start(ctx context.Context) error {
	return n.life.Start(func() error {
		if err := n.start(ctx); err != nil {
			return errors.Join(err, n.stop(context.WithoutCancel(ctx)))
		}
		return nil
	})
}

func (n *Node) start(ctx context.Context) (err error) {
	cfg := n.cfg

	// HTTP first: a port that is taken should fail before anything heavy.
	if cfg.HTTP.Listen != "" {
		if n.ln, err = net.Listen("tcp", cfg.HTTP.Listen); err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("HTTP address %s is already in use: stop the other process or pick another with --http", cfg.HTTP.Listen)
			}
			return fmt.Errorf("listen on %s: %w", cfg.HTTP.Listen, err)
		}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}

	if n.Store, err = OpenStore(ctx, cfg); err != nil {
		return err
	}
	if err = n.Store.EnsureSchemaWithCheckpoints(ctx, cfg.Schema, cfg.Checkpoints); err != nil {
		return fmt.Errorf("%w: %w", ErrSchemaInstall, err)
	}

	if cfg.Bus != nil {
		n.NATS = cfg.Bus
	} else {
		if n.NATS, err = embedded.New(cfg.NATS); err != nil {
			return err
		}
		n.ownNATS = true
		if err = n.NATS.Start(ctx); err != nil {
			return fmt.Errorf("start NATS: %w", err)
		}
	}
	js := n.NATS.JetStream()

	if n.Relay, err = relay.New(js, n.Store, cfg.Relay); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	if err = n.Relay.Start(ctx); err != nil {
		return fmt.Errorf("start relay: %w", err)
	}

	gc := cfg.Gate
	gc.Store, gc.Conn, gc.JetStream = n.Store, n.NATS.Conn(), js
	if n.Gate, err = gate.New(gc); err != nil {
		return err
	}
	if err = n.Gate.Start(ctx); err != nil {
		return fmt.Errorf("start gate: %w", err)
	}

	sc := cfg.Segments
	sc.JetStream, sc.Store = js, n.Store
	if n.Segments, err = segments.New(sc); err != nil {
		return err
	}
	if err = n.Segments.Start(ctx); err != nil {
		return fmt.Errorf("segment store: %w", err)
	}

	ec := cfg.Engine
	ec.Store, ec.Segments, ec.Gate, ec.OnCommit = n.Store, n.Segments, engine.GateOf(n.Gate), n.Relay.Notify
	if n.Engine, err = engine.New(ec); err != nil {
		return err
	}

	ac := cfg.API
	ac.Engine, ac.Segments, ac.Ready = n.Engine, n.Segments, n.ready
	if ac.Registry == nil {
		ac.Registry = prometheus.NewRegistry()
		ac.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if n.Handler, err = httpapi.New(ac); err != nil {
		return err
	}
	var handler http.Handler = n.Handler
	if cfg.Routes != nil {
		if handler, n.routesStop, err = cfg.Routes(ctx, n, handler); err != nil {
			return fmt.Errorf("routes: %w", err)
		}
	}
	if n.ln != nil {
		n.srv = &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: cfg.HTTP.ReadHeaderTimeout,
			ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
		}
		go func() { n.serveErr <- n.srv.Serve(n.ln) }()
	}
	return nil
}

// Addr is the HTTP listen address (with the real port when 0 was asked),
// or "" when the node serves no HTTP of its own.
func (n *Node) Addr() string {
	if n.ln == nil {
		return ""
	}
	return n.ln.Addr().String()
}

// URL is the node's base URL, or "" when it serves no HTTP of its own.
func (n *Node) URL() string {
	if n.ln == nil {
		return ""
	}
	return "http://" + n.Addr()
}

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
// in-flight ones finish, flush the relay, stop NATS (unless it is
// Config.Bus) and close the store. Every acknowledged commit is already
// in SQL; the relay republishes anything unpublished on the next start.
// Stop is idempotent and does nothing before Start.
func (n *Node) Stop(ctx context.Context) error {
	return n.life.Stop(func() error { return n.stop(ctx) })
}

func (n *Node) stop(ctx context.Context) error {
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
		if err := n.Segments.Stop(ctx); err != nil {
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
	if n.NATS != nil && n.ownNATS {
		if err := n.NATS.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("nats stop: %w", err))
		}
	}
	if n.Store != nil {
		if err := n.Store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("store close: %w", err))
		}
	}
	return errors.Join(errs...)
}
