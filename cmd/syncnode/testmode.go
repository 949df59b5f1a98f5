package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/syncnode/syncnode/loadfix"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/testctl"
)

// checkLoopback refuses a test mode on a listener other clients could
// reach: the modes replace authentication.
func checkLoopback(listen string) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("http.listen %q: %w", listen, err)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--test-control and --load-fixture replace authentication and serve only on a loopback address; --http %s is not one (use 127.0.0.1:PORT)", listen)
}

// warnTestModes says loudly, on stderr and in the log, that the node runs
// without real authentication.
func warnTestModes(stderr io.Writer, tm testModeConfig) {
	var modes []string
	if tm.TestControl {
		modes = append(modes, "--test-control: /__test control API, /i/{id} instances, authentication by the "+testctl.ActorHeader+" header")
	}
	if tm.LoadFixture {
		modes = append(modes, fmt.Sprintf("--load-fixture: /__load routes, every request is actor %q in partition %q with every project", loadfix.ActorID, loadfix.Partition))
	}
	// The banner once, as plain text where the log's own lines go too
	// (stderr): a log record saying the same would print it twice.
	fmt.Fprintf(stderr, "\nWARNING: TEST MODE. This node is for conformance and load harnesses only:\n  %s\nNever expose it.\n\n", strings.Join(modes, "\n  "))
}

// testModeRoutes mounts the enabled modes' routes around the node's
// protocol handler. Test-control instances take the node's realtime and
// reaction settings.
func testModeRoutes(tm testModeConfig, nc node.Config, log *slog.Logger) func(ctx context.Context, n *node.Node, h http.Handler) (http.Handler, func(context.Context) error, error) {
	return func(ctx context.Context, n *node.Node, h http.Handler) (http.Handler, func(context.Context) error, error) {
		stop := func(context.Context) error { return nil }
		if tm.LoadFixture {
			lc := loadfix.Config{Store: n.Store, Engine: n.Engine, Logger: log.With("component", "loadfix")}
			if n.Realtime != nil {
				lc.Realtime = n.Realtime.Metrics()
			}
			f, err := loadfix.New(lc)
			if err != nil {
				return nil, nil, err
			}
			h = f.Wrap(h)
		}
		if tm.TestControl {
			ctl, err := testctl.New(testctl.Config{
				Bus: n.NATS, Dir: filepath.Join(nc.DataDir, "test-instances"),
				MaxRequestBytes: nc.API.MaxRequestBytes, Realtime: nc.Realtime, Reactions: nc.Reactions,
				Logger: log.With("component", "testctl"),
			})
			if err != nil {
				return nil, nil, err
			}
			if err := ctl.Start(ctx); err != nil {
				return nil, nil, err
			}
			inner := h
			h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if testctl.Owns(r.URL.Path) {
					ctl.ServeHTTP(w, r)
					return
				}
				inner.ServeHTTP(w, r)
			})
			stop = ctl.Stop
		}
		return h, stop, nil
	}
}
