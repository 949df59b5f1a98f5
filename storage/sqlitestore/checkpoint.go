package sqlitestore

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"

	"modernc.org/sqlite"
)

// WAL checkpoints run mostly on a connection and goroutine of their
// own, off the commit path. With SQLite's default
// (wal_autocheckpoint=1000) the COMMIT that takes the WAL past 1000 pages
// runs the whole checkpoint itself, on the writer connection and inside
// the group commit: every push waiting for that group waits for the WAL
// pages to be copied into the database file and for two fsyncs.
//
// Instead every connection opens with wal_autocheckpoint=0, and after
// each COMMIT the writer adds the pages the transaction wrote to the WAL
// (SQLITE_DBSTATUS_CACHE_WRITE, a counter read without a system call).
// When they pass Config.CheckpointPages it wakes the checkpointer, which
// runs a PASSIVE checkpoint: it copies what no reader still needs and
// never blocks the writer or a reader.
//
// A background checkpoint alone never lets the WAL start over: the
// writer restarts the WAL from its beginning only when everything in it
// was copied, and under a steady load it has committed more by the time
// the checkpoint ends. The WAL file would grow forever, and every commit
// that extends it makes its fdatasync write the file's size as well. So
// after a background checkpoint the writer runs a second PASSIVE one
// itself, between groups and after the previous group's members have
// their answers: it copies only what was committed meanwhile, and the
// next group then writes the WAL from its start again (unless a reader
// still reads from the WAL, in which case a later round does).
//
// A reader holding an old snapshot can keep the WAL from restarting, so
// once it holds more than checkpointHardFactor times CheckpointPages the
// writer's checkpoint is a RESTART: it waits up to the busy timeout for
// the readers to leave the WAL, and the next group starts it over.
// journal_size_limit then truncates a WAL file that grew past its steady
// size.

// checkpointHardFactor bounds the WAL at this many times
// Config.CheckpointPages before a checkpoint waits for readers.
const checkpointHardFactor = 8

// walPageBytes is the WAL bytes a page takes for journal_size_limit: a
// frame header and a page of the default size, rounded up.
const walPageBytes = 4096 + 32

// checkpointPragmas are the DSN pragmas of a store that checkpoints in
// the background; empty when the writer checkpoints itself.
func checkpointPragmas(cfg Config) []string {
	if cfg.CheckpointPages <= 0 {
		return nil
	}
	limit := int64(cfg.CheckpointPages) * 2 * walPageBytes
	return []string{"wal_autocheckpoint(0)", "journal_size_limit(" + strconv.FormatInt(limit, 10) + ")"}
}

// CheckpointStats are the store's WAL checkpoint counters.
type CheckpointStats struct {
	// Checkpoints counts the background checkpoints.
	Checkpoints uint64
	// WriterCheckpoints counts the writer's short checkpoints after them.
	WriterCheckpoints uint64
	// Restarts counts the writer checkpoints the hard bound made RESTART.
	Restarts uint64
	// WALPages is the WAL's size in frames at the last checkpoint.
	WALPages int64
	// Failures counts checkpoints that returned an error.
	Failures uint64
}

type checkpointer struct {
	c       *conn
	pages   int64         // Config.CheckpointPages
	kick    chan struct{} // capacity 1: a checkpoint is wanted
	stop    chan struct{}
	done    chan struct{}
	pending int64 // WAL pages the writer wrote since it last kicked; the writer's only
	// tail is set by a background checkpoint for the writer to finish.
	tail atomic.Bool
	// ran, when set (by tests, before the first write), is called after
	// each background checkpoint.
	ran func()

	checkpoints, tails, restarts, failures atomic.Uint64
	walPages                               atomic.Int64
}

// walStatus is the driver connection's counter interface.
type walStatus interface {
	Status(op sqlite.DBStatusOp, reset bool) (current, high int, err error)
}

