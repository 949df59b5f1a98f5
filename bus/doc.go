// Package bus is syncnode's event bus on NATS: the only place where
// subjects, stream names, bucket names and KV keys are built (Names); the
// CloudEvents encoding of commits (Encoder); the streams (EnsureStreams);
// and the subscriptions the node reacts to. Package relay publishes the
// commit log with this encoding.
//
// # Namespaces
//
// Every stream, bucket and subject name comes from a Names value. The
// zero Names is the production namespace, whose names are the ones below.
// NewNames(prefix) builds an isolated namespace on the same server:
// streams and buckets become <prefix>_<name>, subjects <prefix>.<subject>
// (<prefix>_SYNC_COMMITS on <prefix>.sync.*.commit.*, <prefix>_sync_gate,
// …), reaction and presence subjects included. Each test-control instance
// is a node in the namespace i-<id>. Components take the namespace in
// their Config (Names); the functions here that build or read names of a
// namespace take it as an argument. The admin and hook subjects are per
// deployment and have no namespace (admin.go).
//
// # Subject grammar
//
//	subject        = commit-subject | control-subject | reaction-subject | presence-subject | admin-subject | hook-subject
//	commit-subject = "sync." partition ".commit." table       (stream SYNC_COMMITS, sync.*.commit.*)
//	control-subject= "syncctl." ( partition | "=global" ) "." event  (stream SYNC_CONTROL, syncctl.>)
//	reaction-subject = "syncreact.work." type | "syncreact.event." partition "." event "." type  (core NATS, reactions.go)
//	presence-subject = "syncrt." ( partition ".presence" | "=node.alive" | "=node.sync" )     (core NATS, realtime.go)
//	admin-subject  = "syncnode.admin." group "." op            (micro service syncnode, admin.go)
//	hook-subject   = "syncnode.hook." ( ( "scopes" | "validate" ) "." partition | "token" )
//	partition      = escaped | hashed
//	escaped        = "=" | 1*( keep | "=" HEX HEX )           (at most 64 bytes)
//	keep           = "A"-"Z" | "a"-"z" | "0"-"9" | "_" | "-"
//	HEX            = "0"-"9" | "A"-"F"
//	hashed         = "h_" 26( "A"-"Z" | "2"-"7" )             (base32 of SHA-256 of the id)
//	table          = ( ALPHA | "_" ) *( ALPHA | DIGIT | "_" )  (at most 63 bytes)
//	event          = 1*( "a"-"z" | "0"-"9" | "_" | "-" )
//
// A partition id (valid UTF-8, at most MaxPartitionIDBytes bytes) is
// escaped byte by byte: [A-Za-z0-9_-] is kept, every other byte, '='
// included, becomes =XX; the empty id is "="; an id starting with "h_" has
// its 'h' escaped (=68_…) so that no escaped id looks like a hashed one.
// The result is reversible (ParseToken), injective, case-preserving, and
// valid both as a subject token and as a KV key segment. An escaped id
// longer than 64 bytes is replaced by its hashed form, and the full escaped
// id travels in the Sync-Partition header. A raw id never reaches a
// subject or a key: NATS clients validate little (a partition "a.b" or "*"
// would otherwise change the subject's shape).
//
// Examples: "acme" → acme, "user@example.com" → user=40example=2Ecom,
// "" → =, "h_x" → =68_x.
//
// # Commit events
//
// Every commit becomes one message per table it touches, on
// sync.<partition>.commit.<table>, so `nats sub 'sync.*.commit.todos'`
// follows one table across partitions and sync.<partition>.commit.> one
// partition. The messages of one commit are stored as one JetStream atomic
// batch: a consumer never sees half a commit. Each message is a CloudEvent
// in binary content mode:
//
//	ce-specversion  1.0
//	ce-id           <partition>:<logEpoch>:<commitSeq>:<table>  (also Nats-Msg-Id)
//	ce-type         dev.syncnode.commit.v1
//	ce-source       syncnode://<node>
//	ce-time         the commit's creation time, RFC 3339, milliseconds
//	ce-subject      <partition>/<table>
//	ce-partition    the partition token
//	ce-logepoch     the log epoch
//	ce-commitseq    the commit sequence (decimal)
//	ce-table        the table
//	content-type    application/json
//
// The body is CommitBody as JSON: the commit's metadata and the table's
// changes, each row rendered {column: value} (integers as numbers, bytes
// as base64, json columns embedded). A commit is identified by
// (partition, logEpoch, commitSeq): after a restore the log epoch rotates
// and the retained log is published again under the new epoch.
//
// # Streams and buckets
//
//	SYNC_COMMITS   sync.*.commit.*   commit events; atomic publish, dedup window, MaxAge/MaxBytes
//	SYNC_CONTROL   syncctl.>         control events (serve gate, migrations)
//	sync_gate      KV                gate.<partition>, schema.current
//	sync_leases    KV                leases (History 1)
//	sync_segments  object store      bootstrap segments
//	sync_blobs     object store      blob bytes, one object per upload (blob-<hex>-<nuid>)
//
// # The relay
//
// Package relay publishes the commit log: after a push commits, the engine
// calls relay.Relay.Notify, and every commit reaches SYNC_COMMITS exactly
// once and in order, each publish compare-and-set on the partition's last
// stream sequence (Nats-Expected-Last-Subject-Sequence over
// sync.<partition>.commit.>).
//
// # Control events
//
// The serve gate publishes migration events to SYNC_CONTROL, CloudEvents
// in binary mode like commit events (ce-type
// dev.syncnode.control.<event>.v1, ce-event the event name, a JSON body):
// checkpoint_declared, checkpoint_claimed, checkpoint_advanced,
// checkpoint_activated, checkpoint_stale, checkpoint_unverifiable and
// epoch_rotated on syncctl.<partition>.<event>; schema_migrated, which
// concerns every partition, on syncctl.=global.schema_migrated. "=global"
// can never be a partition token ('=' is only ever followed by two
// uppercase hex digits), so `nats sub 'syncctl.=global.>'` sees node-wide
// events only.
//
// # Reacting to events
//
// Follow delivers commit events in order, exactly once, with catch-up
// from a stream sequence (an ordered consumer, which loads every event
// from the stream's file store). TailCommits follows the live tail
// instead: a core subscription to every commit event as published, at
// most once, with one OnGap callback for every way an event can be
// missed (tail.go); the realtime and operations watch hubs use it, since
// they read the commits themselves from SQL. WatchPartitions is the
// cross-node "partition changed" notifier: a core subscription to every
// commit event, coalesced per partition.
//
// # Realtime subjects
//
// Presence (realtime.go) travels on core NATS, never in a stream:
// syncrt.<partition>.presence per partition, syncrt.=node.alive and
// syncrt.=node.sync node-wide.
package bus
