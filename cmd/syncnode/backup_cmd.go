package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

const backupUsage = `Usage:
  syncnode backup --out FILE [--config F | --data DIR]
      a consistent copy of a SQLite node's database while it serves (VACUUM INTO)
  syncnode restore --from FILE [--config F | --data DIR]
      with the node stopped: replace its database with FILE, then rotate
      every partition's log epoch (clients that are ahead re-bootstrap)
  syncnode restore --rotate-epochs [--config F | --postgres URL]
      rotate every partition's log epoch only: after pg_restore

Serve-gate tokens follow the rotation on NATS when it is reachable
(--nats), else the node's gate rebuilds them from SQL when it starts.
`

// runBackup is `syncnode backup`.
func runBackup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o opsFlags
	o.define(fs)
	out := fs.String("out", "", "backup file to write (must not exist)")
	set, err := parseSubcommand(fs, args)
	if err != nil {
		if isHelp(err) {
			fmt.Fprint(stdout, backupUsage)
			return nil
		}
		return err
	}
	if !set["out"] {
		return errors.New("backup: --out is required")
	}
	nc, err := o.nodeConfig(stderr)
	if err != nil {
		return err
	}
	if nc.Store.Postgres.URL != "" {
		return errors.New("backup: the node stores in PostgreSQL; use pg_dump, then syncnode restore --rotate-epochs after pg_restore")
	}
	path := nc.WithDefaults().Store.SQLite.Path
	start := time.Now()
	fmt.Fprintf(stdout, "backing up %s to %s …\n", path, *out)
	size, err := sqlitestore.Backup(ctx, path, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backup done: %d bytes in %v\n", size, time.Since(start).Round(time.Millisecond))
	return nil
}

// runRestore is `syncnode restore`.
func runRestore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o opsFlags
	o.define(fs)
	from := fs.String("from", "", "backup file written by syncnode backup")
	rotateOnly := fs.Bool("rotate-epochs", false, "only rotate every partition's log epoch (after pg_restore)")
	set, err := parseSubcommand(fs, args)
	if err != nil {
		if isHelp(err) {
			fmt.Fprint(stdout, backupUsage)
			return nil
		}
		return err
	}
	if set["from"] == *rotateOnly {
		return errors.New("restore: give either --from FILE or --rotate-epochs")
	}
	nc, err := o.nodeConfig(stderr)
	if err != nil {
		return err
	}
	if !*rotateOnly {
		if nc.Store.Postgres.URL != "" {
			return errors.New("restore: the node stores in PostgreSQL; use pg_restore, then syncnode restore --rotate-epochs")
		}
		path := nc.WithDefaults().Store.SQLite.Path
		fmt.Fprintf(stdout, "restoring %s from %s …\n", path, *from)
		if err := sqlitestore.Restore(ctx, *from, path); err != nil {
			return err
		}
	}
	o.url = *o.natsURL
	off, err := o.openOffline(ctx, nc, stderr, false)
	if err != nil {
		return err
	}
	defer off.Close()
	return rotateAll(ctx, off, stdout)
}

// rotateAll gives every partition a new log epoch through the serve gate
// (SPEC.md §2.1): a client whose cursor is past the restored log is told
// to reset and re-bootstraps.
func rotateAll(ctx context.Context, off *node.Offline, stdout io.Writer) error {
	parts, err := off.Store.Partitions(ctx)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	for _, p := range parts {
		np, err := off.Gate.RotateEpoch(ctx, p.ID)
		if err != nil {
			return fmt.Errorf("restore: rotate %q: %w", p.ID, err)
		}
		fmt.Fprintf(stdout, "partition %q: log at commit %d, new log epoch %s\n", np.ID, np.MaxCommitSeq, np.LogEpoch)
	}
	fmt.Fprintf(stdout, "restore done: %d partitions rotated\n", len(parts))
	return nil
}
