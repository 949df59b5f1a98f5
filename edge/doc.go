// Package edge is the edge/hub topology: an edge is a node whose
// embedded NATS server is a leaf of the hub's, with its own JetStream
// domain (named like the edge) and its own SQL; it serves the partitions
// homed at it fully, link or no link. The hub keeps a read replica of
// each edge partition in its own SQL and serves it read-only.
//
// # Homes
//
// Config.Homes maps partition ids (or prefixes ending in '*') to an edge
// name or "hub"; the hub and every edge share the table. A partition
// homed at an edge is written only there.
//
// # The replica (Hub)
//
// One loop per edge asks syncnode.edge.<edge>.status every PingInterval
// (the link state) and, for each partition behind, pages the edge's log
// with syncnode.edge.<edge>.commits. The edge answers from SQL with
// whole commits in the row codec, exactly as stored — the commit
// CloudEvent is not enough to rebuild them: one commit is one event per
// table with no count of the tables, rows are a lossy JSON rendering
// (NaN and infinities become null) and are left out past max_payload.
// Each page is applied in one transaction under the partition's write
// lock: adopt the edge's epoch (storage.Store.PartitionAdopt), skip what
// the replica has, require the next seq to be max+1, upsert and delete
// the rows, append the commit and check that its seq and every row
// version come out as the edge's. The replica's position is its max
// commit seq in SQL, so replication is idempotent and resumes after a
// restart or a cut link without state of its own. Each applied page
// wakes the hub's relay, which publishes the commits on the hub's own
// commit stream: the hub's realtime sessions and reaction runners see
// edge commits like any other.
//
// The edge's commit events are also sourced into the hub's
// EDGE_<edge>_COMMITS (subjects edge.<edge>.sync.…) through a durable
// consumer on the edge (durable sourcing, see SourceConsumerConfig), and
// every sourced event wakes the loop, so a linked edge's commits reach
// the replica within milliseconds; the status poll is the floor.
//
// # Routing (Hub as engine.Router)
//
// A request for an edge partition at the hub is served from the
// replica; its push commits are first sent to the edge
// (syncnode.edge.<edge>.push: the request without its pull half, the
// caller's actor and resolved scopes), and the results the edge stored
// are answered as this node's. While the edge cannot be reached the
// request fails with sync.schema_not_ready (retryable, HTTP 503), details
// {"reason":"home_unreachable","home":<edge>}; nothing is applied at the
// hub, so the retry after the link returns applies it once. Registered
// remote commands (package operations) take the same way
// (syncnode.edge.<edge>.command, Hub as operations.RemoteHome);
// authoritative commits and backfills are refused at the hub
// (engine.CheckWritable) and run at the edge.
//
// At an edge, Guard is the engine's Router: a partition homed elsewhere
// is refused with sync.forbidden, details {"reason":"not_home",...}.
//
// # Rebuilds (rebuild.go, snapshot.go, blobs.go)
//
// A replica whose edge changed its log epoch (a restore) is dropped and
// registered afresh under the new epoch; one whose edge pruned commits
// it never applied is rebuilt from a paged snapshot of the edge's rows
// plus the commits made while the snapshot was read, then rebased to
// continue the edge's log. Blobs a replicated row references are read
// from the edge's Object Store, across the domain, before the row is
// applied.
//
// # A hub cluster
//
// Hub nodes sharing one database (storage.Locker) replicate an edge one
// at a time: the loop applies pages only while its node holds the lock
// LeaseName(edge) (lease.go); the others keep the link state, serve the
// replica from SQL at positions the holder vouched for (its notes on
// syncrt.=edge.<edge>.replica, follower.go) and forward writes. A holder
// deposed before it noticed is fenced: a rebuild's placeholder epoch is
// checked under the partition lock by each of its writes and
// compared-and-set by its rebase (snapshot.go), and its wipe is fenced in
// its own transaction on the replica the node last saw
// (storage.Admin.PartitionWipeFrom).
//
// # The gate at the home
//
// The edge reports each partition's unactivated checkpoints with every
// status and page (homegate.go); the hub refuses the replica while a
// migration runs at the edge.
package edge
