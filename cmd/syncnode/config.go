package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/syncnode/syncnode/blobs"
	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/edge"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/hooks"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/realtime"
	"github.com/syncnode/syncnode/rules"
	"github.com/syncnode/syncnode/segments"
	"github.com/syncnode/syncnode/signedurl"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// config is the whole node configuration: defaults, then the config file,
// then SYNCNODE_* environment variables, then flags. NATS server settings
// stay in nats.conf, in the format operators already know.
type config struct {
	DataDir string `toml:"data_dir"`
	Schema  string `toml:"schema"`
	// Validators is a rules file (JSON, package rules): declarative write
	// validators for the served schema.
	Validators string `toml:"validators"`
	// Operations is an operations file (JSON, package operations): the
	// registered remote queries and commands.
	Operations string `toml:"operations"`
	NodeName   string `toml:"node_name"`

	HTTP      httpConfig      `toml:"http"`
	NATS      natsConfig      `toml:"nats"`
	Storage   storageConfig   `toml:"storage"`
	Auth      authConfig      `toml:"auth"`
	Limits    limitsConfig    `toml:"limits"`
	Blobs     blobsConfig     `toml:"blobs"`
	Realtime  realtimeConfig  `toml:"realtime"`
	Reactions reactionsConfig `toml:"reactions"`
	Log       logConfig       `toml:"log"`
	Admin     adminConfig     `toml:"admin"`
	Hooks     hooksConfig     `toml:"hooks"`
	// Images is the SQLite-image bootstrap lane, SignedURLs the signed
	// segment URLs (SPEC.md §5.3, §5.4).
	Images     imagesConfig     `toml:"images"`
	SignedURLs signedURLsConfig `toml:"signed_urls"`
	Runtime    runtimeConfig    `toml:"runtime"`
	Leases     leasesConfig     `toml:"leases"`
	Edge       edgeConfig       `toml:"edge"`
	TestMode   testModeConfig   `toml:"-"`
}

// edgeConfig is [edge]: the edge/hub topology (package edge). name makes
// the node that edge; homes (shared by the hub and every edge) maps
// partition ids, or prefixes ending in *, to an edge name or "hub".
type edgeConfig struct {
	Name           string            `toml:"name"`
	Homes          map[string]string `toml:"homes"`
	PingInterval   duration          `toml:"ping_interval"`
	RequestTimeout duration          `toml:"request_timeout"`
	ForwardWait    duration          `toml:"forward_wait"`
	PageCommits    int               `toml:"page_commits"`
}

func (e edgeConfig) node() edge.Config {
	return edge.Config{Name: e.Name, Homes: e.Homes, PingInterval: e.PingInterval.Duration, RequestTimeout: e.RequestTimeout.Duration,
		ForwardWait: e.ForwardWait.Duration, PageCommits: e.PageCommits}
}

// imagesConfig is the SQLite-image lane: on, a bootstrap of a table
// larger than one rows page, for a client that accepts images, is one
// SQLite database.
type imagesConfig struct {
	Enabled bool `toml:"enabled"`
}

// signedURLsConfig turns signed segment URLs on: with a key (or key
// file), SEGMENT_REFs carry a url with st= for clients that accept them.
type signedURLsConfig struct {
	Key     string   `toml:"key"`
	KeyFile string   `toml:"key_file"`
	TTL     duration `toml:"ttl"`
	BaseURL string   `toml:"base_url"`
}

// leasesConfig is [leases]: auth leases (SPEC.md §7.3), off unless ttl
// is set. The key signs the stored records; every node sharing the
// database needs the same one.
type leasesConfig struct {
	TTL     duration `toml:"ttl"`
	Key     string   `toml:"key"`
	KeyFile string   `toml:"key_file"`
}

// key reads the signing key ("" when none is configured).
func (l leasesConfig) key() ([]byte, error) {
	switch {
	case l.Key != "":
		return []byte(l.Key), nil
	case l.KeyFile != "":
		b, err := os.ReadFile(l.KeyFile)
		if err != nil {
			return nil, &fieldError{Field: "leases.key_file", Reason: err.Error()}
		}
		return []byte(strings.TrimSpace(string(b))), nil
	}
	return nil, nil
}

type httpConfig struct {
	Listen          string   `toml:"listen"`
	MaxRequestBytes int64    `toml:"max_request_bytes"`
	ShutdownTimeout duration `toml:"shutdown_timeout"`
	// Timeouts and connection bounds: see node.HTTPConfig.
	ReadHeaderTimeout    duration `toml:"read_header_timeout"`
	ReadTimeout          duration `toml:"read_timeout"`
	WriteTimeout         duration `toml:"write_timeout"`
	IdleTimeout          duration `toml:"idle_timeout"`
	MaxConnections       int      `toml:"max_connections"`
	MaxInflightBodyBytes int64    `toml:"max_inflight_body_bytes"`
	// StreamSegmentsAboveBytes: larger segment downloads are streamed from
	// the Object Store and compressed on the fly instead of cached.
	StreamSegmentsAboveBytes int64 `toml:"stream_segments_above_bytes"`
	// SegmentCacheBytes bounds the cache of compressed segment bodies.
	SegmentCacheBytes int64 `toml:"segment_cache_bytes"`
}

