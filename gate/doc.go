// Package gate is syncnode's serve gate: it decides, per request, whether
// a node may serve a partition, and it drives the backfill checkpoints of
// schema migrations and the tokens that tell every node about them.
//
// # The refusal rule
//
// A node refuses a partition (sync.schema_not_ready, HTTP 503, retryable)
// when, in SQL:
//
//   - the stored schema version is not the build's (newer: an upgrade is
//     rolling out; older: the database was restored — restart to migrate);
//   - an unactivated checkpoint of the running schema version exists that
//     this process did not declare (another process is backfilling it);
//   - the gate token changed across the request: the schema version, the
//     log epoch, or their revisions. Revisions count changes, so a value
//     that went V → W → V between two reads still refuses.
//
// Every request is admitted once (Gate.Admit) and checked again inside
// each transaction that serves it (Ticket.Check), on that transaction's
// own connection and snapshot: a push inside its write transaction, each
// pull section inside its read transaction, an authoritative write inside
// its write transaction. A segment download has no transaction and reads
// the gate in SQL (Gate.Verify). The SQL read is never cached.
//
// # Checkpoint lifecycle
//
//	state         event                              next
//	(absent)      declare                            declared (writer fence raised)
//	declared      claim: owner epoch + 1             backfilling
//	backfilling   claim: owner epoch + 1             backfilling (the old owner is superseded)
//	backfilling   advance by the owner (CAS)         backfilling (watermark, observed rows)
//	declared or   activate by the owner, and:
//	backfilling     no source change above the       activated (terminal within its
//	                watermark                          schema version)
//	                a source change above it         unchanged; outcome stale
//	                pruning passed the watermark     unchanged; outcome unverifiable
//
// Declaring creates the row and raises the partition's writer fence to the
// checkpoint's schema version in one transaction, so from then on no
// older build can commit to the partition. Claiming makes the caller the
// owner; racing claims get distinct epochs and the last one owns.
// Advancing records the watermark (the highest source commitSeq the
// projection was derived from) and the observed rows, only for the
// current owner, inside the backfill batch's own write transaction.
// Activating, under the partition write lock, returns activated; stale
// when a source table changed above the watermark (the backfill must run
// again); unverifiable when pruning passed the watermark (a pruned window
// is never reported clean). A build declares the checkpoints it knows how
// to backfill at startup (storage.GateStore.EnsureSchemaWithCheckpoints);
// a start with an undeclared unactivated checkpoint of its version fails
// with sync.storage.checkpoint_incomplete.
//
// # Tokens in JetStream KV
//
// SQL holds the truth; the KV bucket sync_gate holds a token per partition
// (gate.<partition>: schema version, log epoch, revisions, pending
// checkpoints) and one node-wide (schema.current). After each transition
// the gate rewrites the token by compare-and-set on its KV revision: it
// reads the KV entry, then SQL, and writes only when they differ, so a
// token is always at least as new as any it replaces and an unchanged
// state writes nothing. Every node watches the bucket. A watched change
// invalidates the node's view of the partition, re-reads SQL and calls
// Config.OnChange (the hook that wakes realtime sessions). While the
// watcher is live the gate admits from that view; the checks inside the
// serving transactions stay in SQL. When the node cannot see KV (no
// connection, a reconnect not yet caught up, the watcher down) the gate
// admits from SQL alone: it never serves on a stale token. Tokens can be
// rebuilt from SQL at any time (Gate.Reconcile, run at start and
// periodically).
//
// Migration events (checkpoint_declared, _claimed, _advanced, _activated,
// _stale, _unverifiable, epoch_rotated on syncctl.<partition>.<event>;
// schema_migrated on syncctl.=global.schema_migrated) go to the
// SYNC_CONTROL stream as CloudEvents. They are notifications: a lost event
// is logged and counted, never the only record of a transition.
package gate
