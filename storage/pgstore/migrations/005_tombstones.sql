-- 005: delete tombstones (SPEC.md §2.2, §6.2). Numbers match
-- storage/sqlitestore/migrations.

-- One row per row whose last applied delete lies above the pruning
-- horizon: an unversioned upsert of an absent row with a tombstone is
-- refused (sync.row_deleted). Written by the commit that deletes, cleared
-- by an insert of the row, pruned with the commit log.
CREATE TABLE sync_tombstones (
    partition  TEXT COLLATE "C" NOT NULL,
    tbl        TEXT COLLATE "C" NOT NULL,
    row_id     TEXT COLLATE "C" NOT NULL,
    commit_seq BIGINT NOT NULL,
    PRIMARY KEY (partition, tbl, row_id)
);

-- Pruning deletes by (partition, commit_seq).
CREATE INDEX sync_tombstones_seq ON sync_tombstones (partition, commit_seq);
