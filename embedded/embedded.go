package embedded

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/internal/lifecycle"
)

// Mode selects where the node's NATS comes from.
type Mode string

const (
	// ModeEmbedded runs a nats-server inside the process (the default).
	ModeEmbedded Mode = "embedded"
	// ModeExternal connects to an existing NATS deployment.
	ModeExternal Mode = "external"
)

// Defaults of the embedded server when no nats.conf is given. They match
// the repository's nats.conf: the client listener is on 4223, not NATS's
// 4222, so a syncnode can run next to a stock nats-server.
const (
	DefaultHost = "127.0.0.1"
	DefaultPort = 4223
)

// RandomPort asks the server to pick a free port (server.RANDOM_PORT).
const RandomPort = server.RANDOM_PORT

// JetStreamDir is the directory under the data dir that holds the
// embedded server's JetStream store. The server appends it to its
// store_dir itself, so store_dir is set to the data dir.
const JetStreamDir = "jetstream"

// Default timeouts.
const (
	DefaultReadyTimeout = 30 * time.Second
	// readyAttempt bounds one JetStream readiness probe (NATS-NOTES
	// pitfall 11: an API call made before the meta leader exists blocks
	// for the full client timeout).
	readyAttempt = 250 * time.Millisecond
)

// Config configures a Server.
type Config struct {
	// Mode is ModeEmbedded (default) or ModeExternal.
	Mode Mode

	// ConfigFile is the nats.conf to load in embedded mode. Empty means
	// the built-in defaults (DefaultHost:DefaultPort, JetStream on).
	ConfigFile string
	// DataDir is the node's data directory; JetStream stores under
	// DataDir/jetstream. Required in embedded mode.
	DataDir string
	// ServerName overrides server_name. When both are empty the name is
	// "syncnode-<hostname>": JetStream clustering needs stable names.
	ServerName string
	// Host overrides the client listen host when non-empty.
	Host string
	// Port overrides the client port when non-zero; RandomPort (-1) picks
	// a free one.
	Port int
	// DontListen disables the TCP client listener: only in-process
	// clients. Route and leafnode listeners are unaffected.
	DontListen bool

	// Domain is the JetStream domain. Embedded: overrides the file's
	// jetstream { domain }. External: the domain to bind to.
	Domain string

	// Cluster, when its Port is set, makes the embedded server a member
	// of a NATS cluster, overriding the file's cluster {} block.
	Cluster ClusterConfig
	// Replicas is the replication factor of every stream, KV bucket and
	// object store the node creates (1..5). Zero detects it: 3 when the
	// cluster has three or more servers (Server.Replicas), else 1.
	Replicas int

	// URLs are the servers to connect to in external mode.
	URLs []string
	// CredentialsFile is a NATS .creds file for external mode.
	CredentialsFile string
	// User and Password authenticate the node's connections, in-process
	// ones included, when nats.conf (or the external deployment) has
	// users: the node's user needs every permission on the subjects the
	// node publishes and subscribes (docs/bus.md, "Permissions").
	User     string
	Password string

	// ClientName names the node's client connection (default "syncnode").
	ClientName string
	// ReadyTimeout bounds readiness: listeners up and JetStream answering
	// (default DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// Logger receives the server's log and ours; nil discards.
	Logger *slog.Logger

	// OptionsFunc, when set, edits the server options after every
	// override (embedded mode). embeddedtest uses it for cluster setups.
	OptionsFunc func(*server.Options)
}

// ClusterConfig is the embedded server's cluster {} block: where it
// listens for routes and the routes of every member. List every member,
// this one included (the server ignores the route to itself): the
// replica detection counts them.
type ClusterConfig struct {
	// Name is the cluster's name, the same on every member (default
	// "syncnode").
	Name string
	// Host and Port are the route listener (Port -1 picks a free one).
	Host string
	Port int
	// Routes are the members' nats-route://host:port URLs.
	Routes []string
}

// set reports whether the cluster block is configured.
func (c ClusterConfig) set() bool { return c.Port != 0 || len(c.Routes) > 0 }

