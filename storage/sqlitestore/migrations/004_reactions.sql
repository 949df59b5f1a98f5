-- 004: durable reactions (SPEC.md §6.9): follow-up work planned in a push
-- transaction and run at least once afterwards. Independent of the commit
-- log: pruning commits never touches it. Numbers match
-- storage/pgstore/migrations.

-- One row per (partition, idempotency key). status moves pending →
-- leased → completed, or back to pending after a failed attempt, or to
-- dead-letter; an operator retry makes a dead letter pending again.
-- payload and failure_details are JSON. available_at_ms is when a pending
-- row is due (for a dead letter, when it was dead-lettered). WITHOUT
-- ROWID: the key is the table, one b-tree less to write per enqueue
-- (larger payloads spill to overflow pages).
CREATE TABLE sync_reactions (
    partition               TEXT    NOT NULL,
    idempotency_key         TEXT    NOT NULL,
    type                    TEXT    NOT NULL,
    version                 INTEGER NOT NULL,
    payload                 TEXT    NOT NULL,
    source_client_id        TEXT    NOT NULL,
    source_client_commit_id TEXT    NOT NULL,
    source_commit_seq       INTEGER NOT NULL,
    created_at_ms           INTEGER NOT NULL,
    available_at_ms         INTEGER NOT NULL,
    status                  TEXT    NOT NULL CHECK (status IN ('pending', 'leased', 'completed', 'dead-letter')),
    attempts                INTEGER NOT NULL DEFAULT 0,
    max_attempts            INTEGER NOT NULL,
    lease_owner             TEXT,
    lease_expires_at_ms     INTEGER,
    completed_at_ms         INTEGER,
    failure_code            TEXT,
    failure_at_ms           INTEGER,
    failure_details         TEXT,
    PRIMARY KEY (partition, idempotency_key)
) STRICT, WITHOUT ROWID;

-- Due scans: pending rows of a partition (or of all) by due time.
CREATE INDEX sync_reactions_due ON sync_reactions (partition, available_at_ms) WHERE status = 'pending';
-- Lease scans: expired leases of a partition (or of all).
CREATE INDEX sync_reactions_lease ON sync_reactions (partition, lease_expires_at_ms) WHERE status = 'leased';
-- Retention scans of terminal rows.
CREATE INDEX sync_reactions_completed ON sync_reactions (completed_at_ms) WHERE status = 'completed';
CREATE INDEX sync_reactions_dead_letter ON sync_reactions (failure_at_ms) WHERE status = 'dead-letter';
