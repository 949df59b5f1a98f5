package engine

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkPushReaction is one push round of a one-row commit, without a
// planner and with a planner that enqueues one reaction: the reaction's
// cost is the difference (evidence, planning, one more row in the push
// transaction). SQLite with synchronous=FULL, as a node runs it.
func BenchmarkPushReaction(b *testing.B) {
	one := func(_ context.Context, v CommitValidation) ([]PlannedReaction, error) {
		return []PlannedReaction{{Key: "mail", Type: "email.send", Version: 1,
			Payload: map[string]any{"task": v.Operations[0].RowID, "title": v.Operations[0].Row["title"]}}}, nil
	}
	for _, bc := range []struct {
		name    string
		planner ReactionPlanner
	}{{"none", nil}, {"one-reaction", one}} {
		b.Run(bc.name, func(b *testing.B) {
			h := newHarness(b, func(c *Config) { c.ReactionPlanner = bc.planner })
			alice := id("alice", "p1")
			ep := h.epoch(alice)
			b.ResetTimer()
			for i := range b.N {
				rid := fmt.Sprint("t", i)
				h.sync(alice, 2, hdr("c1", ep), commit(fmt.Sprint("cc", i), upsert(rid, h.row(rid, "p1", "title"))))
			}
		})
	}
}
