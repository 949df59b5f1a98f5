// Package pgstore is the PostgreSQL implementation of storage.Store, on
// pgx v5 and a pgxpool connection pool. It is what a deployment moves to
// when it outgrows one machine: several nodes share one database.
//
// # Connections and schema
//
// Every pooled connection gets search_path = Config.Schema, so all of
// syncnode's tables live in that schema (created if absent). The internal
// tables come from the numbered migrations in migrations/, whose numbers
// match storage/sqlitestore's; migrations and schema installation take a
// transaction-scoped advisory lock per schema, so nodes starting together
// install once. Statements are prepared and cached per connection by pgx.
//
// # The partition write lock
//
// Store.WriteTx begins a READ COMMITTED transaction and locks the
// partition's registry row with SELECT … FOR UPDATE before its callback
// runs; the locked partition is then read by a separate statement, whose
// snapshot is taken after the lock is granted. Different partitions lock
// different rows and write in parallel. Store.ReadTx runs REPEATABLE READ
// READ ONLY: one snapshot for the whole callback.
//
// # Round trips
//
// A push is bounded by round trips and by the commit's WAL flush, not by
// statement cost, so a transaction queues the statements whose results
// its caller does not need (BEGIN, SAVEPOINT and RELEASE, the commit
// append, a push result the locked re-check proved absent) and sends them
// in one pipeline with the next statement that returns something, or with
// COMMIT. A single-change push takes five round trips: BEGIN with the lock
// and the partition read, the locked idempotency re-check, the row read,
// the row upsert, and the append, result and COMMIT together. An error of
// a queued statement surfaces from the call that sent it. A commit append
// is one statement whatever its size: changes and scope-index entries
// travel as arrays (unnest).
//
// Text keys (partition, row id, scope values) use COLLATE "C", so row ids
// order bytewise as in SQLite.
//
// # Plans
//
// Prepared statements run on cached generic plans, which PostgreSQL only
// re-plans when a table's statistics change. The store therefore analyzes
// a table in the background each time its writes grow fourfold (see
// analyzer), so a plan made on an empty table — a scope index walked for a
// key lookup, say — does not outlive the table's growth even where
// autovacuum is off.
package pgstore
