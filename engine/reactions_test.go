package engine

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// reactionHarness is an engine whose planner is plan, recording every
// OnReactions call.
type reactionHarness struct {
	*harness
	calls    atomic.Int64
	reported []storage.ReactionEnqueueParams
}

func newReactionHarness(t *testing.T, plan ReactionPlanner) *reactionHarness {
	rh := &reactionHarness{}
	rh.harness = newHarness(t, func(c *Config) {
		c.ReactionPlanner = func(ctx context.Context, v CommitValidation) ([]PlannedReaction, error) {
			rh.calls.Add(1)
			return plan(ctx, v)
		}
		c.OnReactions = func(partition string, p storage.ReactionEnqueueParams) {
			if partition != "p" {
				t.Errorf("OnReactions for partition %q", partition)
			}
			rh.reported = append(rh.reported, p)
		}
	})
	return rh
}

func (h *reactionHarness) reactions() []storage.Reaction {
	h.t.Helper()
	rs, err := h.store.ReactionList(context.Background(), storage.ReactionListParams{AllPartitions: true, Limit: 1000})
	if err != nil {
		h.t.Fatal(err)
	}
	return rs
}

// emailPlan plans one "email.send" per upserted row, with the row's
// title and the number of rows the candidate state holds for p1.
func emailPlan(ctx context.Context, v CommitValidation) ([]PlannedReaction, error) {
	var out []PlannedReaction
	for _, op := range v.Operations {
		if op.Row == nil {
			continue
		}
		rows, err := v.Candidate.ScanRows(ctx, "tasks", map[string][]string{"project_id": {"p1"}}, "", 100)
		if err != nil {
			return nil, err
		}
		out = append(out, PlannedReaction{
			Key: "email:" + op.RowID, Type: "email.send", Version: 2, MaxAttempts: 4,
			Payload: map[string]any{"title": op.Row["title"], "rows": len(rows), "actor": v.ActorID},
		})
	}
	return out, nil
}

func TestReactionPlannedForAppliedCommit(t *testing.T) {
	h := newReactionHarness(t, emailPlan)
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	m := h.sync(alice, 2, hdr("c1", ep), commit("cc-1", upsert("t1", h.row("t1", "p1", "hello")), upsert("t2", h.row("t2", "p1", "world"))))
	res := frames[*ssp2.PushResult](m)[0]
	if res.Status != ssp2.PushApplied {
		t.Fatalf("push = %+v", res)
	}
	rs := h.reactions()
	if len(rs) != 2 {
		t.Fatalf("stored %d reactions, want 2: %+v", len(rs), rs)
	}
	got := map[string]storage.Reaction{}
	for _, r := range rs {
		got[r.IdempotencyKey] = r
	}
	r, ok := got[`["p","c1","cc-1","email:t1"]`]
	if !ok {
		t.Fatalf("no reaction under the idempotency key [p, c1, cc-1, email:t1]: %v", got)
	}
	if r.Type != "email.send" || r.Version != 2 || r.MaxAttempts != 4 || r.Status != storage.ReactionPending ||
		r.SourceClientID != "c1" || r.SourceClientCommitID != "cc-1" || r.SourceCommitSeq != *res.CommitSeq ||
		r.CreatedAtMs != h.now || r.AvailableAtMs != h.now {
		t.Fatalf("stored reaction = %+v", r)
	}
	// The planner read the candidate state: both staged rows.
	if string(r.Payload) != `{"actor":"alice","rows":2,"title":"hello"}` {
		t.Fatalf("payload = %s", r.Payload)
	}
	if len(h.reported) != 1 || len(h.reported[0].Reactions) != 2 || h.reported[0].SourceCommitSeq != *res.CommitSeq {
		t.Fatalf("OnReactions got %+v, want one call with both reactions", h.reported)
	}

	// A replay, in another request or the same one, plans nothing more.
	calls := h.calls.Load()
	m = h.sync(alice, 2, hdr("c1", ep), commit("cc-1", upsert("t1", h.row("t1", "p1", "hello")), upsert("t2", h.row("t2", "p1", "world"))))
	if res := frames[*ssp2.PushResult](m)[0]; res.Status != ssp2.PushCached {
		t.Fatalf("replay = %+v", res)
	}
	if h.calls.Load() != calls || len(h.reactions()) != 2 || len(h.reported) != 1 {
		t.Fatalf("a replay ran the planner (%d calls) or enqueued (%d rows, %d reports)", h.calls.Load()-calls, len(h.reactions()), len(h.reported))
	}
}

