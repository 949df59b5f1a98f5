-- 002: the bootstrap segment index. The bytes live in the JetStream
-- Object Store under their content address; SQL records each address and
-- every publication (grant) of it. Numbers match
-- storage/sqlitestore/migrations.

-- One row per content address ("sha256:<hex>") whose bytes were stored.
CREATE TABLE sync_segments (
    segment_id    TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    byte_length   BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL
);

-- One row per publication: the address granted under one key (partition,
-- log epoch, table, schema version, media type, scope digest, pin, page
-- start, page size) until expires_at_ms. row_cursor is '' on a first page,
-- next_row_cursor '' on a last page.
CREATE TABLE sync_segment_publications (
    segment_id       TEXT COLLATE "C" NOT NULL REFERENCES sync_segments (segment_id),
    partition        TEXT COLLATE "C" NOT NULL,
    log_epoch        TEXT     NOT NULL,
    tbl              TEXT     NOT NULL,
    schema_version   INTEGER  NOT NULL,
    media_type       SMALLINT NOT NULL,
    scope_digest     TEXT     NOT NULL,
    as_of_commit_seq BIGINT   NOT NULL,
    row_cursor       TEXT COLLATE "C" NOT NULL,
    page_rows        INTEGER  NOT NULL,
    next_row_cursor  TEXT     NOT NULL,
    row_count        BIGINT   NOT NULL,
    byte_length      BIGINT   NOT NULL,
    created_at_ms    BIGINT   NOT NULL,
    expires_at_ms    BIGINT   NOT NULL,
    PRIMARY KEY (segment_id, partition, log_epoch, tbl, schema_version, media_type,
                 scope_digest, as_of_commit_seq, row_cursor, page_rows)
);

-- The reuse lookup: the live publication of a key.
CREATE INDEX sync_segment_publications_key ON sync_segment_publications (
    partition, log_epoch, tbl, schema_version, media_type, scope_digest,
    as_of_commit_seq, row_cursor, page_rows, expires_at_ms);

-- Expiry sweeps.
CREATE INDEX sync_segment_publications_expiry ON sync_segment_publications (expires_at_ms);
