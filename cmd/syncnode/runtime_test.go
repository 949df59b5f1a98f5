package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"testing"
)

// TestRuntimeConfig: [runtime] parses sizes and "off", refuses bad values
// with the field named, and defaults to a 256 MiB soft limit, a GC
// percent of 50 and no pprof.
func TestRuntimeConfig(t *testing.T) {
	d := defaultConfig()
	if d.Runtime.MemoryLimit != "256MiB" || d.Runtime.GCPercent != 50 || d.Runtime.PprofListen != "" {
		t.Errorf("default runtime = %+v", d.Runtime)
	}
	for in, want := range map[string]int64{"64MiB": 64 << 20, "1GiB": 1 << 30, "16777216": 16 << 20, "9000KiB": 9000 << 10} {
		n, ok, err := parseMemoryLimit(in)
		if err != nil || !ok || n != want {
			t.Errorf("parseMemoryLimit(%q) = %d, %v, %v; want %d", in, n, ok, err, want)
		}
	}
	if _, ok, err := parseMemoryLimit("off"); ok || err != nil {
		t.Errorf(`parseMemoryLimit("off") = %v, %v`, ok, err)
	}
	c, err := parseConfigFile(t, "[runtime]\nmemory_limit = \"1GiB\"\ngc_percent = 200\npprof_listen = \"127.0.0.1:0\"\n")
	if err != nil || c.Runtime.MemoryLimit != "1GiB" || c.Runtime.GCPercent != 200 || c.Runtime.PprofListen != "127.0.0.1:0" {
		t.Fatalf("runtime = %+v, %v", c.Runtime, err)
	}
	if c, err := parseConfigFile(t, "[runtime]\nmemory_limit = \"1GiB\"\n"); err != nil || c.Runtime.GCPercent != DefaultGCPercent {
		t.Errorf("gc_percent unset: %+v, %v; want the default kept", c.Runtime, err)
	}
	for body, field := range map[string]string{
		"[runtime]\nmemory_limit = \"1MiB\"\n":      "runtime.memory_limit",
		"[runtime]\nmemory_limit = \"lots\"\n":      "runtime.memory_limit",
		"[runtime]\npprof_listen = \"localhost\"\n": "runtime.pprof_listen",
		"[runtime]\ngc_percent = 5\n":               "runtime.gc_percent",
		"[runtime]\ngc_percent = 5000\n":            "runtime.gc_percent",
		"[runtime]\ngc_percent = -1\n":              "runtime.gc_percent",
	} {
		_, err := parseConfigFile(t, body)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%q: err = %v, want one naming %s", body, err, field)
		}
	}
}

// TestApplyMemoryLimit: the configured limit is set unless GOMEMLIMIT is.
func TestApplyMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	runtimeConfig{MemoryLimit: "96MiB"}.applyMemoryLimit(log, func(string) string { return "" })
	if got := debug.SetMemoryLimit(-1); got != 96<<20 {
		t.Errorf("limit = %d, want 96 MiB", got)
	}
	runtimeConfig{MemoryLimit: "128MiB"}.applyMemoryLimit(log, func(k string) string {
		if k == "GOMEMLIMIT" {
			return "200MiB"
		}
		return ""
	})
	if got := debug.SetMemoryLimit(-1); got != 96<<20 {
		t.Errorf("limit = %d: GOMEMLIMIT set, the config must not apply", got)
	}
}

// TestApplyGCPercent: the configured GC percent is set unless GOGC is.
func TestApplyGCPercent(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	runtimeConfig{GCPercent: 60}.applyGCPercent(log, func(string) string { return "" })
	if got := debug.SetGCPercent(60); got != 60 {
		t.Errorf("GC percent = %d, want 60", got)
	}
	runtimeConfig{GCPercent: 80}.applyGCPercent(log, func(k string) string {
		if k == "GOGC" {
			return "120"
		}
		return ""
	})
	if got := debug.SetGCPercent(60); got != 60 {
		t.Errorf("GC percent = %d: GOGC set, the config must not apply", got)
	}
}

// TestPprofListen: pprof_listen serves the profile index on its own
// listener until the context ends.
func TestPprofListen(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	addr, err := runtimeConfig{PprofListen: "127.0.0.1:0"}.startPprof(ctx, log)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "goroutine") {
		t.Errorf("GET /debug/pprof/ = %d %q", resp.StatusCode, body)
	}
}