func TestReactionNoneForRejectedCommit(t *testing.T) {
	h := newReactionHarness(t, emailPlan)
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	if err := h.e.SetValidators(map[string]RowValidator{"tasks": func(_ context.Context, v RowValidation) error {
		if v.Row["title"] == "bad" {
			return Reject("app.bad_title", "bad title")
		}
		return nil
	}}, nil); err != nil {
		t.Fatal(err)
	}
	m := h.sync(alice, 2, hdr("c1", ep),
		commit("rej", upsert("t1", h.row("t1", "p1", "fine")), upsert("t2", h.row("t2", "p1", "bad"))),
		commit("conflict", upsert("t3", h.row("t3", "p1", "x"), 7)),
		commit("forbidden", upsert("t4", h.row("t4", "p2", "x"))))
	for _, res := range frames[*ssp2.PushResult](m) {
		if res.Status != ssp2.PushRejected {
			t.Fatalf("%s = %+v, want rejected", res.ClientCommitID, res)
		}
	}
	if h.calls.Load() != 0 || len(h.reactions()) != 0 || len(h.reported) != 0 {
		t.Fatalf("rejected commits ran the planner %d times and left %d reactions", h.calls.Load(), len(h.reactions()))
	}
	// The replay of a rejection plans nothing either.
	h.sync(alice, 2, hdr("c1", ep), commit("rej", upsert("t1", h.row("t1", "p1", "fine"))))
	if h.calls.Load() != 0 || len(h.reactions()) != 0 {
		t.Fatal("the replay of a rejected commit planned reactions")
	}
}

