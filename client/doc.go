// Package client is a Go SSP2 client (wire version 3, or 2 with
// Config.WireVersion): it pushes an outbox of commits, pulls subscriptions into a local replica, bootstraps
// them from segments delivered inline or downloaded by reference, and
// survives restarts through a small persistence interface. Tests,
// benchmarks, load generators, the `syncnode client` commands and an edge
// node's upstream sync use it.
//
// # Rounds
//
// Sync runs one round: one POST /sync carrying REQ_HEADER (the client id,
// the schema version and the accepted log epoch), the head of the outbox
// as PUSH_COMMIT frames, PULL_HEADER, and every registered subscription
// with its cursor and resume token. The response is decoded and applied
// as it streams in (SPEC.md §1.4):
//
//   - PUSH_RESULT: applied and cached commits leave the outbox; rejected
//     ones leave it and are reported as *Rejection (conflict records
//     decoded); a retryable sync.idempotency_cache_miss stays queued.
//     Commits without an answer (a lost response, a transport failure)
//     stay queued and are pushed again under the same clientCommitId, so
//     a replay is answered cached and never applies twice.
//   - Each COMMIT frame and each segment block is applied to the replica
//     as one unit. A subscription's cursor, resume token and effective
//     scopes are persisted only at its SUB_END; an ERROR frame, a decode
//     error or a truncated stream abandons the open subscription without
//     persisting anything of it (§1.4 rule 5), and the next round re-pulls
//     the same window.
//   - A fresh bootstrap (cursor -1, no token) clears the subscription's
//     rows in scope before its first page (§5.6). SEGMENT_REF pages are
//     fetched from GET /segments/{id} with the requested scopes in
//     X-Syncular-Scopes, verified against their content address and
//     applied like inline ones; any failure abandons the subscription.
//   - revoked purges the rows matching the last effective scopes and
//     drops queued commits that write into them (§3.3); reset
//     (sync.cursor_expired) restarts the subscription from -1.
//   - resetRequired adopts the new log epoch and discards rows, cursors
//     and tokens, keeping the client id and the outbox (§2.1); a client
//     without an epoch acquires one first. requiredSchemaVersion stops the
//     client with a *SchemaUnsupportedError.
//
// SyncUntilIdle repeats rounds until one delivers no commits while the
// outbox is empty and no subscription is bootstrapping.
//
// # Realtime
//
// NewRealtime returns the client's realtime session (SPEC.md §8); Start
// keeps a WebSocket to GET {BaseURL}/realtime open. While it is
// connected every round — Sync, SyncUntilIdle, the session's own — rides
// the socket as 0x01 chunks (§8.7): the request bytes of POST /sync, the
// response read by the same streaming apply. Otherwise rounds go to
// POST /sync. After every round the socket acknowledges the lowest
// cursor of the active, synced subscriptions (§8.2).
//
// A delta (tag 0x00) is applied like a pull response, under the round
// lock, in arrival order, and acknowledged at its highest
// SUB_END.nextCursor. Contiguity is judged per connection, as the server
// guarantees it: deltas apply only while none was dropped since a round
// that completed on the connection; a section applies only to a
// subscription that is active, synced and not bootstrapping, and a
// section whose commit the cursor already covers is a duplicate, skipped.
// Anything else that does not apply — a delta under another log epoch,
// one that fails to decode, one the queue had no room for, a section for
// a subscription not synced — is not applied over the gap: it sets the
// sync-needed signal, like hello.requiresSync and every wake-up, and the
// session runs a round (until idle) after up to WakeJitter.
//
// The session reconnects with exponential backoff and jitter, and when
// it hears nothing for HeartbeatTimeout (twice the server's heartbeat).
// Publish sets this client's presence on a scope key (sent again after
// every reconnect); Peers and PresenceFunc report the others'. Stop
// closes the socket with a normal closure. Status and Stats tell what the
// session is doing; AppliedFunc in the client's Config reports every
// round and delta that changed the replica.
//
// # Writes
//
// Upsert writes a full row, Patch some of its columns, Delete a row. At
// wire version 3 an upsert is a sparse row: a Patch presents exactly its
// columns, an Upsert of a row the client holds the columns that differ
// from the row it expects the server to hold (the replica with the queued
// commits applied), so concurrent edits of different columns of one row
// both apply. A conflict (*Rejection with Conflict) then names the moved
// columns in Conflict.Columns. At wire version 2 every upsert is a full
// row and conflicts are per row; a Patch is filled from the expected row.
// A full row queued at version 2 is sent at version 3 as the sparse row
// of every column; a client restarted at version 2 refuses an outbox
// holding version 3 patches.
//
// # Replica and persistence
//
// The replica holds, per table, rowId → serverVersion and the row's codec
// bytes, and decodes rows by column name on read (Rows, Row). It holds
// server state only: queued commits are not overlaid on it. The outbox,
// the epoch and the subscriptions' progress go through a Store: a
// MemoryStore, or a FileStore (one JSON file, rows included, replaced
// atomically with fsync) for processes that restart.
//
// Errors the server answers are *Error (code, HTTP status, category);
// match them with errors.Is(err, &client.Error{Code: ssp2.CodeForbidden}).
package client
