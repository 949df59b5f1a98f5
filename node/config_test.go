package node

import (
	"strings"
	"testing"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/hooks"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/segments"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// New refuses a bad or contradictory configuration with every field
// named, nested configs included, before it opens anything.
func TestConfigValidate(t *testing.T) {
	s, err := schema.Parse([]byte(vectorSchema))
	if err != nil {
		t.Fatal(err)
	}
	base := func() Config {
		return Config{DataDir: t.TempDir(), Schema: s, API: httpapi.Config{Auth: httpapi.AuthenticatorFunc(nil)}}
	}
	if _, err := New(base()); err != nil {
		t.Fatalf("New(minimal) = %v", err)
	}
	d := base().WithDefaults()
	if d.Store.SQLite.Path == "" || !strings.HasSuffix(d.Store.SQLite.Path, SQLiteFile) || *d.Engine.InlineSegmentMaxBytes != engine.DefaultInlineSegmentMaxBytes {
		t.Fatalf("defaults: store %+v, inline %d", d.Store, *d.Engine.InlineSegmentMaxBytes)
	}
	if d2 := d.WithDefaults(); d2.Store != d.Store || len(d2.Gate.Declared) != len(d.Gate.Declared) {
		t.Fatal("WithDefaults is not idempotent")
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want []string
	}{
		{"empty", func(c *Config) { *c = Config{} }, []string{"DataDir", "Schema", "API.Auth"}},
		{"two stores", func(c *Config) {
			c.Store = StoreConfig{Postgres: pgstore.Config{URL: "postgres://x"}, SQLite: sqlitestore.Config{Path: "a.db"}}
		}, []string{"Store"}},
		{"Bus and NATS", func(c *Config) {
			c.Bus = embeddedtest.Start(t)
			c.NATS.Port = 4000
		}, []string{"NATS"}},
		{"negative limits", func(c *Config) {
			c.Engine.MaxOperations = new(-1)
			c.Engine.InlineSegmentMaxBytes = new(-1)
			c.API.StreamSegmentsAbove = -1
			c.Segments.MaintenanceInterval = -5
		}, []string{"MaxOperations", "InlineSegmentMaxBytes", "StreamSegmentsAbove", "MaintenanceInterval"}},
		{"relay", func(c *Config) { c.Relay.Workers = -1 }, []string{"Workers"}},
		{"gate", func(c *Config) { c.Gate.Replicas = 9 }, []string{"Replicas"}},
		{"segments", func(c *Config) { c.Segments = segments.Config{TTL: -1} }, []string{"TTL"}},
		{"http", func(c *Config) { c.HTTP.WriteTimeout, c.HTTP.MaxConnections = -1, -1 }, []string{"HTTP.WriteTimeout", "HTTP.MaxConnections"}},
		{"inflight below a request", func(c *Config) { c.API.MaxRequestBytes, c.API.MaxInflightBodyBytes = 2<<20, 1<<20 }, []string{"MaxInflightBodyBytes"}},
		{"realtime", func(c *Config) { c.Realtime.Hub.MaxDeltaBytes = 10 }, []string{"MaxDeltaBytes"}},
		{"more sockets than connections", func(c *Config) { c.HTTP.Listen, c.HTTP.MaxConnections = "127.0.0.1:0", 100 }, []string{"Realtime.Hub.MaxConnections"}},
		{"reactions", func(c *Config) { c.Reactions.Runner.Concurrency = -1 }, []string{"Concurrency"}},
		{"admin and hooks in a namespace", func(c *Config) {
			c.Names, _ = bus.NewNames("blue")
			c.Hooks.Token = &hooks.TokenConfig{}
		}, []string{"Admin", "Hooks"}},
	} {
		cfg := base()
		tc.mod(&cfg)
		_, err := New(cfg)
		for _, field := range tc.want {
			if err == nil || !strings.Contains(err.Error(), field) {
				t.Errorf("%s: New = %v, want an error naming %s", tc.name, err, field)
			}
		}
	}
}

// A node started on a shared server without a listener serves its
// handler only, and leaves the server running when it stops.
func TestNodeOnSharedBus(t *testing.T) {
	srv := embeddedtest.Start(t)
	n := startNode(t, vectorSchema, func(_ *testing.T, c *Config) {
		c.Bus, c.NATS, c.HTTP.Listen = srv, embedded.Config{}, ""
	})
	if n.URL() != "" || n.Addr() != "" || n.Handler == nil {
		t.Fatalf("URL %q, Addr %q, Handler %v", n.URL(), n.Addr(), n.Handler)
	}
	if err := n.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !srv.Conn().IsConnected() {
		t.Fatal("stopping the node closed the shared server's connection")
	}
}
