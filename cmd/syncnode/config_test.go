package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func parseConfigFile(t *testing.T, body string) (config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "syncnode.toml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return parseServeFlags(fs, []string{"--config", path}, func(string) string { return "" })
}

func TestRealtimeConfig(t *testing.T) {
	c, err := parseConfigFile(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if h := c.Realtime.hubConfig(); !c.Realtime.Enabled || h.HeartbeatInterval != 30*time.Second || h.MaxDeltaBytes != 1<<20 || h.MaxPresenceBytes != 16<<10 {
		t.Fatalf("defaults: %+v", c.Realtime)
	}
	c, err = parseConfigFile(t, `[realtime]
enabled = false
heartbeat_interval = "5s"
max_connections = 50000
max_delta_bytes = 65536
origin_patterns = ["app.example.com"]
`)
	if err != nil {
		t.Fatal(err)
	}
	h := c.Realtime.hubConfig()
	if c.Realtime.Enabled || h.HeartbeatInterval != 5*time.Second || h.MaxConnections != 50000 || h.MaxDeltaBytes != 65536 || h.OriginPatterns[0] != "app.example.com" {
		t.Fatalf("parsed: %+v", h)
	}
	for body, field := range map[string]string{
		"[realtime]\nmax_delta_bytes = 10":            "realtime.max_delta_bytes",
		"[realtime]\nheartbeat_interval = \"0s\"":     "realtime.heartbeat_interval",
		"[realtime]\nmax_connections = 0":             "realtime.max_connections",
		"[realtime]\nsend_queue_bytes = 1024":         "realtime.send_queue_bytes",
		"[realtime]\nmax_connections_per_client = -1": "realtime.max_connections_per_client",
		"[realtime]\nno_such_key = 1":                 "no_such_key",
	} {
		if _, err := parseConfigFile(t, body); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%q: %v, want an error naming %s", body, err, field)
		}
	}
}
