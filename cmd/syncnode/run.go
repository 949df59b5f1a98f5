package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=…"; builds
// from a checkout report the module version or "devel".
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

const usage = `syncnode — an SSP2 sync server with an embedded NATS server

Usage:
  syncnode serve [flags]     run a node (the default command)
  syncnode client CMD ...    mint a token, push a row, pull a table (see "syncnode client help")
  syncnode checkpoints CMD   list, declare and activate backfill checkpoints, rotate an epoch (see "syncnode checkpoints help")
  syncnode load SCENARIO     drive a server with virtual clients and check the thresholds (see "syncnode load -h")
  syncnode backup --out F    a consistent online copy of a SQLite node (see "syncnode backup -h")
  syncnode restore --from F  restore a backup and rotate every log epoch
  syncnode leases CMD        revoke or clear an auth lease (see "syncnode leases help")
  syncnode reactions CMD     list, show, retry and prune durable reactions (see "syncnode reactions help")
  syncnode ops call ...      run a registered remote query or command (see "syncnode ops help")
  syncnode version           print the version
  syncnode help              show this help

Run "syncnode serve -h" for the serve flags.
`

// run is the whole command, testable without a process.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return runServe(ctx, args, stdout, stderr)
	case "client":
		return runClient(ctx, args, stdout, stderr)
	case "checkpoints":
		return runCheckpoints(ctx, args, stdout, stderr)
	case "load":
		return runLoad(ctx, args, stdout, stderr)
	case "reactions":
		return runReactions(ctx, args, stdout, stderr)
	case "ops":
		return runOps(ctx, args, stdout, stderr)
	case "leases":
		return runLeases(ctx, args, stdout, stderr)
	case "backup":
		return runBackup(ctx, args, stdout, stderr)
	case "restore":
		return runRestore(ctx, args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "syncnode", buildVersion())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// errHelp is returned when -h was asked for; it is not a failure.
var errHelp = flag.ErrHelp

func isHelp(err error) bool { return errors.Is(err, errHelp) }
