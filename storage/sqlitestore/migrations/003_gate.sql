-- 003: the serve gate: backfill checkpoints, the writer fence and the gate
-- revisions. Numbers match storage/pgstore/migrations.

-- Backfill checkpoints: declared → backfilling → activated (terminal
-- within a schema version). watermark is the highest source commitSeq the
-- projection was derived from; owner_epoch counts claims.
CREATE TABLE sync_backfill_checkpoints (
    partition      TEXT    NOT NULL,
    schema_version INTEGER NOT NULL,
    name           TEXT    NOT NULL,
    state          TEXT    NOT NULL CHECK (state IN ('declared', 'backfilling', 'activated')),
    watermark      INTEGER NOT NULL DEFAULT 0,
    owner_epoch    INTEGER NOT NULL DEFAULT 0,
    observed_rows  INTEGER NOT NULL DEFAULT 0,
    updated_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (partition, schema_version, name)
) STRICT, WITHOUT ROWID;

-- The writer fence: a commit of a partition with a fence row must carry a
-- writer version at least the required one. No row, no barrier.
CREATE TABLE sync_writer_fence (
    partition               TEXT    NOT NULL PRIMARY KEY,
    required_writer_version INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- The writer version of the build that appended each commit (NULL for
-- commits from before this migration).
ALTER TABLE sync_commits ADD COLUMN writer_version INTEGER;

-- The database-level guard: whoever inserts, a commit from an older or
-- unversioned writer is refused. RAISE in a trigger is reported as
-- SQLITE_CONSTRAINT_TRIGGER, which the store classifies as
-- sync.storage.writer_fence_rejected (this is syncnode's only trigger
-- that raises).
CREATE TRIGGER sync_commits_writer_fence BEFORE INSERT ON sync_commits
WHEN EXISTS (SELECT 1 FROM sync_writer_fence f WHERE f.partition = NEW.partition
             AND (NEW.writer_version IS NULL OR NEW.writer_version < f.required_writer_version))
BEGIN
    SELECT RAISE(ABORT, 'sync.storage.writer_fence_rejected');
END;

-- Gate revisions count changes of the serve-gate token, so a change that
-- was undone (V → W → V) is still seen: the schema revision rises with
-- every change of the stored schema version, a partition's with every
-- epoch rotation and every declaration, activation or deletion of one of
-- its checkpoints.
ALTER TABLE sync_schema_marker ADD COLUMN gate_revision INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_partitions ADD COLUMN gate_revision INTEGER NOT NULL DEFAULT 0;

CREATE TRIGGER sync_schema_marker_gate_revision AFTER UPDATE OF schema_version ON sync_schema_marker
WHEN NEW.schema_version IS NOT OLD.schema_version
BEGIN
    UPDATE sync_schema_marker SET gate_revision = gate_revision + 1 WHERE id = NEW.id;
END;

CREATE TRIGGER sync_partitions_gate_revision AFTER UPDATE OF log_epoch ON sync_partitions
WHEN NEW.log_epoch IS NOT OLD.log_epoch
BEGIN
    UPDATE sync_partitions SET gate_revision = gate_revision + 1 WHERE id = NEW.id;
END;

CREATE TRIGGER sync_checkpoints_insert_gate_revision AFTER INSERT ON sync_backfill_checkpoints
BEGIN
    UPDATE sync_partitions SET gate_revision = gate_revision + 1 WHERE id = NEW.partition;
END;

CREATE TRIGGER sync_checkpoints_state_gate_revision AFTER UPDATE OF state ON sync_backfill_checkpoints
WHEN (NEW.state = 'activated') IS NOT (OLD.state = 'activated')
BEGIN
    UPDATE sync_partitions SET gate_revision = gate_revision + 1 WHERE id = NEW.partition;
END;

CREATE TRIGGER sync_checkpoints_delete_gate_revision AFTER DELETE ON sync_backfill_checkpoints
BEGIN
    UPDATE sync_partitions SET gate_revision = gate_revision + 1 WHERE id = OLD.partition;
END;
