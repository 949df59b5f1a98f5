// Package segments builds and stores bootstrap segments (SPEC.md §5): the
// immutable, content-addressed pages a fresh client bootstraps a table
// from, built once and reused by every client with the same key.
//
// # Identity
//
// A segment is named by its content address, "sha256:" + the lowercase hex
// SHA-256 of its uncompressed bytes (§5.1). Building writes the SSG2 rows
// segment (WriteRows, ssp2.SegmentWriter) into a Spool, which hashes the
// bytes on their way in and moves them from memory to a temporary file
// past a threshold, so a page of any size costs bounded memory. The same
// rows always give the same bytes, hence the same address.
//
// # Bytes and publications
//
// The bytes live once per address in a JetStream Object Store bucket
// (sync_segments, or sync_segments_<instance> for isolated instances),
// as the object sha256-<hex>. The bucket has no TTL: the Object Store
// expires chunks per message, before their meta, and a reader of such an
// object hangs.
//
// What may be downloaded is decided by publications, kept in SQL
// (storage.SegmentIndex): one row per grant of an address under a key —
// partition, log epoch, table, schema version, media type, scope digest,
// as-of commit seq, page start and page size — with its own expiry
// (default 24 h). One address may carry many publications: the same bytes
// under two scope digests, partitions or epochs are two grants, and each
// stays downloadable until it expires on its own (SSP2-NOTES §9 item 4). A
// download is authorized against the caller's partition and current epoch
// only (Publications, Grants, Live): an unknown segment or one published
// only elsewhere is sync.not_found, one whose matching grants all expired
// sync.segment_expired.
//
// # Put without orphans
//
// The Object Store has no conditional put: racing puts of one name each
// upload every chunk, and the losers' chunks are orphaned. Every change of
// an address's object therefore runs under the address's claim — a
// per-node lock plus a KV key (upload.<bucket>.<hex>, per-key TTL) in the
// History=1 lease bucket. Under the claim, Put reads the stored object's
// digest and size: equal bytes are not uploaded again, other bytes are a
// content collision (sync.storage.content_collision), refused loudly.
// Then the publication is recorded in one SQL transaction, which refuses
// an address recorded with another length. Prune deletes expired
// publications, then, under the claim, each address left with none: its
// index row first, then its object. GC collects what crashes leave: chunk
// subjects no live object references and objects with no index row, once
// they are older than a grace period that exceeds the upload timeout, so
// nothing in flight is collected.
//
// # Reads
//
// Open streams a segment one chunk per direct get (no consumer, no
// deadline on the whole read) and verifies it: the recorded digest must be
// the address's, the chunks must add up to the recorded size and count,
// and the bytes must hash to the address; a corrupted object fails the
// read with ErrCorrupt. Bytes serves small, hot segments through a
// bounded in-memory LRU, and concurrent reads of one segment share one
// fetch, so a bootstrap storm reads each segment once per node.
//
// # Build once under a storm
//
// GetOrBuild answers from an in-memory key cache, then from SQL (a read:
// no write reaches SQLite's single writer on a reuse), and otherwise
// builds. Concurrent calls for one key on one node share one build and
// get the same publication; across nodes the content address makes a
// duplicate build harmless — the bytes are stored once, the publications
// merge. A publication is reused only while it has more than ReuseMargin
// left, so a client handed a reference has time to fetch it.
package segments
