// Package reactions runs durable reactions (SPEC.md §6.9): follow-up work
// a commit implies outside the database — send a mail, charge a card,
// call a webhook, recompute a projection — planned inside the push
// transaction and run at least once afterwards, by Go handlers in this
// process or by workers anywhere on the NATS bus.
//
// # Planning
//
// A planner (engine.ReactionPlanner, or declarative rules compiled by
// package rules) runs in the push pipeline after the validators, for new
// commits that will apply. Its reactions are written in the same
// transaction as the commit, keyed by (partition, idempotency key) with
// the key the JSON array [partition, clientId, clientCommitId, key]. A
// rejected commit rolls them back with it; a replayed commit is answered
// from its idempotency record and plans nothing; a crash after COMMIT
// loses nothing, because the reaction is already a row.
//
// # States
//
//	           claim (attempts+1, lease)          complete
//	pending ─────────────────────────────▶ leased ─────────▶ completed
//	   ▲  ▲                                 │  │
//	   │  └──── fail, attempts left ────────┘  │ fail permanently, or
//	   │        (due after the backoff)        │ attempts exhausted, or
//	   │                                       │ final lease expired
//	   └──────── operator retry ◀── dead-letter ◀┘
//
// A claim leases due pending rows and expired leases to a fresh owner
// token; complete, extend and fail act only while that token still holds
// the lease, so a runner that lost its lease (it stalled past the expiry
// and another runner reclaimed the row) cannot overwrite the newer
// attempt's outcome. Claims are disjoint across runners on one database:
// SQLite claims on its single writer connection, PostgreSQL with FOR
// UPDATE SKIP LOCKED. Delivery is at least once — a runner that dies after
// the side effect and before recording it leaves a lease that expires and
// is claimed again — so handlers pass the idempotency key on to the
// systems they call. A retry waits min(MaxBackoff, InitialBackoff ·
// 2^(attempt−1)) (1 s, 2 s, 4 s, … up to 5 min); a reaction dead-letters
// after MaxAttempts attempts or at its first permanent failure, and waits
// there for `syncnode reactions retry`. Completed rows are pruned after
// 30 days, dead letters after 90.
//
// # Waking
//
// A Runner is woken by the node's commit events on the bus — the events
// the relay publishes to sync.<partition>.commit.<table>, whichever node
// committed — and claims in the partition that changed, unless every
// event of the change says its commit enqueued no reactions
// (ce-reactions "0", set by the relay for the pushes its engine hands
// it; an event read back from the log does not say, and is claimed on),
// so a node whose commits plan no reactions pays no claim per commit. It
// also wakes
// when one of its own retries falls due, when an operator requeues a dead
// letter (syncreact.event.<partition>.requeued.<type>), and when it frees
// a slot while rows were left behind. A slow timer (SweepInterval) sweeps
// every partition as a safety net: for expired leases of runners that
// died, and for wake-ups lost on the way.
//
// # Workers over NATS
//
// A reaction whose type has no Go handler is sent as a NATS request to
// syncreact.work.<type>, its JSON (WorkRequest) as the body, its
// idempotency key in the Idempotency-Key header. Workers subscribe in a
// queue group, so each request reaches one of them. The reply completes
// the reaction (an empty body or {"status":"completed"}) or fails it
// ({"status":"failed","code":…, "retryAfterMs"|"retryAtMs":…,
// "permanent":…, "details":{…}}). No reply before the lease ends, or no
// worker at all, fails the attempt (reaction.worker_timeout,
// reaction.no_worker), and the reaction is retried after its backoff —
// by whichever worker the queue group picks.
//
// # Events
//
// Lifecycle events (enqueued, completed, failed, dead_lettered,
// requeued) are CloudEvents on syncreact.event.<partition>.<event>.<type>,
// published with core NATS: fire and forget, for observers. The state is
// the table: `syncnode reactions list` reads it.
//
// # Operating
//
// Admin holds the operator's operations — list, show, retry, prune,
// stats — over the store; as an admin.Extension it adds them to the
// node's admin service on syncnode.admin.reactions.<op>, and AdminClient
// calls them over NATS. `syncnode reactions` uses the client against a
// running node and Admin itself offline. This is why the package sits
// above package admin in the import layers.
//
// # Why not River
//
// River (riverqueue/river) is the model for this package's shape — a
// Postgres-and-SQLite job table behind one driver seam, leases, retries
// with backoff — but it cannot be the queue. A reaction must commit in the
// push transaction, on the store's own connection, or a crash between the
// commit and the enqueue loses it (or a rollback leaves it behind). Our
// stores drive that transaction at the driver level: SQLite through
// modernc's driver.Conn on its single writer connection, inside the
// writer's group commits; PostgreSQL through pgx with pipelined,
// deferred statements. River's drivers insert through a database/sql or
// pgx transaction of their own, which neither store has to give. So the
// table and its operations live in the stores, and this package is the
// runner.
package reactions
