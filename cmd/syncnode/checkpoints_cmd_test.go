package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncnode/syncnode/admin"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// TestCheckpointsCommand drives a running node's serve gate from the
// command line: a declaration closes the partition on the node (through
// KV), bad input is refused with typed errors and changes nothing, the
// activation reopens it.
func TestCheckpointsCommand(t *testing.T) {
	ctx := context.Background()
	sch, err := loadSchema("")
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	n, err := node.New(node.Config{
		DataDir: dataDir, Schema: sch, Name: "cli-test", HTTP: node.HTTPConfig{Listen: "127.0.0.1:0"},
		NATS: embedded.Config{Port: embedded.RandomPort, Host: "127.0.0.1"},
		API:  httpapi.Config{Auth: httpapi.AuthenticatorFunc(nil)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	poll.Until(t, 10*time.Second, "the node's gate watch to go live", n.Gate.WatchLive)
	if _, err := n.Store.PartitionTouch(ctx, "acme", time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	common := []string{"--data", dataDir, "--nats", n.NATS.ClientURL()}
	cp := func(args ...string) (string, error) {
		return cli(t, append(append([]string{"checkpoints"}, args...), common...)...)
	}
	mustCP := func(args ...string) string {
		t.Helper()
		out, err := cp(args...)
		if err != nil {
			t.Fatalf("checkpoints %s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	admit := func() error {
		_, err := n.Gate.Admit(ctx, "acme")
		return err
	}
	if err := admit(); err != nil {
		t.Fatal(err)
	}

	out := mustCP("declare", "--partition", "acme", "--name", "tasks-projection")
	if !strings.Contains(out, "tasks-projection") || !strings.Contains(out, "declared") {
		t.Fatalf("declare printed %q", out)
	}
	poll.Until(t, 10*time.Second, "the node to refuse the partition after the declaration", func() bool { return admit() != nil })
	if ssp2.CodeOf(admit()) != ssp2.CodeSchemaNotReady {
		t.Fatalf("admit = %v", admit())
	}
	if err := n.Gate.Ready(ctx); err == nil || !strings.Contains(err.Error(), "tasks-projection") {
		t.Fatalf("Ready = %v", err)
	}

	var listed []map[string]any
	if err := json.Unmarshal([]byte(mustCP("list", "--json")), &listed); err != nil || len(listed) != 1 || listed[0]["state"] != "declared" {
		t.Fatalf("list --json = %v, %v", listed, err)
	}
	if out := mustCP("gate", "--partition", "acme"); !strings.Contains(out, "pending        tasks-projection (declared)") || !strings.Contains(out, "writer fence   1") {
		t.Fatalf("gate printed %q", out)
	}

	// Bad input: typed errors, nothing changed.
	before, err := n.Store.Checkpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"activate", "--partition", "acme", "--name", "no-such", "--sources", "tasks"}, string(ssp2.CodeStorageCheckpointNotDeclared)},
		{[]string{"activate", "--partition", "acme", "--name", "tasks-projection", "--sources", "tasks", "--owner-epoch", "7"}, string(ssp2.CodeStorageCheckpointSuperseded)},
		{[]string{"activate", "--partition", "acme", "--name", "tasks-projection", "--sources", "no_table"}, string(ssp2.CodeStorageInvalidCheckpoint)},
		{[]string{"activate", "--partition", "acme", "--name", "tasks-projection", "--sources", "tasks", "--watermark", "99"}, string(ssp2.CodeStorageInvalidCheckpoint)},
		{[]string{"declare", "--partition", "acme", "--name", "bad name"}, string(ssp2.CodeStorageInvalidCheckpoint)},
		{[]string{"declare", "--partition", "acme"}, "--name is required"},
		{[]string{"activate", "--partition", "acme", "--name", "tasks-projection"}, "--sources is required"},
		{[]string{"frobnicate"}, "unknown subcommand"},
	} {
		_, err := cp(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("checkpoints %s = %v, want an error with %s", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	after, err := n.Store.Checkpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) || after[0] != before[0] {
		t.Fatalf("refused commands changed the checkpoints: %+v → %+v", before, after)
	}

	if out := mustCP("activate", "--partition", "acme", "--name", "tasks-projection", "--sources", "tasks"); !strings.Contains(out, "activated") {
		t.Fatalf("activate printed %q", out)
	}
	poll.Until(t, 10*time.Second, "the node to serve the partition after the activation", func() bool { return admit() == nil })
	if err := n.Gate.Ready(ctx); err != nil {
		t.Fatal(err)
	}

	p, err := n.Store.PartitionGet(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if out := mustCP("rotate-epoch", "--partition", "acme"); !strings.Contains(out, "new log epoch") || strings.Contains(out, p.LogEpoch) {
		t.Fatalf("rotate-epoch printed %q (old epoch %s)", out, p.LogEpoch)
	}
	if out := mustCP("republish"); !strings.Contains(out, "rebuilt") {
		t.Fatalf("republish printed %q", out)
	}
	// Without NATS, SQL alone.
	out, err = cli(t, "checkpoints", "declare", "--partition", "acme", "--name", "offline", "--data", dataDir, "--no-nats")
	if err != nil || !strings.Contains(out, "offline") {
		t.Fatalf("declare --no-nats = %q, %v", out, err)
	}
	cps, err := n.Store.Checkpoints(ctx, "acme")
	if err != nil || len(cps) != 2 || cps[0].Name != "offline" || cps[0].State != storage.CheckpointDeclared {
		t.Fatalf("checkpoints after an offline declaration: %+v, %v", cps, err)
	}
}

// TestCheckpointsThroughAdminAPI: against a running node the commands go
// through its admin API (the store is never opened: --data names nothing),
// as the operator user of the documented permissions; without a node
// answering they say so and point at --offline, which opens the store.
func TestCheckpointsThroughAdminAPI(t *testing.T) {
	ctx := context.Background()
	sch, err := loadSchema("")
	if err != nil {
		t.Fatal(err)
	}
	start := func(dataDir string, noAdmin bool) *node.Node {
		n, err := node.New(node.Config{
			DataDir: dataDir, Schema: sch, Name: "cli-admin", HTTP: node.HTTPConfig{Listen: "127.0.0.1:0"},
			Admin: node.AdminConfig{Disabled: noAdmin},
			NATS: embedded.Config{Port: embedded.RandomPort, Host: "127.0.0.1", ConfigFile: "../../docs/nats-permissions.conf",
				User: "syncnode", Password: "node-secret"},
			API: httpapi.Config{Auth: httpapi.AuthenticatorFunc(nil)},
		})
		if err == nil {
			err = n.Start(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := n.Stop(ctx); err != nil {
				t.Error(err)
			}
		})
		return n
	}
	n := start(t.TempDir(), false)
	if _, err := n.Store.PartitionTouch(ctx, "acme", time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	nowhere := filepath.Join(t.TempDir(), "nothing-here")
	remote := []string{"--nats", n.NATS.ClientURL(), "--nats-user", "operator", "--nats-password", "operator-secret", "--data", nowhere}
	cp := func(args ...string) (string, error) {
		return cli(t, append(append([]string{"checkpoints"}, args...), remote...)...)
	}
	if _, err := cp("declare", "--partition", "acme", "--name", "remote"); err != nil {
		t.Fatal(err)
	}
	out, err := cp("list", "--json")
	var listed []map[string]any
	if err != nil || json.Unmarshal([]byte(out), &listed) != nil || len(listed) != 1 || listed[0]["name"] != "remote" {
		t.Fatalf("list through the admin API = %q, %v", out, err)
	}
	if _, err := os.Stat(nowhere); !os.IsNotExist(err) {
		t.Fatalf("the command touched --data: %v", err)
	}

	// A wrong password: refused by the server.
	_, err = cli(t, "checkpoints", "list", "--nats", n.NATS.ClientURL(), "--nats-user", "operator", "--nats-password", "wrong")
	if err == nil || !strings.Contains(err.Error(), "--offline") {
		t.Fatalf("wrong password = %v", err)
	}

	// A node without the admin API: the command says so; --offline opens
	// the store.
	dataDir := t.TempDir()
	quiet := start(dataDir, true)
	_, err = cli(t, "checkpoints", "list", "--nats", quiet.NATS.ClientURL(), "--nats-user", "operator", "--nats-password", "operator-secret")
	if !errors.Is(err, admin.ErrNoNode) || !strings.Contains(err.Error(), "--offline") {
		t.Fatalf("no admin API = %v", err)
	}
	out, err = cli(t, "checkpoints", "list", "--offline", "--data", dataDir, "--nats", quiet.NATS.ClientURL(),
		"--nats-user", "syncnode", "--nats-password", "node-secret")
	if err != nil || !strings.Contains(out, "PARTITION") {
		t.Fatalf("--offline = %q, %v", out, err)
	}
}
