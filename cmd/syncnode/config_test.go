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
)

func parseConfig(t *testing.T, toml string) (config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "syncnode.toml")
	if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return parseServeFlags(fs, []string{"--config", path}, func(string) string { return "" })
}

// The [http] timeouts and limits read from the file; bad values are
// refused with the field named.
func TestHTTPLimitsConfig(t *testing.T) {
	c, err := parseConfig(t, `
[http]
read_header_timeout     = "2s"
read_timeout            = "30s"
write_timeout           = "15s"
idle_timeout            = "90s"
max_connections         = 100
max_inflight_body_bytes = 67108864
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
		_, err := parseConfig(t, toml)
		var fe *fieldError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: error %v, want one naming the field", field, err)
		}
	}
}
