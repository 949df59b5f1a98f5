package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/storagetest"
)

// testURL returns the PostgreSQL URL for tests. Without
// SYNCNODE_TEST_POSTGRES_URL the tests skip, except under CI, where they
// fail: CI never silently skips the PostgreSQL half.
func testURL(tb testing.TB) string {
	tb.Helper()
	url := os.Getenv("SYNCNODE_TEST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") != "" {
			tb.Fatal("SYNCNODE_TEST_POSTGRES_URL is not set, and CI requires the PostgreSQL tests")
		}
		tb.Skip("SYNCNODE_TEST_POSTGRES_URL is not set: skipping the PostgreSQL tests (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
	}
	return url
}

// openTB opens a store in a fresh schema, dropped at cleanup.
func openTB(tb testing.TB, maxConns int32) *Store {
	tb.Helper()
	return openDial(tb, maxConns, nil)
}

// openDial is openTB with the pool's dialer wrapped by dial.
func openDial(tb testing.TB, maxConns int32, dial func(pgconn.DialFunc) pgconn.DialFunc) *Store {
	tb.Helper()
	return openWith(tb, Config{MaxConns: maxConns}, dial)
}

// openWith is openDial with cfg's other fields (its URL and schema are
// the test's).
func openWith(tb testing.TB, cfg Config, dial func(pgconn.DialFunc) pgconn.DialFunc) *Store {
	tb.Helper()
	url := testURL(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "syncnode_test_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	cfg.URL, cfg.Schema = url, name
	s, err := open(ctx, cfg, dial)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+quote(name)+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
		}
	})
	return s
}

func TestContract(t *testing.T) {
	testURL(t)
	storagetest.Run(t, func(t *testing.T) storage.Store { return openTB(t, 4) })
}

func BenchmarkStore(b *testing.B) {
	storagetest.Benchmark(b, func(b *testing.B) storage.Store { return openTB(b, 16) })
}

func TestConfig(t *testing.T) {
	def := Config{URL: "postgres://x"}.WithDefaults()
	if def.Schema != DefaultSchema || def.MaxConns != DefaultMaxConns {
		t.Fatalf("defaults = %+v", def)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{URL: "mysql://x"}, "URL"},
		{Config{URL: "postgres://x", Schema: "Bad-Name"}, "Schema"},
		{Config{URL: "postgres://x", MaxConns: -1}, "MaxConns"},
	} {
		err := tc.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
}

// TestSchemaCreatedAndIsolated: the configured schema is created and holds
// every table; a second store in another schema sees none of the first's
// data.
func TestSchemaCreatedAndIsolated(t *testing.T) {
	a, b := openTB(t, 2), openTB(t, 2)
	ctx := t.Context()
	if _, err := a.PartitionTouch(ctx, "p", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PartitionGet(ctx, "p"); err == nil {
		t.Fatal("a partition of one schema is visible in another")
	}
	var n int
	if err := a.pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'sync\_%'`, a.cfg.Schema).Scan(&n); err != nil || n < 7 {
		t.Fatalf("internal tables in %s: %d, %v", a.cfg.Schema, n, err)
	}
}
