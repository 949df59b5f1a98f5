package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Backup writes a consistent copy of the database at path to out, which
// must not exist, with VACUUM INTO: one read transaction on a connection
// of its own, so a node keeps serving (and committing) meanwhile and the
// copy holds exactly the commits durable when it began. The copy is a
// plain, compacted SQLite file (rollback journal). It returns the copy's
// size.
func Backup(ctx context.Context, path, out string) (int64, error) {
	if _, err := os.Stat(path); err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	if _, err := os.Stat(out); err == nil {
		return 0, fmt.Errorf("backup: %s already exists", out)
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("backup: %w", err)
	}
	c, err := connect(ctx, dsn(Config{Path: path, BusyTimeout: 30 * time.Second, Synchronous: SynchronousNormal}, false))
	if err != nil {
		return 0, fmt.Errorf("backup: open %s: %w", path, err)
	}
	defer c.close()
	if _, err := c.exec(ctx, `VACUUM INTO ?`, out); err != nil {
		_ = os.Remove(out)
		return 0, fmt.Errorf("backup: %w", err)
	}
	st, err := os.Stat(out)
	if err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	return st.Size(), nil
}

// Restore replaces the database at path with the backup from, after
// checking that from is an intact SQLite database (PRAGMA
// integrity_check): the copy is written beside path and renamed over it,
// and the old file's WAL and shared-memory files are removed. No process
// may have the database open.
func Restore(ctx context.Context, from, path string) error {
	c, err := connect(ctx, "file:"+from+"?mode=ro")
	if err != nil {
		return fmt.Errorf("restore: open %s: %w", from, err)
	}
	var res string
	ok, err := c.queryRow(ctx, `PRAGMA integrity_check`, nil, &res)
	_ = c.close()
	if err != nil || !ok || res != "ok" {
		return fmt.Errorf("restore: %s is not an intact SQLite database: %q %v", from, res, err)
	}
	tmp := path + ".restore"
	if err := copyFile(from, tmp); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("restore: %w", err)
	}
	for _, side := range []string{path + "-wal", path + "-shm"} {
		if err := os.Remove(side); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("restore: %w", err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}

// copyFile copies from to a new file to, synced.
func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	return errors.Join(err, dst.Sync(), dst.Close())
}
