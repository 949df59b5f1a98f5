package node

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/admin"
	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/reactions"
	"github.com/syncnode/syncnode/rules"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
)

// bearer adds a token to every request.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// A pushed commit's declarative rules plan two reactions in the push
// transaction; the node's runner runs one with a Go handler and sends the
// other to a worker on NATS; a rejected commit plans nothing.
func TestNodeReactions(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			sch, err := schema.Parse([]byte(vectorSchema))
			if err != nil {
				t.Fatal(err)
			}
			planner, err := rules.CompileReactions(sch, []rules.ReactionRule{
				{Name: "mail", Table: "tasks", On: rules.OnInsert, Type: "email.send", Payload: map[string]string{"task": "new.id"}},
				{Name: "hook", Table: "tasks", On: rules.OnAny, Type: "webhook.call", Payload: map[string]string{"task": "$rowId", "op": "$op"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			mailed := make(chan storage.Reaction, 4)
			n := startNode(t, vectorSchema, func(t *testing.T, c *Config) {
				b.cfg(t, c)
				c.Reactions.Planner = planner
				c.Reactions.Runner = reactions.Config{Handlers: map[string]reactions.Handler{
					"email.send": func(_ context.Context, r storage.Reaction) error { mailed <- r; return nil },
				}}
			})
			nc, err := nats.Connect(n.NATS.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			hooked := make(chan reactions.WorkRequest, 4)
			if _, err := nc.QueueSubscribe("syncreact.work.webhook.call", "workers", func(m *nats.Msg) {
				var w reactions.WorkRequest
				_ = json.Unmarshal(m.Data, &w)
				hooked <- w
				_ = m.Respond(nil)
			}); err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}

			tok := token(t, "alice", "acme", map[string][]string{"project": {"p1"}})
			c, err := client.New(client.Config{BaseURL: n.URL(), Schema: sch, HTTPClient: &http.Client{Transport: bearer(tok)}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			ccid, err := c.Upsert(ctx, "tasks", map[string]any{"id": "t1", "project": "p1"})
			if err != nil {
				t.Fatal(err)
			}
			if res, err := c.SyncUntilIdle(ctx); err != nil || len(res.Rejected) != 0 {
				t.Fatalf("sync: %+v, %v", res, err)
			}
			select {
			case r := <-mailed:
				if r.Partition != "acme" || r.SourceClientCommitID != ccid || string(r.Payload) != `{"task":"t1"}` {
					t.Fatalf("mail reaction %+v", r)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the Go handler never ran")
			}
			select {
			case w := <-hooked:
				if w.Type != "webhook.call" || string(w.Payload) != `{"op":"insert","task":"t1"}` ||
					w.IdempotencyKey != storage.ReactionIdempotencyKey("acme", c.ClientID(), ccid, "hook/0") {
					t.Fatalf("work request %+v", w)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the NATS worker never got the reaction")
			}
			poll.Until(t, 20*time.Second, "both completed", func() bool {
				cs, err := n.Store.ReactionCounts(ctx)
				return err == nil && cs.Completed == 2
			})

			// A commit the server rejects (another project) plans nothing.
			if _, err := c.Upsert(ctx, "tasks", map[string]any{"id": "t2", "project": "p2"}); err != nil {
				t.Fatal(err)
			}
			if res, err := c.SyncUntilIdle(ctx); err != nil || len(res.Rejected) != 1 {
				t.Fatalf("sync of a forbidden write: %+v, %v", res, err)
			}
			if cs, err := n.Store.ReactionCounts(ctx); err != nil || cs != (storage.ReactionCounts{Completed: 2}) {
				t.Fatalf("after a rejected commit: %+v, %v", cs, err)
			}

			// The node's admin API answers the reactions endpoints, with
			// this node's runner in stats.
			api := reactions.NewAdminClient(admin.NewClient(nc, 10*time.Second))
			// (The runner counts a completion just after the store has it.)
			var st reactions.AdminStats
			poll.Until(t, 20*time.Second, "reactions.stats to count both completions", func() bool {
				st, err = api.Stats(ctx)
				return err != nil || st.Runner == nil || st.Runner.Completed == 2
			})
			if err != nil || st.Counts != (reactions.StatusCounts{Completed: 2}) || st.Node != "test-node" || st.Runner == nil || st.Runner.Completed != 2 {
				t.Fatalf("reactions.stats = %+v, %v", st, err)
			}
			l, err := api.List(ctx, reactions.ListRequest{Types: []string{"email.send"}})
			if err != nil || len(l.Reactions) != 1 || l.Reactions[0].Status != storage.ReactionCompleted || l.Reactions[0].SourceClientCommitID != ccid {
				t.Fatalf("reactions.list = %+v, %v", l, err)
			}
		})
	}
}

// Through a node: pushes whose commits plan no reactions cost the runner
// no claim (their events say ce-reactions 0), and a later commit that
// plans one still wakes it — its reaction runs without the sweep, which
// is an hour away.
func TestNodeReactionsAfterSkippedWakes(t *testing.T) {
	b := backends[0]
	sch, err := schema.Parse([]byte(vectorSchema))
	if err != nil {
		t.Fatal(err)
	}
	planner, err := rules.CompileReactions(sch, []rules.ReactionRule{
		{Name: "mail", Table: "tasks", On: rules.OnInsert, Type: "email.send", Payload: map[string]string{"task": "new.id"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	mailed := make(chan string, 4)
	n := startNode(t, vectorSchema, func(t *testing.T, c *Config) {
		b.cfg(t, c)
		c.Reactions.Planner = planner
		c.Reactions.Runner = reactions.Config{SweepInterval: time.Hour, Handlers: map[string]reactions.Handler{
			"email.send": func(_ context.Context, r storage.Reaction) error { mailed <- string(r.Payload); return nil },
		}}
	})
	tok := token(t, "alice", "acme", map[string][]string{"project": {"p1"}})
	c, err := client.New(client.Config{BaseURL: n.URL(), Schema: sch, HTTPClient: &http.Client{Transport: bearer(tok)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	push := func(id string) {
		t.Helper()
		if _, err := c.Upsert(ctx, "tasks", map[string]any{"id": id, "project": "p1"}); err != nil {
			t.Fatal(err)
		}
		if res, err := c.SyncUntilIdle(ctx); err != nil || len(res.Rejected) != 0 {
			t.Fatalf("sync: %+v, %v", res, err)
		}
	}
	await := func(want string) {
		t.Helper()
		select {
		case got := <-mailed:
			if got != want {
				t.Fatalf("mailed %s, want %s", got, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("the reaction %s never ran", want)
		}
	}
	push("t1")
	await(`{"task":"t1"}`)
	for range 5 {
		push("t1") // an update: the rule plans nothing
	}
	poll.Until(t, 20*time.Second, "a wake-up skipped", func() bool { return n.Reactions.Stats().SkippedWakes.Load() > 0 })
	push("t2")
	await(`{"task":"t2"}`)
}

// A commit that plans a reaction but changes no row (its one operation
// deletes a row that is not there) is appended to the log with no
// changes, so the relay publishes no commit event for it (events are per
// table). Its reaction must still run without the runner's sweep, which
// is an hour away.
func TestNodeReactionOfCommitWithoutChanges(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			planner := func(_ context.Context, v engine.CommitValidation) ([]engine.PlannedReaction, error) {
				return []engine.PlannedReaction{{Key: "audit", Type: "audit.log", Version: 1, Payload: map[string]string{"commit": v.ClientCommitID}}}, nil
			}
			ran := make(chan string, 4)
			n := startNode(t, vectorSchema, func(t *testing.T, c *Config) {
				b.cfg(t, c)
				c.Reactions.Planner = planner
				c.Reactions.Runner = reactions.Config{SweepInterval: time.Hour, Handlers: map[string]reactions.Handler{
					"audit.log": func(_ context.Context, r storage.Reaction) error { ran <- r.SourceClientCommitID; return nil },
				}}
			})
			sch, err := schema.Parse([]byte(vectorSchema))
			if err != nil {
				t.Fatal(err)
			}
			tok := token(t, "alice", "acme", map[string][]string{"project": {"p1"}})
			c, err := client.New(client.Config{BaseURL: n.URL(), Schema: sch, HTTPClient: &http.Client{Transport: bearer(tok)}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			ccid, err := c.Delete(ctx, "tasks", "absent")
			if err != nil {
				t.Fatal(err)
			}
			if res, err := c.SyncUntilIdle(ctx); err != nil || len(res.Rejected) != 0 {
				t.Fatalf("sync: %+v, %v", res, err)
			}
			commits, err := n.Store.CommitRange(ctx, "acme", 0, 10)
			if err != nil || len(commits) != 1 || len(commits[0].Changes) != 0 || commits[0].ClientCommitID != ccid {
				t.Fatalf("log = %+v, %v; want one commit without changes", commits, err)
			}
			select {
			case got := <-ran:
				if got != ccid {
					t.Fatalf("reaction of %s, want %s", got, ccid)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the reaction of a commit without changes never ran (it waits for the sweep)")
			}
		})
	}
}
