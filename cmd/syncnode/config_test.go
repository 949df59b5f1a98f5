package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

func mustExampleSchema(t *testing.T) *schema.Schema {
	t.Helper()
	s, err := loadSchema("")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func parseConfigFile(t *testing.T, body string) (config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "syncnode.toml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return parseServeFlags(fs, []string{"--config", path}, func(string) string { return "" })
}

// TestHooksConfig: [hooks], [admin] and the node's NATS user reach the
// node's configuration; bad values are refused with the field's name.
func TestHooksConfig(t *testing.T) {
	c, err := parseConfigFile(t, `
[nats]
user = "syncnode"
password = "node-secret"

[admin]
enabled = false

[hooks.scopes]
enabled = true
timeout = "100ms"
cache_ttl = "0s"

[hooks.validate]
enabled = true
reads = true

[hooks.token]
enabled = true
cache_ttl = "5s"
`)
	if err != nil {
		t.Fatal(err)
	}
	if c.NATS.User != "syncnode" || c.NATS.Password != "node-secret" || c.Admin.Enabled {
		t.Errorf("nats/admin = %+v, %+v", c.NATS, c.Admin)
	}
	h := c.Hooks.hooks()
	if h.Scopes == nil || h.Scopes.Timeout != 100*time.Millisecond || h.Scopes.Cache.TTL >= 0 {
		t.Errorf("scopes hook = %+v (cache_ttl 0s must disable the cache)", h.Scopes)
	}
	if h.Validate == nil || h.Validate.Timeout != 500*time.Millisecond || !h.Validate.Reads {
		t.Errorf("validate hook = %+v", h.Validate)
	}
	if h.Token == nil || h.Token.Cache.TTL != 5*time.Second {
		t.Errorf("token hook = %+v", h.Token)
	}

	d := defaultConfig()
	if !d.Admin.Enabled {
		t.Error("the admin API is off by default")
	}
	if h := d.Hooks.hooks(); h.Scopes != nil || h.Validate != nil || h.Token != nil {
		t.Errorf("hooks on by default: %+v", h)
	}

	for _, tc := range []struct{ body, field string }{
		{"[hooks.scopes]\ntimeout = \"0s\"", "hooks.scopes.timeout"},
		{"[hooks.token]\ncache_ttl = \"-1s\"", "hooks.token.cache_ttl"},
		{"[hooks.validate]\ntimeout = \"2m\"", "hooks.validate.timeout"},
		{"[hooks.scopes]\nreads = true", "hooks.scopes.reads"},
		{"[nats]\npassword = \"x\"", "nats.password"},
	} {
		_, err := parseConfigFile(t, tc.body)
		var fe *fieldError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%q: err = %v, want a field error on %s", tc.body, err, tc.field)
		}
	}
	if _, err := parseConfigFile(t, "[hooks.scopes]\nenable = true"); err == nil || !strings.Contains(err.Error(), "hooks.scopes.enable") {
		t.Errorf("a misspelt key: %v", err)
	}
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

// The [http] timeouts and limits read from the file; bad values are
// refused with the field named.
func TestHTTPLimitsConfig(t *testing.T) {
	c, err := parseConfigFile(t, `
[http]
read_header_timeout     = "2s"
read_timeout            = "30s"
write_timeout           = "15s"
idle_timeout            = "90s"
max_connections         = 100
max_inflight_body_bytes = 67108864
[realtime]
max_connections         = 50
`)
	if err != nil {
		t.Fatal(err)
	}
	h := c.HTTP
	if h.ReadHeaderTimeout.Duration != 2*time.Second || h.ReadTimeout.Duration != 30*time.Second || h.WriteTimeout.Duration != 15*time.Second ||
		h.IdleTimeout.Duration != 90*time.Second || h.MaxConnections != 100 || h.MaxInflightBodyBytes != 64<<20 {
		t.Fatalf("http config = %+v", h)
	}
	def := defaultConfig()
	if err := def.validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	for field, toml := range map[string]string{
		"http.write_timeout":           "[http]\nwrite_timeout = \"0s\"",
		"http.max_connections":         "[http]\nmax_connections = 0",
		"http.max_inflight_body_bytes": "[http]\nmax_inflight_body_bytes = 1024",
	} {
		_, err := parseConfigFile(t, toml)
		var fe *fieldError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: error %v, want one naming the field", field, err)
		}
	}
}

