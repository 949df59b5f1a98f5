// Package realtime serves the realtime WebSocket channel of SSP2 (SPEC.md
// §8): GET /realtime?clientId=…, with deltas, wake-ups, heartbeats, acks,
// presence and sync rounds over the socket.
//
// # The source of deltas is the bus
//
// A Hub follows the live tail of commit events — a core NATS subscription
// to the commit subjects (bus.TailCommits), not a consumer of the
// SYNC_COMMITS stream, so no event is loaded back from the stream's file
// store — on every node alike: a commit made on any node of a deployment
// reaches the sessions of every other node through its commit event. An event only
// says that (partition, logEpoch, commitSeq) exists and which changes of
// one table it holds; the hub reads the commit itself from SQL (once per
// node, whatever the number of sessions) and encodes each session's delta
// from it. Nothing goes from the engine to the hub in process.
//
// A commit is one event per table. The commit is read once, at the first
// of its events whose changes (table and scopes, as the event's body
// lists them) some session's registrations may match; the others are
// skipped by (epoch, seq). A commit none of whose events may match is not
// read at all: its sessions observe it unread (it advances what they
// observed and sends nothing) when the next commit's event shows it
// complete — the relay publishes a partition's events in commit order —
// or, should none come, it is read at the next resync or poll. The serve
// gate is asked only for commits read. Events whose epoch is
// not the one the hub knows make it read the partition in SQL: a rotated
// epoch answers every session of the partition with reset-required, and
// the history the relay republishes under the new epoch is skipped. The
// serve gate's token watch (Hub.GateChanged, on every node) makes the hub
// read the partition after any gate change — an epoch rotation, a
// checkpoint that closes the partition to this node — and the periodic
// check below is the backstop when neither signal arrives.
//
// # Sessions
//
// Each session tracks the highest commitSeq it has observed. At connect
// that is the partition's latest seq; a session whose client record is
// behind it (or that has none) is suppressed. Every commit event of the
// partition advances it, matching or not. A delta is sent only while the
// session is not suppressed and the commit is adjacent to what it observed
// (cursor-contiguous, §8.2); otherwise a coalesced wake-up is sent and the
// session stays suppressed until an ack reaches the highest seq it
// observed:
//
//	event                                  session does
//	seq ≤ highest                          nothing (duplicate)
//	seq > highest+1                        suppress; catchup-required (a gap)
//	matching, suppressed or in a round     catchup-required
//	matching, delta > MaxDeltaBytes        suppress; delta-too-large
//	matching, send queue full              suppress; catchup-required
//	matching, otherwise                    the delta (tag 0x00)
//	epoch rotated, gate refuses            suppress; reset-required
//	ack n                                  highest = max(highest, n);
//	                                       n ≥ highest lifts suppression
//
// A node that cannot see the bus (its NATS connection is down) polls SQL
// instead and wakes sessions whose partition moved on. Core NATS is at
// most once: when the connection comes back, or when the subscription
// dropped events as a slow consumer, the tail reports a gap once it is
// live again and every partition is polled the same way; a missed event
// followed by another of its partition is a seq gap, which wakes the
// session anyway. Events delivered twice (a relay's republish, which only
// the stream deduplicates) or late are ignored by (epoch, seq). A
// periodic check also wakes sessions that missed a commit the database
// held a whole interval ago — one that never reached the bus — so a
// missed event is never a silent gap.
//
// # Send path and backpressure
//
// Every session has a bounded send queue (messages and bytes) drained by
// one writer goroutine. Fan-out never blocks on a socket: a delta that does
// not fit becomes a wake-up (a flag, not a queued message); a presence
// event that does not fit drops the slow consumer (its connection is cut
// at once: a socket that does not drain takes no close frame either), as
// does a socket that does not take a message within WriteTimeout. A socket round
// streams its response through the same queue one chunk at a time and
// waits for each to be written, so it runs at the socket's pace.
//
// # Sync rounds over the socket
//
// 0x01 chunks are reassembled with ssp2.StreamScanner into one request,
// which runs through engine.Sync — the same path as POST /sync, so the
// same request yields the same response bytes. A pre-stream failure is
// answered RESP_HEADER, ERROR, END; an invalid envelope header, bytes past
// END, a chunk during a round's response or another tag closes the socket
// with 1008. A successful round with a PULL_HEADER re-reads the client
// record before its END is sent: registrations, wire version and epoch
// follow it, so whatever the client sends after END (a presence publish,
// an ack) is judged by the new registrations.
//
// # Presence
//
// Presence documents (§8.6) live in memory, keyed by (partition, scope
// key, actor, client). Publishing needs the scope key among the session's
// registered keys; the document is fanned out to the other sessions
// registered on the key, here and — over core NATS on
// syncrt.<partition>.presence — on every other node. Nodes announce
// themselves on syncrt.=node.alive; the documents of a node not heard from
// for three intervals are dropped (leave). A node that starts or
// reconnects asks for every document again on syncrt.=node.sync and drops
// those not re-announced.
package realtime
