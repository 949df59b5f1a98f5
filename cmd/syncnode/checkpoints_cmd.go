package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/admin"
	"github.com/syncnode/syncnode/node"
)

const checkpointsUsage = `Usage:
  syncnode checkpoints list [--partition P] [--json]
      list backfill checkpoints: state, owner epoch, watermark, observed rows
  syncnode checkpoints declare --partition P --name N
      declare a checkpoint of the stored schema version: until it activates,
      only processes that declared it serve the partition (a running node
      asked to declare does not: every node refuses it), and the
      partition's writer fence rises to the version
  syncnode checkpoints activate --partition P --name N --sources T1[,T2]
                                [--owner-epoch E] [--watermark W]
      activate a checkpoint (owner epoch and watermark default to the
      stored row's); fails when a source table changed above the
      watermark (stale) or pruning passed it (unverifiable)
  syncnode checkpoints gate --partition P
      show the serve-gate read of a partition
  syncnode checkpoints rotate-epoch --partition P
      give the partition a new log epoch (after restoring a backup)
  syncnode checkpoints republish
      rebuild every serve-gate token in JetStream KV from SQL

The commands ask a running node through its admin API on NATS
(syncnode.admin.checkpoints.*):
` + opsNATSUsage + `
Without a running node, --offline opens the node's store itself:
  --offline              change the store directly (no node needed)
` + opsStoreUsage + `  --no-nats              (implies --offline) change SQL only; running
                         nodes still refuse in SQL, and "republish" writes
                         the tokens later
`

var checkpointsCommand = opsCommand{name: "checkpoints", usage: checkpointsUsage, required: map[string][]string{
	"list": nil, "declare": {"partition", "name"}, "activate": {"partition", "name", "sources"},
	"gate": {"partition"}, "rotate-epoch": {"partition"}, "republish": nil,
}}

// runCheckpoints dispatches the checkpoints subcommands.
func runCheckpoints(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		partition, name, sources string
		ownerEpoch, watermark    int64
		asJSON                   bool
	)
	sub, o, set, err := checkpointsCommand.parse(args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&partition, "partition", "", "partition id")
		fs.StringVar(&name, "name", "", "checkpoint name")
		fs.StringVar(&sources, "sources", "", "comma-separated source tables")
		fs.Int64Var(&ownerEpoch, "owner-epoch", 0, "owner epoch (default: the stored row's)")
		fs.Int64Var(&watermark, "watermark", 0, "watermark commitSeq (default: the stored row's)")
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	})
	if o == nil {
		return err
	}
	api, closeAPI, err := o.api(ctx, stderr, false)
	if err != nil {
		return err
	}
	defer closeAPI()
	if sub == "republish" && o.noBus {
		return errors.New("checkpoints republish: needs NATS (drop --no-nats or fix --nats)")
	}
	return o.explain(runCheckpointOp(ctx, api, sub, checkpointArgs{
		partition: partition, name: name, sources: splitList(sources), asJSON: asJSON,
		ownerEpoch: optional(set["owner-epoch"], ownerEpoch), watermark: optional(set["watermark"], watermark),
		listOne: set["partition"],
	}, stdout))
}

type checkpointArgs struct {
	partition, name       string
	sources               []string
	ownerEpoch, watermark *int64
	listOne, asJSON       bool
}

func optional(set bool, v int64) *int64 {
	if !set {
		return nil
	}
	return &v
}

// runCheckpointOp runs one subcommand against the admin API: a running
// node's, or an offline one over the store.
func runCheckpointOp(ctx context.Context, api admin.API, sub string, a checkpointArgs, stdout io.Writer) error {
	switch sub {
	case "list":
		var req admin.CheckpointsRequest
		if a.listOne {
			req.Partition = &a.partition
		}
		res, err := api.Checkpoints(ctx, req)
		if err != nil {
			return err
		}
		return printCheckpoints(stdout, res.Checkpoints, a.asJSON)
	case "declare":
		cp, err := api.CheckpointDeclare(ctx, admin.DeclareRequest{Partition: a.partition, Name: a.name})
		if err != nil {
			return err
		}
		return printCheckpoints(stdout, []admin.Checkpoint{cp}, a.asJSON)
	case "activate":
		res, err := api.CheckpointActivate(ctx, admin.ActivateRequest{Partition: a.partition, Name: a.name, Sources: a.sources,
			OwnerEpoch: a.ownerEpoch, Watermark: a.watermark})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "activated %s/%s at watermark %d\n", res.Partition, res.Name, res.Watermark)
		return nil
	case "gate":
		g, err := api.Gate(ctx, admin.PartitionRequest{Partition: a.partition})
		if err != nil {
			return err
		}
		if a.asJSON {
			return json.NewEncoder(stdout).Encode(g)
		}
		fmt.Fprintf(stdout, "schema version %d (revision %d)\n", g.SchemaVersion, g.SchemaRevision)
		if g.Registered {
			fmt.Fprintf(stdout, "log epoch      %s (gate revision %d)\n", g.LogEpoch, g.Revision)
		} else {
			fmt.Fprintln(stdout, "log epoch      (partition not registered)")
		}
		if g.WriterFence != nil {
			fmt.Fprintf(stdout, "writer fence   %d\n", *g.WriterFence)
		}
		if len(g.Pending) == 0 {
			fmt.Fprintln(stdout, "pending        none: every node serves the partition")
		}
		for _, p := range g.Pending {
			fmt.Fprintf(stdout, "pending        %s (%s): served only by processes that declared it\n", p.Name, p.State)
		}
		return nil
	case "rotate-epoch":
		p, err := api.RotateEpoch(ctx, admin.PartitionRequest{Partition: a.partition})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "partition %q: new log epoch %s\n", p.Partition, p.LogEpoch)
		return nil
	case "republish":
		if _, err := api.Republish(ctx); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "serve-gate tokens rebuilt from SQL")
		return nil
	}
	return fmt.Errorf("checkpoints: unknown subcommand %q", sub)
}

