package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestClientPatchAndWireVersions: --patch writes only the named columns
// and a conflict names the columns that moved; --wire 2 pushes full rows
// with row-level conflicts.
func TestClientPatchAndWireVersions(t *testing.T) {
	url, dataDir := testNode(t)
	tok := strings.TrimSpace(mustCLI(t, "client", "token", "--actor", "alice", "--partition", "acme", "--scope", "project_id=p1", "--data", dataDir))
	push := func(args ...string) (map[string]any, error) {
		out, err := cli(t, append([]string{"client", "push", "--url", url, "--token", tok, "--table", "tasks"}, args...)...)
		lines := jsonLines(t, out)
		if len(lines) != 1 {
			t.Fatalf("push %v printed %q", args, out)
		}
		return lines[0], err
	}
	if l, err := push("--json", `{"id":"t1","project_id":"p1","title":"one","done":false,"priority":1}`); err != nil || l["status"] != "applied" {
		t.Fatalf("insert: %v %v", l, err)
	}
	if l, err := push("--patch", "--base-version", "1", "--json", `{"id":"t1","title":"renamed"}`); err != nil || l["status"] != "applied" {
		t.Fatalf("patch: %v %v", l, err)
	}
	// From base 1 again: priority did not move, title did.
	l, err := push("--patch", "--base-version", "1", "--json", `{"id":"t1","title":"again","priority":5}`)
	if err == nil || l["code"] != "sync.version_conflict" || fmt.Sprint(l["conflictColumns"]) != "[title]" {
		t.Fatalf("conflicting patch: %v %v", l, err)
	}
	if l, err := push("--patch", "--base-version", "1", "--json", `{"id":"t1","priority":5}`); err != nil || l["status"] != "applied" {
		t.Fatalf("disjoint patch: %v %v", l, err)
	}
	out := mustCLI(t, "client", "pull", "--url", url, "--token", tok, "--table", "tasks", "--scope", "project_id=p1", "--wire", "2")
	rows := jsonLines(t, out)
	vals := rows[0]["values"].(map[string]any)
	if len(rows) != 1 || rows[0]["version"] != float64(3) || vals["title"] != "renamed" || vals["priority"] != float64(5) {
		t.Fatalf("pull printed %q", out)
	}
	l, err = push("--wire", "2", "--base-version", "1", "--json", `{"id":"t1","project_id":"p1","title":"old","done":true}`)
	if err == nil || l["code"] != "sync.version_conflict" || l["conflictColumns"] != nil {
		t.Fatalf("v2 conflict: %v %v", l, err)
	}
	for _, args := range [][]string{{"--wire", "4", "--json", `{"id":"t1"}`}, {"--patch", "--delete", "t1"}} {
		if _, err := cli(t, append([]string{"client", "push", "--url", url, "--token", tok, "--table", "tasks"}, args...)...); err == nil {
			t.Fatalf("push %v succeeded", args)
		}
	}
	if !strings.Contains(clientUsage, "[--patch]") || !strings.Contains(clientUsage, "[--wire 3|2]") {
		t.Fatal("usage does not mention --patch and --wire")
	}
}