// WithDefaults returns c with unset fields defaulted.
func (c Config) WithDefaults() Config {
	if c.Mode == "" {
		c.Mode = ModeEmbedded
	}
	if c.ClientName == "" {
		c.ClientName = "syncnode"
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch c.Mode {
	case ModeEmbedded:
		if c.DataDir == "" {
			return fmt.Errorf("nats config: DataDir is required in embedded mode")
		}
		if len(c.URLs) > 0 || c.CredentialsFile != "" {
			return fmt.Errorf("nats config: URLs and CredentialsFile are for external mode")
		}
		if c.Port < RandomPort || c.Port > 65535 {
			return fmt.Errorf("nats config: Port %d out of range (-1..65535)", c.Port)
		}
		if c.Cluster.set() {
			if c.Cluster.Port < RandomPort || c.Cluster.Port > 65535 || c.Cluster.Port == 0 {
				return fmt.Errorf("nats config: Cluster.Port %d out of range (-1, 1..65535)", c.Cluster.Port)
			}
			for _, r := range c.Cluster.Routes {
				if u, err := url.Parse(r); err != nil || u.Host == "" || (u.Scheme != "nats-route" && u.Scheme != "nats" && u.Scheme != "tls") {
					return fmt.Errorf("nats config: Cluster.Routes: %q is not a nats-route://host:port URL", r)
				}
			}
		}
	case ModeExternal:
		if len(c.URLs) == 0 {
			return fmt.Errorf("nats config: URLs are required in external mode")
		}
		if c.ConfigFile != "" {
			return fmt.Errorf("nats config: ConfigFile is for embedded mode")
		}
		if c.Cluster.set() {
			return fmt.Errorf("nats config: Cluster is for embedded mode")
		}
	default:
		return fmt.Errorf("nats config: unknown Mode %q (want %q or %q)", c.Mode, ModeEmbedded, ModeExternal)
	}
	if c.ReadyTimeout < 0 {
		return fmt.Errorf("nats config: ReadyTimeout must not be negative")
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("nats config: Replicas %d outside 0..5 (0 detects)", c.Replicas)
	}
	if c.Password != "" && c.User == "" {
		return fmt.Errorf("nats config: Password needs a User")
	}
	if c.User != "" && c.CredentialsFile != "" {
		return fmt.Errorf("nats config: User and CredentialsFile are exclusive")
	}
	return nil
}

// Server is the node's NATS: an embedded nats-server with an in-process
// connection, or a connection to an external deployment. It is safe for
// concurrent use.
type Server struct {
	cfg      Config
	mode     Mode
	nc       *nats.Conn
	js       jetstream.JetStream
	domain   string
	srv      *server.Server // nil in external mode
	connOpts []nats.Option  // how to open more connections
	urls     string         // external mode
	replicas int
	leafs    []LeafRemote
	opts     *server.Options // embedded: the server's options, random ports resolved
	logger   *slog.Logger

	life lifecycle.Once
}

// New validates cfg and returns a Server; Start starts it.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, mode: cfg.Mode, logger: cfg.Logger}, nil
}

// Start starts (embedded) or connects to (external) the node's NATS and
// waits, at most Config.ReadyTimeout, until JetStream answers. On failure
// nothing is left running. A Server starts once.
func (s *Server) Start(ctx context.Context) error {
	return s.life.Start(func() error {
		if s.cfg.Mode == ModeExternal {
			return s.connectExternal(ctx)
		}
		return s.startEmbedded(ctx)
	})
}

// LoadOptions parses a nats.conf with the server's own parser (or returns
// the built-in defaults for an empty path) and applies the overrides the
// node owns. It does not start anything.
func LoadOptions(cfg Config) (*server.Options, error) {
	cfg = cfg.WithDefaults()
	var opts *server.Options
	if cfg.ConfigFile == "" {
		opts = &server.Options{Host: DefaultHost, Port: DefaultPort}
	} else {
		var err error
		opts, err = server.ProcessConfigFile(cfg.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("load nats config %s: %w", cfg.ConfigFile, err)
		}
	}
	opts.JetStream = true
	opts.StoreDir = cfg.DataDir // the server stores under StoreDir/jetstream
	opts.NoSigs = true
	opts.NoLog = false
	opts.DisableJetStreamBanner = true
	if cfg.Domain != "" {
		opts.JetStreamDomain = cfg.Domain
	}
	if cfg.ServerName != "" {
		opts.ServerName = cfg.ServerName
	}
	if opts.ServerName == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "local"
		}
		opts.ServerName = "syncnode-" + host
	}
	if cfg.Host != "" {
		opts.Host = cfg.Host
	}
	if cfg.Port != 0 {
		opts.Port = cfg.Port
	}
	if cfg.DontListen {
		opts.DontListen = true
	}
	if c := cfg.Cluster; c.set() {
		opts.Cluster.Name = cmp.Or(c.Name, opts.Cluster.Name, "syncnode")
		opts.Cluster.Host = cmp.Or(c.Host, opts.Cluster.Host, opts.Host)
		opts.Cluster.Port = c.Port
		opts.Routes = server.RoutesFromStr(strings.Join(c.Routes, ","))
	}
	if cfg.OptionsFunc != nil {
		cfg.OptionsFunc(opts)
	}
	return opts, nil
}