// startCheckpointer opens the checkpoint connection and its goroutine;
// nil when the writer checkpoints itself.
func startCheckpointer(ctx context.Context, cfg Config) (*checkpointer, error) {
	if cfg.CheckpointPages <= 0 {
		return nil, nil
	}
	c, err := connect(ctx, dsn(cfg, false))
	if err != nil {
		return nil, fmt.Errorf("open sqlite checkpointer: %w", err)
	}
	if _, ok := c.dc.(walStatus); !ok {
		_ = c.close()
		return nil, fmt.Errorf("sqlite driver connection has no status counters")
	}
	k := &checkpointer{
		c:     c,
		pages: int64(cfg.CheckpointPages),
		kick:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go k.run()
	return k, nil
}

// committed is the writer's hook after a COMMIT on wc: it counts the
// pages written to the WAL and wakes the checkpointer past the threshold.
func (k *checkpointer) committed(wc *conn) {
	if k == nil {
		return
	}
	n, _, err := wc.dc.(walStatus).Status(sqlite.DBStatusCacheWrite, true)
	if err != nil {
		return
	}
	k.pending += int64(n)
	if k.pending < k.pages {
		return
	}
	k.pending = 0
	select {
	case k.kick <- struct{}{}:
	default: // a checkpoint is already due
	}
}

func (k *checkpointer) run() {
	defer close(k.done)
	for {
		select {
		case <-k.kick:
			k.checkpoint()
		case <-k.stop:
			return
		}
	}
}

// checkpoint runs one background PASSIVE checkpoint and leaves the
// rest to the writer.
func (k *checkpointer) checkpoint() {
	_, _, err := k.exec(k.c, "PASSIVE")
	if err != nil {
		k.failures.Add(1)
		slog.Warn("sqlite WAL checkpoint failed", "err", err)
		return
	}
	k.checkpoints.Add(1)
	k.tail.Store(true)
	if k.ran != nil {
		k.ran()
	}
}

// idle is the writer's hook between groups, after the last group's
// members have their answers: it finishes a background checkpoint on the
// writer connection wc.
func (k *checkpointer) idle(wc *conn) {
	if k == nil || !k.tail.Load() {
		return
	}
	k.tail.Store(false)
	mode := "PASSIVE"
	if k.walPages.Load() > checkpointHardFactor*k.pages {
		mode = "RESTART"
		k.restarts.Add(1)
	}
	_, _, err := k.exec(wc, mode)
	if err != nil {
		k.failures.Add(1)
		slog.Warn("sqlite WAL checkpoint failed", "err", err)
		return
	}
	k.tails.Add(1)
}

// exec runs a checkpoint in mode on c and returns the WAL's frames and
// those copied.
func (k *checkpointer) exec(c *conn, mode string) (log, copied int64, err error) {
	var busy int64
	if _, err := c.queryRow(stmtCtx, "PRAGMA wal_checkpoint("+mode+")", nil, &busy, &log, &copied); err != nil {
		return 0, 0, fmt.Errorf("wal_checkpoint(%s): %w", mode, err)
	}
	k.walPages.Store(log)
	return log, copied, nil
}

// close stops the goroutine (after a running checkpoint) and closes the
// connection. The last connection the Store closes checkpoints the WAL
// and removes it, as SQLite does for every WAL database.
func (k *checkpointer) close() error {
	if k == nil {
		return nil
	}
	close(k.stop)
	<-k.done
	return k.c.close()
}

// CheckpointStats reports the background checkpointer's counters (zero
// when the writer checkpoints itself, Config.CheckpointPages < 0).
func (s *Store) CheckpointStats() CheckpointStats {
	k := s.ckpt
	if k == nil {
		return CheckpointStats{}
	}
	return CheckpointStats{
		Checkpoints:       k.checkpoints.Load(),
		WriterCheckpoints: k.tails.Load(),
		Restarts:          k.restarts.Load(),
		WALPages:          k.walPages.Load(),
		Failures:          k.failures.Load(),
	}
}
