package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/storage"
)

// The auth lease store (storage.LeaseStore): plain statements on the pool,
// no partition lock.

const leaseCols = `partition, client_id, lease_id, actor_id, allowed, issued_at_ms, expires_at_ms, revoked, signature`

func scanLease(row pgx.Row) (storage.Lease, bool, error) {
	var (
		l       storage.Lease
		allowed string
	)
	err := row.Scan(&l.Partition, &l.ClientID, &l.LeaseID, &l.ActorID, &allowed, &l.IssuedAtMs, &l.ExpiresAtMs, &l.Revoked, &l.Signature)
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.Lease{}, false, nil
	}
	if err != nil {
		return storage.Lease{}, false, fmt.Errorf("get lease: %w", err)
	}
	l.Allowed = []byte(allowed)
	return l, true, nil
}

// LeaseGet implements storage.LeaseStore.
func (s *Store) LeaseGet(ctx context.Context, partition, clientID string) (storage.Lease, bool, error) {
	return scanLease(s.pool.QueryRow(ctx, `SELECT `+leaseCols+` FROM sync_auth_leases WHERE partition = $1 AND client_id = $2`, partition, clientID))
}

// LeaseByID implements storage.LeaseStore.
func (s *Store) LeaseByID(ctx context.Context, partition, leaseID string) (storage.Lease, bool, error) {
	return scanLease(s.pool.QueryRow(ctx, `SELECT `+leaseCols+` FROM sync_auth_leases WHERE partition = $1 AND lease_id = $2`, partition, leaseID))
}

// LeasePut implements storage.LeaseStore.
func (s *Store) LeasePut(ctx context.Context, l storage.Lease) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO sync_auth_leases (`+leaseCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (partition, client_id) DO UPDATE SET lease_id = EXCLUDED.lease_id, actor_id = EXCLUDED.actor_id,
			allowed = EXCLUDED.allowed, issued_at_ms = EXCLUDED.issued_at_ms, expires_at_ms = EXCLUDED.expires_at_ms,
			revoked = EXCLUDED.revoked, signature = EXCLUDED.signature`,
		l.Partition, l.ClientID, l.LeaseID, l.ActorID, string(l.Allowed), l.IssuedAtMs, l.ExpiresAtMs, l.Revoked, l.Signature)
	if err != nil {
		return fmt.Errorf("put lease: %w", err)
	}
	return nil
}

// LeaseDelete implements storage.LeaseStore.
func (s *Store) LeaseDelete(ctx context.Context, partition, leaseID string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM sync_auth_leases WHERE partition = $1 AND lease_id = $2`, partition, leaseID)
	if err != nil {
		return false, fmt.Errorf("delete lease: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}
