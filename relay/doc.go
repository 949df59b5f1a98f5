// Package relay publishes the commit log to JetStream: every commit
// becomes the commit events of package bus (names and encoding live
// there), in the stream SYNC_COMMITS, exactly once and in order.
//
// The commit log in SQL is the outbox. After a push commits, the engine
// hands the commit to Relay.Committed (other writers call Relay.Notify);
// the relay reads the partition's last event from the stream, publishes
// every later commit, and makes each publish conditional
// on the partition's last stream sequence (Nats-Expected-Last-Subject-
// Sequence over sync.<partition>.commit.>). A replay after a crash, a
// stale cache or a relay on another node sharing the same PostgreSQL is
// refused by the server and resolved by re-reading the stream's tail:
// every commit is in the stream exactly once and in order, inside or
// outside the duplicate window. The messages of one commit go out as one
// atomic batch. At start, and every ResyncInterval, the relay closes any
// gap between the log and the stream for every partition; a wiped or
// deleted stream is recreated and refilled with what the log still holds.
//
// Committed's commits are a bounded cache of the log's tail, not a second
// source: a run publishes them only when they continue the stream's tail
// exactly (same epoch, the next commitSeq, no gap) and reads the log
// whenever they do not, when Notify or the sweep named the partition, and
// after a failed run.
package relay
