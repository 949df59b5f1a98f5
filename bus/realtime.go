package bus

// Realtime subjects: presence fan-out between the nodes of a deployment
// (SPEC.md §8.6). They are core NATS — ephemeral, at most once, never
// bound by a stream — and live under their own prefix, so `nats sub
// 'sync.>'` keeps showing commits only and leaf remotes that deny sync.>
// are unaffected.
//
//	realtime-subject = "syncrt." partition ".presence"   one partition's presence changes
//	                 | "syncrt.=node." ( "alive" | "sync" ) node-wide presence control
//
// "=node" can never be a partition token ('=' is only ever followed by two
// uppercase hex digits), like "=global" in control subjects. In an
// isolated namespace they carry its prefix (Names).
const realtimePrefix = "syncrt."

// Presence matches every partition's presence changes:
// syncrt.*.presence.
func (n Names) Presence() string { return n.subject(realtimePrefix + "*.presence") }

// PresenceAlive carries each node's periodic presence heartbeat; a node
// not heard from for a while has its documents dropped by the others:
// syncrt.=node.alive.
func (n Names) PresenceAlive() string { return n.subject(realtimePrefix + "=node.alive") }

// PresenceSync asks every node to announce its current presence documents
// again (sent by a node that starts or reconnects): syncrt.=node.sync.
func (n Names) PresenceSync() string { return n.subject(realtimePrefix + "=node.sync") }

// PresenceSubject is syncrt.<partition>.presence.
func (n Names) PresenceSubject(p Partition) string {
	return n.subject(realtimePrefix + p.token + ".presence")
}

// EpochToken is a log epoch as commit events carry it in ce-logepoch
// (Meta.LogEpoch): escaped like a partition id, equal to the epoch itself
// for ordinary epochs.
func EpochToken(logEpoch string) string { return EscapeEpoch(logEpoch) }
