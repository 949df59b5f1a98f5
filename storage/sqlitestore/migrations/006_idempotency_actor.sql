-- 006: the actor of each persisted push result, so a result is replayed
-- only to the actor whose commit it is. Numbers match
-- storage/pgstore/migrations.
ALTER TABLE sync_idempotency ADD COLUMN actor_id TEXT;

-- Older results take the actor of their commit, else of the client record
-- their client id is bound to; what neither names stays NULL (unknown).
UPDATE sync_idempotency SET actor_id = (
    SELECT c.actor_id FROM sync_commits c
    WHERE c.partition = sync_idempotency.partition AND c.seq = sync_idempotency.commit_seq
      AND c.client_id = sync_idempotency.client_id AND c.client_commit_id = sync_idempotency.client_commit_id)
WHERE status = 1;
UPDATE sync_idempotency SET actor_id = (
    SELECT cl.actor_id FROM sync_clients cl
    WHERE cl.partition = sync_idempotency.partition AND cl.client_id = sync_idempotency.client_id)
WHERE actor_id IS NULL;
