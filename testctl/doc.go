// Package testctl is the test-control surface of `syncnode serve
// --test-control`: the host-control API that lets an external conformance
// harness (Syncular's own catalog, run by its TypeScript client) drive a
// running node over HTTP. It is never mounted on a normal node, and the
// serve command refuses it unless the listener is on a loopback address.
//
// # Instances
//
// Each instance is a real node (package node, the code `syncnode serve`
// runs) sharing only the process and the embedded NATS server: its own
// SQLite file (in a directory of its own, removed on DELETE), its own
// partition (fixed at creation), its own virtual clock (engine, segment
// TTLs, checkpoints, retention and realtime timestamps all read it; it
// moves only by clock/advance), its own limits, and its own serve gate,
// commit relay, segment store, realtime hub and reaction runner in the bus
// namespace i-<id> (streams i-<id>_SYNC_COMMITS and i-<id>_SYNC_CONTROL,
// buckets i-<id>_sync_gate, i-<id>_sync_leases and i-<id>_sync_segments,
// subjects i-<id>.sync.…, i-<id>.syncrt.… and i-<id>.syncreact.…, all
// deleted with the instance), so two instances with the same partition
// name share nothing. The hub and the runner take the serving node's
// settings (Config.Realtime, Config.Reactions); an instance plans no
// reactions, and runs neither the admin API nor host hooks, which answer
// on production subjects. Its protocol routes are mounted at /i/{id}:
// POST /i/{id}/sync, GET /i/{id}/segments/{segmentId}, PUT and GET
// /i/{id}/blobs/{blobId}, POST /i/{id}/blobs/{blobId}/upload-grant and GET
// /i/{id}/realtime, served by the node's handler (package httpapi), so
// errors keep the SSP2 JSON shape; a refused realtime connect is answered
// in band (the upgrade completes, an {"event":"error"} message carries the
// error, the socket closes with 1008). The node has no listener of its
// own.
//
// Authentication is replaced, in this mode only, by the header
// X-Syncular-Test-Actor: <actorId> (or the query parameter actor=, for a
// WebSocket upgrade); a request without one is answered 401
// sync.auth_required. An actor's allowed scopes are what allowed-scopes
// granted it, {} without a grant (subscriptions revoked, writes denied),
// with "*" meaning any value.
//
// # Control API (JSON)
//
//	GET    /__test/capabilities                       → ["validators","commit-validators","realtime","blobs","signed-urls","blob-presign",…]
//	POST   /__test/instances {schema, partition, nowMs, limits?, signedUrls?} → {"id"}
//	DELETE /__test/i/{id}                             → {}
//	POST   /__test/i/{id}/allowed-scopes {"actorId","allowed":{var:[values|"*"]}} → {}
//	GET    /__test/i/{id}/rows/{table}                → [{"rowId","version","values","scopes"}] by rowId
//	GET    /__test/i/{id}/max-commit-seq              → {"value"}
//	GET    /__test/i/{id}/horizon-seq                 → {"value"}
//	GET    /__test/i/{id}/clock                       → {"nowMs"}
//	POST   /__test/i/{id}/clock/advance {"ms"}         → {"nowMs"}
//	POST   /__test/i/{id}/prune {"retention"?:{"activeWindowMs","ageForceMs","minRetainedCommits"}} → {"horizonSeq"}
//	POST   /__test/i/{id}/resolver {"failing"?, "outage"?} → {}
//	POST   /__test/i/{id}/validators {"specs":[{"table","rule"}]}  → {}   ([] clears)
//	POST   /__test/i/{id}/commit-validator {"spec"?}   → {}   (absent clears)
//	POST   /__test/i/{id}/signed-url-ttl {"ttlSeconds"} → {}  (0..900; 0 mints urls expiring at issuance)
//	POST   /__test/i/{id}/blob-presign {"enabled"}      → {}  (needs signedUrls; off at creation)
//
// limits may carry maxOperationsPerRequest, inlineSegmentMaxBytes (absent:
// the default; 0: never inline a page the client accepts by reference),
// segmentTtlMs (at least 1000), maxDeltaBytes (at least 1024),
// maxPresenceBytes and maxCascadeOperationsPerCommit (absent or 0: the
// node's setting). signedUrls is true, false or {"ttlSeconds": 1..900}:
// SEGMENT_REFs then carry signed urls for pulls with accept bit 3, under
// a key of the instance's own, checked on the instance's clock. With
// blob-presign enabled, an upload grant answers {"url","urlExpiresAtMs"}
// (a PUT of at most byteLength bytes to /i/{id}/blobs/{blobId}?st=… that
// needs no actor), an authorized GET /i/{id}/blobs/{blobId} answers the
// same shape instead of the bytes, and the url serves them to anyone
// until it expires (tampered, expired or foreign: 403 blob.forbidden);
// signed-url-ttl sets those urls' lifetime too. leases
// are refused: this build has none. In rows, version is the
// stored server_version, scopes the stored scope values, and values the
// decoded row: strings, numbers, booleans, null, json columns as their
// raw JSON text, bytes and crdt columns as {"$bytes": "<hex>"}.
// Retention fields left out of prune take the protocol defaults (14 days,
// 30 days, 1000 commits); the ones given are taken literally, zero
// included. A failing resolver, or one in outage (leases do not exist, so
// an outage fails the same way), revokes every subscription and refuses
// every write with sync.forbidden. Validator rules are those of package
// rules, plus {"kind":"unexpectedError","message"} for the catalog's
// non-rejection failure path; reserved or empty codes are refused with
// 400. Control errors are {"error": "..."} with status 400 (bad request)
// or 404 (unknown instance or table).
package testctl
