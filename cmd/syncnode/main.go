// Command syncnode is a sync server for local-first and offline-first apps
// that speaks SSP2 and embeds a NATS server. Run `syncnode help` for usage.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "syncnode:", err)
		os.Exit(1)
	}
}
