-- 009: the blob sweep's object pass (SPEC.md §5.9.2) looks blob rows up
-- by the Object Store object they name, to collect the objects no row
-- names. Numbers match storage/pgstore/migrations.
CREATE INDEX sync_blobs_object ON sync_blobs (object);
