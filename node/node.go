// Package node is the only place that assembles a running syncnode: the
// SQL store, the embedded (or external, or shared) NATS server, the commit
// relay, the serve gate, the segment store, the blob store, the host hooks, the sync
// engine, the reaction runner, the realtime hub, the HTTP handler and
// listener, and the admin API. `syncnode serve` is a thin shell around
// it, the operator commands open a node's data through OpenStore and
// OpenOffline, each test-control instance is a node, and end-to-end tests
// start real nodes through it.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/syncnode/syncnode/admin"
	"github.com/syncnode/syncnode/blobs"
	"github.com/syncnode/syncnode/edge"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/gate"
	"github.com/syncnode/syncnode/hooks"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/lifecycle"
	"github.com/syncnode/syncnode/leases"
	"github.com/syncnode/syncnode/operations"
	"github.com/syncnode/syncnode/reactions"
	"github.com/syncnode/syncnode/realtime"
	"github.com/syncnode/syncnode/relay"
	"github.com/syncnode/syncnode/segments"
	"github.com/syncnode/syncnode/signedurl"
	"github.com/syncnode/syncnode/sqliteimage"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// ErrSchemaInstall wraps a failure to install the schema (and the
// declared checkpoints) at Start: the store refused it.
var ErrSchemaInstall = errors.New("install schema")