func TestReactionPlanLimits(t *testing.T) {
	deep := json.RawMessage(strings.Repeat("[", storage.MaxReactionJSONDepth+1) + strings.Repeat("]", storage.MaxReactionJSONDepth+1))
	ok := func() PlannedReaction {
		return PlannedReaction{Key: "k", Type: "t", Version: 1, Payload: map[string]int{"a": 1}}
	}
	many := make([]PlannedReaction, storage.MaxReactionsPerCommit+1)
	for i := range many {
		many[i] = ok()
		many[i].Key = strings.Repeat("k", i+1)
	}
	edit := func(f func(*PlannedReaction)) []PlannedReaction {
		p := ok()
		f(&p)
		return []PlannedReaction{p}
	}
	cases := []struct {
		name string
		plan []PlannedReaction
		code string
	}{
		{"too many", many, CodeReactionTooMany},
		{"empty key", edit(func(p *PlannedReaction) { p.Key = "" }), CodeReactionInvalidKey},
		{"long key", edit(func(p *PlannedReaction) { p.Key = strings.Repeat("k", storage.MaxReactionKeyBytes+1) }), CodeReactionInvalidKey},
		{"duplicate key", []PlannedReaction{ok(), ok()}, CodeReactionInvalidKey},
		{"bad type", edit(func(p *PlannedReaction) { p.Type = "send mail" }), CodeReactionInvalidType},
		{"long type", edit(func(p *PlannedReaction) { p.Type = strings.Repeat("t", storage.MaxReactionTypeBytes+1) }), CodeReactionInvalidType},
		{"version 0", edit(func(p *PlannedReaction) { p.Version = 0 }), CodeReactionInvalidVersion},
		{"max attempts 101", edit(func(p *PlannedReaction) { p.MaxAttempts = 101 }), CodeReactionInvalidMaxAttempts},
		{"max attempts -1", edit(func(p *PlannedReaction) { p.MaxAttempts = -1 }), CodeReactionInvalidMaxAttempts},
		{"NaN", edit(func(p *PlannedReaction) { p.Payload = math.NaN() }), CodeReactionInvalidPayload},
		{"raw not JSON", edit(func(p *PlannedReaction) { p.Payload = json.RawMessage(`{`) }), CodeReactionInvalidPayload},
		{"too deep", edit(func(p *PlannedReaction) { p.Payload = deep }), CodeReactionPayloadTooDeep},
		{"too large", edit(func(p *PlannedReaction) { p.Payload = strings.Repeat("x", storage.MaxReactionPayloadBytes) }), CodeReactionPayloadTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newReactionHarness(t, func(context.Context, CommitValidation) ([]PlannedReaction, error) { return tc.plan, nil })
			alice := id("alice", "p1")
			ep := h.epoch(alice)
			m := h.sync(alice, 2, hdr("c1", ep), commit("cc", upsert("t1", h.row("t1", "p1", "x"))))
			res := frames[*ssp2.PushResult](m)[0]
			if res.Status != ssp2.PushRejected || res.Results[0].Code != tc.code || res.Results[0].Retryable {
				t.Fatalf("push = %+v, want rejected with %s", res, tc.code)
			}
			if d := frames[*ssp2.PushResultDetails](m); len(d) != 1 || !strings.Contains(string(d[0].Entries[0].DetailsJSON), `"reason":"reaction_`) {
				t.Fatalf("details = %+v", d)
			}
			if n := len(h.reactions()); n != 0 {
				t.Fatalf("a rejected plan left %d reactions", n)
			}
			if seq, err := h.store.CommitMaxSeq(context.Background(), "p"); err != nil || seq != 0 {
				t.Fatalf("a rejected plan left commits: %d, %v", seq, err)
			}
			// The rejection is the commit's outcome: a replay returns it.
			m = h.sync(alice, 2, hdr("c1", ep), commit("cc", upsert("t1", h.row("t1", "p1", "x"))))
			if res := frames[*ssp2.PushResult](m)[0]; res.Status != ssp2.PushRejected || res.Results[0].Code != tc.code || h.calls.Load() != 1 {
				t.Fatalf("replay = %+v after %d planner calls", res, h.calls.Load())
			}
		})
	}
	// Exactly at the limits the plan applies.
	t.Run("at the limits", func(t *testing.T) {
		edge := make([]PlannedReaction, storage.MaxReactionsPerCommit)
		for i := range edge {
			edge[i] = ok()
			edge[i].Key = strings.Repeat("k", storage.MaxReactionKeyBytes-i)
			edge[i].MaxAttempts = storage.MaxReactionAttempts
		}
		edge[0].Type = strings.Repeat("t", storage.MaxReactionTypeBytes)
		edge[0].Payload = strings.Repeat("x", storage.MaxReactionPayloadBytes-2)
		edge[1].Payload = json.RawMessage(strings.Repeat("[", storage.MaxReactionJSONDepth) + strings.Repeat("]", storage.MaxReactionJSONDepth))
		h := newReactionHarness(t, func(context.Context, CommitValidation) ([]PlannedReaction, error) { return edge, nil })
		alice := id("alice", "p1")
		m := h.sync(alice, 2, hdr("c1", h.epoch(alice)), commit("cc", upsert("t1", h.row("t1", "p1", "x"))))
		if res := frames[*ssp2.PushResult](m)[0]; res.Status != ssp2.PushApplied {
			t.Fatalf("push at the limits = %+v", res)
		}
		if n := len(h.reactions()); n != storage.MaxReactionsPerCommit {
			t.Fatalf("stored %d reactions, want %d", n, storage.MaxReactionsPerCommit)
		}
	})
}

