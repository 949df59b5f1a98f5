package storage

import "context"

// Lease is a stored auth lease (SPEC.md §7.3.1), one per (partition,
// client id). Allowed is the JSON of the allowed-scope map captured at
// issuance; Signature is the lease component's MAC over the record, which
// it verifies on every read — the store keeps both as opaque values.
type Lease struct {
	Partition   string
	ClientID    string
	LeaseID     string
	ActorID     string
	Allowed     []byte
	IssuedAtMs  int64
	ExpiresAtMs int64
	Revoked     bool
	Signature   []byte
}

// LeaseStore keeps auth leases. None of its methods takes a partition
// lock: a lease is written beside a request, never inside a commit.
type LeaseStore interface {
	// LeaseGet returns the lease of (partition, clientID).
	LeaseGet(ctx context.Context, partition, clientID string) (Lease, bool, error)
	// LeaseByID returns the lease with leaseID in partition.
	LeaseByID(ctx context.Context, partition, leaseID string) (Lease, bool, error)
	// LeasePut inserts the lease of (l.Partition, l.ClientID), or replaces
	// the stored one whole.
	LeasePut(ctx context.Context, l Lease) error
	// LeaseDelete deletes the lease with leaseID in partition and reports
	// whether there was one.
	LeaseDelete(ctx context.Context, partition, leaseID string) (bool, error)
}
