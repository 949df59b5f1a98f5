package sqlitestore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/advances"
	"github.com/syncnode/syncnode/storage/internal/blobcore"
	"github.com/syncnode/syncnode/storage/internal/gatecore"
	"github.com/syncnode/syncnode/storage/internal/migrate"
	"github.com/syncnode/syncnode/storage/internal/segcore"
	"github.com/syncnode/syncnode/storage/internal/startcache"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// ErrClosed is returned by every method after Close.
var ErrClosed = errors.New("sqlitestore: store is closed")

// Store is the SQLite implementation of storage.Store.
type Store struct {
	cfg        Config
	requests   chan *writeReq // to the writer coordinator (writer.go)
	writerDone chan struct{}  // closed when the coordinator has exited
	writerConn *conn          // the writer connection, once the coordinator exited
	readers    chan *conn
	nReaders   int
	closed     chan struct{}
	closeOnce  sync.Once
	closeErr   error
	migrations []migrate.Migration
	schema     atomic.Pointer[installed]
	queries    queryPool      // registered queries' connections (query.go)
	advances   advances.Queue // cursor advances waiting for a write (advance.go)
	cache      startcache.Cache
	parts      partCache // pull sections' partition rows (partcache.go)
	// group is what the running group's members changed so far: set by
	// the coordinator before it grants the first member, read by members
	// (which run while the coordinator waits for them).
	group *groupTouches
	fresh freshness // what the writer knows of commits from outside (fresh.go)
	// The serve gate but for EnsureSchemaWithCheckpoints (gate.go), and
	// the segment index, written once over this store's SQL.
	*gateStore
	*segmentIndex
	*blobIndex
}

var _ storage.Store = (*Store)(nil)

// Unexported names for the embedded implementations, so that Store gains
// their methods and no field.
type (
	gateStore    = gatecore.Gate
	segmentIndex = segcore.Index
	blobIndex    = blobcore.Index
)

// Page cache bounds per connection, in KiB of pages (see dsn).
const (
	writerCacheKiB = 2048
	readerCacheKiB = 1024
)

