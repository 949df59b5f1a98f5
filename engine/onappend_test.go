package engine

import (
	"context"
	"reflect"
	"testing"

	"github.com/syncnode/syncnode/storage"
)

// TestOnAppendHandsTheCommitAsStored: the relay publishes OnAppend's
// commit instead of reading it back, so it must be the log's commit
// exactly — seq, header, every change with its version, scopes and row —
// under the epoch the log holds, for upserts, deletes and a commit that
// appended nothing (not handed over).
func TestOnAppendHandsTheCommitAsStored(t *testing.T) {
	type appended struct {
		partition, epoch string
		c                storage.Commit
	}
	var got []appended
	h := newHarness(t, func(c *Config) {
		c.OnAppend = func(partition, epoch string, c storage.Commit, _ int) {
			got = append(got, appended{partition, epoch, c})
		}
	})
	alice := id("alice", "p1", "p2")
	ep := h.epoch(alice)
	h.sync(alice, 2, hdr("c1", ep),
		commit("k1", upsert("t1", h.row("t1", "p1", "first")), upsert("t2", h.row("t2", "p2", ""))),
		commit("k2", upsert("t1", h.row("t1", "p1", "second"), 1), del("t2")),
		commit("k3", del("absent")))
	h.sync(alice, 2, hdr("c2", ep), commit("k4", del("t1")))

	part, stored, err := h.store.PartitionCommitRange(context.Background(), "p", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(stored) || len(stored) != 3 {
		t.Fatalf("OnAppend handed %d commits, the log holds %d; want 3 each", len(got), len(stored))
	}
	for i, a := range got {
		if a.partition != "p" || a.epoch != part.LogEpoch {
			t.Errorf("commit %d handed for %q epoch %q; want p, %q", i, a.partition, a.epoch, part.LogEpoch)
		}
		if !reflect.DeepEqual(a.c, stored[i]) {
			t.Errorf("commit %d handed over\n  %+v\nthe log holds\n  %+v", i, a.c, stored[i])
		}
	}
}
