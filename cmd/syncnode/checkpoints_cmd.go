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

	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/storage"
)

const checkpointsUsage = `Usage:
  syncnode checkpoints list [--partition P] [--json]
      list backfill checkpoints: state, owner epoch, watermark, observed rows
  syncnode checkpoints declare --partition P --name N
      declare a checkpoint of the stored schema version: until it activates,
      only processes that declared it serve the partition, and the
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

Every subcommand takes the node's storage and NATS settings:
  --config FILE    the node's config file (default $SYNCNODE_CONFIG)
  --data DIR       data directory (the SQLite file)
  --postgres URL   PostgreSQL URL
  --nats URL       NATS to write tokens and events to (default: the
                   config's external URLs, or the embedded server's
                   client port on 127.0.0.1)
  --no-nats        change SQL only; running nodes still refuse in SQL, and
                   "republish" writes the tokens later
`

// runCheckpoints dispatches the checkpoints subcommands.
func runCheckpoints(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, checkpointsUsage)
		return errors.New("checkpoints: missing subcommand")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, checkpointsUsage)
		return nil
	case "list", "declare", "activate", "gate", "rotate-epoch", "republish":
	default:
		fmt.Fprint(stderr, checkpointsUsage)
		return fmt.Errorf("checkpoints: unknown subcommand %q", sub)
	}
	fs := flag.NewFlagSet("checkpoints "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o          opsFlags
		partition  = fs.String("partition", "", "partition id")
		name       = fs.String("name", "", "checkpoint name")
		sources    = fs.String("sources", "", "comma-separated source tables")
		ownerEpoch = fs.Int64("owner-epoch", 0, "owner epoch (default: the stored row's)")
		watermark  = fs.Int64("watermark", 0, "watermark commitSeq (default: the stored row's)")
		asJSON     = fs.Bool("json", false, "print JSON")
	)
	o.define(fs)
	if err := fs.Parse(args); err != nil {
		if isHelp(err) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("checkpoints %s: unexpected arguments: %s", sub, strings.Join(fs.Args(), " "))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	need := func(names ...string) error {
		for _, n := range names {
			if !set[n] {
				return fmt.Errorf("checkpoints %s: --%s is required", sub, n)
			}
		}
		return nil
	}
	switch sub {
	case "declare":
		if err := need("partition", "name"); err != nil {
			return err
		}
	case "activate":
		if err := need("partition", "name", "sources"); err != nil {
			return err
		}
	case "gate", "rotate-epoch":
		if err := need("partition"); err != nil {
			return err
		}
	}

	env, err := o.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer env.Close()
	g := env.Gate

	switch sub {
	case "list":
		var parts []string
		if set["partition"] {
			parts = []string{*partition}
		}
		cps, err := env.Store.Checkpoints(ctx, parts...)
		if err != nil {
			return err
		}
		return printCheckpoints(stdout, cps, *asJSON)
	case "declare":
		cp, err := g.Declare(ctx, *partition, *name)
		if err != nil {
			return err
		}
		return printCheckpoints(stdout, []storage.Checkpoint{cp}, *asJSON)
	case "activate":
		key := g.Key(*partition, *name)
		cps, err := env.Store.Checkpoints(ctx, *partition)
		if err != nil {
			return err
		}
		// Owner epoch and watermark default to the stored row's (0 when
		// there is none, which the store refuses as undeclared).
		p := storage.CheckpointActivateParams{CheckpointKey: key, Sources: splitList(*sources)}
		for _, c := range cps {
			if c.CheckpointKey == key {
				p.OwnerEpoch, p.Watermark = c.OwnerEpoch, c.Watermark
			}
		}
		if set["owner-epoch"] {
			p.OwnerEpoch = *ownerEpoch
		}
		if set["watermark"] {
			p.Watermark = *watermark
		}
		out, err := g.Activate(ctx, p)
		if err != nil {
			return err
		}
		if out != storage.ActivateActivated {
			why := "a source table changed above the watermark: run the backfill again"
			if out == storage.ActivateUnverifiable {
				why = "pruning passed the watermark, so the window cannot be checked: run the backfill again"
			}
			return fmt.Errorf("checkpoint %s not activated: %s (%s)", key, out, why)
		}
		fmt.Fprintf(stdout, "activated %s at watermark %d\n", key, p.Watermark)
		return nil
	case "gate":
		st, err := env.Store.GateRead(ctx, *partition, env.SchemaVersion)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(stdout).Encode(st)
		}
		fmt.Fprintf(stdout, "schema version %d (revision %d)\n", st.SchemaVersion, st.SchemaRevision)
		if st.Registered {
			fmt.Fprintf(stdout, "log epoch      %s (gate revision %d)\n", st.LogEpoch, st.Revision)
		} else {
			fmt.Fprintln(stdout, "log epoch      (partition not registered)")
		}
		if fence, ok, err := env.Store.WriterFence(ctx, *partition); err != nil {
			return err
		} else if ok {
			fmt.Fprintf(stdout, "writer fence   %d\n", fence)
		}
		if len(st.Pending) == 0 {
			fmt.Fprintln(stdout, "pending        none: every node serves the partition")
		}
		for _, p := range st.Pending {
			fmt.Fprintf(stdout, "pending        %s (%s): served only by processes that declared it\n", p.Name, p.State)
		}
		return nil
	case "rotate-epoch":
		p, err := g.RotateEpoch(ctx, *partition)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "partition %q: new log epoch %s\n", p.ID, p.LogEpoch)
		return nil
	case "republish":
		if env.NATSURL == "" {
			return errors.New("checkpoints republish: needs NATS (drop --no-nats or fix --nats)")
		}
		if err := g.Reconcile(ctx); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "serve-gate tokens rebuilt from SQL")
		return nil
	}
	return nil
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

