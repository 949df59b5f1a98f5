package sqlitestore

import (
	"context"
	"fmt"

	"github.com/syncnode/syncnode/storage"
)

// The auth lease store (storage.LeaseStore): reads on the readers, writes
// as members of the writer's group transactions, no partition lock.

const leaseCols = `partition, client_id, lease_id, actor_id, allowed, issued_at_ms, expires_at_ms, revoked, signature`

func (s *Store) leaseQuery(ctx context.Context, where string, args ...any) (storage.Lease, bool, error) {
	var (
		l       storage.Lease
		ok      bool
		allowed string
		revoked int64
	)
	err := s.withReader(ctx, func(c *conn) (err error) {
		ok, err = c.queryRow(ctx, `SELECT `+leaseCols+` FROM sync_auth_leases WHERE `+where, args,
			&l.Partition, &l.ClientID, &l.LeaseID, &l.ActorID, &allowed, &l.IssuedAtMs, &l.ExpiresAtMs, &revoked, &l.Signature)
		return err
	})
	if err != nil || !ok {
		return storage.Lease{}, false, err
	}
	l.Allowed, l.Revoked = []byte(allowed), revoked != 0
	return l, true, nil
}

// LeaseGet implements storage.LeaseStore.
func (s *Store) LeaseGet(ctx context.Context, partition, clientID string) (storage.Lease, bool, error) {
	l, ok, err := s.leaseQuery(ctx, `partition = ? AND client_id = ?`, partition, clientID)
	if err != nil {
		return storage.Lease{}, false, fmt.Errorf("get lease: %w", err)
	}
	return l, ok, nil
}

// LeaseByID implements storage.LeaseStore.
func (s *Store) LeaseByID(ctx context.Context, partition, leaseID string) (storage.Lease, bool, error) {
	l, ok, err := s.leaseQuery(ctx, `partition = ? AND lease_id = ?`, partition, leaseID)
	if err != nil {
		return storage.Lease{}, false, fmt.Errorf("get lease: %w", err)
	}
	return l, ok, nil
}

// LeasePut implements storage.LeaseStore.
func (s *Store) LeasePut(ctx context.Context, l storage.Lease) error {
	revoked := int64(0)
	if l.Revoked {
		revoked = 1
	}
	err := s.writeTouching(ctx, touchNone, func(c *conn) error {
		_, err := c.exec(ctx, `INSERT INTO sync_auth_leases (`+leaseCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (partition, client_id) DO UPDATE SET lease_id = excluded.lease_id, actor_id = excluded.actor_id,
				allowed = excluded.allowed, issued_at_ms = excluded.issued_at_ms, expires_at_ms = excluded.expires_at_ms,
				revoked = excluded.revoked, signature = excluded.signature`,
			l.Partition, l.ClientID, l.LeaseID, l.ActorID, string(l.Allowed), l.IssuedAtMs, l.ExpiresAtMs, revoked, l.Signature)
		return err
	})
	if err != nil {
		return fmt.Errorf("put lease: %w", err)
	}
	return nil
}

// LeaseDelete implements storage.LeaseStore.
func (s *Store) LeaseDelete(ctx context.Context, partition, leaseID string) (bool, error) {
	var n int64
	err := s.writeTouching(ctx, touchNone, func(c *conn) (err error) {
		n, err = c.exec(ctx, `DELETE FROM sync_auth_leases WHERE partition = ? AND lease_id = ?`, partition, leaseID)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("delete lease: %w", err)
	}
	return n > 0, nil
}