func TestReactionPlannerFailureAbortsPush(t *testing.T) {
	for name, plan := range map[string]ReactionPlanner{
		"error": func(context.Context, CommitValidation) ([]PlannedReaction, error) { return nil, errors.New("boom") },
		"panic": func(context.Context, CommitValidation) ([]PlannedReaction, error) { panic("boom") },
	} {
		t.Run(name, func(t *testing.T) {
			fail := true
			h := newReactionHarness(t, func(ctx context.Context, v CommitValidation) ([]PlannedReaction, error) {
				if fail {
					return plan(ctx, v)
				}
				return []PlannedReaction{{Key: "k", Type: "t", Version: 1}}, nil
			})
			alice := id("alice", "p1")
			ep := h.epoch(alice)
			m := h.sync(alice, 2, hdr("c1", ep), commit("cc", upsert("t1", h.row("t1", "p1", "x"))))
			errs := frames[*ssp2.ErrorFrame](m)
			if len(errs) != 1 || errs[0].Code != string(ssp2.CodeInternalError) || len(frames[*ssp2.PushResult](m)) != 0 {
				t.Fatalf("response = %+v, want an in-band internal error and no push result", m.Frames)
			}
			if _, ok, err := h.store.IdempotencyGet(context.Background(), "p", "c1", "cc"); err != nil || ok {
				t.Fatalf("a failed planner persisted an outcome: %v, %v", ok, err)
			}
			if seq, _ := h.store.CommitMaxSeq(context.Background(), "p"); seq != 0 || len(h.reactions()) != 0 {
				t.Fatal("a failed planner left the commit or reactions")
			}
			// A later delivery plans again and applies.
			fail = false
			m = h.sync(alice, 2, hdr("c1", ep), commit("cc", upsert("t1", h.row("t1", "p1", "x"))))
			if res := frames[*ssp2.PushResult](m)[0]; res.Status != ssp2.PushApplied || len(h.reactions()) != 1 {
				t.Fatalf("retry = %+v with %d reactions", res, len(h.reactions()))
			}
		})
	}
}

func TestReactionPlannedForAuthoritativeCommit(t *testing.T) {
	h := newReactionHarness(t, emailPlan)
	row := h.row("t1", "p1", "server")
	res, err := h.e.PushAuthoritative(context.Background(), AuthoritativeCommit{
		Partition: "p", ActorID: "server", ClientID: "cmd", ClientCommitID: "x1",
		Operations: func(context.Context, storage.Tx) ([]ssp2.Operation, error) {
			return []ssp2.Operation{upsert("t1", row)}, nil
		},
	})
	if err != nil || !res.Applied {
		t.Fatalf("PushAuthoritative = %+v, %v", res, err)
	}
	if rs := h.reactions(); len(rs) != 1 || rs[0].IdempotencyKey != `["p","cmd","x1","email:t1"]` || len(h.reported) != 1 {
		t.Fatalf("authoritative commit reactions = %+v, reported %d", rs, len(h.reported))
	}
}

func TestReactionCodesAreHostCodes(t *testing.T) {
	seen := map[string]bool{}
	for reason, code := range reactionCodes {
		if err := ValidateHostCode(code); err != nil || !strings.HasPrefix(code, "reaction.") {
			t.Errorf("reason %s: code %q is not a reaction host code: %v", reason, code, err)
		}
		if seen[code] {
			t.Errorf("code %s used twice", code)
		}
		seen[code] = true
	}
}

// A commit that only deletes absent rows appends nothing to the log
// (absentdelete_test.go) unless it plans reactions: then it is their
// source commit, appended with its seq.
func TestReactionPlannedForAbsentRowDelete(t *testing.T) {
	h := newReactionHarness(t, func(ctx context.Context, v CommitValidation) ([]PlannedReaction, error) {
		if v.ClientCommitID != "audit" {
			return nil, nil
		}
		return []PlannedReaction{{Key: "k", Type: "audit.delete", Version: 1, Payload: v.Operations[0].RowID}}, nil
	})
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	h.sync(alice, 2, hdr("c1", ep), commit("first", upsert("t1", h.row("t1", "p1", "x"))))
	quiet := frames[*ssp2.PushResult](h.sync(alice, 2, hdr("c1", ep), commit("quiet", del("gone"))))[0]
	audit := frames[*ssp2.PushResult](h.sync(alice, 2, hdr("c1", ep), commit("audit", del("gone"))))[0]
	if *quiet.CommitSeq != 1 || audit.Status != ssp2.PushApplied || *audit.CommitSeq != 2 {
		t.Fatalf("quiet delete at %d, audited delete %+v; want 1 and applied at 2", *quiet.CommitSeq, audit)
	}
	rs := h.reactions()
	if len(rs) != 1 || rs[0].SourceCommitSeq != 2 || len(h.reported) != 1 {
		t.Fatalf("reactions %+v, reports %d; want one from commit 2", rs, len(h.reported))
	}
}
