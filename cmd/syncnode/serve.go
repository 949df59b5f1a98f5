package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/BurntSushi/toml"
)

// runServe resolves the configuration and, until the node is wired up,
// prints it with the version.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg, err := parseServeFlags(fs, args, os.Getenv)
	if err != nil {
		if isHelp(err) {
			return nil
		}
		return err
	}
	fmt.Fprintln(stdout, "syncnode", buildVersion())
	fmt.Fprintln(stdout, "# resolved configuration")
	return toml.NewEncoder(stdout).Encode(cfg)
}