// Node is a running syncnode. Its component fields are set by Start; the
// optional ones stay nil when their component is off.
type Node struct {
	cfg      Config
	log      *slog.Logger
	Store    storage.Store
	NATS     *embedded.Server
	Relay    *relay.Relay
	Segments *segments.Store
	Blobs    *blobs.Store
	Engine   *engine.Engine
	// SignedURLs is the signer of segment URLs, nil when they are off.
	SignedURLs *signedurl.Signer
	Handler    *httpapi.Handler
	Gate       *gate.Gate
	Hooks      *hooks.Set
	// Reactions is the reaction runner (nil when Reactions.Disabled).
	Reactions *reactions.Runner
	// wakeRunner is Reactions once started, for the engine's
	// OnSilentReactions (commits may come before the runner starts).
	wakeRunner atomic.Pointer[reactions.Runner]
	// Realtime is the realtime hub (nil when Realtime.Disabled).
	Realtime *realtime.Hub
	// Operations runs the remote operations (nil when none is
	// registered).
	Operations *operations.Service
	// Admin is the admin API (nil when Admin.Disabled).
	Admin *admin.Admin
	// Leases is the auth lease authority (nil when leases are off).
	Leases *leases.Leases
	// EdgeHome is the edge side of an edge node, EdgeHub the hub side of
	// its hub (package edge); nil outside an edge topology.
	EdgeHome *edge.Home
	EdgeHub  *edge.Hub

	ownNATS    bool // NATS was started by this node (not Config.Bus)
	adminConn  *nats.Conn
	hub        atomic.Pointer[realtime.Hub] // for the gate's callback, set once started
	opsHub     *operations.Hub
	opsNATS    *operations.NATSBinding
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
		n.ln = &limitListener{Listener: n.ln, max: int64(cfg.HTTP.MaxConnections)}
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
	if err = n.checkEdge(); err != nil {
		return err
	}
	js := n.NATS.JetStream()
	// Every stream, bucket and object store the node creates has the
	// replication factor of its NATS (3 on a cluster of three or more).
	replicas := max(n.NATS.Replicas(), 1)
	cfg.Relay.Streams.Commits.Replicas, cfg.Relay.Streams.Control.Replicas = replicas, replicas
	cfg.Gate.Replicas, cfg.Segments.Replicas, cfg.Blobs.Replicas = replicas, replicas, replicas

	if n.Relay, err = relay.New(js, n.Store, cfg.Relay); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	if err = n.Relay.Start(ctx); err != nil {
		return fmt.Errorf("start relay: %w", err)
	}

	gc := cfg.Gate
	gc.Store, gc.Conn, gc.JetStream, gc.OnChange = n.Store, n.NATS.Conn(), js, n.gateChanged
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

	bc := cfg.Blobs
	bc.JetStream, bc.Store = js, n.Store
	if n.Blobs, err = blobs.New(bc); err != nil {
		return err
	}
	if err = n.Blobs.Start(ctx); err != nil {
		return fmt.Errorf("blob store: %w", err)
	}

	ac := cfg.API
	if ac.Registry == nil {
		ac.Registry = prometheus.NewRegistry()
		ac.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	ec := cfg.Engine
	opsRegistry, err := n.loadOperations(ctx)
	if err != nil {
		return err
	}
	if ac.Auth, ec.CommitValidator, err = n.startHooks(ac.Auth, ec.CommitValidator, ac.Registry, candidateQuery(opsRegistry)); err != nil {
		return err
	}

	ec.Store, ec.Segments, ec.Gate, ec.OnCommit = n.Store, n.Segments, engine.GateOf(n.Gate), n.Relay.Notify
	ec.OnAppend = n.Relay.Committed
	if !cfg.Images.Disabled {
		dir := cfg.Images.TempDir
		if dir == "" {
			dir = cfg.Segments.TempDir
		}
		ec.ImageWriter = func(ctx context.Context, w io.Writer, l sqliteimage.Layout, m sqliteimage.Meta, rows iter.Seq2[sqliteimage.Row, error]) (int64, error) {
			return sqlitestore.WriteImage(ctx, w, dir, l, m, rows)
		}
	}
	if cfg.SignedURLs.enabled() {
		if n.SignedURLs, err = signedurl.New(signedurl.Config{Key: cfg.SignedURLs.Key, TTL: cfg.SignedURLs.TTL}); err != nil {
			return err
		}
		ec.SignedURLs, ec.SignedURLBase = n.SignedURLs, cfg.SignedURLs.BaseURL
	}
	ec.OnReactions = n.reactionsEnqueued
	ec.OnSilentReactions = func(partition string) {
		// No commit event will announce these reactions: wake the local
		// runner (before it starts, its first sweep finds them).
		if r := n.wakeRunner.Load(); r != nil {
			r.Wake(partition)
		}
	}
	if cfg.Leases.TTL != 0 {
		lc := cfg.Leases
		lc.Store, lc.Logger = n.Store, n.log.With("component", "leases")
		if n.Leases, err = leases.New(lc); err != nil {
			return err
		}
		ec.Leases = n.Leases
		if err = registerLeaseMetrics(ac.Registry, n.Leases.Metrics()); err != nil {
			return err
		}
	}
	if err = n.newEdgeHub(&ec); err != nil {
		return err
	}
	if n.Engine, err = engine.New(ec); err != nil {
		return err
	}
	if err = n.startEdge(ctx, ac.Registry); err != nil {
		return err
	}
	if err = n.startReactions(ctx, ac.Registry); err != nil {
		return err
	}
	if err = n.startRealtime(ctx, ac.Registry, ac.Auth); err != nil {
		return err
	}
	if n.Realtime != nil {
		ac.Realtime = n.Realtime
	}
	if ac.Operations, err = n.startOperations(ctx, opsRegistry, ac.Auth, ac.Registry); err != nil {
		return err
	}

	ac.Engine, ac.Segments, ac.Blobs, ac.Ready = n.Engine, n.Segments, n.Blobs, n.ready
	if n.cfg.Edge.Enabled() {
		ac.ReadyDetail = n.readyDetail
	}
	if err = ac.Registry.Register(n.Blobs.Collector()); err != nil {
		return err
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
	if !cfg.Admin.Disabled {
		if err = n.startAdmin(ctx); err != nil {
			return err
		}
	}
	if n.ln != nil {
		n.srv = &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: cfg.HTTP.ReadHeaderTimeout,
			// The read deadline ends once the body is read (net/http
			// clears it for its background read), so it never cuts a long
			// response; httpapi extends the write deadline before every
			// chunk it sends, and realtime clears both on upgrade.
			ReadTimeout:  cfg.HTTP.ReadTimeout,
			WriteTimeout: cfg.HTTP.WriteTimeout,
			IdleTimeout:  cfg.HTTP.IdleTimeout,
			ErrorLog:     slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
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
// in-flight ones finish, close the realtime sockets, stop the admin API,
// the routes and the reaction runner, drain the relay (every commit
// notified so far is published, within ctx), stop NATS (unless it is
// Config.Bus) and close the store. Every acknowledged commit is already in
// SQL; the relay republishes anything left unpublished on the next start.
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
	if n.Realtime != nil {
		if err := n.Realtime.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if n.opsNATS != nil {
		if err := n.opsNATS.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("operations NATS stop: %w", err))
		}
	}
	if n.opsHub != nil {
		if err := n.opsHub.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("operations watch stop: %w", err))
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
	if n.Blobs != nil {
		if err := n.Blobs.Stop(ctx); err != nil {
			errs = append(errs, err)
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
	if err := n.stopEdge(ctx); err != nil {
		errs = append(errs, err)
	}
	if n.Relay != nil && n.Engine != nil {
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

// startReactions starts the reaction runner unless disabled. It is woken
// by commit events on the bus, like a runner on any other node.
func (n *Node) startReactions(ctx context.Context, reg prometheus.Registerer) error {
	if n.cfg.Reactions.Disabled {
		return nil
	}
	rc := n.cfg.Reactions.Runner
	rc.Store, rc.Conn = n.Store, n.NATS.Conn()
	r, err := reactions.New(rc)
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return fmt.Errorf("start reactions: %w", err)
	}
	n.Reactions = r
	n.wakeRunner.Store(r)
	return reg.Register(r.Collector())
}

// reactionsEnqueued publishes the enqueued events of a durable commit.
func (n *Node) reactionsEnqueued(partition string, p storage.ReactionEnqueueParams) {
	reactions.PublishEnqueued(n.NATS.Conn(), n.cfg.Names, n.cfg.Name, n.log, partition, p)
}

// startRealtime starts the realtime hub on the node's components unless
// disabled.
func (n *Node) startRealtime(ctx context.Context, reg prometheus.Registerer, authn httpapi.Authenticator) error {
	if n.cfg.Realtime.Disabled {
		return nil
	}
	rc := n.cfg.Realtime.Hub
	rc.Engine, rc.Store, rc.Auth, rc.Gate = n.Engine, n.Store, authn, n.realtimeGate()
	rc.Conn = n.NATS.Conn()
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
	if n.cfg.Gate.OnChange != nil {
		n.cfg.Gate.OnChange(partition)
	}
}

// registerLeaseMetrics exports the lease authority's counters as
// syncnode_auth_leases_total{event}.
func registerLeaseMetrics(reg prometheus.Registerer, m *leases.Metrics) error {
	for event, v := range map[string]*atomic.Int64{
		"issued": &m.Issued, "refreshed": &m.Refreshed, "served": &m.Served,
		"required": &m.Required, "revoked": &m.Revoked, "bad_record": &m.BadRecords,
	} {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "syncnode_auth_leases_total", Help: "Auth lease events: issued, refreshed, served during an outage, refused (required, revoked), records failing their signature.",
			ConstLabels: prometheus.Labels{"event": event},
		}, func() float64 { return float64(v.Load()) })
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register lease metrics: %w", err)
		}
	}
	return nil
}