func printCheckpoints(w io.Writer, cps []storage.Checkpoint, asJSON bool) error {
	if asJSON {
		type row struct {
			Partition     string `json:"partition"`
			Name          string `json:"name"`
			SchemaVersion int32  `json:"schemaVersion"`
			State         string `json:"state"`
			OwnerEpoch    int64  `json:"ownerEpoch"`
			Watermark     int64  `json:"watermark"`
			ObservedRows  int64  `json:"observedRows"`
			UpdatedAtMs   int64  `json:"updatedAtMs"`
		}
		out := make([]row, len(cps))
		for i, c := range cps {
			out[i] = row{c.Partition, c.Name, c.SchemaVersion, string(c.State), c.OwnerEpoch, c.Watermark, c.ObservedRows, c.UpdatedAtMs}
		}
		return json.NewEncoder(w).Encode(out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tNAME\tVERSION\tSTATE\tOWNER EPOCH\tWATERMARK\tROWS\tUPDATED")
	for _, c := range cps {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\n", strconv.Quote(c.Partition), c.Name, c.SchemaVersion, c.State,
			c.OwnerEpoch, c.Watermark, c.ObservedRows, time.UnixMilli(c.UpdatedAtMs).UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

// opsFlags are the storage and NATS settings of an operator command.
type opsFlags struct {
	config, data, postgres, natsURL *string
	noNATS                          *bool
}

func (o *opsFlags) define(fs *flag.FlagSet) {
	o.config = fs.String("config", "", "the node's config file (TOML); default $SYNCNODE_CONFIG")
	o.data = fs.String("data", "", "data directory (the SQLite file)")
	o.postgres = fs.String("postgres", "", "PostgreSQL URL")
	o.natsURL = fs.String("nats", "", "NATS URL for tokens and events")
	o.noNATS = fs.Bool("no-nats", false, "change SQL only")
}

// open reads the node's configuration (defaults, file, environment, then
// these flags) and opens what the command needs through the node: its
// store and a serve gate for the stored schema version, bound to the
// node's NATS when reachable (a warning says when it is not).
func (o *opsFlags) open(ctx context.Context, stderr io.Writer) (*node.Admin, error) {
	c, err := loadConfig(*o.config, os.Getenv)
	if err != nil {
		return nil, err
	}
	if *o.data != "" {
		c.DataDir = *o.data
	}
	if *o.postgres != "" {
		c.Storage.PostgresURL = *o.postgres
	}
	nc, err := c.node()
	if err != nil {
		return nil, err
	}
	nc.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := node.OpenAdmin(ctx, nc, node.AdminOptions{NATSURL: *o.natsURL, NoNATS: *o.noNATS})
	if err != nil {
		return nil, err
	}
	for _, w := range a.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	return a, nil
}