type natsConfig struct {
	// Mode is "embedded" (run a NATS server in-process, configured by
	// ConfigFile) or "external" (connect to URLs).
	Mode       string `toml:"mode"`
	ConfigFile string `toml:"config_file"`
	// Port overrides the client port of nats.conf; -1 picks a free one.
	Port        *int     `toml:"port"`
	URLs        []string `toml:"urls"`
	Credentials string   `toml:"credentials"`
	Domain      string   `toml:"domain"`
	// User and Password authenticate the node's own connections when
	// nats.conf has users (docs/bus.md, "Permissions").
	User     string `toml:"user"`
	Password string `toml:"password"`
	// Namespace prefixes every stream, bucket and subject (package bus):
	// "" keeps the standard names. The admin API and the host hooks
	// answer on production subjects only: a namespaced node runs neither.
	Namespace string `toml:"namespace"`
	// Replicas of every stream, KV bucket and object store: 0 (the
	// default) detects 3 on a cluster of three or more servers, else 1.
	Replicas int `toml:"replicas"`
	// Cluster overrides nats.conf's cluster {} block (embedded mode).
	Cluster natsClusterConfig `toml:"cluster"`
}

// natsClusterConfig makes the embedded server a cluster member.
type natsClusterConfig struct {
	Name string `toml:"name"`
	// Listen is the route listener, host:port.
	Listen string `toml:"listen"`
	// Routes are every member's nats-route://host:port, this one's too.
	Routes []string `toml:"routes"`
}

type adminConfig struct {
	// Enabled serves the admin API (the micro service "syncnode").
	Enabled bool `toml:"enabled"`
}

// hooksConfig turns the host hooks over NATS on (package hooks).
type hooksConfig struct {
	Scopes   hookConfig `toml:"scopes"`
	Validate hookConfig `toml:"validate"`
	Token    hookConfig `toml:"token"`
}

type hookConfig struct {
	Enabled bool     `toml:"enabled"`
	Timeout duration `toml:"timeout"`
	// CacheTTL (scopes, token) reuses an answer this long; "0s" asks on
	// every request.
	CacheTTL  duration `toml:"cache_ttl"`
	CacheSize int      `toml:"cache_size"`
	// Reads (validate) lets the hook read the commit's candidate state
	// through its request's readSubject (hooks.ReadRequest).
	Reads bool `toml:"reads"`
}

type storageConfig struct {
	// PostgresURL selects PostgreSQL; empty means SQLite in the data dir.
	PostgresURL string `toml:"postgres_url"`
	// PostgresSchema is the schema syncnode's tables live in (default
	// public).
	PostgresSchema string `toml:"postgres_schema"`
	// PostgresSoleWriter declares the node the only writer of its
	// schema: it serves request starts from memory, and no other node
	// opens the schema while it runs (pgstore.Config.SoleWriter).
	PostgresSoleWriter bool `toml:"postgres_sole_writer"`
	// SQLiteSynchronous is FULL (durable, the default) or NORMAL.
	SQLiteSynchronous string `toml:"sqlite_synchronous"`
}

type authConfig struct {
	// JWTSecret verifies HS256 bearer tokens; JWTSecretFile reads it from a
	// file. JWTPublicKeyFiles verify RS256/ES256/EdDSA tokens (PEM).
	JWTSecret         string   `toml:"jwt_secret"`
	JWTSecretFile     string   `toml:"jwt_secret_file"`
	JWTPublicKeyFiles []string `toml:"jwt_public_key_files"`
	Issuer            string   `toml:"issuer"`
	Audience          string   `toml:"audience"`
}

type limitsConfig struct {
	MaxOperationsPerRequest    int      `toml:"max_operations_per_request"`
	MaxSubscriptionsPerRequest int      `toml:"max_subscriptions_per_request"`
	InlineSegmentMaxBytes      int      `toml:"inline_segment_max_bytes"`
	SegmentTTL                 duration `toml:"segment_ttl"`
}

// blobsConfig is the blob store (SPEC.md §5.9): the size cap of one blob,
// and how long a blob no row references is kept before the sweep
// deletes it ("0s": at the next sweep). upload_timeout bounds one upload
// (the sweep collects a dead upload's chunks that long plus 10 minutes
// after it began). presign (default true) serves
// blobs by signed URL when [signed_urls] has a key: upload grants carry a
// presigned PUT, downloads answer a presigned GET.
type blobsConfig struct {
	MaxBytes      int64    `toml:"max_bytes"`
	OrphanGrace   duration `toml:"orphan_grace"`
	SweepInterval duration `toml:"sweep_interval"`
	UploadTimeout duration `toml:"upload_timeout"`
	Presign       bool     `toml:"presign"`
}

