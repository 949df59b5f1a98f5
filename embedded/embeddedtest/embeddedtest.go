// Package embeddedtest starts real embedded NATS servers for other
// packages' tests: a random client port on 127.0.0.1, JetStream stored in
// t.TempDir(), stopped at test cleanup.
package embeddedtest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/syncnode/syncnode/embedded"
)

// Option adjusts a test server.
type Option func(*options)

type options struct {
	cfg     embedded.Config
	cluster *clusterOpts
	noClean bool
}

type clusterOpts struct {
	name   string
	port   int
	routes []string
}

// WithConfigFile loads the server options from a nats.conf.
func WithConfigFile(path string) Option {
	return func(o *options) { o.cfg.ConfigFile = path }
}

// WithDataDir stores JetStream under dir instead of a fresh t.TempDir(),
// so a test can restart a server on the same store.
func WithDataDir(dir string) Option {
	return func(o *options) { o.cfg.DataDir = dir }
}

// WithName sets the server name.
func WithName(name string) Option {
	return func(o *options) { o.cfg.ServerName = name }
}

// WithDomain sets the JetStream domain.
func WithDomain(domain string) Option {
	return func(o *options) { o.cfg.Domain = domain }
}

// WithPort fixes the client port (default: random), e.g. to restart a
// server where clients reconnect.
func WithPort(port int) Option {
	return func(o *options) { o.cfg.Port = port }
}

// WithDontListen disables the TCP client listener (in-process only).
func WithDontListen() Option {
	return func(o *options) { o.cfg.DontListen = true }
}

// WithUser authenticates the node's connections as user (a nats.conf
// with users).
func WithUser(user, password string) Option {
	return func(o *options) { o.cfg.User, o.cfg.Password = user, password }
}

// WithLogger routes the server's log to logger (default: warnings and
// errors to the test log).
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) { o.cfg.Logger = logger }
}

// WithOptions edits the server options last.
func WithOptions(fn func(*server.Options)) Option {
	return func(o *options) { o.cfg.OptionsFunc = fn }
}

// WithCluster makes the server a cluster member listening for routes on
// 127.0.0.1:port and routing to routes (nats-route://host:port URLs).
// StartCluster is the usual way to get a cluster.
func WithCluster(name string, port int, routes []string) Option {
	return func(o *options) { o.cluster = &clusterOpts{name: name, port: port, routes: routes} }
}

// WithoutCleanup leaves stopping the server to the test (restart tests).
func WithoutCleanup() Option {
	return func(o *options) { o.noClean = true }
}

// Start starts an embedded server for t and stops it at cleanup.
func Start(t testing.TB, opts ...Option) *embedded.Server {
	t.Helper()
	s, err := start(t, opts...)
	if err != nil {
		t.Fatalf("embeddedtest: %v", err)
	}
	return s
}

func start(t testing.TB, opts ...Option) (*embedded.Server, error) {
	o := options{cfg: embedded.Config{
		Port:         embedded.RandomPort,
		Host:         "127.0.0.1",
		ReadyTimeout: 30 * time.Second,
		Logger:       slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}}
	for _, opt := range opts {
		opt(&o)
	}
	if o.cfg.DataDir == "" {
		o.cfg.DataDir = t.TempDir()
	}
	if o.cfg.ServerName == "" {
		o.cfg.ServerName = "test-" + strconv.Itoa(os.Getpid()) + "-" + nextID()
	}
	if o.cluster != nil {
		c := *o.cluster
		userFn := o.cfg.OptionsFunc
		o.cfg.OptionsFunc = func(so *server.Options) {
			so.Cluster.Name = c.name
			so.Cluster.Host = "127.0.0.1"
			so.Cluster.Port = c.port
			so.Routes = server.RoutesFromStr(strings.Join(c.routes, ","))
			if userFn != nil {
				userFn(so)
			}
		}
	}
	s, err := embedded.New(o.cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Start(context.Background()); err != nil {
		return nil, err
	}
	if !o.noClean {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.Stop(ctx); err != nil {
				t.Errorf("embeddedtest: stop: %v", err)
			}
		})
	}
	return s, nil
}

// StartCluster starts n clustered servers (route ports on loopback,
// client listeners on random ports) concurrently, so a JetStream meta
// leader can be elected, and returns them once every one is ready.
func StartCluster(t testing.TB, n int, opts ...Option) []*embedded.Server {
	t.Helper()
	ports := make([]int, n)
	routes := make([]string, n)
	for i := range ports {
		ports[i] = FreePort(t)
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i])
	}
	name := "c" + nextID()
	servers := make([]*embedded.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			o := append([]Option{
				WithName(fmt.Sprintf("%s-n%d", name, i)),
				WithCluster(name, ports[i], routes),
			}, opts...)
			servers[i], errs[i] = start(t, o...)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("embeddedtest: cluster node %d: %v", i, err)
		}
	}
	return servers
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("embeddedtest: free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

var (
	idMu sync.Mutex
	idN  int
)

func nextID() string {
	idMu.Lock()
	defer idMu.Unlock()
	idN++
	return strconv.Itoa(idN)
}
