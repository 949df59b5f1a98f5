package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/blobcore"
	"github.com/syncnode/syncnode/storage/internal/gatecore"
	"github.com/syncnode/syncnode/storage/internal/migrate"
	"github.com/syncnode/syncnode/storage/internal/segcore"
	"github.com/syncnode/syncnode/storage/internal/startcache"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Store is the PostgreSQL implementation of storage.Store.
type Store struct {
	cfg        Config
	pool       *pgxpool.Pool
	queries    *pgxpool.Pool // registered queries' connections (query.go)
	migrations []migrate.Migration
	schema     atomic.Pointer[installed]
	analyzer   *analyzer
	groups     writeGroups     // the open write group of each partition (group.go)
	advances   pendingAdvances // pending cursor advances (advance.go)
	hints      idemHints       // keys whose optimistic lookup missed (hints.go)
	// The sole writer's lock and the start cache it allows
	// (solewriter.go, start.go).
	sole  soleWriter
	cache startcache.Cache
	// The serve gate but for EnsureSchemaWithCheckpoints (gate.go), and
	// the segment index, written once over this store's SQL.
	*gateStore
	*segmentIndex
	*blobIndex
	closeOnce sync.Once
}

var _ storage.Store = (*Store)(nil)

// Unexported names for the embedded implementations, so that Store gains
// their methods and no field.
type (
	gateStore    = gatecore.Gate
	segmentIndex = segcore.Index
	blobIndex    = blobcore.Index
)

// Advisory lock keys (pg_advisory_xact_lock(key, hashtext(schema))):
// migrations and schema installation of one schema serialize across
// nodes.
const lockKeySchema = 0x73796e63 // "sync"

// Open connects a pool to cfg.URL with search_path set to cfg.Schema
// (created if absent), applies the internal migrations, and returns the
// store. Application tables are installed by EnsureSchema.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	return open(ctx, cfg, nil)
}

// open is Open with dial, when not nil (tests), wrapping the pool's
// dialer: the round-trip test counts what the connections send.
func open(ctx context.Context, cfg Config, dial func(pgconn.DialFunc) pgconn.DialFunc) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	migrations, err := migrate.Load(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("pgstore: parse URL: %w", err)
	}
	pc.MaxConns = cfg.MaxConns
	pc.ConnConfig.RuntimeParams["search_path"] = cfg.Schema
	if dial != nil {
		pc.ConnConfig.DialFunc = dial(pc.ConnConfig.DialFunc)
	}
	s := &Store{cfg: cfg, migrations: migrations}
	if cfg.SoleWriter {
		if err := s.takeSole(ctx, pc.ConnConfig.Copy()); err != nil {
			return nil, err
		}
	}
	// The registered queries' connections are read-only: they take no
	// writers' lock.
	queries, err := newQueryPool(ctx, pc)
	if err != nil {
		s.closeSole()
		return nil, err
	}
	pc.AfterConnect = s.afterConnect
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		queries.Close()
		s.closeSole()
		return nil, fmt.Errorf("pgstore: connect: %w", err)
	}
	s.pool, s.queries = pool, queries
	s.analyzer = newAnalyzer(s)
	s.advances.FlushFunc = s.flushAdvances
	s.gateStore = gatecore.New(gateSQL, runner{s})
	s.segmentIndex = segcore.New(segmentSQL, runner{s})
	s.blobIndex = blobcore.New(blobSQL, runner{s})
	// Nodes starting together race on IF NOT EXISTS: the loser gets a
	// unique violation on the catalog, and the schema exists.
	var pe *pgconn.PgError
	if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+quote(cfg.Schema)); err != nil && !(errors.As(err, &pe) && pe.Code == "23505") {
		pool.Close()
		queries.Close()
		s.closeSole()
		return nil, fmt.Errorf("pgstore: create schema: %w", err)
	}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		queries.Close()
		s.closeSole()
		return nil, err
	}
	return s, nil
}

func quote(ident string) string { return `"` + ident + `"` }

// migrate applies the pending internal migrations in one transaction,
// under an advisory lock so that nodes starting together do not race.
func (s *Store) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return applyMigrations(ctx, tx, s.migrations)
	})
}

// applyMigrations runs inside a transaction the caller owns.
func applyMigrations(ctx context.Context, tx pgx.Tx, ms []migrate.Migration) error {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext(current_schema()))", lockKeySchema); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS sync_migrations (
		version INTEGER NOT NULL PRIMARY KEY,
		name    TEXT    NOT NULL
	)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM sync_migrations").Scan(&current); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, m := range ms {
		if m.Version <= current {
			continue
		}
		// The simple protocol runs a file of several statements.
		if _, err := tx.Exec(ctx, m.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("migrate %03d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO sync_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
			return fmt.Errorf("migrate %03d_%s: %w", m.Version, m.Name, err)
		}
	}
	return nil
}

// Capabilities implements storage.Store: each partition has its own row
// lock, so different partitions write in parallel.
func (s *Store) Capabilities() storage.Capabilities {
	return storage.Capabilities{ConcurrentPartitionWriters: true}
}

// Close waits for background statistics runs, then closes the pool,
// waiting for acquired connections to be released. It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closeAdvances()
		s.analyzer.close()
		s.pool.Close()
		s.queries.Close()
		s.closeSole()
	})
	return nil
}

// translate maps a driver error of a statement on table to a
// *storage.ConstraintError when its SQLSTATE positively identifies a
// constraint violation (class 23); any other error is returned as is.
func translate(err error, table string) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	if fe, ok := fenceError(pe, err); ok {
		return fe
	}
	var kind storage.ConstraintKind
	switch pe.Code {
	case "23505": // unique_violation
		kind = storage.ConstraintUnique
	case "23502": // not_null_violation
		kind = storage.ConstraintNotNull
	case "23514": // check_violation
		kind = storage.ConstraintCheck
	case "23503": // foreign_key_violation
		kind = storage.ConstraintForeignKey
	default:
		return err
	}
	if table == "" {
		table = pe.TableName
	}
	return storage.NewConstraintError(kind, table, err)
}
