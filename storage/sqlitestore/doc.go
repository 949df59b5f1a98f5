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
// The writer connection is the partition write lock. One coordinator
// goroutine drives it, and every write — a Store.WriteTx callback, a
// client record update, a schema installation — runs as a member of a
// group transaction: members run one at a time on their own goroutines,
// queueing behind any running member of any partition. A group begins with
// BEGIN IMMEDIATE, so SQLite's database write lock is held from the first
// statement and no transaction fails to upgrade later. When a member
// finishes and others are already waiting, the next one runs in the same
// transaction (inside a savepoint, so its failure undoes only its own
// writes); when nobody waits, the group commits once and every member's
// call returns. One fsync thus covers all the pushes that arrived during
// the previous one, and nothing is acknowledged before its COMMIT. Readers
// run in WAL snapshots and never wait for the writer.
//
// Connections are used at the driver level, without database/sql: the
// store owns them for life, and the per-statement bookkeeping of
// database/sql (and the watcher goroutine a cancellable context costs the
// driver) is as expensive as a short statement. Cancellation is honoured
// between statements.
//
// A statement takes a bound limit as "LIMIT +?", never "LIMIT ?". Since
// SQLite 3.54 a bare "LIMIT ?" is planned with the value bound at
// preparation, and binding a different value expires the statement, so
// the next step parses and plans it again. The cached statements are
// shared by every caller on a connection, and callers ask for different
// limits (each client's pull limit, page sizes), so a mixed workload
// re-prepared the pull window's candidate query on nearly every
// execution. The unary plus makes the limit an expression evaluated at
// run time, as every SQLite before 3.54 treated it: one plan per
// statement.
//
// The same holds for every plan: no statement's plan may depend on a
// bound value, since binding a parameter the planner looked at (a
// "col = ?" matched against a partial index's WHERE, a LIKE or GLOB
// pattern) expires the statement on every bind. Constants such as the
// reaction statuses of the partial indexes are written into the SQL.
// (SQLITE_DBCONFIG_ENABLE_QPSG would pin plans, but modernc.org/sqlite
// has no way to set it.) TestSteadyRoundsCompileNothing runs steady push
// and pull rounds and fails on any statement compiled again.
//
// # Durability
//
// WAL mode with synchronous=FULL (the default) syncs the WAL before every
// COMMIT returns, so an acknowledged commit survives a power loss or OS
// crash. The sync is fdatasync(2) (Open switches modernc.org/sqlite to it,
// process-wide): the WAL's data and size reach the disk without the inode
// timestamp update that makes fsync(2) wait for an ext4 journal commit. synchronous=NORMAL fsyncs only when the WAL is checkpointed into
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