func (s *Server) startEmbedded(ctx context.Context) error {
	cfg := s.cfg
	opts, err := LoadOptions(cfg)
	if err != nil {
		return err
	}
	if cfg.User == "" && requiresAuth(opts) {
		return fmt.Errorf("start nats: %w: %s has users: set the node's user and password", ErrAuthRequired, cfg.ConfigFile)
	}
	if err := checkPortsFree(opts); err != nil {
		return err
	}
	if err := os.MkdirAll(opts.StoreDir, 0o755); err != nil {
		return fmt.Errorf("start nats: %w", err)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("start nats: %w", err)
	}
	logger := cfg.Logger.With("component", "nats-server", "server", opts.ServerName)
	adapter := newLogAdapter(logger)
	srv.SetLoggerV2(adapter, logger.Enabled(ctx, slog.LevelDebug), logger.Enabled(ctx, LevelTrace), false)
	srv.Start()

	fail := func(err error) error {
		srv.Shutdown()
		srv.WaitForShutdown()
		return err
	}
	deadline := time.Now().Add(cfg.ReadyTimeout)
	if err := waitListeners(ctx, srv, adapter, deadline); err != nil {
		return fail(err)
	}

	connOpts := []nats.Option{
		nats.Name(cfg.ClientName),
		nats.InProcessServer(srv),
	}
	if cfg.User != "" {
		connOpts = append(connOpts, nats.UserInfo(cfg.User, cfg.Password))
	}
	nc, err := nats.Connect("", connOpts...)
	if err != nil {
		return fail(fmt.Errorf("start nats: connect in-process: %w", err))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return fail(fmt.Errorf("start nats: %w", err))
	}
	domain, err := waitJetStream(ctx, js, adapter, deadline)
	if err == nil {
		err = waitMetaCurrent(ctx, srv, deadline)
	}
	if err != nil {
		nc.Close()
		return fail(err)
	}
	s.nc, s.js, s.domain, s.srv, s.connOpts = nc, js, domain, srv, connOpts
	s.replicas = replicasFor(cfg.Replicas, clusterSize(opts))
	s.leafs, s.opts = leafRemotes(opts), opts
	cfg.Logger.Info("nats: embedded server ready",
		"server", opts.ServerName, "client_url", s.ClientURL(), "domain", domain, "store_dir", filepath.Join(opts.StoreDir, JetStreamDir))
	return nil
}

func (s *Server) connectExternal(ctx context.Context) error {
	cfg := s.cfg
	connOpts := []nats.Option{
		nats.Name(cfg.ClientName),
		nats.MaxReconnects(-1),
	}
	if cfg.CredentialsFile != "" {
		if _, err := os.Stat(cfg.CredentialsFile); err != nil {
			return fmt.Errorf("connect nats: credentials file: %w", err)
		}
		connOpts = append(connOpts, nats.UserCredentials(cfg.CredentialsFile))
	}
	if cfg.User != "" {
		connOpts = append(connOpts, nats.UserInfo(cfg.User, cfg.Password))
	}
	urls := strings.Join(cfg.URLs, ",")
	nc, err := nats.Connect(urls, connOpts...)
	if err != nil {
		return fmt.Errorf("connect nats %s: %w", urls, err)
	}
	var js jetstream.JetStream
	if cfg.Domain != "" {
		js, err = jetstream.NewWithDomain(nc, cfg.Domain)
	} else {
		js, err = jetstream.New(nc)
	}
	if err != nil {
		nc.Close()
		return fmt.Errorf("connect nats: %w", err)
	}
	domain, err := waitJetStream(ctx, js, nil, time.Now().Add(cfg.ReadyTimeout))
	if err != nil {
		nc.Close()
		return err
	}
	if cfg.Domain != "" {
		domain = cfg.Domain
	}
	cfg.Logger.Info("nats: connected to external deployment", "urls", urls, "domain", domain)
	s.nc, s.js, s.domain, s.connOpts, s.urls = nc, js, domain, connOpts, urls
	s.replicas = replicasFor(cfg.Replicas, len(nc.Servers()))
	return nil
}