// reactionsConfig is durable reactions: declarative rules, checked
// against the schema at start, and this node's runner (zero values take
// the runner's defaults).
type reactionsConfig struct {
	// Enabled runs a runner on this node; with false the node still
	// plans and enqueues, and runners elsewhere run the reactions.
	Enabled             bool                 `toml:"enabled"`
	Concurrency         int                  `toml:"concurrency"`
	Lease               duration             `toml:"lease"`
	Heartbeat           duration             `toml:"heartbeat"`
	SweepInterval       duration             `toml:"sweep_interval"`
	InitialBackoff      duration             `toml:"initial_backoff"`
	MaxBackoff          duration             `toml:"max_backoff"`
	CompletedRetention  duration             `toml:"completed_retention"`
	DeadLetterRetention duration             `toml:"dead_letter_retention"`
	Rules               []rules.ReactionRule `toml:"rules"`
}

// realtimeConfig is the realtime channel, GET /realtime (package
// realtime; its Config documents each field).
type realtimeConfig struct {
	Enabled                 bool     `toml:"enabled"`
	HeartbeatInterval       duration `toml:"heartbeat_interval"`
	MaxConnections          int      `toml:"max_connections"`
	MaxConnectionsPerClient int      `toml:"max_connections_per_client"`
	MaxDeltaBytes           int      `toml:"max_delta_bytes"`
	MaxPresenceBytes        int      `toml:"max_presence_bytes"`
	SendQueueMessages       int      `toml:"send_queue_messages"`
	SendQueueBytes          int      `toml:"send_queue_bytes"`
	WriteTimeout            duration `toml:"write_timeout"`
	FallbackPollInterval    duration `toml:"fallback_poll_interval"`
	PresenceAliveInterval   duration `toml:"presence_alive_interval"`
	OriginPatterns          []string `toml:"origin_patterns"`
}

type logConfig struct {
	Level  string `toml:"level"`
	Format string `toml:"format"`
}

// testModeConfig holds the flags of the conformance and load modes; they
// are flags only, never read from a file.
type testModeConfig struct {
	TestControl bool
	LoadFixture bool
}

// duration is a time.Duration written as "24h" in TOML.
type duration struct{ time.Duration }

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

