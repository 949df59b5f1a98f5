package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// runtimeConfig is the [runtime] section: settings of the Go runtime of
// the serving process. They are the process's, not a node's (a process
// may hold several nodes), so the binary applies them, not node.
type runtimeConfig struct {
	// MemoryLimit is the Go runtime's soft memory limit (GOMEMLIMIT):
	// "64MiB", "1GiB", a plain number of bytes, or "off". The GOMEMLIMIT
	// environment variable, when set, wins.
	MemoryLimit string `toml:"memory_limit"`
	// GCPercent is the collector's heap growth target (GOGC): a
	// collection starts when the heap has grown by this percentage over
	// what the last one left live. The GOGC environment variable, when
	// set, wins ("off" stays available there, for use with memory_limit).
	GCPercent int `toml:"gc_percent"`
	// PprofListen serves net/http/pprof on its own listener at this
	// host:port; empty (the default) serves nothing.
	PprofListen string `toml:"pprof_listen"`
}

// DefaultMemoryLimit is the soft limit without configuration. A soft
// limit under the live heap makes the collector run nearly continuously:
// at 64 MiB a reconnect storm over 2,000-row scopes (inline segments,
// sockets) cost 3.5 ms of server CPU per reconnect, at 256 MiB 1.4 ms with
// a peak RSS of 240 MiB (README, Benchmarks). 256 MiB holds that working
// set and still bounds a node on a small edge box; raise it (or "off")
// where memory is plentiful.
const DefaultMemoryLimit = "256MiB"

// DefaultGCPercent is the heap growth target without configuration. The
// Go default, 100, lets the heap reach twice its live size between
// collections, and the garbage between them is resident: under push +
// pull at 20 clients the heap at its goal is the largest part of the
// RSS after the binary. 50 keeps half of that headroom off; a collection
// also drops the JetStream file store's 4 MB block caches that its
// flusher has released, so fewer of them are resident at once. The cost
// is a few percent more collector CPU (README, "What keeps a node
// resident").
const DefaultGCPercent = 50

// GC percent bounds: under 10 the collector runs nearly continuously;
// over 1000 the limit is memory_limit alone, which "off" in GOGC says.
const (
	minGCPercent = 10
	maxGCPercent = 1000
)

// minMemoryLimit refuses limits under which the collector would run
// nearly continuously.
const minMemoryLimit = 8 << 20

// parseMemoryLimit parses memory_limit; ok is false for "off".
func parseMemoryLimit(s string) (n int64, ok bool, err error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "off") {
		return 0, false, nil
	}
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, false, errors.New("not a size such as 64MiB, 1GiB, a number of bytes, or off")
	}
	if v*mult < minMemoryLimit {
		return 0, false, fmt.Errorf("%d bytes is below 8 MiB", v*mult)
	}
	return v * mult, true, nil
}

func (r runtimeConfig) validate(bad func(field, format string, args ...any)) {
	if _, _, err := parseMemoryLimit(r.MemoryLimit); err != nil {
		bad("runtime.memory_limit", "%q: %v", r.MemoryLimit, err)
	}
	if r.GCPercent < minGCPercent || r.GCPercent > maxGCPercent {
		bad("runtime.gc_percent", "%d outside %d..%d", r.GCPercent, minGCPercent, maxGCPercent)
	}
	if r.PprofListen != "" {
		if _, _, err := net.SplitHostPort(r.PprofListen); err != nil {
			bad("runtime.pprof_listen", "%q is not host:port", r.PprofListen)
		}
	}
}

// apply sets the runtime's soft memory limit and GC percent from the
// config, each unless its environment variable is set.
func (r runtimeConfig) apply(log *slog.Logger, getenv func(string) string) {
	r.applyMemoryLimit(log, getenv)
	r.applyGCPercent(log, getenv)
}

// applyGCPercent sets the heap growth target unless GOGC is set (the
// runtime has read it at start).
func (r runtimeConfig) applyGCPercent(log *slog.Logger, getenv func(string) string) {
	if env := getenv("GOGC"); env != "" {
		log.Info("GC percent from GOGC", "GOGC", env)
		return
	}
	debug.SetGCPercent(r.GCPercent)
}

// applyMemoryLimit sets the runtime's soft memory limit from the config
// unless GOMEMLIMIT is set, and says which applies.
func (r runtimeConfig) applyMemoryLimit(log *slog.Logger, getenv func(string) string) {
	if env := getenv("GOMEMLIMIT"); env != "" {
		log.Info("memory limit from GOMEMLIMIT", "GOMEMLIMIT", env)
		return
	}
	n, ok, err := parseMemoryLimit(r.MemoryLimit)
	if err != nil || !ok {
		return // validated; "off" keeps the runtime's default (none)
	}
	debug.SetMemoryLimit(n)
}

// startPprof serves the profiling endpoints on their own listener until
// ctx ends; it returns the bound address.
func (r runtimeConfig) startPprof(ctx context.Context, log *slog.Logger) (string, error) {
	if r.PprofListen == "" {
		return "", nil
	}
	ln, err := net.Listen("tcp", r.PprofListen)
	if err != nil {
		return "", fmt.Errorf("runtime.pprof_listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof listener stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Warn("pprof endpoints are served; keep this address private", "pprof", "http://"+ln.Addr().String()+"/debug/pprof/")
	return ln.Addr().String(), nil
}