// The config file reaches the node's nested configs, zero values that
// mean something included.
func TestConfigFileToNode(t *testing.T) {
	c, err := parseConfigFile(t, `
data_dir = "d"
[http]
stream_segments_above_bytes = 4096
segment_cache_bytes = 1048576
read_header_timeout = "2s"
read_timeout = "3s"
write_timeout = "4s"
idle_timeout = "5s"
max_connections = 77
max_inflight_body_bytes = 67108864
[nats]
namespace = "blue"
user = "u"
password = "p"
[admin]
enabled = false
[storage]
sqlite_synchronous = "normal"
[limits]
inline_segment_max_bytes = 0
segment_ttl = "2h"
max_subscriptions_per_request = 9
[realtime]
enabled = false
max_delta_bytes = 4096
[reactions]
enabled = false
concurrency = 3
lease = "9s"
heartbeat = "2s"
[blobs]
max_bytes = 1000
orphan_grace = "0s"
sweep_interval = "30s"
upload_timeout = "20m"
`)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := c.node()
	if err != nil {
		t.Fatal(err)
	}
	if nc.API.StreamSegmentsAbove != 4096 || nc.API.SegmentCacheBytes != 1<<20 {
		t.Errorf("API = %+v", nc.API)
	}
	if nc.Engine.InlineSegmentMaxBytes == nil || *nc.Engine.InlineSegmentMaxBytes != 0 {
		t.Errorf("InlineSegmentMaxBytes = %v, want 0", nc.Engine.InlineSegmentMaxBytes)
	}
	if nc.Names.Prefix() != "blue" || nc.Segments.TTL != 2*time.Hour || nc.DataDir != "d" {
		t.Errorf("Names %v, Segments.TTL %v, DataDir %q", nc.Names, nc.Segments.TTL, nc.DataDir)
	}
	if nc.Store.SQLite.Synchronous != sqlitestore.SynchronousNormal || nc.Store.Postgres.URL != "" {
		t.Errorf("Store = %+v", nc.Store)
	}
	if h := nc.HTTP; h.ReadHeaderTimeout != 2*time.Second || h.ReadTimeout != 3*time.Second || h.WriteTimeout != 4*time.Second ||
		h.IdleTimeout != 5*time.Second || h.MaxConnections != 77 || nc.API.MaxInflightBodyBytes != 64<<20 {
		t.Errorf("HTTP = %+v, inflight %d", h, nc.API.MaxInflightBodyBytes)
	}
	if b := nc.Blobs; b.MaxBytes != 1000 || b.OrphanGrace == nil || *b.OrphanGrace != 0 || b.SweepInterval != 30*time.Second || b.UploadTimeout != 20*time.Minute {
		t.Errorf("Blobs = %+v (grace %v)", b, b.OrphanGrace)
	}
	if nc.Engine.MaxSubscriptions != 9 || nc.NATS.User != "u" || nc.NATS.Password != "p" {
		t.Errorf("MaxSubscriptions %d, NATS user %q", nc.Engine.MaxSubscriptions, nc.NATS.User)
	}
	if !nc.Realtime.Disabled || nc.Realtime.Hub.MaxDeltaBytes != 4096 || !nc.Reactions.Disabled || nc.Reactions.Runner.Concurrency != 3 ||
		nc.Reactions.Runner.Lease != 9*time.Second || nc.Reactions.Runner.Heartbeat != 2*time.Second || !nc.Admin.Disabled {
		t.Errorf("Realtime %+v, Reactions %+v, Admin %+v", nc.Realtime, nc.Reactions, nc.Admin)
	}
	// The defaults keep today's behaviour.
	d, err := parseConfigFile(t, "")
	if err != nil {
		t.Fatal(err)
	}
	dn, err := d.node()
	if err != nil {
		t.Fatal(err)
	}
	if *dn.Engine.InlineSegmentMaxBytes != 256<<10 || dn.API.StreamSegmentsAbove != 16<<20 || dn.Names.Prefix() != "" {
		t.Errorf("defaults: inline %d, stream above %d, namespace %q", *dn.Engine.InlineSegmentMaxBytes, dn.API.StreamSegmentsAbove, dn.Names.Prefix())
	}
	if b := dn.Blobs; b.MaxBytes != 64<<20 || *b.OrphanGrace != 24*time.Hour || b.SweepInterval != 10*time.Minute {
		t.Errorf("defaults: Blobs = %+v", b)
	}
	if dn.HTTP.WriteTimeout != 30*time.Second || dn.HTTP.MaxConnections != 16384 || dn.Realtime.Disabled || dn.Reactions.Disabled || dn.Admin.Disabled {
		t.Errorf("defaults: HTTP %+v, realtime off %v, reactions off %v, admin off %v", dn.HTTP, dn.Realtime.Disabled, dn.Reactions.Disabled, dn.Admin.Disabled)
	}
	// The node accepts the file's defaults, with what serve adds.
	dn.Schema, dn.API.Auth, dn.DataDir = mustExampleSchema(t), httpapi.AuthenticatorFunc(nil), t.TempDir()
	if _, err := node.New(dn); err != nil {
		t.Errorf("node.New(defaults) = %v", err)
	}
}

