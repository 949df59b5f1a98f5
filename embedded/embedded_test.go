package embedded_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// exercise proves the handle works: a KV round trip through JetStream and a
// core request over a second connection.
func exercise(t *testing.T, s *embedded.Server) {
	t.Helper()
	ctx := ctxT(t)
	kv, err := s.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "probe"})
	if err != nil {
		t.Fatalf("create kv: %v", err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("put: %v", err)
	}
	e, err := kv.Get(ctx, "k")
	if err != nil || string(e.Value()) != "v" {
		t.Fatalf("get = %v, %v; want v", e, err)
	}
	nc2, err := s.Connect()
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer nc2.Close()
	sub, err := nc2.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc2.Flush(); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Conn().Request("echo", []byte("hi"), 5*time.Second)
	if err != nil || string(resp.Data) != "hi" {
		t.Fatalf("request = %v, %v", resp, err)
	}
}

func TestStartInProcess(t *testing.T) {
	t.Parallel()
	s := embeddedtest.Start(t, embeddedtest.WithDontListen())
	if s.Mode() != embedded.ModeEmbedded {
		t.Fatalf("mode = %q", s.Mode())
	}
	if got := s.ClientURL(); got != "" {
		t.Errorf("ClientURL with DontListen = %q, want empty", got)
	}
	exercise(t, s)
}

func TestRepoNATSConf(t *testing.T) {
	t.Parallel()
	opts, err := server.ProcessConfigFile("../nats.conf")
	if err != nil {
		t.Fatalf("parse nats.conf: %v", err)
	}
	if opts.Host != embedded.DefaultHost || opts.Port != embedded.DefaultPort {
		t.Errorf("nats.conf listens on %s:%d, want %s:%d (the documented default)", opts.Host, opts.Port, embedded.DefaultHost, embedded.DefaultPort)
	}
	if !opts.JetStream {
		t.Errorf("nats.conf: JetStream off")
	}

	dir := t.TempDir()
	// Start from the file itself, on a random port: 4223 may be in use by
	// a syncnode running on this machine.
	s := embeddedtest.Start(t, embeddedtest.WithConfigFile("../nats.conf"), embeddedtest.WithDataDir(dir))
	if got := s.NATSServer().JetStreamConfig().StoreDir; got != filepath.Join(dir, embedded.JetStreamDir) {
		t.Errorf("store dir = %q, want %q", got, filepath.Join(dir, embedded.JetStreamDir))
	}
	if !strings.HasPrefix(s.ClientURL(), "nats://127.0.0.1:") {
		t.Errorf("ClientURL = %q", s.ClientURL())
	}
	exercise(t, s)
}

// TestNATSConfExamples uncomments the documented example blocks of
// nats.conf and parses the result, so the examples stay valid.
func TestNATSConfExamples(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	out.Write(data)
	var in bool
	var blocks int
	for line := range strings.SplitSeq(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "# BEGIN EXAMPLE"):
			in = true
			blocks++
		case strings.HasPrefix(line, "# END EXAMPLE"):
			in = false
		case in:
			out.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "#"), " ") + "\n")
		}
	}
	if blocks != 2 {
		t.Fatalf("found %d example blocks, want 2 (cluster, leafnode)", blocks)
	}
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("parse nats.conf with examples: %v\n%s", err, out.String())
	}
	if opts.Cluster.Name != "syncnode" || len(opts.Routes) != 3 {
		t.Errorf("cluster example: name %q, %d routes", opts.Cluster.Name, len(opts.Routes))
	}
	if len(opts.LeafNode.Remotes) != 1 {
		t.Fatalf("leafnode example: %d remotes", len(opts.LeafNode.Remotes))
	}
	if r := opts.LeafNode.Remotes[0]; len(r.DenyExports) != 8 || r.DenyExports[0] != "sync.>" || len(r.DenyImports) != 8 {
		t.Errorf("leafnode remote deny_exports = %v, deny_imports = %v, want the node's eight subjects each", r.DenyExports, r.DenyImports)
	}
}

func TestParseErrorNamesLine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bad.conf")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:4223\njetstream {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := startServer(ctxT(t), embedded.Config{ConfigFile: path, DataDir: t.TempDir(), Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want a parse error naming %s", err, path)
	}
}