func (d duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func defaultConfig() config {
	return config{
		DataDir: "data",
		HTTP: httpConfig{
			Listen:          "127.0.0.1:8080",
			MaxRequestBytes: httpapi.DefaultMaxRequestBytes,
			ShutdownTimeout: duration{15 * time.Second},

			ReadHeaderTimeout:    duration{node.DefaultReadHeaderTimeout},
			ReadTimeout:          duration{node.DefaultReadTimeout},
			WriteTimeout:         duration{node.DefaultWriteTimeout},
			IdleTimeout:          duration{node.DefaultIdleTimeout},
			MaxConnections:       node.DefaultMaxConnections,
			MaxInflightBodyBytes: httpapi.DefaultMaxInflightBodyBytes,

			StreamSegmentsAboveBytes: httpapi.DefaultStreamSegmentsAbove,
			SegmentCacheBytes:        httpapi.DefaultSegmentCacheBytes,
		},
		NATS:    natsConfig{Mode: "embedded", ConfigFile: "nats.conf"},
		Storage: storageConfig{SQLiteSynchronous: "FULL"},
		Limits: limitsConfig{
			MaxOperationsPerRequest:    engine.DefaultMaxOperations,
			MaxSubscriptionsPerRequest: engine.DefaultMaxSubscriptions,
			InlineSegmentMaxBytes:      engine.DefaultInlineSegmentMaxBytes,
			SegmentTTL:                 duration{segments.DefaultTTL},
		},
		Blobs: blobsConfig{
			MaxBytes:      blobs.DefaultMaxBytes,
			Presign:       true,
			OrphanGrace:   duration{blobs.DefaultOrphanGrace},
			SweepInterval: duration{blobs.DefaultSweepInterval},
			UploadTimeout: duration{blobs.DefaultUploadTimeout},
		},
		Realtime: realtimeConfig{
			Enabled:                 true,
			HeartbeatInterval:       duration{realtime.DefaultHeartbeatInterval},
			MaxConnections:          realtime.DefaultMaxConnections,
			MaxConnectionsPerClient: realtime.DefaultMaxConnectionsPerClient,
			MaxDeltaBytes:           realtime.DefaultMaxDeltaBytes,
			MaxPresenceBytes:        realtime.DefaultMaxPresenceBytes,
			SendQueueMessages:       realtime.DefaultSendQueueMessages,
			SendQueueBytes:          realtime.DefaultSendQueueBytes,
			WriteTimeout:            duration{realtime.DefaultWriteTimeout},
			FallbackPollInterval:    duration{realtime.DefaultFallbackPollInterval},
			PresenceAliveInterval:   duration{realtime.DefaultPresenceAliveInterval},
		},
		Reactions:  reactionsConfig{Enabled: true},
		Images:     imagesConfig{Enabled: true},
		SignedURLs: signedURLsConfig{TTL: duration{signedurl.DefaultTTL}},
		Log:        logConfig{Level: "info", Format: "text"},
		Admin:      adminConfig{Enabled: true},
		Runtime:    runtimeConfig{MemoryLimit: DefaultMemoryLimit, GCPercent: DefaultGCPercent},
		Hooks: hooksConfig{
			Scopes:   hookConfig{Timeout: duration{hooks.DefaultScopesTimeout}, CacheTTL: duration{hooks.DefaultScopesCacheTTL}, CacheSize: hooks.DefaultCacheSize},
			Validate: hookConfig{Timeout: duration{hooks.DefaultValidateTimeout}},
			Token:    hookConfig{Timeout: duration{hooks.DefaultTokenTimeout}, CacheTTL: duration{hooks.DefaultTokenCacheTTL}, CacheSize: hooks.DefaultCacheSize},
		},
	}
}

// hubConfig is the realtime section as the hub takes it.
func (r realtimeConfig) hubConfig() realtime.Config {
	return realtime.Config{
		HeartbeatInterval: r.HeartbeatInterval.Duration, MaxConnections: r.MaxConnections,
		MaxConnectionsPerClient: r.MaxConnectionsPerClient, MaxDeltaBytes: r.MaxDeltaBytes,
		MaxPresenceBytes: r.MaxPresenceBytes, SendQueueMessages: r.SendQueueMessages, SendQueueBytes: r.SendQueueBytes,
		WriteTimeout: r.WriteTimeout.Duration, FallbackPollInterval: r.FallbackPollInterval.Duration,
		PresenceAliveInterval: r.PresenceAliveInterval.Duration, OriginPatterns: r.OriginPatterns,
	}
}

// fieldError names the configuration field a problem is about.
type fieldError struct {
	Field  string
	Reason string
}

func (e *fieldError) Error() string { return "config: " + e.Field + ": " + e.Reason }

// validate checks every field and returns all problems at once.
func (c *config) validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &fieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if c.DataDir == "" {
		bad("data_dir", "must not be empty")
	}
	if err := c.Edge.node().WithDefaults().Validate(); err != nil {
		bad("edge", "%v", err)
	}
	if _, _, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
		bad("http.listen", "%q is not host:port", c.HTTP.Listen)
	}
	if c.HTTP.MaxRequestBytes < 1<<10 {
		bad("http.max_request_bytes", "%d is below 1 KiB", c.HTTP.MaxRequestBytes)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"http.shutdown_timeout", c.HTTP.ShutdownTimeout.Duration},
		{"http.read_header_timeout", c.HTTP.ReadHeaderTimeout.Duration},
		{"http.read_timeout", c.HTTP.ReadTimeout.Duration},
		{"http.write_timeout", c.HTTP.WriteTimeout.Duration},
		{"http.idle_timeout", c.HTTP.IdleTimeout.Duration},
	} {
		if d.v <= 0 {
			bad(d.field, "must be positive")
		}
	}
	if n := c.HTTP.MaxConnections; n < 1 || n > 1_000_000 {
		bad("http.max_connections", "%d is outside 1..1000000", n)
	}
	if c.Realtime.Enabled && c.Realtime.MaxConnections >= c.HTTP.MaxConnections {
		bad("realtime.max_connections", "%d must be below http.max_connections (%d): every socket is an HTTP connection", c.Realtime.MaxConnections, c.HTTP.MaxConnections)
	}
	if c.Blobs.MaxBytes < 1 {
		bad("blobs.max_bytes", "%d must be positive", c.Blobs.MaxBytes)
	}
	if c.Blobs.OrphanGrace.Duration < 0 {
		bad("blobs.orphan_grace", "%s must not be negative", c.Blobs.OrphanGrace)
	}
	if c.Blobs.SweepInterval.Duration < time.Second {
		bad("blobs.sweep_interval", "%s is below one second", c.Blobs.SweepInterval)
	}
	if c.Blobs.UploadTimeout.Duration < time.Second {
		bad("blobs.upload_timeout", "%s is below one second", c.Blobs.UploadTimeout)
	}
	if c.SignedURLs.Key != "" && c.SignedURLs.KeyFile != "" {
		bad("signed_urls.key_file", "set either key or key_file, not both")
	}
	if c.SignedURLs.Key != "" && len(c.SignedURLs.Key) < signedurl.MinKeyBytes {
		bad("signed_urls.key", "must be at least %d bytes", signedurl.MinKeyBytes)
	}
	if d := c.SignedURLs.TTL.Duration; d <= 0 || d > signedurl.MaxTTL || d%time.Second != 0 {
		bad("signed_urls.ttl", "%s must be whole seconds in 1s..%s", d, signedurl.MaxTTL)
	}
	if u := c.SignedURLs.BaseURL; u != "" && !strings.HasSuffix(u, "/") {
		bad("signed_urls.base_url", "%q must end with /", u)
	}
	if c.HTTP.MaxInflightBodyBytes < c.HTTP.MaxRequestBytes {
		bad("http.max_inflight_body_bytes", "%d is below http.max_request_bytes (%d)", c.HTTP.MaxInflightBodyBytes, c.HTTP.MaxRequestBytes)
	}
	if c.HTTP.StreamSegmentsAboveBytes < 1 {
		bad("http.stream_segments_above_bytes", "%d must be positive", c.HTTP.StreamSegmentsAboveBytes)
	}
	if c.HTTP.SegmentCacheBytes < 1 {
		bad("http.segment_cache_bytes", "%d must be positive", c.HTTP.SegmentCacheBytes)
	}
	if _, err := bus.NewNames(c.NATS.Namespace); err != nil {
		bad("nats.namespace", "%v", err)
	} else if c.NATS.Namespace != "" && (c.Admin.Enabled || c.Hooks.Scopes.Enabled || c.Hooks.Validate.Enabled || c.Hooks.Token.Enabled) {
		bad("nats.namespace", "the admin API and the host hooks answer on production subjects only: set admin.enabled = false and disable [hooks] in a namespace")
	}
	switch c.NATS.Mode {
	case "embedded":
		if c.NATS.Port != nil && (*c.NATS.Port < -1 || *c.NATS.Port > 65535) {
			bad("nats.port", "%d is not a port (-1 picks a free one)", *c.NATS.Port)
		}
		if cl := c.NATS.Cluster; cl.Listen != "" || len(cl.Routes) > 0 || cl.Name != "" {
			if _, _, err := splitHostPort(cl.Listen); err != nil {
				bad("nats.cluster.listen", "%q: %v", cl.Listen, err)
			}
		}
	case "external":
		if len(c.NATS.URLs) == 0 {
			bad("nats.urls", "external mode needs at least one URL")
		}
		if cl := c.NATS.Cluster; cl.Listen != "" || len(cl.Routes) > 0 || cl.Name != "" {
			bad("nats.cluster", "is for embedded mode; an external deployment has its own cluster")
		}
	default:
		bad("nats.mode", "%q is neither embedded nor external", c.NATS.Mode)
	}
	if c.NATS.Replicas < 0 || c.NATS.Replicas > 5 {
		bad("nats.replicas", "%d outside 0..5 (0 detects)", c.NATS.Replicas)
	}
	switch strings.ToUpper(c.Storage.SQLiteSynchronous) {
	case "FULL", "NORMAL":
	default:
		bad("storage.sqlite_synchronous", "%q is neither FULL nor NORMAL", c.Storage.SQLiteSynchronous)
	}
	if c.Storage.PostgresURL != "" && !strings.HasPrefix(c.Storage.PostgresURL, "postgres://") && !strings.HasPrefix(c.Storage.PostgresURL, "postgresql://") {
		bad("storage.postgres_url", "must start with postgres:// or postgresql://")
	}
	if c.Auth.JWTSecret != "" && c.Auth.JWTSecretFile != "" {
		bad("auth.jwt_secret_file", "set either jwt_secret or jwt_secret_file, not both")
	}
	if c.Auth.JWTSecret != "" && len(c.Auth.JWTSecret) < 32 {
		bad("auth.jwt_secret", "must be at least 32 bytes")
	}
	if l := c.Leases; l.TTL.Duration != 0 || l.Key != "" || l.KeyFile != "" {
		switch {
		case l.TTL.Duration < time.Second:
			bad("leases.ttl", "%v must be at least 1s", l.TTL.Duration)
		case l.Key != "" && l.KeyFile != "":
			bad("leases.key_file", "set either key or key_file, not both")
		case l.Key == "" && l.KeyFile == "":
			bad("leases.key", "a signing key (key or key_file, at least 32 bytes) is required with leases")
		case l.Key != "" && len(l.Key) < 32:
			bad("leases.key", "must be at least 32 bytes")
		}
	}
	if n := c.Limits.MaxOperationsPerRequest; n < 0 || n > 100_000 {
		bad("limits.max_operations_per_request", "%d is outside 0..100000 (0: pushes refused)", n)
	}
	if n := c.Limits.MaxSubscriptionsPerRequest; n < 1 || n > 100_000 {
		bad("limits.max_subscriptions_per_request", "%d is outside 1..100000", n)
	}
	if n := c.Limits.InlineSegmentMaxBytes; n < 0 || n > 64<<20 {
		bad("limits.inline_segment_max_bytes", "%d is outside 0..64 MiB", n)
	}
	if c.Limits.SegmentTTL.Duration < time.Minute {
		bad("limits.segment_ttl", "%s is below one minute", c.Limits.SegmentTTL)
	}
	if n := c.Reactions.Concurrency; n < 0 || n > 10_000 {
		bad("reactions.concurrency", "%d is outside 1..10000", n)
	}
	for name, d := range map[string]duration{"lease": c.Reactions.Lease, "heartbeat": c.Reactions.Heartbeat, "sweep_interval": c.Reactions.SweepInterval,
		"initial_backoff": c.Reactions.InitialBackoff, "max_backoff": c.Reactions.MaxBackoff,
		"completed_retention": c.Reactions.CompletedRetention, "dead_letter_retention": c.Reactions.DeadLetterRetention} {
		if d.Duration < 0 {
			bad("reactions."+name, "must not be negative")
		}
	}
	if c.NATS.Password != "" && c.NATS.User == "" {
		bad("nats.password", "needs nats.user")
	}
	for _, h := range []struct {
		name string
		c    hookConfig
	}{{"scopes", c.Hooks.Scopes}, {"validate", c.Hooks.Validate}, {"token", c.Hooks.Token}} {
		if h.c.Timeout.Duration <= 0 || h.c.Timeout.Duration > time.Minute {
			bad("hooks."+h.name+".timeout", "%s is outside (0, 1m]", h.c.Timeout)
		}
		if h.c.CacheTTL.Duration < 0 {
			bad("hooks."+h.name+".cache_ttl", "must not be negative (0s disables the cache)")
		}
		if h.c.CacheSize < 0 {
			bad("hooks."+h.name+".cache_size", "must not be negative")
		}
		if h.c.Reads && h.name != "validate" {
			bad("hooks."+h.name+".reads", "only the validate hook reads")
		}
	}
	c.Realtime.validate(bad)
	c.Runtime.validate(bad)
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q is not debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format", "%q is neither text nor json", c.Log.Format)
	}
	return errors.Join(errs...)
}

