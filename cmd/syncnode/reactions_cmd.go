package main

import (
	"context"
	"encoding/json"
	"errors"
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
  syncnode reactions retry --partition P --key K
      make a dead letter pending again (attempts reset, failure cleared)
      and wake the runners
  syncnode reactions prune [--partition P] [--completed-before D] [--dead-letter-before D] [--limit N]
      delete completed reactions older than D (default 720h) and dead
      letters older than D (default 2160h), in passes of N (default 1000)

K is the idempotency key as listed, the JSON array
["<partition>","<clientId>","<clientCommitId>","<key>"] (quote it for the
shell). Every subcommand takes the node's storage and NATS settings:
  --config FILE    the node's config file (default $SYNCNODE_CONFIG)
  --data DIR       data directory (the SQLite file)
  --postgres URL   PostgreSQL URL
  --nats URL       NATS to publish the requeued event to (retry; default:
                   the config's external URLs, or the embedded server's
                   client port on 127.0.0.1)
  --no-nats        change SQL only; runners pick a retry up at their next
                   sweep
`

// runReactions dispatches the reactions subcommands.
func runReactions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, reactionsUsage)
		return errors.New("reactions: missing subcommand")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, reactionsUsage)
		return nil
	case "list", "show", "retry", "prune":
	default:
		fmt.Fprint(stderr, reactionsUsage)
		return fmt.Errorf("reactions: unknown subcommand %q", sub)
	}
	fs := flag.NewFlagSet("reactions "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o            opsFlags
		partition    = fs.String("partition", "", "partition id")
		key          = fs.String("key", "", "idempotency key (the JSON array)")
		statuses     = fs.String("status", "", "comma-separated statuses")
		types        = fs.String("type", "", "comma-separated types")
		limit        = fs.Int("limit", 100, "rows to list, or per prune pass")
		completedAge = fs.Duration("completed-before", reactions.DefaultCompletedRetention, "prune completed reactions older than this")
		deadAge      = fs.Duration("dead-letter-before", reactions.DefaultDeadLetterRetention, "prune dead letters older than this")
		asJSON       = fs.Bool("json", false, "print JSON")
	)
	o.define(fs)
	set, err := parseSubcommand(fs, args)
	if err != nil {
		if isHelp(err) {
			return nil
		}
		return err
	}
	if sub == "show" || sub == "retry" {
		for _, n := range []string{"partition", "key"} {
			if !set[n] {
				return fmt.Errorf("reactions %s: --%s is required", sub, n)
			}
		}
	}
	if sub == "prune" && !set["limit"] {
		*limit = storage.MaxReactionBatch
	}

	nc, err := o.nodeConfig(stderr)
	if err != nil {
		return err
	}
	off, err := node.OpenOffline(ctx, nc, node.OfflineOptions{NoNATS: true})
	if err != nil {
		return err
	}
	defer off.Close()
	st := off.Store
	k := storage.ReactionKey{Partition: *partition, IdempotencyKey: *key}

	switch sub {
	case "list":
		p := storage.ReactionListParams{Partition: *partition, AllPartitions: !set["partition"], Types: splitList(*types), Limit: *limit}
		for _, s := range splitList(*statuses) {
			p.Statuses = append(p.Statuses, storage.ReactionStatus(s))
		}
		rs, err := st.ReactionList(ctx, p)
		if err != nil {
			return err
		}
		return printReactions(stdout, rs, *asJSON)
	case "show":
		r, ok, err := st.ReactionGet(ctx, k)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("reactions show: no reaction %s in partition %q", *key, *partition)
		}
		if *asJSON {
			return json.NewEncoder(stdout).Encode(reactionView(r))
		}
		return showReaction(stdout, r)
	case "retry":
		ok, err := st.ReactionRetry(ctx, k, time.Now().UnixMilli())
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("reactions retry: %s in partition %q is not a dead letter (see reactions show)", *key, *partition)
		}
		fmt.Fprintf(stdout, "requeued %s\n", *key)
		if *o.noNATS {
			return nil
		}
		r, _, err := st.ReactionGet(ctx, k)
		if err != nil {
			return err
		}
		url := *o.natsURL
		if url == "" {
			url = node.NATSURL(nc.NATS)
		}
		opts, err := o.natsOptions()
		if err != nil {
			return err
		}
		conn, err := nats.Connect(url, opts...)
		if err == nil {
			defer conn.Close()
			err = reactions.PublishRequeued(conn, nc.Names, "syncnode-cli", r, time.Now())
		}
		if err != nil {
			fmt.Fprintf(stderr, "warning: could not wake the runners through NATS at %s (%v): they pick the reaction up at their next sweep\n", url, err)
		}
		return nil
	case "prune":
		now := time.Now()
		p := storage.ReactionPruneParams{Partition: *partition, AllPartitions: !set["partition"],
			CompletedBeforeMs: now.Add(-*completedAge).UnixMilli(), DeadLetterBeforeMs: now.Add(-*deadAge).UnixMilli(), Limit: *limit}
		var total storage.ReactionPruneResult
		for {
			res, err := st.ReactionPrune(ctx, p)
			if err != nil {
				return err
			}
			total.Completed += res.Completed
			total.DeadLetter += res.DeadLetter
			if !res.MayHaveMore {
				break
			}
		}
		fmt.Fprintf(stdout, "pruned %d completed and %d dead-lettered reactions\n", total.Completed, total.DeadLetter)
		return nil
	}
	return nil
}

// reactionJSON is a reaction as --json prints it.
type reactionJSON struct {
	Partition            string                   `json:"partition"`
	IdempotencyKey       string                   `json:"idempotencyKey"`
	Type                 string                   `json:"type"`
	Version              int32                    `json:"version"`
	Status               string                   `json:"status"`
	Attempts             int32                    `json:"attempts"`
	MaxAttempts          int32                    `json:"maxAttempts"`
	Payload              json.RawMessage          `json:"payload"`
	SourceClientID       string                   `json:"sourceClientId"`
	SourceClientCommitID string                   `json:"sourceClientCommitId"`
	SourceCommitSeq      int64                    `json:"sourceCommitSeq"`
	CreatedAtMs          int64                    `json:"createdAtMs"`
	AvailableAtMs        int64                    `json:"availableAtMs"`
	LeaseOwner           string                   `json:"leaseOwner,omitempty"`
	LeaseExpiresAtMs     int64                    `json:"leaseExpiresAtMs,omitempty"`
	CompletedAtMs        int64                    `json:"completedAtMs,omitempty"`
	Failure              *storage.ReactionFailure `json:"failure,omitempty"`
}

func reactionView(r storage.Reaction) reactionJSON {
	return reactionJSON{r.Partition, r.IdempotencyKey, r.Type, r.Version, string(r.Status), r.Attempts, r.MaxAttempts, r.Payload,
		r.SourceClientID, r.SourceClientCommitID, r.SourceCommitSeq, r.CreatedAtMs, r.AvailableAtMs, r.LeaseOwner,
		r.LeaseExpiresAtMs, r.CompletedAtMs, r.Failure}
}

func msTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

func printReactions(w io.Writer, rs []storage.Reaction, asJSON bool) error {
	if asJSON {
		out := make([]reactionJSON, len(rs))
		for i, r := range rs {
			out[i] = reactionView(r)
		}
		return json.NewEncoder(w).Encode(out)
	}
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

func showReaction(w io.Writer, r storage.Reaction) error {
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
			Concurrency: c.Concurrency, Lease: c.Lease.Duration, SweepInterval: c.SweepInterval.Duration,
			InitialBackoff: c.InitialBackoff.Duration, MaxBackoff: c.MaxBackoff.Duration,
			CompletedRetention: c.CompletedRetention.Duration, DeadLetterRetention: c.DeadLetterRetention.Duration,
		},
	}, nil
}