// clusterSize is the number of servers the embedded server's cluster
// block names: its distinct routes (every member, itself included), or 1
// when it is not clustered.
func clusterSize(opts *server.Options) int {
	if opts.Cluster.Port == 0 {
		return 1
	}
	seen := map[string]bool{}
	for _, r := range opts.Routes {
		seen[r.Host] = true
	}
	return max(len(seen), 1)
}

// replicasFor is the configured replication factor, or the detected one:
// 3 on a cluster of three or more servers, else 1 (R2 survives no loss).
func replicasFor(configured, servers int) int {
	if configured > 0 {
		return configured
	}
	if servers >= 3 {
		return 3
	}
	return 1
}

// requiresAuth reports whether the server's options authenticate clients.
func requiresAuth(opts *server.Options) bool {
	return len(opts.Users) > 0 || len(opts.Nkeys) > 0 || opts.Authorization != "" || opts.Username != "" ||
		opts.TrustedOperators != nil || opts.AuthCallout != nil
}

// waitListeners polls the server's listeners until they are up, a fatal
// server error is reported, ctx ends or the deadline passes.
func waitListeners(ctx context.Context, srv *server.Server, adapter *logAdapter, deadline time.Time) error {
	for {
		if err := adapter.fatal(); err != nil {
			return err
		}
		if srv.ReadyForConnections(20 * time.Millisecond) {
			return adapter.fatal()
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("start nats: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("start nats: %w: listeners not up", ErrNotReady)
		}
	}
}

// waitJetStream polls the JetStream API with short attempts until it
// answers and returns the account's domain.
func waitJetStream(ctx context.Context, js jetstream.JetStream, adapter *logAdapter, deadline time.Time) (string, error) {
	var last error
	for {
		if adapter != nil {
			if err := adapter.fatal(); err != nil {
				return "", err
			}
		}
		actx, cancel := context.WithTimeout(ctx, readyAttempt)
		info, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return info.Domain, nil
		}
		last = err
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return "", fmt.Errorf("nats jetstream: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("nats jetstream: %w", err)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("nats jetstream: %w: %w", ErrNotReady, last)
		}
		// A refused or timed-out attempt returns quickly or after
		// readyAttempt; pace the fast failures a little.
		select {
		case <-ctx.Done():
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// waitMetaCurrent waits until a clustered server follows a JetStream meta
// leader: before that, the account answers but creating a stream or a
// bucket blocks for the client's whole timeout (NATS-NOTES pitfall 11).
func waitMetaCurrent(ctx context.Context, srv *server.Server, deadline time.Time) error {
	for !srv.JetStreamIsCurrent() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("nats jetstream: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats jetstream: %w: no meta leader", ErrNotReady)
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// checkPortsFree refuses to start when a fixed listener port is taken. The
// server would otherwise log a fatal error from its accept loop and never
// become ready.
func checkPortsFree(opts *server.Options) error {
	type listener struct {
		what string
		host string
		port int
	}
	ls := []listener{
		{"cluster", opts.Cluster.Host, opts.Cluster.Port},
		{"leafnode", opts.LeafNode.Host, opts.LeafNode.Port},
		{"websocket", opts.Websocket.Host, opts.Websocket.Port},
		{"mqtt", opts.MQTT.Host, opts.MQTT.Port},
		{"gateway", opts.Gateway.Host, opts.Gateway.Port},
		{"monitoring", opts.HTTPHost, opts.HTTPPort},
	}
	if !opts.DontListen {
		ls = append([]listener{{"client", opts.Host, opts.Port}}, ls...)
	}
	for _, l := range ls {
		if l.port <= 0 {
			continue
		}
		host := l.host
		if host == "" {
			host = opts.Host
		}
		addr := net.JoinHostPort(host, strconv.Itoa(l.port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return &PortInUseError{Listener: l.what, Addr: addr, Err: err}
		}
		ln.Close()
	}
	return nil
}

// Replicas is the replication factor of the streams, KV buckets and
// object stores the node creates: Config.Replicas, or the detected one
// (3 on a cluster of three or more servers, else 1). Zero before Start.
func (s *Server) Replicas() int { return s.replicas }

// LeafRemote is one leafnodes { remotes } entry of the embedded server:
// the hub it dials and the subjects it keeps off the link.
type LeafRemote struct {
	URLs []string
	// DenyExports are subjects whose local messages are not sent to the
	// hub; DenyImports subjects whose hub messages are not received.
	DenyExports, DenyImports []string
}

// LeafRemotes are the embedded server's leaf remotes (none in external
// mode or on a hub).
func (s *Server) LeafRemotes() []LeafRemote { return s.leafs }

// LeafConnections is the number of leaf connections up: on an edge, its
// links to the hub; on a hub, the edges attached. Zero in external mode.
func (s *Server) LeafConnections() int {
	if s.srv == nil {
		return 0
	}
	return s.srv.NumLeafNodes()
}

// LeafURL is where edges dial this server's leafnodes {} listener
// (nats-leaf://host:port, a random port resolved), or "" when it has
// none.
func (s *Server) LeafURL() string {
	if s.opts == nil || s.opts.LeafNode.Port <= 0 {
		return ""
	}
	host := s.opts.LeafNode.Host
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "nats-leaf://" + net.JoinHostPort(host, strconv.Itoa(s.opts.LeafNode.Port))
}

// CheckLeafIsolation refuses leaf remotes that let any of subjects
// cross the link in either direction: each remote must deny both
// exports and imports of each (a wider wildcard counts). A hub stream
// bound to the same subjects would otherwise store the edge's messages
// too and answer its publishes (NATS-NOTES pitfall 3).
func (s *Server) CheckLeafIsolation(subjects []string) error {
	var errs []error
	for _, r := range s.leafs {
		for _, subj := range subjects {
			for _, dir := range []struct {
				name string
				list []string
			}{{"deny_exports", r.DenyExports}, {"deny_imports", r.DenyImports}} {
				if !slices.ContainsFunc(dir.list, func(p string) bool { return subjectCovers(p, subj) }) {
					errs = append(errs, fmt.Errorf("%w: leaf remote %v: %s must include %q", ErrLeafNotIsolated, r.URLs, dir.name, subj))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// subjectCovers reports whether pattern matches every subject that
// subject (itself possibly a wildcard) matches.
func subjectCovers(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" {
			return i < len(st)
		}
		if i >= len(st) {
			return false
		}
		if p != "*" && p != st[i] || p == "*" && st[i] == ">" {
			return false
		}
	}
	return len(pt) == len(st)
}

func leafRemotes(opts *server.Options) []LeafRemote {
	var out []LeafRemote
	for _, r := range opts.LeafNode.Remotes {
		lr := LeafRemote{DenyExports: slices.Clone(r.DenyExports), DenyImports: slices.Clone(r.DenyImports)}
		for _, u := range r.URLs {
			lr.URLs = append(lr.URLs, u.Redacted())
		}
		out = append(out, lr)
	}
	return out
}

// Mode reports whether the server is embedded or external.
func (s *Server) Mode() Mode { return s.mode }

// Conn is the node's client connection (in-process when embedded).
func (s *Server) Conn() *nats.Conn { return s.nc }

// JetStream is bound to the node's domain.
func (s *Server) JetStream() jetstream.JetStream { return s.js }

// Domain is the JetStream domain in use ("" when none).
func (s *Server) Domain() string { return s.domain }

// NATSServer is the embedded server, nil in external mode.
func (s *Server) NATSServer() *server.Server { return s.srv }

// ClientURL is where external clients (the nats CLI) connect: the
// embedded TCP listener, or the configured URLs in external mode. It is
// empty when the embedded server does not listen.
func (s *Server) ClientURL() string {
	if s.srv == nil {
		return s.urls
	}
	if s.srv.Addr() == nil {
		return ""
	}
	return s.srv.ClientURL()
}

// Connect opens another client connection to the same NATS (in-process
// when embedded). The caller closes it.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	all := append(append([]nats.Option(nil), s.connOpts...), opts...)
	nc, err := nats.Connect(s.urls, all...)
	if err != nil {
		return nil, fmt.Errorf("nats connect: %w", err)
	}
	return nc, nil
}

// Stop drains the node's connection, then (embedded) shuts the server
// down and waits for it. ctx bounds the drain. It is idempotent (later
// calls return the first result) and does nothing before Start.
func (s *Server) Stop(ctx context.Context) error {
	return s.life.Stop(func() error { return s.stop(ctx) })
}

func (s *Server) stop(ctx context.Context) error {
	var errs []error
	if err := drain(ctx, s.nc); err != nil {
		errs = append(errs, err)
	}
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop nats: %w", err)
	}
	return nil
}

// drain drains nc and waits until it is closed or ctx ends, in which case
// the connection is closed hard.
func drain(ctx context.Context, nc *nats.Conn) error {
	if nc.IsClosed() {
		return nil
	}
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := nc.Drain(); err != nil {
		nc.Close()
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil
		}
		return err
	}
	select {
	case <-closed:
		return nil
	case <-ctx.Done():
		nc.Close()
		return ctx.Err()
	}
}