func (r realtimeConfig) validate(bad func(field, format string, args ...any)) {
	durations := []struct {
		field string
		d     time.Duration
	}{
		{"heartbeat_interval", r.HeartbeatInterval.Duration}, {"write_timeout", r.WriteTimeout.Duration},
		{"fallback_poll_interval", r.FallbackPollInterval.Duration}, {"presence_alive_interval", r.PresenceAliveInterval.Duration},
	}
	for _, d := range durations {
		if d.d < time.Millisecond {
			bad("realtime."+d.field, "%s is below 1ms", d.d)
		}
	}
	if r.MaxConnections < 1 {
		bad("realtime.max_connections", "%d must be positive", r.MaxConnections)
	}
	if r.MaxConnectionsPerClient < 1 {
		bad("realtime.max_connections_per_client", "%d must be positive", r.MaxConnectionsPerClient)
	}
	if r.MaxDeltaBytes < 1<<10 {
		bad("realtime.max_delta_bytes", "%d is below 1 KiB", r.MaxDeltaBytes)
	}
	if r.MaxPresenceBytes < 2 {
		bad("realtime.max_presence_bytes", "%d is below 2", r.MaxPresenceBytes)
	}
	if r.SendQueueMessages < 4 {
		bad("realtime.send_queue_messages", "%d is below 4", r.SendQueueMessages)
	}
	if r.SendQueueBytes < r.MaxDeltaBytes {
		bad("realtime.send_queue_bytes", "%d is below max_delta_bytes (%d)", r.SendQueueBytes, r.MaxDeltaBytes)
	}
}