func TestPortInUse(t *testing.T) {
	t.Parallel()
	// Hold a port the way a stock nats-server holds 4222.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	_, err = startServer(ctxT(t), embedded.Config{
		DataDir: t.TempDir(), Host: "127.0.0.1", Port: port, Logger: testLogger(t),
	})
	if !errors.Is(err, embedded.ErrPortInUse) {
		t.Fatalf("err = %v, want ErrPortInUse", err)
	}
	var pe *embedded.PortInUseError
	if !errors.As(err, &pe) {
		t.Fatalf("err %T is not a *PortInUseError", err)
	}
	want := "127.0.0.1:" + strconv.Itoa(port)
	if pe.Addr != want || pe.Listener != "client" || !strings.Contains(err.Error(), want) {
		t.Errorf("PortInUseError = %+v (%q), want client listener %s named in the message", pe, err, want)
	}
}

func TestClusterPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	_, err = startServer(ctxT(t), embedded.Config{
		DataDir: t.TempDir(), Port: embedded.RandomPort, Logger: testLogger(t),
		OptionsFunc: func(o *server.Options) {
			o.Cluster.Name, o.Cluster.Host, o.Cluster.Port = "c", "127.0.0.1", port
		},
	})
	var pe *embedded.PortInUseError
	if !errors.As(err, &pe) || pe.Listener != "cluster" {
		t.Fatalf("err = %v, want a cluster *PortInUseError", err)
	}
}

// A server-side fatal error (here: an unwritable pid file) fails Start
// with a *FatalError instead of exiting the test binary.
func TestFatalDoesNotExit(t *testing.T) {
	t.Parallel()
	_, err := startServer(ctxT(t), embedded.Config{
		DataDir: t.TempDir(), Port: embedded.RandomPort, Logger: testLogger(t), ReadyTimeout: 10 * time.Second,
		OptionsFunc: func(o *server.Options) {
			o.PidFile = filepath.Join(t.TempDir(), "missing", "dir", "nats.pid")
		},
	})
	var fe *embedded.FatalError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want *FatalError", err)
	}
}