// dsn builds the connection string. PRAGMAs go in the DSN so every
// connection gets them; busy_timeout comes first so it covers the others.
func dsn(cfg Config, reader bool) string {
	u := url.URL{Scheme: "file", Opaque: (&url.URL{Path: cfg.Path}).EscapedPath()}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(cfg.BusyTimeout.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+string(cfg.Synchronous)+")")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Add("_pragma", "temp_store(MEMORY)")
	// The page cache is the process's biggest non-Go memory: each
	// connection grows its own up to cache_size, and the writer's is
	// never reset. A reader drops its cache whenever another connection
	// committed, so under writes it only ever holds one transaction's
	// pages; the writer touches the tails of the log's b-trees and the
	// rows it upserts. A miss is a pread from the OS page cache.
	// cache_size counts page bytes, but each cached page is one
	// allocation of the page plus SQLite's headers (~4.3 KiB), which
	// modernc's allocator serves from an 8 KiB slot: a full cache costs
	// twice its cache_size. At 8 MiB for the writer and 4 MiB per reader
	// a 20-client push + pull node's SQLite allocations reached 22 MB
	// after ~25,000 commits; at 2 MiB and 1 MiB they stay at 8 MB, at
	// no measurable CPU (README, "What keeps a node resident").
	if reader {
		q.Add("_pragma", "cache_size(-"+strconv.Itoa(readerCacheKiB)+")")
	} else {
		q.Add("_pragma", "cache_size(-"+strconv.Itoa(writerCacheKiB)+")")
	}
	// No memory map: SQLite unmaps and remaps the file in every read
	// transaction that begins after another connection committed, so
	// under a steady write load the mapping costs munmap/mmap and TLB
	// shootdowns on every request, more than reading pages through the
	// page cache saves. Reads go through the page cache (cache_size).
	q.Add("_pragma", "mmap_size(0)")
	if reader {
		q.Add("_pragma", "query_only(ON)")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Open opens (creating if needed) the database at cfg.Path, applies the
// internal migrations, and returns the store. Application tables are
// installed by EnsureSchema.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	migrations, err := migrate.Load(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	// Commit with fdatasync(2) rather than fsync(2): the same durability
	// for the WAL (its data and size), without the inode timestamp update
	// that makes fsync on ext4 wait for a journal commit. The switch is
	// process-wide in modernc.org/sqlite, and this package is its only
	// user in syncnode. Platforms without fdatasync keep their default.
	_, _ = sqlite.Fdatasync(true)
	s := &Store{
		cfg:        cfg,
		requests:   make(chan *writeReq),
		readers:    make(chan *conn, cfg.Readers),
		closed:     make(chan struct{}),
		migrations: migrations,
		queries:    newQueryPool(cfg.Readers),
		fresh:      newFreshness(),
	}
	s.advances.FlushFunc = s.flushAdvances
	s.gateStore = gatecore.New(gateSQL, runner{s})
	s.segmentIndex = segcore.New(segmentSQL, runner{s})
	s.blobIndex = blobcore.New(blobSQL, runner{s})
	if err := s.open(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) open(ctx context.Context) error {
	// The writer opens first so the WAL switch happens once, before any
	// reader connects.
	wc, err := connect(ctx, dsn(s.cfg, false))
	if err != nil {
		return fmt.Errorf("open sqlite: %w", err)
	}
	if err := s.migrate(ctx, wc); err != nil {
		_ = wc.close()
		return err
	}
	s.writerDone = make(chan struct{})
	go s.runWriter(wc)
	for range s.cfg.Readers {
		rc, err := connect(ctx, dsn(s.cfg, true))
		if err != nil {
			return fmt.Errorf("open sqlite reader: %w", err)
		}
		s.readers <- rc
		s.nReaders++
	}
	return nil
}

// migrate applies the pending internal migrations in one IMMEDIATE
// transaction, so two processes opening one file do not race.
func (s *Store) migrate(ctx context.Context, c *conn) (err error) {
	if err := c.execOnce(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer func() {
		if err != nil {
			rollback(c)
		}
	}()
	if err := applyMigrations(ctx, c, s.migrations); err != nil {
		return err
	}
	if err := c.execOnce(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// Let the query planner know the data: analyze tables whose
	// statistics are missing or stale (SQLite's advice for long-lived
	// connections; Close runs it again).
	if err := c.execOnce(ctx, "PRAGMA optimize=0x10002"); err != nil {
		return fmt.Errorf("optimize: %w", err)
	}
	return nil
}

// applyMigrations runs inside a transaction the caller owns.
func applyMigrations(ctx context.Context, c *conn, ms []migrate.Migration) error {
	if err := c.execOnce(ctx, `CREATE TABLE IF NOT EXISTS sync_migrations (
		version INTEGER NOT NULL PRIMARY KEY,
		name    TEXT    NOT NULL
	) STRICT`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var current int
	if _, err := c.queryRow(ctx, "SELECT coalesce(max(version), 0) FROM sync_migrations", nil, &current); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, m := range ms {
		if m.Version <= current {
			continue
		}
		if err := c.execOnce(ctx, m.SQL); err != nil {
			return fmt.Errorf("migrate %03d_%s: %w", m.Version, m.Name, err)
		}
		if err := c.execOnce(ctx, "INSERT INTO sync_migrations (version, name) VALUES (?, ?)", m.Version, m.Name); err != nil {
			return fmt.Errorf("migrate %03d_%s: %w", m.Version, m.Name, err)
		}
	}
	return nil
}

// Capabilities implements storage.Store: one writer connection serializes
// every partition.
func (s *Store) Capabilities() storage.Capabilities {
	return storage.Capabilities{ConcurrentPartitionWriters: false}
}

// Close waits for running calls to finish (the writer for its current
// group transaction, readers for their connections), then closes
// everything. It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		var errs []error
		if s.writerDone != nil {
			<-s.writerDone
			errs = append(errs, s.closeAdvances(), s.writerConn.execOnce(context.Background(), "PRAGMA optimize"), s.writerConn.close())
		}
		for range s.nReaders {
			errs = append(errs, (<-s.readers).close())
		}
		errs = append(errs, s.closeQueries())
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// acquire takes a connection from pool, honouring ctx and Close.
func (s *Store) acquire(ctx context.Context, pool chan *conn) (*conn, error) {
	select {
	case <-s.closed:
		return nil, ErrClosed
	default:
	}
	select {
	case c := <-pool:
		return c, nil
	case <-s.closed:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// withReader runs fn on a reader connection outside any transaction.
func (s *Store) withReader(ctx context.Context, fn func(c *conn) error) error {
	c, err := s.acquire(ctx, s.readers)
	if err != nil {
		return err
	}
	defer func() { s.readers <- c }()
	return fn(c)
}

// readTx runs fn in a deferred transaction on a reader connection: its
// WAL snapshot is fixed by the first read. fn's error or a panic rolls
// back.
func readTx(ctx context.Context, c *conn, fn func() error) (err error) {
	if _, err := c.exec(ctx, "BEGIN"); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			// ROLLBACK fails harmlessly when SQLite already rolled back.
			_, _ = c.exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if err := fn(); err != nil {
		return err
	}
	if _, err := c.exec(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	committed = true
	return nil
}

// translate maps a driver error of a statement on table to a
// *storage.ConstraintError when SQLite's extended result code positively
// identifies a constraint violation; any other error is returned as is.
func translate(err error, table string) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	if fe, ok := fenceError(err); ok {
		return fe
	}
	var kind storage.ConstraintKind
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		kind = storage.ConstraintUnique
	case sqlite3.SQLITE_CONSTRAINT_NOTNULL:
		kind = storage.ConstraintNotNull
	case sqlite3.SQLITE_CONSTRAINT_CHECK:
		kind = storage.ConstraintCheck
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		kind = storage.ConstraintForeignKey
	default:
		return err
	}
	return storage.NewConstraintError(kind, table, err)
}
