// Package loadgen is the scenario engine of `syncnode load`: protocol-level
// virtual clients that drive an SSP2 server over real HTTP (POST /sync,
// GET /segments/{id}) and over the realtime WebSocket (GET /realtime,
// SPEC.md §8), measure latencies and throughput, and check thresholds.
//
// # Scenarios
//
// The five scenarios mirror Syncular's own load suite (its load/ package)
// — client counts, datasets, what one round is, pauses and thresholds — so
// that numbers compare with it. Full profile / smoke profile:
//
//	push-pull          50 VUs 20 s / 5 VUs 4 s. Each user owns project vu-NNNNN,
//	                   bootstraps it once, then loops rounds of one upsert (rows
//	                   round-robin over 20) plus an incremental pull (limitCommits
//	                   100). p95 round ≤ 500 / 1000 ms, RSS ≤ 700 / 400 MiB.
//	bootstrap-storm    50 VUs 60 s 100k rows / 5 VUs 8 s 2k rows. Each user
//	                   bootstraps the seeded project "storm" as a fresh client,
//	                   again and again, asking for the image lane, in pages of
//	                   max(1000, dataset/2) rows. p95 bootstrap ≤ 15 / 3 s, RSS
//	                   ≤ 900 / 400 MiB, segments reused > built > 0.
//	reconnect-storm    40 VUs 20 s 2k rows / 5 VUs 5 s 500 rows. Realtime users
//	                   connect, bootstrap "storm" over the socket, then close and
//	                   reconnect over and over as a fresh client state running one
//	                   catch-up round (limitCommits 200, 10,000 snapshot rows), 20 ms
//	                   apart, while an HTTP writer changes 50 hot rows every 10 ms.
//	                   p95 reconnect (handshake to hello, plus the round) ≤ 1.5 / 2 s,
//	                   catch-up ≤ 1 / 1.5 s, RSS ≤ 700 / 400 MiB.
//	maintenance-churn  30 VUs 20 s 5k rows / 5 VUs 5 s 500 rows. Users share 8
//	                   projects; even users push+pull (30 rows per project), odd
//	                   users pull, while /__load/prune runs every 200 ms. p95 round
//	                   ≤ 600 / 1000 ms, RSS ≤ 700 / 400 MiB, at least one prune.
//	mixed-soak         30 VUs 120 s 20k rows / 5 VUs 6 s 500 rows. User n%5: 0–2
//	                   read "storm" over HTTP every 15 ms, 3 push+pull a shared
//	                   project every 15 ms, 4 run socket rounds on "storm" every
//	                   30 ms; pruning every 500 ms; the server's RSS is traced
//	                   once a second. p95 read ≤ 600 / 1000 ms, write ≤ 800 / 1000
//	                   ms, RSS ≤ 900 / 400 MiB.
//
// Config.Transport (`--transport`) chooses what carries the rounds of
// push-pull and maintenance-churn: POST /sync (http, the default) or one
// realtime WebSocket per user (socket, SPEC.md §8.7), the way reference
// clients sync once connected. A socket user connects, waits for hello,
// runs its rounds as 0x01 messages, applies the deltas that arrived
// between rounds and acks the highest nextCursor it applied, and after
// every round acks its cursor floor (§8.2), which lifts the server's
// delta suppression. The other scenarios keep their own mix; every result
// names its transport.
//
// Users start evenly spread over a short ramp, then run until the duration
// is up; a round in flight then finishes. Throughput is ops over the wall
// time, ramp included, as the reference computes it. Percentiles are the
// sample at rank ⌈p·n⌉ of every sample.
//
// # What the virtual clients check
//
// Every response is read frame by frame with ssp2.MessageReader — which
// validates the envelope, the grammar and every row of inline segments —
// and nothing is kept but what a client carries forward. A round fails
// (and its user stops, counted as a protocol error) on a non-200 answer,
// a decode error, an in-band ERROR, a schema floor, a log epoch that
// changed during the run, a push without its PUSH_RESULT or rejected, a
// revoked subscription, a section out of order, an incremental cursor that
// goes backwards, or a pull that does not cover the commit pushed in the
// same round. A section answered reset (cursor behind the pruning horizon)
// re-bootstraps, as a client must. A bootstrap of a seeded dataset must
// deliver exactly its rows. Rows are counted, not decoded twice: inline
// segments by their block headers, referenced ones by rowCount; with
// FetchSegments each referenced segment is downloaded and its length and
// content address checked (the reference suite does not download them).
// Realtime connections check hello, tags and chunk framing (§8.7: one
// round at a time, no delta inside a response, nothing after END) and
// decode every delta; those of reconnect-storm and mixed-soak never ack,
// like the reference's.
//
// # Measuring the server, not the tool
//
// Requests are encoded into frames and buffers each client reuses;
// responses are streamed, never materialized. The tool reports its own
// CPU (getrusage) per op beside the server's: the difference of the
// fixture's cpuSeconds before and after the run, divided by the ops. On a
// load fixture, RSS is the server's peak (VmHWM), which is the process's
// lifetime peak: start a fresh server per scenario for a clean figure,
// as the command does when it starts its own nodes.
//
// # Driving a server
//
// On a `syncnode serve --load-fixture` node (or any server with the same
// /__load routes) a run resets the load partition and seeds the dataset
// through POST /__load/reset, prunes through POST /__load/prune and reads
// GET /__load/metrics. Any other SSP2 server works if it serves wire
// version 2 and the fixture's schema: version 1, table tasks (id string
// primary key, project_id, title, done boolean, priority integer,
// updated_at_ms integer, none nullable; scope project:{project_id}), with
// the acting identity allowed every project and the rows of project
// "storm" seeded beforehand. Config.Header carries its credentials (the
// command's --token and --header); without /__load routes the RSS, reuse
// and prune checks are skipped, not failed, and CPU per op is the tool's
// only.
package loadgen
