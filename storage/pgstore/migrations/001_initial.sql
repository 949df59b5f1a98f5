-- 001: the internal tables of the commit log, partitions, idempotency and
-- client records. Numbers match storage/sqlitestore/migrations. Text keys
-- use COLLATE "C" so ordering is bytewise, as in SQLite.

-- The schema marker: the schema version and per-table layouts the
-- application tables were built for. One row.
CREATE TABLE sync_schema_marker (
    id             INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    schema_version INTEGER NOT NULL,
    layouts        TEXT    NOT NULL,
    updated_at_ms  BIGINT  NOT NULL
);

-- The partition registry. log_epoch is opaque and random; horizon_seq is
-- the pruning horizon. The max commitSeq is max(seq) of sync_commits:
-- pruning always keeps the newest commit, and a push then writes no
-- registry row.
CREATE TABLE sync_partitions (
    id             TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    log_epoch      TEXT    NOT NULL,
    epoch_required BOOLEAN NOT NULL DEFAULT FALSE,
    created_at_ms  BIGINT  NOT NULL,
    last_seen_ms   BIGINT  NOT NULL,
    horizon_seq    BIGINT  NOT NULL DEFAULT 0
);

CREATE TABLE sync_commits (
    partition        TEXT COLLATE "C" NOT NULL,
    seq              BIGINT  NOT NULL,
    created_at_ms    BIGINT  NOT NULL,
    actor_id         TEXT    NOT NULL,
    client_id        TEXT    NOT NULL,
    client_commit_id TEXT    NOT NULL,
    schema_version   INTEGER NOT NULL,
    PRIMARY KEY (partition, seq)
);

-- op: 1 upsert, 2 delete. row_version and row are NULL for deletes.
-- scopes is the stored-scopes JSON object, kept as written.
CREATE TABLE sync_changes (
    partition   TEXT COLLATE "C" NOT NULL,
    seq         BIGINT   NOT NULL,
    idx         INTEGER  NOT NULL,
    tbl         TEXT     NOT NULL,
    row_id      TEXT COLLATE "C" NOT NULL,
    op          SMALLINT NOT NULL,
    row_version BIGINT,
    scopes      TEXT     NOT NULL,
    row         BYTEA,
    PRIMARY KEY (partition, seq, idx)
);

-- The inverted scope index (SPEC.md §3.1): one row per commit and distinct
-- (table, variable, value) among its changes.
CREATE TABLE sync_scope_index (
    partition TEXT COLLATE "C" NOT NULL,
    tbl       TEXT COLLATE "C" NOT NULL,
    variable  TEXT COLLATE "C" NOT NULL,
    value     TEXT COLLATE "C" NOT NULL,
    seq       BIGINT NOT NULL,
    PRIMARY KEY (partition, tbl, variable, value, seq)
);

-- Persisted push results (SPEC.md §2.3). status: 1 applied, 3 rejected.
CREATE TABLE sync_idempotency (
    partition        TEXT COLLATE "C" NOT NULL,
    client_id        TEXT COLLATE "C" NOT NULL,
    client_commit_id TEXT COLLATE "C" NOT NULL,
    status           SMALLINT NOT NULL,
    commit_seq       BIGINT   NOT NULL,
    result           BYTEA    NOT NULL,
    created_at_ms    BIGINT   NOT NULL,
    PRIMARY KEY (partition, client_id, client_commit_id)
);

CREATE TABLE sync_clients (
    partition     TEXT COLLATE "C" NOT NULL,
    client_id     TEXT COLLATE "C" NOT NULL,
    actor_id      TEXT    NOT NULL,
    wire_version  INTEGER NOT NULL,
    cursor        BIGINT  NOT NULL,
    updated_at_ms BIGINT  NOT NULL,
    subscriptions TEXT,
    PRIMARY KEY (partition, client_id)
);
