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

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/segments"
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
	NodeName   string `toml:"node_name"`

	HTTP     httpConfig     `toml:"http"`
	NATS     natsConfig     `toml:"nats"`
	Storage  storageConfig  `toml:"storage"`
	Auth     authConfig     `toml:"auth"`
	Limits   limitsConfig   `toml:"limits"`
	Log      logConfig      `toml:"log"`
	TestMode testModeConfig `toml:"-"`
}

type httpConfig struct {
	Listen          string   `toml:"listen"`
	MaxRequestBytes int64    `toml:"max_request_bytes"`
	ShutdownTimeout duration `toml:"shutdown_timeout"`
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
	// Namespace prefixes every stream, bucket and subject (package bus):
	// "" keeps the standard names.
	Namespace string `toml:"namespace"`
}

type storageConfig struct {
	// PostgresURL selects PostgreSQL; empty means SQLite in the data dir.
	PostgresURL string `toml:"postgres_url"`
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
	MaxOperationsPerRequest int      `toml:"max_operations_per_request"`
	InlineSegmentMaxBytes   int      `toml:"inline_segment_max_bytes"`
	SegmentTTL              duration `toml:"segment_ttl"`
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

			StreamSegmentsAboveBytes: httpapi.DefaultStreamSegmentsAbove,
			SegmentCacheBytes:        httpapi.DefaultSegmentCacheBytes,
		},
		NATS:    natsConfig{Mode: "embedded", ConfigFile: "nats.conf"},
		Storage: storageConfig{SQLiteSynchronous: "FULL"},
		Limits: limitsConfig{
			MaxOperationsPerRequest: engine.DefaultMaxOperations,
			InlineSegmentMaxBytes:   engine.DefaultInlineSegmentMaxBytes,
			SegmentTTL:              duration{segments.DefaultTTL},
		},
		Log: logConfig{Level: "info", Format: "text"},
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
	if _, _, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
		bad("http.listen", "%q is not host:port", c.HTTP.Listen)
	}
	if c.HTTP.MaxRequestBytes < 1<<10 {
		bad("http.max_request_bytes", "%d is below 1 KiB", c.HTTP.MaxRequestBytes)
	}
	if c.HTTP.ShutdownTimeout.Duration <= 0 {
		bad("http.shutdown_timeout", "must be positive")
	}
	if c.HTTP.StreamSegmentsAboveBytes < 1 {
		bad("http.stream_segments_above_bytes", "%d must be positive", c.HTTP.StreamSegmentsAboveBytes)
	}
	if c.HTTP.SegmentCacheBytes < 1 {
		bad("http.segment_cache_bytes", "%d must be positive", c.HTTP.SegmentCacheBytes)
	}
	if _, err := bus.NewNames(c.NATS.Namespace); err != nil {
		bad("nats.namespace", "%v", err)
	}
	switch c.NATS.Mode {
	case "embedded":
		if c.NATS.Port != nil && (*c.NATS.Port < -1 || *c.NATS.Port > 65535) {
			bad("nats.port", "%d is not a port (-1 picks a free one)", *c.NATS.Port)
		}
	case "external":
		if len(c.NATS.URLs) == 0 {
			bad("nats.urls", "external mode needs at least one URL")
		}
	default:
		bad("nats.mode", "%q is neither embedded nor external", c.NATS.Mode)
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
	if n := c.Limits.MaxOperationsPerRequest; n < 1 || n > 100_000 {
		bad("limits.max_operations_per_request", "%d is outside 1..100000", n)
	}
	if n := c.Limits.InlineSegmentMaxBytes; n < 0 || n > 64<<20 {
		bad("limits.inline_segment_max_bytes", "%d is outside 0..64 MiB", n)
	}
	if c.Limits.SegmentTTL.Duration < time.Minute {
		bad("limits.segment_ttl", "%s is below one minute", c.Limits.SegmentTTL)
	}
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
	{"SYNCNODE_JWT_SECRET", func(c *config, v string) error { c.Auth.JWTSecret = v; return nil }},
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

// node turns the configuration into the node's: store, NATS, bus
// namespace, HTTP and the component limits. The caller adds what is not
// in the file (schema, authentication, validators, logger, routes).
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
		HTTP:    node.HTTPConfig{Listen: c.HTTP.Listen},
		API: httpapi.Config{
			MaxRequestBytes:     c.HTTP.MaxRequestBytes,
			StreamSegmentsAbove: c.HTTP.StreamSegmentsAboveBytes,
			SegmentCacheBytes:   c.HTTP.SegmentCacheBytes,
		},
		Engine: engine.Config{
			MaxOperations:         c.Limits.MaxOperationsPerRequest,
			InlineSegmentMaxBytes: new(c.Limits.InlineSegmentMaxBytes),
		},
		Segments: segments.Config{TTL: c.Limits.SegmentTTL.Duration},
	}
	if c.Storage.PostgresURL != "" {
		nc.Store.Postgres.URL = c.Storage.PostgresURL
	} else {
		nc.Store.SQLite.Synchronous = sqlitestore.Synchronous(strings.ToUpper(c.Storage.SQLiteSynchronous))
	}
	return nc, nil
}

// natsConfig is the node's NATS: embedded per nats.conf, or external.
func (c config) natsConfig() embedded.Config {
	if c.NATS.Mode == "external" {
		return embedded.Config{Mode: embedded.ModeExternal, URLs: c.NATS.URLs, CredentialsFile: c.NATS.Credentials, Domain: c.NATS.Domain}
	}
	nc := embedded.Config{Mode: embedded.ModeEmbedded, ConfigFile: c.NATS.ConfigFile, ServerName: c.NodeName, Domain: c.NATS.Domain}
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
