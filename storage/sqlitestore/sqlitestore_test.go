package sqlitestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/migrate"
	"github.com/syncnode/syncnode/storage/storagetest"
)

func openTB(tb testing.TB, sync Synchronous) *Store {
	tb.Helper()
	s, err := Open(context.Background(), Config{Path: filepath.Join(tb.TempDir(), "sync.db"), Synchronous: sync})
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestContract(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store { return openTB(t, SynchronousFull) })
}

func BenchmarkStore(b *testing.B) {
	for _, sync := range []Synchronous{SynchronousFull, SynchronousNormal} {
		b.Run("synchronous="+string(sync), func(b *testing.B) {
			storagetest.Benchmark(b, func(b *testing.B) storage.Store { return openTB(b, sync) })
		})
	}
}

func TestConfig(t *testing.T) {
	def := Config{Path: "x"}.WithDefaults()
	if def.Synchronous != SynchronousFull || def.BusyTimeout != DefaultBusyTimeout || def.Readers < 4 {
		t.Fatalf("defaults = %+v", def)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Path"},
		{Config{Path: "x", Synchronous: "OFF"}, "Synchronous"},
		{Config{Path: "x", BusyTimeout: -1}, "BusyTimeout"},
		{Config{Path: "x", Readers: MaxReaders + 1}, "Readers"},
	} {
		err := tc.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
}

func TestPragmas(t *testing.T) {
	for _, sync := range []Synchronous{SynchronousFull, SynchronousNormal} {
		s := openTB(t, sync)
		ctx := t.Context()
		want := map[string]int64{"synchronous": 2, "foreign_keys": 1, "busy_timeout": DefaultBusyTimeout.Milliseconds()}
		if sync == SynchronousNormal {
			want["synchronous"] = 1
		}
		check := func(c *conn) {
			var mode string
			if _, err := c.queryRow(ctx, "PRAGMA journal_mode", nil, &mode); err != nil || mode != "wal" {
				t.Fatalf("journal_mode = %q, %v", mode, err)
			}
			for name, v := range want {
				var got int64
				if _, err := c.queryRow(ctx, "PRAGMA "+name, nil, &got); err != nil || got != v {
					t.Fatalf("%s = %d, %v; want %d", name, got, err, v)
				}
			}
		}
		if err := s.write(ctx, func(c *conn) error { check(c); return nil }); err != nil {
			t.Fatal(err)
		}
		if err := s.withReader(ctx, func(c *conn) error { check(c); return nil }); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCloseIdempotent(t *testing.T) {
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "db")})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := s.PartitionTouch(t.Context(), "p", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close = %v, want ErrClosed", err)
	}
}

// TestMigrationsMatchPostgres: both dialects carry the same numbered
// migrations, so a version means the same change on both.
func TestMigrationsMatchPostgres(t *testing.T) {
	lite, err := migrate.Load(os.DirFS("migrations"), ".")
	if err != nil {
		t.Fatal(err)
	}
	pg, err := migrate.Load(os.DirFS(filepath.Join("..", "pgstore", "migrations")), ".")
	if err != nil {
		t.Fatal(err)
	}
	if len(lite) != len(pg) {
		t.Fatalf("%d SQLite migrations, %d PostgreSQL migrations", len(lite), len(pg))
	}
	for i := range lite {
		if lite[i].Version != pg[i].Version || lite[i].Name != pg[i].Name {
			t.Fatalf("migration %d: SQLite %03d_%s, PostgreSQL %03d_%s", i, lite[i].Version, lite[i].Name, pg[i].Version, pg[i].Name)
		}
	}
}
