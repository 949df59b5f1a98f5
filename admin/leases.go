package admin

import (
	"context"

	"github.com/syncnode/syncnode/internal/ids"
)

// Leases revokes and clears stored auth leases (*leases.Leases; offline,
// the same operations over the store).
type Leases interface {
	// Revoke marks the lease revoked and reports whether it exists.
	Revoke(ctx context.Context, partition, leaseID string) (bool, error)
	// Clear deletes the lease and reports whether it existed.
	Clear(ctx context.Context, partition, leaseID string) (bool, error)
}

// LeaseRequest names one auth lease (leases.revoke, leases.clear).
type LeaseRequest struct {
	Partition string `json:"partition"`
	LeaseID   string `json:"leaseId"`
}

// LeaseResponse answers leases.revoke (Revoked) and leases.clear
// (Cleared). A lease that does not exist is admin.not_found.
type LeaseResponse struct {
	Partition string `json:"partition"`
	LeaseID   string `json:"leaseId"`
	Revoked   bool   `json:"revoked,omitempty"`
	Cleared   bool   `json:"cleared,omitempty"`
}

func checkLease(req LeaseRequest) error {
	if err := needPartition(req.Partition); err != nil {
		return err
	}
	if req.LeaseID == "" {
		return invalid("leaseId is required")
	}
	for _, f := range []struct{ name, v string }{{"partition", req.Partition}, {"leaseId", req.LeaseID}} {
		if err := ids.Check(f.name, f.v); err != nil {
			return invalid("%v", err)
		}
	}
	return nil
}

// leaseOp runs a revoke or a clear: the request checked, the lease found.
func (a *Admin) leaseOp(ctx context.Context, verb string, req LeaseRequest, op func(context.Context, string, string) (bool, error)) error {
	if err := checkLease(req); err != nil {
		return err
	}
	ok, err := op(ctx, req.Partition, req.LeaseID)
	if err != nil {
		return toError(verb+" lease", err)
	}
	if !ok {
		return errorf(CodeNotFound, "no lease %s in partition %q", req.LeaseID, req.Partition)
	}
	return nil
}

// LeaseRevoke implements API: the next round the lease would authorize
// fails with sync.auth_lease_revoked, and live rounds no longer refresh
// it. Revoking twice is a no-op.
func (a *Admin) LeaseRevoke(ctx context.Context, req LeaseRequest) (LeaseResponse, error) {
	if a.cfg.Leases == nil {
		return LeaseResponse{}, leasesOff()
	}
	if err := a.leaseOp(ctx, "revoke", req, a.cfg.Leases.Revoke); err != nil {
		return LeaseResponse{}, err
	}
	return LeaseResponse{Partition: req.Partition, LeaseID: req.LeaseID, Revoked: true}, nil
}

// LeaseClear implements API: the lease is deleted, revoked or not, and
// the client's next authorized round gets a fresh lease id.
func (a *Admin) LeaseClear(ctx context.Context, req LeaseRequest) (LeaseResponse, error) {
	if a.cfg.Leases == nil {
		return LeaseResponse{}, leasesOff()
	}
	if err := a.leaseOp(ctx, "clear", req, a.cfg.Leases.Clear); err != nil {
		return LeaseResponse{}, err
	}
	return LeaseResponse{Partition: req.Partition, LeaseID: req.LeaseID, Cleared: true}, nil
}

func leasesOff() *Error {
	return errorf(CodeUnavailable, "auth leases are off on this node ([leases] ttl and key)")
}
