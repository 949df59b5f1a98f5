// Package admin is a node's admin API: the NATS micro service "syncnode"
// (`nats micro ls`, `nats micro info syncnode`), one endpoint per
// operation on syncnode.admin.<group>.<op> (names in package bus, bodies
// in types.go, the reference in docs/bus.md):
//
//	node.info                every node answers: version, schema versions, storage, uptime, readiness, relay lag
//	partitions.list|info     the partition registry; epoch, max commit seq, horizon, relay lag, serve gate
//	partitions.clients       a partition's client records and how far behind they are
//	partitions.prune         prune a partition's commit log (SPEC.md §4.6)
//	checkpoints.*            every `syncnode checkpoints` operation: list, declare, activate, gate, rotate-epoch, republish
//	segments.stats|prune     the bootstrap segment store
//	leases.revoke|clear      auth leases (SPEC.md §7.3): every `syncnode leases` operation
//	reactions.*              list, show, retry, prune, stats: package reactions adds them through Extension
//
// *Admin runs the operations over a node's components (Config) and, once
// started, answers them; *Client calls them over NATS. Both implement API,
// so an operator command runs the same code against a running node or,
// offline, against the store. Failures are *Error: a code (Codes), the
// syncnode code behind it, and an HTTP-like status in the micro error
// headers. Who may call the API is decided by NATS permissions
// (docs/nats-permissions.conf).
package admin
