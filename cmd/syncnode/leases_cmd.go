package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/syncnode/syncnode/admin"
	"github.com/syncnode/syncnode/leases"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/storage"
)

const leasesUsage = `Usage:
  syncnode leases revoke --partition P --lease ID   revoke an auth lease: the next round it would
                                                    authorize fails with sync.auth_lease_revoked,
                                                    and live rounds no longer refresh it
  syncnode leases clear --partition P --lease ID    delete a lease (revoked or not): the client's
                                                    next authorized round gets a fresh lease id

The commands ask a running node through its admin API on NATS
(syncnode.admin.leases.*); the node needs [leases] on:
` + opsNATSUsage + `
Leases are SQL records every node reads on each request, so without a
running node --offline changes the store directly, with the same effect
at once (revoke re-signs the record with the config's [leases] key):
  --offline              change the store directly (no node needed)
` + opsStoreUsage

var leasesCommand = opsCommand{name: "leases", usage: leasesUsage, required: map[string][]string{
	"revoke": {"partition", "lease"}, "clear": {"partition", "lease"},
}}

// runLeases is `syncnode leases`.
func runLeases(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var req admin.LeaseRequest
	sub, o, _, err := leasesCommand.parse(args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&req.Partition, "partition", "", "partition id")
		fs.StringVar(&req.LeaseID, "lease", "", "lease id")
	})
	if o == nil {
		return err
	}
	// Leases are SQL records only: offline needs no NATS.
	api, closeAPI, err := o.api(ctx, stderr, true)
	if err != nil {
		return err
	}
	defer closeAPI()
	op, verb := api.LeaseClear, "cleared"
	if sub == "revoke" {
		op, verb = api.LeaseRevoke, "revoked"
	}
	if _, err := op(ctx, req); err != nil {
		return o.explain(fmt.Errorf("leases %s: %w", sub, err))
	}
	fmt.Fprintf(stdout, "lease %s in partition %q %s\n", req.LeaseID, req.Partition, verb)
	return nil
}

// offlineLeases are the lease operations of an offline command: over the
// store, revoking with the config's [leases] key (none: revoke is
// refused).
func offlineLeases(off *node.Offline, nc node.Config) admin.Leases {
	return storeLeases{st: off.Store, key: nc.Leases.Key}
}

type storeLeases struct {
	st  storage.LeaseStore
	key []byte
}

func (s storeLeases) Revoke(ctx context.Context, partition, leaseID string) (bool, error) {
	if s.key == nil {
		return false, &admin.Error{Code: admin.CodeUnavailable, Message: "the config has no [leases] key to sign the revoked record with"}
	}
	return leases.Revoke(ctx, s.st, s.key, partition, leaseID)
}

func (s storeLeases) Clear(ctx context.Context, partition, leaseID string) (bool, error) {
	return leases.Clear(ctx, s.st, partition, leaseID)
}
