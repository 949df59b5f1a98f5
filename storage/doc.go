// Package storage defines the Store: syncnode's source of truth in SQL.
//
// An acknowledged commit lives in the Store; everything on the bus and in
// the object store can be rebuilt from it. Two implementations exist,
// storage/sqlitestore (modernc.org/sqlite, the embedded default) and
// storage/pgstore (pgx v5), and both must pass the one contract suite in
// storage/storagetest.
//
// # One rule, two dialects
//
// A store holds its SQL, its locking and its connections; what to read,
// what to refuse and what to write is decided once, in packages under
// storage/internal, over the statements a store supplies and the
// transactions it runs them in (sqlexec): gatecore is the serve gate
// (GateStore), segcore the segment index (SegmentIndex), commitlog the
// commit log's rules (validation, pull windows, pruning), schemaplan the
// schema installation plan, and admincore the checks of Admin.
//
// # The partition write lock
//
// Every write that must serialize with pushes to a partition runs inside
// Store.WriteTx, which takes the partition write lock before its callback
// runs and holds it until commit or rollback: SQLite uses a single writer
// connection and BEGIN IMMEDIATE; PostgreSQL locks the partition's registry
// row with SELECT … FOR UPDATE. A plain ReadTx takes no lock. The push path
// must enter WriteTx before its first read of rows or idempotency records,
// so two overlapping deliveries of one commit run exactly one pipeline
// (SPEC.md §6.3).
//
// # Transactions
//
// A database error inside a transaction aborts it, as PostgreSQL does
// natively; both stores then answer ErrTxAborted until a Savepoint taken
// before the error is rolled back, so the push path takes a savepoint per
// commit, rolls a rejected commit back to it and persists the rejection
// under the same lock. Constraint violations are recognized positively
// from the engine's structured codes and returned as *ConstraintError.
// Behaviour that legitimately differs between the stores is declared in
// Capabilities.
//
// # Tables
//
// Internal tables are prefixed sync_. Each schema table becomes one real
// application table of the same name with its typed columns plus the
// internal columns _sync_partition, _sync_row_id, _sync_server_version,
// _sync_scopes (JSON, variable → value), _sync_payload (the row in SSP2
// row-codec encoding, served as-is to pulls and segments) and
// _sync_column_versions (the columns' versions, SPEC.md §2.2; see
// DecodeColumnVersions), primary key (_sync_partition, _sync_row_id), an
// index on (_sync_partition, column, _sync_row_id) per scope column and
// per reference column, and one per declared index. The commit log is
// sync_commits and sync_changes; sync_scope_index holds one row per commit
// and distinct (table, variable, value), so a pull window finds its
// candidate commits without scanning the log (SPEC.md §3.1).
// sync_tombstones holds a row's last applied delete above the horizon
// (SPEC.md §6.2). A partition's max commitSeq is that of its newest
// commit: pruning always keeps at least one.
package storage
