package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/reactions"
	"github.com/syncnode/syncnode/rules"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
)

const reactionsUsage = `Usage:
  syncnode reactions list [--partition P] [--status S[,S]] [--type T[,T]] [--limit N] [--json]
      list reactions, newest first (every partition unless --partition);
      statuses: pending, leased, completed, dead-letter
  syncnode reactions show --partition P --key K [--json]
      show one reaction: payload, attempts, lease, last failure
  syncnode reactions retry --partition P --key K [--json]
      make a dead letter pending again (attempts reset, failure cleared)
      and wake the runners
  syncnode reactions prune [--partition P] [--completed-before D] [--dead-letter-before D] [--limit N] [--json]
      delete completed reactions older than D (default 720h) and dead
      letters older than D (default 2160h), in passes of N (default 1000);
      pending and leased reactions are never pruned
  syncnode reactions stats [--json]
      count reactions by status (every partition), with the answering
      node's runner counters

K is the idempotency key as listed, the JSON array
["<partition>","<clientId>","<clientCommitId>","<key>"] (quote it for the
shell).

The commands ask a running node through its admin API on NATS
(syncnode.admin.reactions.*):
` + opsNATSUsage + `
Without a running node, --offline opens the node's store itself:
  --offline              read and change the store directly (no node needed)
` + opsStoreUsage + `  --no-nats              (implies --offline) change SQL only: runners pick a
                         retry up at their next sweep instead of at once
`

var reactionsCommand = opsCommand{name: "reactions", usage: reactionsUsage, required: map[string][]string{
	"list": nil, "show": {"partition", "key"}, "retry": {"partition", "key"}, "prune": nil, "stats": nil,
}}

// runReactions dispatches the reactions subcommands.
func runReactions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		partition, key, statuses, types string
		limit                           int
		completedAge, deadAge           time.Duration
		asJSON                          bool
	)
	sub, o, set, err := reactionsCommand.parse(args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&partition, "partition", "", "partition id")
		fs.StringVar(&key, "key", "", "idempotency key (the JSON array)")
		fs.StringVar(&statuses, "status", "", "comma-separated statuses")
		fs.StringVar(&types, "type", "", "comma-separated types")
		fs.IntVar(&limit, "limit", 0, "rows to list (default 100), or per prune pass (default 1000)")
		fs.DurationVar(&completedAge, "completed-before", reactions.DefaultCompletedRetention, "prune completed reactions older than this")
		fs.DurationVar(&deadAge, "dead-letter-before", reactions.DefaultDeadLetterRetention, "prune dead letters older than this")
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	})
	if o == nil {
		return err
	}
	if set["limit"] && limit == 0 {
		return fmt.Errorf("reactions %s: --limit must be 1..%d", sub, storage.MaxReactionBatch)
	}
	var onePartition *string
	if set["partition"] {
		onePartition = &partition
	}

	api, closeAPI, err := o.reactionsAPI(ctx, stderr)
	if err != nil {
		return err
	}
	defer closeAPI()
	return o.explain(runReactionOp(ctx, api, sub, reactionArgs{
		partition: onePartition, key: storage.ReactionKey{Partition: partition, IdempotencyKey: key},
		statuses: splitList(statuses), types: splitList(types), limit: limit, asJSON: asJSON,
		completedAge: durationMs(set["completed-before"], completedAge), deadAge: durationMs(set["dead-letter-before"], deadAge),
	}, stdout, stderr))
}

type reactionArgs struct {
	partition             *string
	key                   storage.ReactionKey
	statuses, types       []string
	limit                 int
	completedAge, deadAge *int64
	asJSON                bool
}