// Bad values are refused with the file's field named.
func TestConfigFileRefusals(t *testing.T) {
	for _, tc := range []struct{ field, toml string }{
		{"http.stream_segments_above_bytes", "[http]\nstream_segments_above_bytes = -1"},
		{"http.segment_cache_bytes", "[http]\nsegment_cache_bytes = 0"},
		{"blobs.max_bytes", "[blobs]\nmax_bytes = 0"},
		{"blobs.orphan_grace", "[blobs]\norphan_grace = \"-1s\""},
		{"blobs.sweep_interval", "[blobs]\nsweep_interval = \"0s\""},
		{"blobs.upload_timeout", "[blobs]\nupload_timeout = \"0s\""},
		{"nats.namespace", "[nats]\nnamespace = \"sync\""},
		// The admin API (on by default) answers on production subjects.
		{"nats.namespace", "[nats]\nnamespace = \"blue\""},
		{"nats.namespace", "[nats]\nnamespace = \"blue\"\n[admin]\nenabled = false\n[hooks.token]\nenabled = true"},
		{"limits.inline_segment_max_bytes", "[limits]\ninline_segment_max_bytes = -1"},
		{"realtime.max_connections", "[http]\nmax_connections = 100\n[realtime]\nmax_connections = 100"},
		{"nats.replicas", "[nats]\nreplicas = 7"},
		{"nats.cluster.listen", "[nats.cluster]\nlisten = \"nohost\""},
		{"nats.cluster", "[nats]\nmode = \"external\"\nurls = [\"nats://a:4222\"]\n[nats.cluster]\nlisten = \"0.0.0.0:6222\""},
	} {
		if _, err := parseConfigFile(t, tc.toml); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%q: err = %v, want one naming %s", tc.toml, err, tc.field)
		}
	}
}

// TestSignedURLsAndImagesConfig: [signed_urls] and [images] reach the
// node; without a key signed URLs stay off; bad values name their field.
func TestSignedURLsAndImagesConfig(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("k", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfigFile(t, `
[images]
enabled = false
[signed_urls]
key_file = "`+keyFile+`"
ttl      = "10m"
base_url = "https://cdn.example/sync/"
`)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := c.node()
	if err != nil {
		t.Fatal(err)
	}
	if !nc.Images.Disabled || string(nc.SignedURLs.Key) != strings.Repeat("k", 40) || nc.SignedURLs.TTL != 10*time.Minute ||
		nc.SignedURLs.BaseURL != "https://cdn.example/sync/" {
		t.Fatalf("images %+v, signed urls %+v", nc.Images, nc.SignedURLs)
	}
	if nc.Engine.BlobPresign == nil || !*nc.Engine.BlobPresign {
		t.Fatalf("blobs are not presigned by default once signed urls are on: %v", nc.Engine.BlobPresign)
	}
	c, err = parseConfigFile(t, "[blobs]\npresign = false\n[signed_urls]\nkey = \""+strings.Repeat("k", 32)+"\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if nc, err = c.node(); err != nil || nc.Engine.BlobPresign == nil || *nc.Engine.BlobPresign {
		t.Fatalf("blobs.presign = false: %v, %v", nc.Engine.BlobPresign, err)
	}
	def := defaultConfig()
	nc, err = def.node()
	if err != nil || nc.Images.Disabled || nc.SignedURLs.Key != nil || nc.Engine.BlobPresign != nil {
		t.Fatalf("defaults: images %+v, signed urls %+v, blob presign %v, %v; want images on, signed urls off", nc.Images, nc.SignedURLs, nc.Engine.BlobPresign, err)
	}
	for _, tc := range []struct{ field, toml string }{
		{"signed_urls.key", "[signed_urls]\nkey = \"short\""},
		{"signed_urls.key_file", "[signed_urls]\nkey = \"" + strings.Repeat("k", 32) + "\"\nkey_file = \"x\""},
		{"signed_urls.ttl", "[signed_urls]\nttl = \"16m\""},
		{"signed_urls.ttl", "[signed_urls]\nttl = \"0s\""},
		{"signed_urls.base_url", "[signed_urls]\nbase_url = \"https://cdn.example/sync\""},
	} {
		if _, err := parseConfigFile(t, tc.toml); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%q: err = %v, want one naming %s", tc.toml, err, tc.field)
		}
	}
}

// TestClusterConfig: [nats.cluster] and nats.replicas reach the node's
// embedded NATS configuration.
func TestClusterConfig(t *testing.T) {
	c, err := parseConfigFile(t, "[nats]\nreplicas = 3\n[nats.cluster]\nname = \"east\"\nlisten = \"127.0.0.1:6222\"\n"+
		"routes = [\"nats-route://a:6222\", \"nats-route://b:6222\", \"nats-route://c:6222\"]")
	if err != nil {
		t.Fatal(err)
	}
	nc := c.natsConfig()
	if nc.Replicas != 3 || nc.Cluster.Name != "east" || nc.Cluster.Host != "127.0.0.1" || nc.Cluster.Port != 6222 || len(nc.Cluster.Routes) != 3 {
		t.Fatalf("nats config = %+v", nc)
	}
}
