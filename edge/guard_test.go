package edge_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/edge"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/ssp2"
)

// TestEdgeRefusesForeignPartition: an edge refuses a pull and a push for
// a partition homed at the hub with sync.forbidden (403, not retryable,
// details naming the home), and registers nothing for it; its own
// partition is served as before.
func TestEdgeRefusesForeignPartition(t *testing.T) {
	tp := startTopology(t)
	ctx := context.Background()
	c := clientOf(t, tp.edg, hubPart, &client.MemoryStore{}, "lost-device")

	_, err := c.SyncUntilIdle(ctx) // the pull (epoch acquisition)
	wantNotHome(t, err, "hub")
	if _, err := c.Upsert(ctx, "todos", nodetest.Todo("t1", project, "at the wrong node")); err != nil {
		t.Fatal(err)
	}
	_, err = c.Sync(ctx)
	wantNotHome(t, err, "hub")
	if _, err := tp.edg.Store.PartitionGet(ctx, hubPart); ssp2.CodeOf(err) != ssp2.CodeStoragePartitionUnregistered {
		t.Fatalf("the edge registered the foreign partition: %v", err)
	}

	pushTodos(t, clientOf(t, tp.edg, edgePart, &client.MemoryStore{}, "home-device"), "own", 3)
}

func wantNotHome(t *testing.T, err error, home string) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != ssp2.CodeForbidden || ce.Retryable || ce.Status != 403 {
		t.Fatalf("got %v, want sync.forbidden (403, not retryable)", err)
	}
	var d map[string]string
	if err := json.Unmarshal(ce.Details, &d); err != nil {
		t.Fatalf("details %s: %v", ce.Details, err)
	}
	if d["reason"] != "not_home" || d["home"] != home || d["edge"] != edgeName {
		t.Fatalf("details %v, want reason not_home, home %s, edge %s", d, home, edgeName)
	}
}

// TestGuardHomes: at an edge only its own partitions are local; those of
// the hub and of another edge are refused with their home named.
func TestGuardHomes(t *testing.T) {
	g, err := edge.NewGuard(edge.Config{Name: "shop1", Homes: map[string]string{"shop1-*": "shop1", "shop2-*": "shop2", "shop1-archive": "hub"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		partition, home string
	}{{"shop1-a", ""}, {"shop2-a", "shop2"}, {"shop1-archive", "hub"}, {"elsewhere", "hub"}} {
		if got := g.Remote(tc.partition); got != (tc.home != "") {
			t.Errorf("Remote(%q) = %v", tc.partition, got)
			continue
		}
		if tc.home == "" {
			continue
		}
		err := g.Ready(context.Background(), tc.partition)
		var se *ssp2.Error
		if !errors.As(err, &se) || se.Code != ssp2.CodeForbidden {
			t.Fatalf("Ready(%q) = %v, want sync.forbidden", tc.partition, err)
		}
		var d map[string]string
		if err := json.Unmarshal(se.Details, &d); err != nil || d["home"] != tc.home {
			t.Fatalf("Ready(%q) details %s, want home %s", tc.partition, se.Details, tc.home)
		}
	}
	if _, err := edge.NewGuard(edge.Config{}); err == nil {
		t.Fatal("a Guard without a name was accepted")
	}
}