// envVars maps SYNCNODE_* variables onto fields.
var envVars = []struct {
	name string
	set  func(c *config, v string) error
}{
	{"SYNCNODE_DATA_DIR", func(c *config, v string) error { c.DataDir = v; return nil }},
	{"SYNCNODE_SCHEMA", func(c *config, v string) error { c.Schema = v; return nil }},
	{"SYNCNODE_VALIDATORS", func(c *config, v string) error { c.Validators = v; return nil }},
	{"SYNCNODE_NODE_NAME", func(c *config, v string) error { c.NodeName = v; return nil }},
	{"SYNCNODE_HTTP_LISTEN", func(c *config, v string) error { c.HTTP.Listen = v; return nil }},
	{"SYNCNODE_NATS_CONFIG", func(c *config, v string) error { c.NATS.ConfigFile = v; return nil }},
	{"SYNCNODE_NATS_PORT", func(c *config, v string) error {
		n, err := strconv.Atoi(v)
		c.NATS.Port = &n
		return err
	}},
	{"SYNCNODE_NATS_URLS", func(c *config, v string) error {
		c.NATS.Mode, c.NATS.URLs = "external", strings.Split(v, ",")
		return nil
	}},
	{"SYNCNODE_POSTGRES_URL", func(c *config, v string) error { c.Storage.PostgresURL = v; return nil }},
	{"SYNCNODE_POSTGRES_SOLE_WRITER", func(c *config, v string) error {
		b, err := strconv.ParseBool(v)
		c.Storage.PostgresSoleWriter = b
		return err
	}},
	{"SYNCNODE_JWT_SECRET", func(c *config, v string) error { c.Auth.JWTSecret = v; return nil }},
	{"SYNCNODE_SIGNED_URL_KEY", func(c *config, v string) error { c.SignedURLs.Key = v; return nil }},
	{"SYNCNODE_NATS_USER", func(c *config, v string) error { c.NATS.User = v; return nil }},
	{"SYNCNODE_NATS_PASSWORD", func(c *config, v string) error { c.NATS.Password = v; return nil }},
	{"SYNCNODE_LOG_LEVEL", func(c *config, v string) error { c.Log.Level = v; return nil }},
}

