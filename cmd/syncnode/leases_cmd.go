package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/syncnode/syncnode/leases"
	"github.com/syncnode/syncnode/node"
)

const leasesUsage = `Usage:
  syncnode leases revoke --partition P --lease ID   revoke an auth lease: the next round it would
                                                    authorize fails with sync.auth_lease_revoked,
                                                    and live rounds no longer refresh it
  syncnode leases clear --partition P --lease ID    delete a lease (revoked or not): the client's
                                                    next authorized round gets a fresh lease id

Leases are SQL records the node reads on every request, so both change the
store directly (--config, or --data / --postgres) and take effect at once,
on a running node too. revoke re-signs the record with [leases] key.
`

// runLeases is `syncnode leases`.
func runLeases(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, leasesUsage)
		return errors.New("leases: missing subcommand")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, leasesUsage)
		return nil
	case "revoke", "clear":
	default:
		fmt.Fprint(stderr, leasesUsage)
		return fmt.Errorf("leases: unknown subcommand %q", sub)
	}
	fs := flag.NewFlagSet("leases "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o         opsFlags
		partition = fs.String("partition", "", "partition id")
		leaseID   = fs.String("lease", "", "lease id")
	)
	o.define(fs)
	set, err := parseSubcommand(fs, args)
	if err != nil {
		if isHelp(err) {
			return nil
		}
		return err
	}
	for _, n := range []string{"partition", "lease"} {
		if !set[n] {
			return fmt.Errorf("leases %s: --%s is required", sub, n)
		}
	}
	nc, err := o.nodeConfig(stderr)
	if err != nil {
		return err
	}
	if sub == "revoke" && nc.Leases.Key == nil {
		return errors.New("leases revoke: the config has no [leases] key to sign the revoked record with")
	}
	off, err := node.OpenOffline(ctx, nc, node.OfflineOptions{NoNATS: true})
	if err != nil {
		return err
	}
	defer off.Close()
	var ok bool
	if sub == "revoke" {
		ok, err = leases.Revoke(ctx, off.Store, nc.Leases.Key, *partition, *leaseID)
	} else {
		ok, err = leases.Clear(ctx, off.Store, *partition, *leaseID)
	}
	if err != nil {
		return fmt.Errorf("leases %s: %w", sub, err)
	}
	if !ok {
		return fmt.Errorf("leases %s: no lease %s in partition %q", sub, *leaseID, *partition)
	}
	verb := map[string]string{"revoke": "revoked", "clear": "cleared"}[sub]
	fmt.Fprintf(stdout, "lease %s in partition %q %s\n", *leaseID, *partition, verb)
	return nil
}