// durationMs is d in milliseconds when the flag was given, else nil (the
// API's default).
func durationMs(set bool, d time.Duration) *int64 {
	if !set {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

// runReactionOp runs one subcommand against the reactions API: a running
// node's, or an offline one over the store.
func runReactionOp(ctx context.Context, api reactions.AdminAPI, sub string, a reactionArgs, stdout, stderr io.Writer) error {
	printJSON := func(v any) error { return json.NewEncoder(stdout).Encode(v) }
	switch sub {
	case "list":
		req := reactions.ListRequest{Partition: a.partition, Types: a.types, Limit: a.limit}
		for _, s := range a.statuses {
			req.Statuses = append(req.Statuses, storage.ReactionStatus(s))
		}
		res, err := api.List(ctx, req)
		if err != nil {
			return err
		}
		if a.asJSON {
			return printJSON(res.Reactions)
		}
		return printReactions(stdout, res.Reactions)
	case "show":
		r, err := api.Show(ctx, reactions.KeyRequest{Partition: a.key.Partition, IdempotencyKey: a.key.IdempotencyKey})
		if err != nil {
			return err
		}
		if a.asJSON {
			return printJSON(r)
		}
		return showReaction(stdout, r)
	case "retry":
		res, err := api.Retry(ctx, reactions.KeyRequest{Partition: a.key.Partition, IdempotencyKey: a.key.IdempotencyKey})
		if err != nil {
			return err
		}
		if !res.Woken {
			fmt.Fprintf(stderr, "warning: the runners were not woken (%s): they pick the reaction up at their next sweep\n", res.WakeError)
		}
		if a.asJSON {
			return printJSON(res)
		}
		fmt.Fprintf(stdout, "requeued %s\n", a.key.IdempotencyKey)
		return nil
	case "prune":
		req := reactions.PruneRequest{Partition: a.partition, CompletedOlderThanMs: a.completedAge, DeadLetterOlderThanMs: a.deadAge, Limit: a.limit}
		var total reactions.PruneResponse
		for {
			res, err := api.Prune(ctx, req)
			if err != nil {
				return err
			}
			total.Completed += res.Completed
			total.DeadLetter += res.DeadLetter
			if !res.MayHaveMore {
				break
			}
		}
		if a.asJSON {
			return printJSON(total)
		}
		fmt.Fprintf(stdout, "pruned %d completed and %d dead-lettered reactions\n", total.Completed, total.DeadLetter)
		return nil
	case "stats":
		st, err := api.Stats(ctx)
		if err != nil {
			return err
		}
		if a.asJSON {
			return printJSON(st)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		c := st.Counts
		fmt.Fprintf(tw, "pending\t%d\nleased\t%d\ncompleted\t%d\ndead-letter\t%d\n", c.Pending, c.Leased, c.Completed, c.DeadLetter)
		if r := st.Runner; r != nil {
			fmt.Fprintf(tw, "runner on %s\tclaimed %d, completed %d, failed %d, dead-lettered %d, lost leases %d, pruned %d, in flight %d\n",
				st.Node, r.Claimed, r.Completed, r.Failed, r.DeadLettered, r.LostLeases, r.Pruned, r.InFlight)
		} else {
			fmt.Fprintf(tw, "runner on %s\tnone\n", st.Node)
		}
		return tw.Flush()
	}
	return fmt.Errorf("reactions: unknown subcommand %q", sub)
}

// reactionsAPI returns the reactions API the command runs against: a
// running node's over NATS, or with --offline one over the store the
// flags name. Offline, a retry still wakes the runners through the
// node's NATS unless --no-nats.
func (o *opsFlags) reactionsAPI(ctx context.Context, stderr io.Writer) (reactions.AdminAPI, func(), error) {
	nc, err := o.target(stderr)
	if err != nil {
		return nil, nil, err
	}
	if !o.offlineMode() {
		c, closeConn, err := o.adminClient()
		if err != nil {
			return nil, nil, err
		}
		return reactions.NewAdminClient(c), closeConn, nil
	}
	opts, err := o.natsOptions()
	if err != nil {
		return nil, nil, err
	}
	off, err := node.OpenOffline(ctx, nc, node.OfflineOptions{NoNATS: true})
	if err != nil {
		return nil, nil, err
	}
	closeAll := func() { _ = off.Close() }
	var conn *nats.Conn
	if !*o.noNATS {
		if conn, err = nats.Connect(o.url, opts...); err != nil {
			fmt.Fprintf(stderr, "warning: NATS at %s unreachable (%v): a retry wakes no runner\n", o.url, err)
			conn = nil
		} else {
			closeAll = func() { conn.Close(); _ = off.Close() }
		}
	}
	a, err := reactions.NewAdmin(reactions.AdminConfig{Store: off.Store, Conn: conn, Names: nc.Names, Node: "syncnode-cli"})
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return a, closeAll, nil
}

func msTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

func printReactions(w io.Writer, rs []reactions.Info) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tTYPE\tSTATUS\tATTEMPTS\tCREATED\tDUE\tLAST FAILURE\tKEY")
	for _, r := range rs {
		failure := "-"
		if r.Failure != nil {
			failure = r.Failure.Code
		}
		due := msTime(r.AvailableAtMs)
		switch r.Status {
		case storage.ReactionCompleted:
			due = "-"
		case storage.ReactionLeased:
			due = "lease " + msTime(r.LeaseExpiresAtMs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", strconv.Quote(r.Partition), r.Type, r.Status, r.Attempts, r.MaxAttempts,
			msTime(r.CreatedAtMs), due, failure, r.IdempotencyKey)
	}
	return tw.Flush()
}

func showReaction(w io.Writer, r reactions.Info) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("partition", strconv.Quote(r.Partition))
	row("key", r.IdempotencyKey)
	row("type", fmt.Sprintf("%s (version %d)", r.Type, r.Version))
	row("status", string(r.Status))
	row("attempts", fmt.Sprintf("%d of %d", r.Attempts, r.MaxAttempts))
	row("source", fmt.Sprintf("client %s, commit %s, commitSeq %d", r.SourceClientID, r.SourceClientCommitID, r.SourceCommitSeq))
	row("created", msTime(r.CreatedAtMs))
	switch r.Status {
	case storage.ReactionPending:
		row("due", msTime(r.AvailableAtMs))
	case storage.ReactionLeased:
		row("lease", fmt.Sprintf("%s until %s", r.LeaseOwner, msTime(r.LeaseExpiresAtMs)))
	case storage.ReactionCompleted:
		row("completed", msTime(r.CompletedAtMs))
	}
	if f := r.Failure; f != nil {
		failure := f.Code + " at " + msTime(f.AtMs)
		if f.Details != nil {
			failure += " " + string(f.Details)
		}
		row("last failure", failure)
	}
	row("payload", string(r.Payload))
	return tw.Flush()
}

// node turns the [reactions] section into the node's configuration,
// compiling the rules against the served schema (none without one).
func (c reactionsConfig) node(sch *schema.Schema) (node.ReactionsConfig, error) {
	var planner engine.ReactionPlanner
	if sch != nil {
		var err error
		if planner, err = rules.CompileReactions(sch, c.Rules); err != nil {
			return node.ReactionsConfig{}, fmt.Errorf("reactions.rules: %w", err)
		}
	}
	return node.ReactionsConfig{
		Planner:  planner,
		Disabled: !c.Enabled,
		Runner: reactions.Config{
			Concurrency: c.Concurrency, Lease: c.Lease.Duration, Heartbeat: c.Heartbeat.Duration, SweepInterval: c.SweepInterval.Duration,
			InitialBackoff: c.InitialBackoff.Duration, MaxBackoff: c.MaxBackoff.Duration,
			CompletedRetention: c.CompletedRetention.Duration, DeadLetterRetention: c.DeadLetterRetention.Duration,
		},
	}, nil
}
