package reactions

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/admin"
	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/gate"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/storage"
)

// adminAPI serves the reactions endpoints from an admin service on the
// env's server (as a node does) and returns a client on its own TCP
// connection; runner, when set, is the answering node's.
func (e *env) adminAPI(runner *Runner) (*AdminClient, *nats.Conn) {
	e.t.Helper()
	rx, err := NewAdmin(AdminConfig{Store: e.store, Conn: e.srv.Conn(), Node: "admin-node", Runner: runner, Logger: testLogger(e.t)})
	if err != nil {
		e.t.Fatal(err)
	}
	// The admin service needs a serve gate; the reactions endpoints use
	// none, so it is never started.
	g, err := gate.New(gate.Config{Store: e.store, Schema: e.schema, Node: "admin-node"})
	if err != nil {
		e.t.Fatal(err)
	}
	a, err := admin.New(admin.Config{Conn: e.srv.Conn(), Node: "admin-node", Store: e.store, Gate: g, Extensions: []admin.Extension{rx}})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := a.Start(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = a.Stop(context.Background()) })
	nc := e.conn()
	return NewAdminClient(admin.NewClient(nc, 10*time.Second)), nc
}

// deadLetter claims k and fails it permanently with details.
func (e *env) deadLetter(k storage.ReactionKey, atMs int64) {
	e.t.Helper()
	res, err := e.store.ReactionClaim(e.ctx, storage.ReactionClaimParams{Partition: k.Partition, Owner: "o", NowMs: time.Now().UnixMilli(), LeaseMs: 60_000, Limit: 10})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, rx := range res.Claimed {
		l := storage.ReactionLease{ReactionKey: rx.ReactionKey, Owner: "o"}
		if rx.ReactionKey == k {
			_, _, err = e.store.ReactionFail(e.ctx, storage.ReactionFailParams{ReactionLease: l, DeadLetter: true,
				Failure: storage.ReactionFailure{Code: "smtp.rejected", AtMs: atMs, Details: json.RawMessage(`{"status":550}`)}})
		} else {
			_, err = e.store.ReactionComplete(e.ctx, storage.ReactionCompleteParams{Leases: []storage.ReactionLease{l}, NowMs: 1000})
		}
		if err != nil {
			e.t.Fatal(err)
		}
	}
}

func wantAdminCode(t *testing.T, err error, code admin.Code) {
	t.Helper()
	var ae *admin.Error
	if !errors.As(err, &ae) || ae.Code != code {
		t.Fatalf("err = %v, want %s", err, code)
	}
}

func keysOf(infos []Info) []string {
	var out []string
	for _, i := range infos {
		out = append(out, i.IdempotencyKey)
	}
	return out
}

