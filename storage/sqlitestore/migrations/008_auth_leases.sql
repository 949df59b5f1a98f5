-- 007: auth leases (SPEC.md §7.3), one per (partition, client id), each
-- signed by the node; the lease id is the revocation handle. Numbers
-- match storage/pgstore/migrations.
CREATE TABLE sync_auth_leases (
    partition     TEXT NOT NULL,
    client_id     TEXT NOT NULL,
    lease_id      TEXT NOT NULL,
    actor_id      TEXT NOT NULL,
    allowed       TEXT NOT NULL,
    issued_at_ms  INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    revoked       INTEGER NOT NULL CHECK (revoked IN (0, 1)),
    signature     BLOB NOT NULL,
    PRIMARY KEY (partition, client_id)
) STRICT, WITHOUT ROWID;
CREATE UNIQUE INDEX sync_auth_leases_id ON sync_auth_leases (partition, lease_id);
