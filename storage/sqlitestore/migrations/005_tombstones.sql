-- 005: delete tombstones (SPEC.md §2.2, §6.2). Numbers match
-- storage/pgstore/migrations.

-- One row per row whose last applied delete lies above the pruning
-- horizon: an unversioned upsert of an absent row with a tombstone is
-- refused (sync.row_deleted). Written by the commit that deletes, cleared
-- by an insert of the row, pruned with the commit log.
CREATE TABLE sync_tombstones (
    partition  TEXT    NOT NULL,
    tbl        TEXT    NOT NULL,
    row_id     TEXT    NOT NULL,
    commit_seq INTEGER NOT NULL,
    PRIMARY KEY (partition, tbl, row_id)
) STRICT, WITHOUT ROWID;

-- Pruning deletes by (partition, commit_seq).
CREATE INDEX sync_tombstones_seq ON sync_tombstones (partition, commit_seq);