// loadConfig reads the defaults, then the config file (path, else
// $SYNCNODE_CONFIG; none when both are empty), then the environment.
func loadConfig(path string, getenv func(string) string) (config, error) {
	c := defaultConfig()
	if path == "" {
		path = getenv("SYNCNODE_CONFIG")
	}
	if path != "" {
		md, err := toml.DecodeFile(path, &c)
		if err != nil {
			return config{}, fmt.Errorf("config file %s: %w", path, err)
		}
		if undec := md.Undecoded(); len(undec) > 0 {
			keys := make([]string, len(undec))
			for i, k := range undec {
				keys[i] = k.String()
			}
			return config{}, fmt.Errorf("config file %s: unknown keys: %s", path, strings.Join(keys, ", "))
		}
	}
	for _, ev := range envVars {
		if v := getenv(ev.name); v != "" {
			if err := ev.set(&c, v); err != nil {
				return config{}, &fieldError{Field: ev.name, Reason: err.Error()}
			}
		}
	}
	return c, nil
}

// parseServeFlags defines the serve flags on fs, bound to c after the file
// and environment were applied.
func parseServeFlags(fs *flag.FlagSet, args []string, getenv func(string) string) (config, error) {
	configPath := fs.String("config", "", "config file (TOML); default: none, or $SYNCNODE_CONFIG")
	httpAddr := fs.String("http", "", "HTTP listen address, e.g. 127.0.0.1:0 for a free port")
	dataDir := fs.String("data", "", "data directory (SQLite file, JetStream store)")
	natsPort := fs.Int("nats-port", 0, "embedded NATS client port (-1 picks a free one)")
	pgURL := fs.String("postgres", "", "PostgreSQL URL (default: SQLite in the data dir)")
	schemaPath := fs.String("schema", "", "schema IR file (default: the bundled example schema)")
	validatorsPath := fs.String("validators", "", "rules file of declarative write validators (JSON)")
	operationsPath := fs.String("operations", "", "operations file of registered remote queries and commands (JSON)")
	natsConf := fs.String("nats-config", "", "nats.conf for the embedded server")
	testControl := fs.Bool("test-control", false, "enable the conformance test-control surface (loopback only)")
	loadFixture := fs.Bool("load-fixture", false, "enable the load-suite fixture (loopback only)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}

	c, err := loadConfig(*configPath, getenv)
	if err != nil {
		return config{}, err
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "http":
			c.HTTP.Listen = *httpAddr
		case "data":
			c.DataDir = *dataDir
		case "nats-port":
			n := *natsPort
			c.NATS.Port = &n
		case "postgres":
			c.Storage.PostgresURL = *pgURL
		case "schema":
			c.Schema = *schemaPath
		case "validators":
			c.Validators = *validatorsPath
		case "operations":
			c.Operations = *operationsPath
		case "nats-config":
			c.NATS.ConfigFile = *natsConf
		}
	})
	c.TestMode = testModeConfig{TestControl: *testControl, LoadFixture: *loadFixture}
	if err := c.validate(); err != nil {
		return config{}, err
	}
	return c, nil
}

// hooks is the node's hook selection: the enabled hooks with their
// deadlines and caches (a zero cache_ttl disables the cache).
func (h hooksConfig) hooks() hooks.Config {
	ttl := func(d duration) time.Duration {
		if d.Duration == 0 {
			return -1
		}
		return d.Duration
	}
	var out hooks.Config
	if h.Scopes.Enabled {
		out.Scopes = &hooks.ScopesConfig{Timeout: h.Scopes.Timeout.Duration, Cache: hooks.CacheConfig{TTL: ttl(h.Scopes.CacheTTL), Size: h.Scopes.CacheSize}}
	}
	if h.Validate.Enabled {
		out.Validate = &hooks.ValidateConfig{Timeout: h.Validate.Timeout.Duration, Reads: h.Validate.Reads}
	}
	if h.Token.Enabled {
		out.Token = &hooks.TokenConfig{Timeout: h.Token.Timeout.Duration, Cache: hooks.CacheConfig{TTL: ttl(h.Token.CacheTTL), Size: h.Token.CacheSize}}
	}
	return out
}

