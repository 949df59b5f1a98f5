// Package storage defines the Store: syncnode's source of truth in SQL.
//
// An acknowledged commit lives in the Store; everything on the bus and in
// the object store can be rebuilt from it. Two implementations exist,
// storage/sqlitestore (modernc.org/sqlite, the embedded default) and
// storage/pgstore (pgx v5), and both must pass the one contract suite in
// storage/storagetest.
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
// # Tables
//
// Internal tables are prefixed sync_. Each schema table becomes one real
// application table of the same name with its typed columns plus the
// internal columns _sync_partition, _sync_row_id, _sync_server_version,
// _sync_scopes (JSON, variable → value) and _sync_payload (the row in SSP2
// row-codec encoding, served as-is to pulls and segments), primary key
// (_sync_partition, _sync_row_id).
package storage
