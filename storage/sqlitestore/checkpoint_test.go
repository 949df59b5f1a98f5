package sqlitestore

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// openCheckpointing opens a store that checkpoints every pages WAL pages
// and reports each background checkpoint on the returned channel.
func openCheckpointing(t *testing.T, pages int, busy time.Duration) (*Store, string, <-chan struct{}) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sync.db")
	s, err := Open(t.Context(), Config{Path: path, CheckpointPages: pages, BusyTimeout: busy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ran := make(chan struct{}, 1)
	s.ckpt.ran = func() {
		select {
		case ran <- struct{}{}:
		default:
		}
	}
	if err := s.write(t.Context(), func(c *conn) error {
		return c.execOnce(t.Context(), "CREATE TABLE ckpt_test (b BLOB NOT NULL)")
	}); err != nil {
		t.Fatal(err)
	}
	return s, path, ran
}

// writeUntilCheckpoint commits 16 KiB transactions until a background
// checkpoint ran, then one more, after whose group the writer finishes
// the checkpoint.
func writeUntilCheckpoint(t *testing.T, s *Store, ran <-chan struct{}) {
	t.Helper()
	blob := make([]byte, 16<<10)
	insert := func() {
		_, _ = rand.Read(blob)
		if err := s.write(t.Context(), func(c *conn) error {
			_, err := c.exec(stmtCtx, "INSERT INTO ckpt_test (b) VALUES (?)", blob)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	for {
		insert()
		select {
		case <-ran:
			insert()
			return
		default:
		}
	}
}

func walSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestCheckpointInBackground: the writer never checkpoints inside a
// commit, the background checkpoints run, and the WAL keeps starting
// over instead of growing.
func TestCheckpointInBackground(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const pages = 16
	s, path, ran := openCheckpointing(t, pages, 0)
	var auto int64
	if err := s.write(t.Context(), func(c *conn) error {
		_, err := c.queryRow(stmtCtx, "PRAGMA wal_autocheckpoint", nil, &auto)
		return err
	}); err != nil || auto != 0 {
		t.Fatalf("writer wal_autocheckpoint = %d, %v; want 0", auto, err)
	}
	var maxWAL int64
	const cycles = 30
	for range cycles {
		writeUntilCheckpoint(t, s, ran)
		maxWAL = max(maxWAL, walSize(t, path))
	}
	st := s.CheckpointStats()
	if st.Checkpoints < cycles || st.WriterCheckpoints < cycles || st.Restarts != 0 || st.Failures != 0 {
		t.Fatalf("stats = %+v after %d cycles", st, cycles)
	}
	// Each cycle writes at least pages pages; a WAL that never restarted
	// would hold all of them, cycles times the bound below.
	if limit := int64(checkpointHardFactor * pages * walPageBytes); maxWAL > limit {
		t.Fatalf("WAL file reached %d bytes, want at most %d (it does not start over)", maxWAL, limit)
	}
	var n int
	if err := s.withReader(t.Context(), func(c *conn) error {
		_, err := c.queryRow(stmtCtx, "SELECT count(*) FROM ckpt_test", nil, &n)
		return err
	}); err != nil || n < 2*cycles {
		t.Fatalf("rows = %d, %v", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The last connection's close checkpointed and removed the WAL.
	if _, err := os.Stat(path + "-wal"); !os.IsNotExist(err) {
		t.Fatalf("WAL after Close: %v", err)
	}
}

// TestCheckpointBoundedByRestart: a reader holding an old snapshot keeps
// the WAL from being copied past it; once the WAL passes the hard bound
// the writer's checkpoint is a RESTART, and when the reader lets go the
// WAL starts over.
func TestCheckpointBoundedByRestart(t *testing.T) {
	const pages = 16
	s, path, ran := openCheckpointing(t, pages, 20*time.Millisecond)
	rc, err := s.acquire(t.Context(), s.readers)
	if err != nil {
		t.Fatal(err)
	}
	err = readTx(t.Context(), rc, func() error {
		var n int
		if _, err := rc.queryRow(stmtCtx, "SELECT count(*) FROM ckpt_test", nil, &n); err != nil {
			return err
		}
		for s.CheckpointStats().Restarts == 0 {
			writeUntilCheckpoint(t, s, ran)
		}
		return nil
	})
	s.readers <- rc
	if err != nil {
		t.Fatal(err)
	}
	if st := s.CheckpointStats(); st.WALPages <= checkpointHardFactor*pages {
		t.Fatalf("RESTART with the WAL at %d pages, bound %d", st.WALPages, checkpointHardFactor*pages)
	}
	pinned := walSize(t, path)
	// Released: the next checkpoints copy everything and the WAL starts
	// over, truncated to journal_size_limit.
	for range 3 {
		writeUntilCheckpoint(t, s, ran)
	}
	if got := walSize(t, path); got >= pinned {
		t.Fatalf("WAL file %d bytes after the reader let go, %d while pinned", got, pinned)
	}
	if st := s.CheckpointStats(); st.Failures != 0 || st.WALPages > checkpointHardFactor*pages {
		t.Fatalf("stats = %+v after the reader let go", st)
	}
}

// TestCheckpointByWriter: CheckpointPages < 0 leaves checkpoints to
// SQLite's automatic ones on the writer.
func TestCheckpointByWriter(t *testing.T) {
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "sync.db"), CheckpointPages: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var auto int64
	if err := s.write(t.Context(), func(c *conn) error {
		_, err := c.queryRow(context.Background(), "PRAGMA wal_autocheckpoint", nil, &auto)
		return err
	}); err != nil || auto != 1000 || s.ckpt != nil {
		t.Fatalf("wal_autocheckpoint = %d, %v, checkpointer %v", auto, err, s.ckpt)
	}
}
