package main

import (
	"bytes"
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
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/reactions"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// TestServeRefusesBadReactionRules: the rules are checked against the
// schema before anything starts.
func TestServeRefusesBadReactionRules(t *testing.T) {
	for _, tc := range []struct{ rule, want string }{
		{`name = "x"` + "\n" + `table = "nope"` + "\n" + `on = "insert"` + "\n" + `type = "t"`, `unknown table "nope"`},
		{`name = "x"` + "\n" + `table = "tasks"` + "\n" + `on = "insert"` + "\n" + `type = "t"` + "\n" + `payload = { a = "new.nope" }`, `no column "nope"`},
		{`name = "x"` + "\n" + `table = "tasks"` + "\n" + `on = "insert"` + "\n" + `type = "t"` + "\n" + `colour = "red"`, "unknown keys"},
	} {
		conf := filepath.Join(t.TempDir(), "syncnode.toml")
		if err := os.WriteFile(conf, []byte("[[reactions.rules]]\n"+tc.rule+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		err := run(context.Background(), serveArgs(t.TempDir(), "--config", conf), strings.NewReader(""), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) || out.Len() != 0 {
			t.Errorf("serve with rule %q: %v, stdout %q; want an error about %s", tc.rule, err, out.String(), tc.want)
		}
	}
}

// reactionStore is a data directory with an installed schema and three
// reactions: one pending, one completed long ago, one dead-lettered.
func reactionStore(t *testing.T) (dataDir string, keys []string) {
	t.Helper()
	ctx := context.Background()
	dataDir = t.TempDir()
	sch, err := loadSchema("")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(dataDir, "syncnode.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.EnsureSchema(ctx, sch); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PartitionTouch(ctx, "acme", 1); err != nil {
		t.Fatal(err)
	}
	var rs []storage.ReactionNew
	for _, k := range []string{"pending", "done", "dead"} {
		key := storage.ReactionIdempotencyKey("acme", "c1", "cc1", k)
		keys = append(keys, key)
		rs = append(rs, storage.ReactionNew{IdempotencyKey: key, Type: "email." + k, Version: 1, Payload: json.RawMessage(`{"k":"` + k + `"}`), MaxAttempts: 5})
	}
	if err := st.WriteTx(ctx, "acme", func(tx storage.Tx) error {
		return tx.ReactionEnqueue(ctx, storage.ReactionEnqueueParams{SourceClientID: "c1", SourceClientCommitID: "cc1", SourceCommitSeq: 1, CreatedAtMs: 1000, Reactions: rs})
	}); err != nil {
		t.Fatal(err)
	}
	for i, typ := range []string{"email.done", "email.dead"} {
		res, err := st.ReactionClaim(ctx, storage.ReactionClaimParams{Partition: "acme", Types: []string{typ}, Owner: "o", NowMs: 2000, LeaseMs: 1000, Limit: 1})
		if err != nil || len(res.Claimed) != 1 {
			t.Fatalf("claim: %+v, %v", res, err)
		}
		l := storage.ReactionLease{ReactionKey: res.Claimed[0].ReactionKey, Owner: "o"}
		if i == 0 {
			_, err = st.ReactionComplete(ctx, storage.ReactionCompleteParams{Leases: []storage.ReactionLease{l}, NowMs: 2500})
		} else {
			_, _, err = st.ReactionFail(ctx, storage.ReactionFailParams{ReactionLease: l, DeadLetter: true,
				Failure: storage.ReactionFailure{Code: "smtp.rejected", AtMs: time.Now().UnixMilli(), Details: json.RawMessage(`{"status":550}`)}})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dataDir, keys
}

// TestReactionsCommand runs every subcommand against a running node's
// admin API and, with --no-nats, offline against the store: the same
// answers either way.
func TestReactionsCommand(t *testing.T) {
	t.Run("admin API", func(t *testing.T) {
		dataDir, keys := reactionStore(t)
		n := reactionsNode(t, dataDir)
		testReactionsCommand(t, dataDir, keys, "--nats", n.NATS.ClientURL())
	})
	t.Run("offline", func(t *testing.T) {
		dataDir, keys := reactionStore(t)
		testReactionsCommand(t, dataDir, keys, "--data", dataDir, "--no-nats")
	})
}

// reactionsNode serves dataDir with its runner off, so the reactions stay
// as reactionStore left them.
func reactionsNode(t *testing.T, dataDir string) *node.Node {
	t.Helper()
	sch, err := loadSchema("")
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{
		DataDir: dataDir, Schema: sch, Name: "cli-test",
		NATS:      embedded.Config{Port: embedded.RandomPort, Host: "127.0.0.1"},
		API:       httpapi.Config{Auth: httpapi.AuthenticatorFunc(nil)},
		Reactions: node.ReactionsConfig{Disabled: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
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

func testReactionsCommand(t *testing.T, dataDir string, keys []string, where ...string) {
	rx := func(args ...string) string {
		t.Helper()
		return mustCLI(t, append(append([]string{"reactions"}, args...), where...)...)
	}

	out := rx("list")
	for _, want := range []string{"PARTITION", "email.pending", "pending", "email.done", "completed", "email.dead", "dead-letter", "smtp.rejected", "0/5", "1/5", keys[0]} {
		if !strings.Contains(out, want) {
			t.Errorf("list does not show %q:\n%s", want, out)
		}
	}
	var listed []reactions.Info
	if err := json.Unmarshal([]byte(rx("list", "--status", "pending,dead-letter", "--type", "email.dead", "--json")), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].IdempotencyKey != keys[2] || listed[0].Failure == nil || string(listed[0].Failure.Details) != `{"status":550}` {
		t.Fatalf("filtered list = %+v", listed)
	}
	if err := json.Unmarshal([]byte(rx("list", "--partition", "other", "--json")), &listed); err != nil || len(listed) != 0 {
		t.Fatalf("another partition lists %+v (%v)", listed, err)
	}

	out = rx("show", "--partition", "acme", "--key", keys[2])
	for _, want := range []string{"email.dead (version 1)", "dead-letter", "1 of 5", "smtp.rejected", `{"status":550}`, `{"k":"dead"}`, "commit cc1"} {
		if !strings.Contains(out, want) {
			t.Errorf("show does not show %q:\n%s", want, out)
		}
	}

	// Prune with the defaults removes the reaction completed in 1970 and
	// keeps the recent dead letter and the pending one.
	if out := rx("prune"); !strings.Contains(out, "pruned 1 completed and 0 dead-lettered") {
		t.Fatalf("default prune: %q", out)
	}

	if out := rx("retry", "--partition", "acme", "--key", keys[2]); !strings.Contains(out, "requeued") {
		t.Fatalf("retry printed %q", out)
	}
	var shown reactions.Info
	if err := json.Unmarshal([]byte(rx("show", "--partition", "acme", "--key", keys[2], "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.Status != "pending" || shown.Attempts != 0 || shown.Failure != nil {
		t.Fatalf("after retry: %+v", shown)
	}

	// Even with cutoffs of zero, prune never removes pending rows.
	if out := rx("prune", "--completed-before", "0s", "--dead-letter-before", "0s"); !strings.Contains(out, "pruned 0 completed and 0 dead-lettered") {
		t.Fatalf("prune: %q", out)
	}
	if err := json.Unmarshal([]byte(rx("list", "--json")), &listed); err != nil || len(listed) != 2 {
		t.Fatalf("after prune: %+v (%v)", listed, err)
	}

	// Refusals.
	for _, args := range [][]string{
		{"show", "--partition", "acme"},
		{"retry", "--key", keys[0]},
		{"show", "--partition", "acme", "--key", "nope"},
		{"retry", "--partition", "acme", "--key", keys[0]},
		{"list", "--status", "done"},
		{"list", "--limit", "0"},
		{"explode"},
		{},
	} {
		if _, err := cli(t, append(append([]string{"reactions"}, args...), where...)...); err == nil {
			t.Errorf("reactions %v succeeded", args)
		}
	}

	var st reactions.AdminStats
	if err := json.Unmarshal([]byte(rx("stats", "--json")), &st); err != nil || st.Counts != (reactions.StatusCounts{Pending: 2}) || st.Runner != nil {
		t.Fatalf("stats = %+v, %v", st, err)
	}
	if out := rx("stats"); !strings.Contains(strings.Join(strings.Fields(out), " "), "pending 2 leased 0 completed 0 dead-letter 0 runner on") || !strings.Contains(out, "none") {
		t.Fatalf("stats printed %q", out)
	}
}

// Without a node on the NATS given, the command says how to go offline.
func TestReactionsCommandNoNode(t *testing.T) {
	n := reactionsNode(t, t.TempDir())
	if err := n.Admin.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err := cli(t, "reactions", "list", "--nats", n.NATS.ClientURL())
	if !errors.Is(err, admin.ErrNoNode) || !strings.Contains(err.Error(), "--offline") {
		t.Fatalf("err = %v", err)
	}
}
