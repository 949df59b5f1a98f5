package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/admin"
	"github.com/syncnode/syncnode/node"
)

// The flags of every operator command, for its usage text: how to reach
// the node's admin API, and which store --offline opens.
const (
	opsNATSUsage = `  --nats URL             NATS the node is on (default: the config's external
                         URLs, or the embedded server's client port on
                         127.0.0.1)
  --nats-user U          NATS user (the operator user of docs/bus.md)
  --nats-password P      its password ($SYNCNODE_NATS_PASSWORD)
  --nats-creds FILE      a NATS credentials file instead
  --timeout D            bound each request (default 30s)
`
	opsStoreUsage = `  --config FILE          the node's config file (default $SYNCNODE_CONFIG)
  --data DIR             data directory (the SQLite file)
  --postgres URL         PostgreSQL URL
`
)

// opsCommand is an operator command with subcommands — `syncnode
// checkpoints|reactions|leases <sub> [flags]` — that runs against a
// running node's admin API or, with --offline, the store.
type opsCommand struct {
	name  string
	usage string
	// required lists each subcommand's required flags; a subcommand
	// that is not a key is unknown.
	required map[string][]string
}

// parse picks the subcommand of args and parses its flags: define adds
// the command's own, then the opsFlags. It prints the usage on help (and
// returns nil, nil) and on a missing or unknown subcommand, and refuses
// positional arguments and missing required flags. set holds the names
// of the flags given.
func (c opsCommand) parse(args []string, stdout, stderr io.Writer, define func(fs *flag.FlagSet)) (sub string, o *opsFlags, set map[string]bool, err error) {
	if len(args) == 0 {
		fmt.Fprint(stderr, c.usage)
		return "", nil, nil, fmt.Errorf("%s: missing subcommand", c.name)
	}
	sub, args = args[0], args[1:]
	switch sub {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, c.usage)
		return "", nil, nil, nil
	}
	required, ok := c.required[sub]
	if !ok {
		fmt.Fprint(stderr, c.usage)
		return "", nil, nil, fmt.Errorf("%s: unknown subcommand %q", c.name, sub)
	}
	fs := flag.NewFlagSet(c.name+" "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o = &opsFlags{}
	define(fs)
	o.define(fs)
	if set, err = parseSubcommand(fs, args); err != nil {
		if isHelp(err) {
			return "", nil, nil, nil
		}
		return "", nil, nil, err
	}
	for _, n := range required {
		if !set[n] {
			return "", nil, nil, fmt.Errorf("%s %s: --%s is required", c.name, sub, n)
		}
	}
	return sub, o, set, nil
}

// offlineMode reports whether the command opens the store itself
// (--offline, or --no-nats which implies it).
func (o *opsFlags) offlineMode() bool { return *o.offline || *o.noNATS }

// target reads the node's configuration and settles the NATS URL the
// command uses: --nats, else the configuration's.
func (o *opsFlags) target(stderr io.Writer) (node.Config, error) {
	nc, err := o.nodeConfig(stderr)
	if err != nil {
		return node.Config{}, err
	}
	o.url = *o.natsURL
	if o.url == "" {
		o.url = node.NATSURL(nc.NATS)
	}
	return nc, nil
}

// adminClient connects to the node's NATS (target first) and returns the
// admin API over it; closeConn closes the connection.
func (o *opsFlags) adminClient() (c *admin.Client, closeConn func(), err error) {
	opts, err := o.natsOptions()
	if err != nil {
		return nil, nil, err
	}
	conn, err := nats.Connect(o.url, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("no node reachable: NATS at %s: %w\nstart the node, or pass --offline to use the store directly", o.url, err)
	}
	return admin.NewClient(conn, *o.timeout), conn.Close, nil
}

// explain adds to a failure because no node answered what to do.
func (o *opsFlags) explain(err error) error {
	if errors.Is(err, admin.ErrNoNode) {
		return fmt.Errorf("%w\nno syncnode answers at %s: start one, check the NATS user's permissions, or pass --offline to use the store directly", err, o.url)
	}
	return err
}
