-- 003: the serve gate: backfill checkpoints, the writer fence and the gate
-- revisions. Numbers match storage/sqlitestore/migrations.

-- Backfill checkpoints: declared → backfilling → activated (terminal
-- within a schema version). watermark is the highest source commitSeq the
-- projection was derived from; owner_epoch counts claims.
CREATE TABLE sync_backfill_checkpoints (
    partition      TEXT COLLATE "C" NOT NULL,
    schema_version INTEGER NOT NULL,
    name           TEXT COLLATE "C" NOT NULL,
    state          TEXT    NOT NULL CHECK (state IN ('declared', 'backfilling', 'activated')),
    watermark      BIGINT  NOT NULL DEFAULT 0,
    owner_epoch    BIGINT  NOT NULL DEFAULT 0,
    observed_rows  BIGINT  NOT NULL DEFAULT 0,
    updated_at_ms  BIGINT  NOT NULL,
    PRIMARY KEY (partition, schema_version, name)
);

-- The writer fence: a commit of a partition with a fence row must carry a
-- writer version at least the required one. No row, no barrier.
CREATE TABLE sync_writer_fence (
    partition               TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    required_writer_version INTEGER NOT NULL
);

-- The writer version of the build that appended each commit (NULL for
-- commits from before this migration).
ALTER TABLE sync_commits ADD COLUMN writer_version INTEGER;

-- The database-level guard: whoever inserts, a commit from an older or
-- unversioned writer is refused with the SQLSTATE SNWFR, which the store
-- classifies as sync.storage.writer_fence_rejected. The fence row is read
-- in the inserting statement's snapshot; raising a fence takes the
-- partition lock, so it serializes with every push.
CREATE FUNCTION sync_writer_fence_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    required INTEGER;
BEGIN
    SELECT f.required_writer_version INTO required FROM sync_writer_fence f WHERE f.partition = NEW.partition;
    IF FOUND AND (NEW.writer_version IS NULL OR NEW.writer_version < required) THEN
        RAISE EXCEPTION 'sync.storage.writer_fence_rejected' USING ERRCODE = 'SNWFR';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER sync_commits_writer_fence BEFORE INSERT ON sync_commits
    FOR EACH ROW EXECUTE FUNCTION sync_writer_fence_check();

-- Gate revisions count changes of the serve-gate token, so a change that
-- was undone (V → W → V) is still seen: the schema revision rises with
-- every change of the stored schema version, a partition's with every
-- epoch rotation and every declaration, activation or deletion of one of
-- its checkpoints.
ALTER TABLE sync_schema_marker ADD COLUMN gate_revision BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sync_partitions ADD COLUMN gate_revision BIGINT NOT NULL DEFAULT 0;

CREATE FUNCTION sync_bump_gate_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.gate_revision := OLD.gate_revision + 1;
    RETURN NEW;
END
$$;

CREATE TRIGGER sync_schema_marker_gate_revision BEFORE UPDATE OF schema_version ON sync_schema_marker
    FOR EACH ROW WHEN (NEW.schema_version IS DISTINCT FROM OLD.schema_version)
    EXECUTE FUNCTION sync_bump_gate_revision();

CREATE TRIGGER sync_partitions_gate_revision BEFORE UPDATE OF log_epoch ON sync_partitions
    FOR EACH ROW WHEN (NEW.log_epoch IS DISTINCT FROM OLD.log_epoch)
    EXECUTE FUNCTION sync_bump_gate_revision();

CREATE FUNCTION sync_checkpoint_gate_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE sync_partitions SET gate_revision = gate_revision + 1 WHERE id = OLD.partition;
        RETURN OLD;
    END IF;
    IF TG_OP = 'INSERT' OR (NEW.state = 'activated') IS DISTINCT FROM (OLD.state = 'activated') THEN
        UPDATE sync_partitions SET gate_revision = gate_revision + 1 WHERE id = NEW.partition;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER sync_checkpoints_gate_revision AFTER INSERT OR DELETE OR UPDATE OF state ON sync_backfill_checkpoints
    FOR EACH ROW EXECUTE FUNCTION sync_checkpoint_gate_revision();