// node turns the configuration into the node's: store, NATS, bus
// namespace, HTTP, the component limits, the realtime hub, the reaction
// runner, the hooks and the admin API. The caller adds what is not in the
// file or depends on the schema (schema, authentication, validators,
// reaction rules, logger, routes).
func (c config) node() (node.Config, error) {
	names, err := bus.NewNames(c.NATS.Namespace)
	if err != nil {
		return node.Config{}, &fieldError{Field: "nats.namespace", Reason: err.Error()}
	}
	nc := node.Config{
		Name:    c.NodeName,
		DataDir: c.DataDir,
		Names:   names,
		NATS:    c.natsConfig(),
		HTTP: node.HTTPConfig{
			Listen:            c.HTTP.Listen,
			ReadHeaderTimeout: c.HTTP.ReadHeaderTimeout.Duration,
			ReadTimeout:       c.HTTP.ReadTimeout.Duration,
			WriteTimeout:      c.HTTP.WriteTimeout.Duration,
			IdleTimeout:       c.HTTP.IdleTimeout.Duration,
			MaxConnections:    c.HTTP.MaxConnections,
		},
		API: httpapi.Config{
			MaxRequestBytes:      c.HTTP.MaxRequestBytes,
			StreamSegmentsAbove:  c.HTTP.StreamSegmentsAboveBytes,
			SegmentCacheBytes:    c.HTTP.SegmentCacheBytes,
			MaxInflightBodyBytes: c.HTTP.MaxInflightBodyBytes,
		},
		Engine: engine.Config{
			MaxOperations:         new(c.Limits.MaxOperationsPerRequest),
			MaxSubscriptions:      c.Limits.MaxSubscriptionsPerRequest,
			InlineSegmentMaxBytes: new(c.Limits.InlineSegmentMaxBytes),
		},
		Segments: segments.Config{TTL: c.Limits.SegmentTTL.Duration},
		Blobs: blobs.Config{MaxBytes: c.Blobs.MaxBytes, OrphanGrace: new(c.Blobs.OrphanGrace.Duration),
			SweepInterval: c.Blobs.SweepInterval.Duration, UploadTimeout: c.Blobs.UploadTimeout.Duration},
		Realtime:   node.RealtimeConfig{Disabled: !c.Realtime.Enabled, Hub: c.Realtime.hubConfig()},
		Hooks:      c.Hooks.hooks(),
		Admin:      node.AdminConfig{Disabled: !c.Admin.Enabled, Version: buildVersion()},
		Images:     node.ImagesConfig{Disabled: !c.Images.Enabled},
		Operations: node.OperationsConfig{File: c.Operations},
		Edge:       c.Edge.node(),
	}
	if nc.SignedURLs, err = c.SignedURLs.node(); err != nil {
		return node.Config{}, err
	}
	if len(nc.SignedURLs.Key) > 0 {
		nc.Engine.BlobPresign = new(c.Blobs.Presign)
	}
	if nc.Reactions, err = c.Reactions.node(nil); err != nil {
		return node.Config{}, err
	}
	if c.Leases.TTL.Duration != 0 {
		key, err := c.Leases.key()
		if err != nil {
			return node.Config{}, err
		}
		nc.Leases = node.LeasesConfig{TTL: c.Leases.TTL.Duration, Key: key}
	}
	if c.Storage.PostgresURL != "" {
		nc.Store.Postgres.URL, nc.Store.Postgres.Schema = c.Storage.PostgresURL, c.Storage.PostgresSchema
		nc.Store.Postgres.SoleWriter = c.Storage.PostgresSoleWriter
	} else {
		nc.Store.SQLite.Synchronous = sqlitestore.Synchronous(strings.ToUpper(c.Storage.SQLiteSynchronous))
	}
	return nc, nil
}

// node is the node's signed-URL setting: off without a key.
func (s signedURLsConfig) node() (node.SignedURLsConfig, error) {
	key := []byte(s.Key)
	if s.KeyFile != "" {
		b, err := os.ReadFile(s.KeyFile)
		if err != nil {
			return node.SignedURLsConfig{}, &fieldError{Field: "signed_urls.key_file", Reason: err.Error()}
		}
		if key = []byte(strings.TrimSpace(string(b))); len(key) < signedurl.MinKeyBytes {
			return node.SignedURLsConfig{}, &fieldError{Field: "signed_urls.key_file", Reason: fmt.Sprintf("the key must be at least %d bytes", signedurl.MinKeyBytes)}
		}
	}
	if len(key) == 0 {
		return node.SignedURLsConfig{}, nil
	}
	return node.SignedURLsConfig{Key: key, TTL: s.TTL.Duration, BaseURL: s.BaseURL}, nil
}

// natsConfig is the node's NATS: embedded per nats.conf, or external.
func (c config) natsConfig() embedded.Config {
	if c.NATS.Mode == "external" {
		return embedded.Config{Mode: embedded.ModeExternal, URLs: c.NATS.URLs, CredentialsFile: c.NATS.Credentials, Domain: c.NATS.Domain,
			User: c.NATS.User, Password: c.NATS.Password, Replicas: c.NATS.Replicas}
	}
	nc := embedded.Config{Mode: embedded.ModeEmbedded, ConfigFile: c.NATS.ConfigFile, ServerName: c.NodeName, Domain: c.NATS.Domain,
		User: c.NATS.User, Password: c.NATS.Password, Replicas: c.NATS.Replicas}
	if cl := c.NATS.Cluster; cl.Listen != "" {
		host, port, _ := splitHostPort(cl.Listen) // validated
		nc.Cluster = embedded.ClusterConfig{Name: cl.Name, Host: host, Port: port, Routes: cl.Routes}
	}
	if c.NATS.ConfigFile == defaultConfig().NATS.ConfigFile {
		// The default nats.conf is optional: without it the built-in
		// defaults (the same as the file in the repository) apply.
		if _, err := os.Stat(c.NATS.ConfigFile); errors.Is(err, os.ErrNotExist) {
			nc.ConfigFile = ""
		}
	}
	if c.NATS.Port != nil {
		nc.Port = *c.NATS.Port
	}
	return nc
}

// splitHostPort parses a host:port listen address.
func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not 1..65535", p)
	}
	return host, port, nil
}
