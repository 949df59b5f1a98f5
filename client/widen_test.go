package client

import (
	"context"
	"fmt"
	"testing"
)

// TestWidenedGrantConverges: a subscription whose effective scopes widen
// between pulls (the actor was granted another project) receives the rows
// that already existed under the new value, not just later changes.
func TestWidenedGrantConverges(t *testing.T) { bothStores(t, testWidenedGrantConverges) }

func testWidenedGrantConverges(t *testing.T) {
	srv := newServer(t, nil)
	writer := srv.client("writer", []string{"p1", "p2"}, nil)
	for i := range 10 {
		mustCommit(t, writer, Upsert("tasks", task(fmt.Sprintf("a%d", i), "p1", "a")), Upsert("tasks", task(fmt.Sprintf("b%d", i), "p2", "b")))
	}
	mustSync(t, writer)

	tok := srv.token("alice", "p1")
	c := srv.client("alice", nil, func(cfg *Config) {
		cfg.TokenFunc = func(context.Context) (string, error) { return tok, nil }
	})
	if err := c.Subscribe("sub", "tasks", map[string][]string{"project_id": {"p1", "p2"}}); err != nil {
		t.Fatal(err)
	}
	mustSync(t, c)
	sameRows(t, "alice with p1", replicaRows(c), srv.serverRows("p1"))

	// More writes while alice holds p1 only, then p2 is granted.
	mustCommit(t, writer, Upsert("tasks", task("a-late", "p1", "a")), Upsert("tasks", task("b-late", "p2", "b")))
	mustSync(t, writer)
	mustSync(t, c)
	tok = srv.token("alice", "p1", "p2")
	mustSync(t, c)
	sameRows(t, "alice after p2 was granted", replicaRows(c), srv.serverRows("p1", "p2"))

	// Narrowing purges nothing (SPEC.md §3.3): rows stay, later changes
	// of p2 stop.
	tok = srv.token("alice", "p1")
	mustCommit(t, writer, Upsert("tasks", task("b-after", "p2", "b")))
	mustSync(t, writer)
	mustSync(t, c)
	got := replicaRows(c)
	if _, ok := got["b0"]; !ok {
		t.Fatal("narrowing purged a row")
	}
	if _, ok := got["b-after"]; ok {
		t.Fatal("a change outside the narrowed scopes arrived")
	}
}
