package sqlitestore

import (
	"context"
	"database/sql"
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
	"github.com/syncnode/syncnode/storage/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// ErrClosed is returned by every method after Close.
var ErrClosed = errors.New("sqlitestore: store is closed")

// Store is the SQLite implementation of storage.Store.
type Store struct {
	cfg        Config
	writerDB   *sql.DB
	readerDB   *sql.DB
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
}

var _ storage.Store = (*Store)(nil)

// conn is one pooled connection with its prepared-statement cache. A conn
// is used by one goroutine at a time: whoever took it from its channel.
type conn struct {
	c     *sql.Conn
	stmts map[string]*sql.Stmt
}

// Statements run under a context that is never cancelled: with a
// cancellable one, the driver and database/sql each start a watcher
// goroutine per statement, which costs more than most of our statements.
// Cancellation is honoured between statements (and while waiting for a
// connection) instead; every statement is short.
var stmtCtx = context.Background()

// stmt returns the prepared statement for q, preparing it on first use.
func (c *conn) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s, ok := c.stmts[q]; ok {
		return s, nil
	}
	s, err := c.c.PrepareContext(stmtCtx, q)
	if err != nil {
		return nil, err
	}
	c.stmts[q] = s
	return s, nil
}

func (c *conn) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	s, err := c.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return s.ExecContext(stmtCtx, args...)
}

func (c *conn) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	s, err := c.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return s.QueryContext(stmtCtx, args...)
}

// queryRow runs q and scans its first row into dest; ok=false when there
// is no row.
func (c *conn) queryRow(ctx context.Context, q string, args []any, dest ...any) (ok bool, err error) {
	s, err := c.stmt(ctx, q)
	if err != nil {
		return false, err
	}
	err = s.QueryRowContext(stmtCtx, args...).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (c *conn) close() error {
	var errs []error
	for _, s := range c.stmts {
		errs = append(errs, s.Close())
	}
	errs = append(errs, c.c.Close())
	return errors.Join(errs...)
}

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
	q.Add("_pragma", "cache_size(-32000)")
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
	}
	if err := s.open(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) open(ctx context.Context) error {
	var err error
	// The writer opens first so the WAL switch happens once, before any
	// reader connects.
	if s.writerDB, err = sql.Open("sqlite", dsn(s.cfg, false)); err != nil {
		return fmt.Errorf("open sqlite: %w", err)
	}
	s.writerDB.SetMaxOpenConns(1)
	w, err := s.writerDB.Conn(ctx)
	if err != nil {
		return fmt.Errorf("open sqlite: %w", err)
	}
	wc := &conn{c: w, stmts: map[string]*sql.Stmt{}}
	if err := s.migrate(ctx, wc); err != nil {
		_ = wc.close()
		return err
	}
	s.writerDone = make(chan struct{})
	go s.runWriter(wc)

	if s.readerDB, err = sql.Open("sqlite", dsn(s.cfg, true)); err != nil {
		return fmt.Errorf("open sqlite readers: %w", err)
	}
	s.readerDB.SetMaxOpenConns(s.cfg.Readers)
	s.readerDB.SetMaxIdleConns(s.cfg.Readers)
	for range s.cfg.Readers {
		r, err := s.readerDB.Conn(ctx)
		if err != nil {
			return fmt.Errorf("open sqlite readers: %w", err)
		}
		s.readers <- &conn{c: r, stmts: map[string]*sql.Stmt{}}
		s.nReaders++
	}
	return nil
}

// migrate applies the pending internal migrations in one IMMEDIATE
// transaction, so two processes opening one file do not race.
func (s *Store) migrate(ctx context.Context, c *conn) (err error) {
	if _, err := c.c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer func() {
		if err != nil {
			_, _ = c.c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if err := applyMigrations(ctx, c, s.migrations); err != nil {
		return err
	}
	if _, err := c.c.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// applyMigrations runs inside a transaction the caller owns.
func applyMigrations(ctx context.Context, c *conn, ms []migrate.Migration) error {
	if _, err := c.c.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS sync_migrations (
		version INTEGER NOT NULL PRIMARY KEY,
		name    TEXT    NOT NULL
	) STRICT`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var current int
	if err := c.c.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM sync_migrations").Scan(&current); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, m := range ms {
		if m.Version <= current {
			continue
		}
		if _, err := c.c.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("migrate %03d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := c.c.ExecContext(ctx, "INSERT INTO sync_migrations (version, name) VALUES (?, ?)", m.Version, m.Name); err != nil {
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
			errs = append(errs, s.writerConn.close())
		}
		for range s.nReaders {
			errs = append(errs, (<-s.readers).close())
		}
		if s.readerDB != nil {
			errs = append(errs, s.readerDB.Close())
		}
		if s.writerDB != nil {
			errs = append(errs, s.writerDB.Close())
		}
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
