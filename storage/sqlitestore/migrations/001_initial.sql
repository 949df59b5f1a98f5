-- 001: the internal tables of the commit log, partitions, idempotency and
-- client records. Numbers match storage/pgstore/migrations.

-- The schema marker: the schema version and per-table layouts the
-- application tables were built for. One row.
CREATE TABLE sync_schema_marker (
    id             INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    schema_version INTEGER NOT NULL,
    layouts        TEXT    NOT NULL,
    updated_at_ms  INTEGER NOT NULL
) STRICT;

-- The partition registry. log_epoch is opaque and random; horizon_seq is
-- the pruning horizon. The max commitSeq is max(seq) of sync_commits:
-- pruning always keeps the newest commit, and a push then writes no
-- registry row.
CREATE TABLE sync_partitions (
    id             TEXT    NOT NULL PRIMARY KEY,
    log_epoch      TEXT    NOT NULL,
    epoch_required INTEGER NOT NULL DEFAULT 0,
    created_at_ms  INTEGER NOT NULL,
    last_seen_ms   INTEGER NOT NULL,
    horizon_seq    INTEGER NOT NULL DEFAULT 0
) STRICT, WITHOUT ROWID;

CREATE TABLE sync_commits (
    partition        TEXT    NOT NULL,
    seq              INTEGER NOT NULL,
    created_at_ms    INTEGER NOT NULL,
    actor_id         TEXT    NOT NULL,
    client_id        TEXT    NOT NULL,
    client_commit_id TEXT    NOT NULL,
    schema_version   INTEGER NOT NULL,
    PRIMARY KEY (partition, seq)
) STRICT, WITHOUT ROWID;

-- op: 1 upsert, 2 delete. row_version and row are NULL for deletes.
-- scopes is the stored-scopes JSON object.
CREATE TABLE sync_changes (
    partition   TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    idx         INTEGER NOT NULL,
    tbl         TEXT    NOT NULL,
    row_id      TEXT    NOT NULL,
    op          INTEGER NOT NULL,
    row_version INTEGER,
    scopes      TEXT    NOT NULL,
    row         BLOB,
    PRIMARY KEY (partition, seq, idx)
) STRICT, WITHOUT ROWID;

-- The inverted scope index (SPEC.md §3.1): one row per commit and distinct
-- (table, variable, value) among its changes.
CREATE TABLE sync_scope_index (
    partition TEXT    NOT NULL,
    tbl       TEXT    NOT NULL,
    variable  TEXT    NOT NULL,
    value     TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    PRIMARY KEY (partition, tbl, variable, value, seq)
) STRICT, WITHOUT ROWID;

-- Persisted push results (SPEC.md §2.3). status: 1 applied, 3 rejected.
CREATE TABLE sync_idempotency (
    partition        TEXT    NOT NULL,
    client_id        TEXT    NOT NULL,
    client_commit_id TEXT    NOT NULL,
    status           INTEGER NOT NULL,
    commit_seq       INTEGER NOT NULL,
    result           BLOB    NOT NULL,
    created_at_ms    INTEGER NOT NULL,
    PRIMARY KEY (partition, client_id, client_commit_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE sync_clients (
    partition     TEXT    NOT NULL,
    client_id     TEXT    NOT NULL,
    actor_id      TEXT    NOT NULL,
    wire_version  INTEGER NOT NULL,
    cursor        INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    subscriptions TEXT,
    PRIMARY KEY (partition, client_id)
) STRICT, WITHOUT ROWID;
