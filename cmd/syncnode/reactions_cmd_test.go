package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

func TestReactionsCommand(t *testing.T) {
	dataDir, keys := reactionStore(t)
	rx := func(args ...string) string {
		t.Helper()
		return mustCLI(t, append(append([]string{"reactions"}, args...), "--data", dataDir, "--no-nats")...)
	}

	out := rx("list")
	for _, want := range []string{"PARTITION", "email.pending", "pending", "email.done", "completed", "email.dead", "dead-letter", "smtp.rejected", "0/5", "1/5", keys[0]} {
		if !strings.Contains(out, want) {
			t.Errorf("list does not show %q:\n%s", want, out)
		}
	}
	var listed []reactionJSON
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
	var shown reactionJSON
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
		if _, err := cli(t, append(append([]string{"reactions"}, args...), "--data", dataDir, "--no-nats")...); err == nil {
			t.Errorf("reactions %v succeeded", args)
		}
	}
}
