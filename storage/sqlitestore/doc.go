// Package sqlitestore is the SQLite implementation of storage.Store, on
// modernc.org/sqlite (pure Go). It is syncnode's embedded default: one
// database file in the data directory.
//
// # Connections
//
// A Store holds one writer connection and a pool of reader connections
// (Config.Readers), each opened with its PRAGMAs in the DSN so every
// connection gets them: busy_timeout first, then journal_mode=WAL,
// synchronous, foreign_keys=ON; readers add query_only=ON. Each connection
// keeps its prepared statements for the life of the Store.
//
// The writer connection is the partition write lock: Store.WriteTx takes
// it (queueing behind any running write transaction, of any partition)
// and starts with BEGIN IMMEDIATE, so SQLite's database write lock is held
// from the first statement and no transaction fails to upgrade later. Other
// writes (partition creation and touch, client records) also go through
// the writer, in autocommit mode. Readers run in WAL snapshots and never
// wait for the writer.
//
// # Durability
//
// WAL mode with synchronous=FULL (the default) fsyncs the WAL before every
// COMMIT returns, so an acknowledged commit survives a power loss or OS
// crash. synchronous=NORMAL fsyncs only when the WAL is checkpointed into
// the database: a process crash still loses nothing (the WAL is in the OS
// page cache), but a power loss or OS crash may drop the most recent
// transactions — all of each, never part of one — while the database stays
// consistent and uncorrupted. NORMAL therefore trades the durability of the
// last acknowledged commits, which clients may then hold while the server
// does not, for commit latency. Deployments that choose NORMAL must treat
// an unclean host shutdown like a backup restore and rotate every
// partition's log epoch (Store.PartitionRotateEpoch).
//
// # Tables
//
// Internal tables come from the numbered migrations in migrations/, whose
// numbers match storage/pgstore's. Application tables are STRICT and
// WITHOUT ROWID, clustered by (_sync_partition, _sync_row_id); booleans are
// stored as INTEGER 0/1.
package sqlitestore
