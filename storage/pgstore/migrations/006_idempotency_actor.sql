-- 006: the actor of each persisted push result, so a result is replayed
-- only to the actor whose commit it is. Numbers match
-- storage/sqlitestore/migrations.
ALTER TABLE sync_idempotency ADD COLUMN actor_id TEXT;

-- Older results take the actor of their commit, else of the client record
-- their client id is bound to; what neither names stays NULL (unknown).
UPDATE sync_idempotency i SET actor_id = c.actor_id
FROM sync_commits c
WHERE i.status = 1 AND c.partition = i.partition AND c.seq = i.commit_seq
  AND c.client_id = i.client_id AND c.client_commit_id = i.client_commit_id;
UPDATE sync_idempotency i SET actor_id = cl.actor_id
FROM sync_clients cl
WHERE i.actor_id IS NULL AND cl.partition = i.partition AND cl.client_id = i.client_id;