func TestLogsGoToSlog(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var buf bytes.Buffer
	h := slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, &slog.HandlerOptions{Level: slog.LevelInfo})
	embeddedtest.Start(t, embeddedtest.WithLogger(slog.New(h)))
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(buf.String(), "Server is ready") || !strings.Contains(buf.String(), "component=nats-server") {
		t.Errorf("server log not routed through slog:\n%s", buf.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Stop is idempotent and does nothing before Start; a stopped server
// does not start again.
func TestStopIdempotent(t *testing.T) {
	t.Parallel()
	cfg := embedded.Config{DataDir: t.TempDir(), Port: embedded.RandomPort, Logger: testLogger(t)}
	unstarted, err := embedded.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := unstarted.Stop(ctxT(t)); err != nil {
		t.Fatalf("stop before start: %v", err)
	}
	s, err := startServer(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctxT(t)); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := s.Stop(ctxT(t)); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if !s.Conn().IsClosed() || s.NATSServer().Running() {
		t.Errorf("after Stop: conn closed %v, server running %v", s.Conn().IsClosed(), s.NATSServer().Running())
	}
	if err := s.Start(ctxT(t)); err == nil {
		t.Error("a stopped server started again")
	}
}

func TestRestartKeepsStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := ctxT(t)
	s1 := embeddedtest.Start(t, embeddedtest.WithDataDir(dir), embeddedtest.WithName("n1"), embeddedtest.WithoutCleanup())
	kv, err := s1.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "keep"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := s1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := embeddedtest.Start(t, embeddedtest.WithDataDir(dir), embeddedtest.WithName("n1"))
	kv2, err := s2.JetStream().KeyValue(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv2.Get(ctx, "k"); err != nil || string(e.Value()) != "v1" {
		t.Fatalf("after restart get = %v, %v", e, err)
	}
}

func TestExternalMode(t *testing.T) {
	t.Parallel()
	hub := embeddedtest.Start(t, embeddedtest.WithDomain("hub"))
	ext, err := startServer(ctxT(t), embedded.Config{
		Mode: embedded.ModeExternal, URLs: []string{hub.ClientURL()}, Domain: "hub", Logger: testLogger(t),
	})
	if err != nil {
		t.Fatalf("external: %v", err)
	}
	defer ext.Stop(context.Background())
	if ext.Mode() != embedded.ModeExternal || ext.NATSServer() != nil || ext.Domain() != "hub" {
		t.Errorf("external handle: mode %q, server %v, domain %q", ext.Mode(), ext.NATSServer(), ext.Domain())
	}
	if ext.ClientURL() != hub.ClientURL() {
		t.Errorf("ClientURL = %q, want %q", ext.ClientURL(), hub.ClientURL())
	}
	exercise(t, ext)
	// The external client's writes are visible through the embedded handle.
	if _, err := hub.JetStream().KeyValue(ctxT(t), "probe"); err != nil {
		t.Fatalf("bucket created externally not visible: %v", err)
	}
}

func TestExternalModeErrors(t *testing.T) {
	t.Parallel()
	hub := embeddedtest.Start(t)
	_, err := startServer(ctxT(t), embedded.Config{
		Mode: embedded.ModeExternal, URLs: []string{hub.ClientURL()},
		CredentialsFile: filepath.Join(t.TempDir(), "missing.creds"),
	})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing creds: err = %v, want os.ErrNotExist", err)
	}
	_, err = startServer(ctxT(t), embedded.Config{Mode: embedded.ModeExternal})
	if err == nil || !strings.Contains(err.Error(), "URLs") {
		t.Errorf("no URLs: err = %v", err)
	}
	_, err = startServer(ctxT(t), embedded.Config{})
	if err == nil || !strings.Contains(err.Error(), "DataDir") {
		t.Errorf("no DataDir: err = %v", err)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	servers := embeddedtest.StartCluster(t, 3)
	ctx := ctxT(t)
	kv, err := servers[0].JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "r3", Replicas: 3})
	if err != nil {
		t.Fatalf("create R3 kv: %v", err)
	}
	// A freshly created R3 stream may still be electing its leader: the
	// first puts can go unanswered, so retry until one lands.
	waitFor(t, 10*time.Second, func() error {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := kv.Put(pctx, "k", []byte("v"))
		return err
	}, "the R3 put to land")
	for i, s := range servers {
		// Replicas catch up asynchronously: poll with a deadline.
		waitFor(t, 10*time.Second, func() error {
			// Short attempts: a call to a replica that is not current yet
			// must not use up the whole deadline (NATS-NOTES pitfall 11).
			actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			kvi, err := s.JetStream().KeyValue(actx, "r3")
			if err != nil {
				return err
			}
			e, err := kvi.Get(actx, "k")
			if err != nil {
				return err
			}
			if string(e.Value()) != "v" {
				return errors.New("stale value " + string(e.Value()))
			}
			return nil
		}, "node %d reads the R3 value", i)
	}
}

// waitFor polls cond until it returns nil or the deadline passes.
func waitFor(t *testing.T, d time.Duration, cond func() error, what string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until "+what+": %v", append(args, err)...)
		}
		<-tick.C
	}
}

// TestUserPassword starts the documented nats.conf with users: the node's
// connections, in-process and extra ones, log in as the node's user, and
// a start without it is refused by the server.
func TestUserPassword(t *testing.T) {
	t.Parallel()
	conf := "../docs/nats-permissions.conf"
	s := embeddedtest.Start(t, embeddedtest.WithConfigFile(conf), embeddedtest.WithUser("syncnode", "node-secret"))
	exercise(t, s)

	// A TCP client with the wrong password is refused.
	if nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("syncnode", "wrong"), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("wrong password accepted")
	}

	_, err := startServer(ctxT(t), embedded.Config{ConfigFile: conf, DataDir: t.TempDir(), Port: embedded.RandomPort,
		ServerName: "no-user", ReadyTimeout: 5 * time.Second, Logger: testLogger(t)})
	if !errors.Is(err, embedded.ErrAuthRequired) {
		t.Fatalf("start without a user: err = %v, want %v", err, embedded.ErrAuthRequired)
	}
	if err := (embedded.Config{DataDir: "d", Password: "p"}).Validate(); err == nil {
		t.Error("a password without a user passed validation")
	}
	if err := (embedded.Config{Mode: embedded.ModeExternal, URLs: []string{"nats://x"}, User: "u", CredentialsFile: "c"}).Validate(); err == nil {
		t.Error("a user and a credentials file passed validation")
	}
}

// startServer is embedded.New then Start.
func startServer(ctx context.Context, cfg embedded.Config) (*embedded.Server, error) {
	s, err := embedded.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}
