-- 007: blobs (SPEC.md §5.9). The bytes live in the JetStream Object
-- Store; SQL records each blob a partition holds and the reference index.
-- Numbers match storage/sqlitestore/migrations.

-- One row per (partition, content address) uploaded. object names the
-- Object Store object holding the bytes (one per accepted upload).
CREATE TABLE sync_blobs (
    partition      TEXT COLLATE "C" NOT NULL,
    blob_id        TEXT COLLATE "C" NOT NULL,
    byte_length    BIGINT NOT NULL,
    media_type     TEXT   NOT NULL,
    object         TEXT   NOT NULL,
    uploaded_at_ms BIGINT NOT NULL,
    PRIMARY KEY (partition, blob_id)
);

-- The orphan sweep, oldest first.
CREATE INDEX sync_blobs_uploaded ON sync_blobs (uploaded_at_ms);

-- The reference index (§5.9.4): one row per (blob, referencing row), with
-- the row's stored scopes, so download authorization reads no application
-- table. The foreign key makes "referenced ⇒ present" hold in SQL, and
-- refuses a sweep's delete that races a new reference.
CREATE TABLE sync_blob_refs (
    partition TEXT COLLATE "C" NOT NULL,
    blob_id   TEXT COLLATE "C" NOT NULL,
    tbl       TEXT COLLATE "C" NOT NULL,
    row_id    TEXT COLLATE "C" NOT NULL,
    scopes    TEXT NOT NULL,
    PRIMARY KEY (partition, blob_id, tbl, row_id),
    FOREIGN KEY (partition, blob_id) REFERENCES sync_blobs (partition, blob_id)
);

-- A row's references, replaced on every write of the row.
CREATE INDEX sync_blob_refs_row ON sync_blob_refs (partition, tbl, row_id);
