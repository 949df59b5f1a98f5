package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncnode/syncnode/storage/sqlitestore"
)

func parseFile(t *testing.T, toml string) (config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "syncnode.toml")
	if err := os.WriteFile(path, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return parseServeFlags(fs, []string{"--config", path}, func(string) string { return "" })
}

// The config file reaches the node's nested configs, zero values that
// mean something included.
func TestConfigFileToNode(t *testing.T) {
	c, err := parseFile(t, `
data_dir = "d"
[http]
stream_segments_above_bytes = 4096
segment_cache_bytes = 1048576
[nats]
namespace = "blue"
[storage]
sqlite_synchronous = "normal"
[limits]
inline_segment_max_bytes = 0
segment_ttl = "2h"
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
	// The defaults keep today's behaviour.
	d, err := parseFile(t, "")
	if err != nil {
		t.Fatal(err)
	}
	dn, err := d.node()
	if err != nil {
		t.Fatal(err)
	}
	if *dn.Engine.InlineSegmentMaxBytes != 256<<10 || dn.API.StreamSegmentsAbove != 8<<20 || dn.Names.Prefix() != "" {
		t.Errorf("defaults: inline %d, stream above %d, namespace %q", *dn.Engine.InlineSegmentMaxBytes, dn.API.StreamSegmentsAbove, dn.Names.Prefix())
	}
}

// Bad values are refused with the file's field named.
func TestConfigFileRefusals(t *testing.T) {
	for field, toml := range map[string]string{
		"http.stream_segments_above_bytes": "[http]\nstream_segments_above_bytes = -1",
		"http.segment_cache_bytes":         "[http]\nsegment_cache_bytes = 0",
		"nats.namespace":                   "[nats]\nnamespace = \"sync\"",
		"limits.inline_segment_max_bytes":  "[limits]\ninline_segment_max_bytes = -1",
	} {
		if _, err := parseFile(t, toml); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err = %v, want one naming %s", field, err, field)
		}
	}
}
