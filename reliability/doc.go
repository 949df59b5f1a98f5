// Package reliability holds syncnode's reliability suite: tests that
// attack a real node the way a crash, an operator or a hostile client
// would, on SQLite and on PostgreSQL. It has no code of its own.
//
//   - Kill -9 durability: a child process (this test binary, re-executed)
//     runs a node under a push storm and is killed mid-storm, again and
//     again. After a restart every acknowledged commit is in the log,
//     whole, at the seq it was acknowledged with; seqs are dense; every
//     commit reached the bus exactly once per table.
//   - Cluster: three child nodes on one PostgreSQL schema whose embedded
//     NATS servers form a cluster (R3), 20 clients spread over them; one
//     member is SIGKILLed mid storm. Its clients move to a survivor; no
//     acknowledged commit is lost, every commit is on the bus exactly
//     once, every client converges.
//   - SIGTERM: a clean shutdown mid-storm leaves every acknowledged commit
//     on the bus, without waiting for a restart.
//   - Client-id takeover: another actor can neither read nor steal a
//     client id's stored push results.
//   - Bad input: truncations, bit flips, U+0000, invalid UTF-8, oversize
//     and gzip-bomb bodies, unknown frames, huge numbers. The node stays
//     up, answers each with a typed error (never an internal one) and
//     changes nothing the response does not acknowledge. FuzzSyncRequest
//     runs the same invariant on fuzzed bodies.
//   - Scope isolation: actors with random grants, re-drawn half way,
//     write and read concurrently; no replica ever holds a row of a scope
//     its actor was not granted, and every replica converges on what its
//     actor holds at the end.
//
// `go test ./...` runs a fast version of each (seconds). SYNCNODE_LONG=1
// runs the long campaign: hundreds of kill trials, longer storms and
// more random rounds (SYNCNODE_KILL_TRIALS overrides the kill trial
// count; SYNCNODE_SEED replays a randomized run). `.ci/long` runs it
// together with minutes of fuzzing of every Fuzz target.
package reliability