// parseSubcommand parses an operator subcommand's flags, refusing
// positional arguments, and returns the names of the flags given.
func parseSubcommand(fs *flag.FlagSet, args []string) (map[string]bool, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%s: unexpected arguments: %s", fs.Name(), strings.Join(fs.Args(), " "))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set, nil
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func printCheckpoints(w io.Writer, cps []admin.Checkpoint, asJSON bool) error {
	if asJSON {
		if cps == nil {
			cps = []admin.Checkpoint{}
		}
		return json.NewEncoder(w).Encode(cps)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tNAME\tVERSION\tSTATE\tOWNER EPOCH\tWATERMARK\tROWS\tUPDATED")
	for _, c := range cps {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\n", strconv.Quote(c.Partition), c.Name, c.SchemaVersion, c.State,
			c.OwnerEpoch, c.Watermark, c.ObservedRows, time.UnixMilli(c.UpdatedAtMs).UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

// opsFlags are the settings of an operator command: how to reach a
// running node's admin API, or (offline) the node's storage.
type opsFlags struct {
	config, data, postgres, natsURL  *string
	natsUser, natsPassword, natsCred *string
	timeout                          *time.Duration
	offline, noNATS                  *bool

	url   string // the NATS URL in use
	noBus bool   // offline without NATS
}

func (o *opsFlags) define(fs *flag.FlagSet) {
	o.config = fs.String("config", "", "the node's config file (TOML); default $SYNCNODE_CONFIG")
	o.data = fs.String("data", "", "data directory (the SQLite file); with --offline")
	o.postgres = fs.String("postgres", "", "PostgreSQL URL; with --offline")
	o.natsURL = fs.String("nats", "", "NATS URL of the node")
	o.natsUser = fs.String("nats-user", "", "NATS user")
	o.natsPassword = fs.String("nats-password", "", "NATS password (default $SYNCNODE_NATS_PASSWORD)")
	o.natsCred = fs.String("nats-creds", "", "NATS credentials file")
	o.timeout = fs.Duration("timeout", admin.DefaultClientTimeout, "bound each admin request")
	o.offline = fs.Bool("offline", false, "open the store directly instead of asking a running node")
	o.noNATS = fs.Bool("no-nats", false, "with --offline (implied): change SQL only")
}

// natsOptions are the connection options of the flags.
func (o *opsFlags) natsOptions() ([]nats.Option, error) {
	opts := []nats.Option{nats.Name("syncnode-cli"), nats.Timeout(2 * time.Second), nats.MaxReconnects(0)}
	password := *o.natsPassword
	if password == "" {
		password = os.Getenv("SYNCNODE_NATS_PASSWORD")
	}
	switch {
	case *o.natsCred != "" && *o.natsUser != "":
		return nil, errors.New("--nats-creds and --nats-user are exclusive")
	case *o.natsCred != "":
		opts = append(opts, nats.UserCredentials(*o.natsCred))
	case *o.natsUser != "":
		opts = append(opts, nats.UserInfo(*o.natsUser, password))
	}
	return opts, nil
}

// api returns the admin API the command runs against: a running node's
// over NATS, or with --offline one over the store the flags name, opened
// through the node (node.OpenOffline); sqlOnly keeps an offline command
// off NATS as --no-nats does.
func (o *opsFlags) api(ctx context.Context, stderr io.Writer, sqlOnly bool) (admin.API, func(), error) {
	nc, err := o.target(stderr)
	if err != nil {
		return nil, nil, err
	}
	if !o.offlineMode() {
		return o.adminClient()
	}
	off, err := o.openOffline(ctx, nc, stderr, sqlOnly)
	if err != nil {
		return nil, nil, err
	}
	a, err := admin.New(admin.Config{Store: off.Store, Gate: off.Gate, Names: nc.Names, Leases: offlineLeases(off, nc)})
	if err != nil {
		_ = off.Close()
		return nil, nil, err
	}
	return a, func() { _ = off.Close() }, nil
}

// nodeConfig reads the node's configuration (defaults, file, environment,
// then these flags) as the node takes it.
func (o *opsFlags) nodeConfig(stderr io.Writer) (node.Config, error) {
	c, err := loadConfig(*o.config, os.Getenv)
	if err != nil {
		return node.Config{}, err
	}
	if *o.data != "" {
		c.DataDir = *o.data
	}
	if *o.postgres != "" {
		c.Storage.PostgresURL = *o.postgres
	}
	nc, err := c.node()
	if err != nil {
		return node.Config{}, err
	}
	nc.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return nc, nil
}

// openOffline opens the node's store and a serve gate for the stored
// schema version, bound to the node's NATS unless --no-nats; a NATS that
// cannot be reached leaves the command on SQL alone (a warning says so).
func (o *opsFlags) openOffline(ctx context.Context, nc node.Config, stderr io.Writer, sqlOnly bool) (*node.Offline, error) {
	password := *o.natsPassword
	if password == "" {
		password = os.Getenv("SYNCNODE_NATS_PASSWORD")
	}
	off, err := node.OpenOffline(ctx, nc, node.OfflineOptions{NATSURL: o.url, NoNATS: *o.noNATS || sqlOnly,
		User: *o.natsUser, Password: password, CredentialsFile: *o.natsCred})
	if err != nil {
		return nil, err
	}
	for _, w := range off.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	o.noBus = off.NATSURL == ""
	return off, nil
}