// TestAdminEndpoints calls every reactions endpoint over a real NATS
// server against each store: list with every filter, show, retry (which
// wakes the runners), prune (never pending or leased rows), stats, and
// the refusals, each typed and changing nothing.
func TestAdminEndpoints(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		ctx := e.ctx
		api, nc := e.adminAPI(nil)
		// acme: a completed (at 1 s after the epoch), a dead letter (now)
		// and a pending reaction; beta: one pending.
		ka := e.commit("acme", plan{key: "done", typ: "email.done"}, plan{key: "dead", typ: "email.dead"})
		done, dead := ka[0], ka[1]
		e.deadLetter(dead, time.Now().UnixMilli())
		pending := e.commit("acme", plan{key: "new", typ: "email.new"})[0]
		beta := e.commit("beta", plan{key: "b", typ: "email.new"})[0]

		all, err := api.List(ctx, ListRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(all.Reactions) != 4 {
			t.Fatalf("list = %v", keysOf(all.Reactions))
		}
		acme := "acme"
		for _, tc := range []struct {
			req  ListRequest
			want []storage.ReactionKey
		}{
			{ListRequest{Partition: &acme, Statuses: []storage.ReactionStatus{storage.ReactionPending}}, []storage.ReactionKey{pending}},
			{ListRequest{Types: []string{"email.new"}}, []storage.ReactionKey{beta, pending}},
			{ListRequest{Statuses: []storage.ReactionStatus{storage.ReactionCompleted, storage.ReactionDeadLetter}}, []storage.ReactionKey{dead, done}},
			{ListRequest{Partition: &acme, Types: []string{"email.dead"}, Statuses: []storage.ReactionStatus{storage.ReactionDeadLetter}}, []storage.ReactionKey{dead}},
			{ListRequest{Limit: 1}, nil},
		} {
			got, err := api.List(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			keys := keysOf(got.Reactions)
			slices.Sort(keys)
			var want []string
			for _, k := range tc.want {
				want = append(want, k.IdempotencyKey)
			}
			slices.Sort(want)
			if tc.req.Limit == 1 {
				if len(keys) != 1 {
					t.Errorf("list limit 1 = %v", keys)
				}
				continue
			}
			if !slices.Equal(keys, want) {
				t.Errorf("list %+v = %v, want %v", tc.req, keys, want)
			}
		}

		shown, err := api.Show(ctx, KeyRequest{Partition: "acme", IdempotencyKey: dead.IdempotencyKey})
		if err != nil {
			t.Fatal(err)
		}
		if shown.Status != storage.ReactionDeadLetter || shown.Type != "email.dead" || shown.Attempts != 1 || shown.Failure == nil ||
			shown.Failure.Code != "smtp.rejected" || string(shown.Failure.Details) != `{"status":550}` || shown.SourceClientID != "client" {
			t.Fatalf("show = %+v", shown)
		}

		st, err := api.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Counts != (StatusCounts{Pending: 2, Completed: 1, DeadLetter: 1}) || st.Node != "admin-node" || st.Runner != nil {
			t.Fatalf("stats = %+v", st)
		}

		// Refusals: typed, and nothing changes.
		bogus := ""
		neg := int64(-1)
		for _, tc := range []struct {
			name string
			call func() error
			code admin.Code
		}{
			{"list unknown status", func() error {
				_, err := api.List(ctx, ListRequest{Statuses: []storage.ReactionStatus{"done"}})
				return err
			}, admin.CodeInvalidRequest},
			{"list bad type", func() error { _, err := api.List(ctx, ListRequest{Types: []string{"no spaces"}}); return err }, admin.CodeInvalidRequest},
			{"list limit", func() error { _, err := api.List(ctx, ListRequest{Limit: 1001}); return err }, admin.CodeInvalidRequest},
			{"list empty partition", func() error { _, err := api.List(ctx, ListRequest{Partition: &bogus}); return err }, admin.CodeInvalidRequest},
			{"list unknown field", func() error {
				return api.c.Call(ctx, bus.AdminReactionsList, json.RawMessage(`{"status":"pending"}`), new(ListResponse))
			}, admin.CodeInvalidRequest},
			{"show no key", func() error { _, err := api.Show(ctx, KeyRequest{Partition: "acme"}); return err }, admin.CodeInvalidRequest},
			{"show NUL key", func() error {
				_, err := api.Show(ctx, KeyRequest{Partition: "acme", IdempotencyKey: "a\x00"})
				return err
			}, admin.CodeInvalidRequest},
			{"show absent", func() error {
				_, err := api.Show(ctx, KeyRequest{Partition: "acme", IdempotencyKey: "nope"})
				return err
			}, admin.CodeNotFound},
			{"retry absent", func() error {
				_, err := api.Retry(ctx, KeyRequest{Partition: "beta", IdempotencyKey: dead.IdempotencyKey})
				return err
			}, admin.CodeNotFound},
			{"retry pending", func() error {
				_, err := api.Retry(ctx, KeyRequest{Partition: "acme", IdempotencyKey: pending.IdempotencyKey})
				return err
			}, admin.CodeConflict},
			{"retry completed", func() error {
				_, err := api.Retry(ctx, KeyRequest{Partition: "acme", IdempotencyKey: done.IdempotencyKey})
				return err
			}, admin.CodeConflict},
			{"prune negative age", func() error { _, err := api.Prune(ctx, PruneRequest{CompletedOlderThanMs: &neg}); return err }, admin.CodeInvalidRequest},
			{"prune limit", func() error { _, err := api.Prune(ctx, PruneRequest{Limit: -1}); return err }, admin.CodeInvalidRequest},
		} {
			wantAdminCode(t, tc.call(), tc.code)
		}
		if got, err := api.Stats(ctx); err != nil || got.Counts != st.Counts {
			t.Fatalf("after the refusals: %+v, %v", got, err)
		}

		// Prune with the defaults removes the reaction completed in 1970
		// only; a zero age would take the dead letter too.
		pr, err := api.Prune(ctx, PruneRequest{})
		if err != nil || pr != (PruneResponse{Completed: 1}) {
			t.Fatalf("default prune = %+v, %v", pr, err)
		}

		// Retry wakes the runners with the requeued event.
		sub, err := nc.SubscribeSync(prod.ReactionEvents())
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		rr, err := api.Retry(ctx, KeyRequest{Partition: "acme", IdempotencyKey: dead.IdempotencyKey})
		if err != nil {
			t.Fatal(err)
		}
		if !rr.Woken || rr.Reaction.Status != storage.ReactionPending || rr.Reaction.Attempts != 0 || rr.Reaction.Failure != nil {
			t.Fatalf("retry = %+v", rr)
		}
		m, err := sub.NextMsg(wait)
		if err != nil {
			t.Fatal(err)
		}
		if _, ev, typ, _ := prod.ParseReactionEventSubject(m.Subject); ev != bus.ReactionRequeued || typ != "email.dead" {
			t.Fatalf("event %s", m.Subject)
		}

		// Zero ages prune every terminal row, never pending ones.
		zero := int64(0)
		pr, err = api.Prune(ctx, PruneRequest{CompletedOlderThanMs: &zero, DeadLetterOlderThanMs: &zero})
		if err != nil || pr != (PruneResponse{}) {
			t.Fatalf("prune of pending rows = %+v, %v", pr, err)
		}
		if got, err := api.Stats(ctx); err != nil || got.Counts != (StatusCounts{Pending: 3}) {
			t.Fatalf("after prune: %+v, %v", got, err)
		}
	})
}

// TestAdminStatsRunner: stats carries the answering node's runner
// counters.
func TestAdminStatsRunner(t *testing.T) {
	e := newEnv(t, backends[0])
	r := e.runner(Config{Handlers: map[string]Handler{"t": func(context.Context, storage.Reaction) error { return nil }}})
	api, _ := e.adminAPI(r)
	e.commit("p", plan{key: "k", typ: "t"})
	var st AdminStats
	var err error
	poll.Until(t, wait, "the runner to complete the reaction and free its slot", func() bool {
		st, err = api.Stats(e.ctx)
		return err != nil || st.Counts.Completed == 1 && st.Runner != nil && st.Runner.Completed == 1 && st.Runner.InFlight == 0
	})
	if err != nil || st.Runner == nil || st.Runner.Completed != 1 || st.Runner.Claimed != 1 || st.Runner.InFlight != 0 || st.Counts.Completed != 1 {
		t.Fatalf("stats = %+v (runner %+v)", st, st.Runner)
	}
}
