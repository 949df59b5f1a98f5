package sqlitestore_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// TestSteadyRoundsCompileNothing: once warm, push + pull rounds compile
// no statement on any of the store's connections. A statement whose plan
// depends on a bound value (a "col = ?" matched against a partial index's
// WHERE, a LIKE prefix) is expired by SQLite whenever that parameter is
// bound, and a bare LIMIT ? whenever its value changes, so the next run
// parses and plans it again; the rounds here run every statement of the
// push and pull path, and a statement compiled again fails the test with
// its SQL. The one compilation allowed is a reader's first preparation
// of a statement another reader had already cached: once per connection.
//
// The rounds are those of `syncnode load push-pull`, a little widened:
// four clients on their own projects (one also subscribed to another's)
// pushing concurrently, so the writer groups their commits under
// savepoints, each round one commit that inserts a row and updates
// another, then an incremental pull of every subscription; the engine's
// serve-gate check in each transaction; the relay's reads of the log and
// a reaction's enqueue, claim and completion after every round.
func TestSteadyRoundsCompileNothing(t *testing.T) {
	ctx := context.Background()
	const readers = 4
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(t.TempDir(), "sync.db"), Synchronous: sqlitestore.SynchronousNormal,
		Readers: readers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	sc, err := schema.Parse([]byte(`{"version":1,"tables":[{"name":"tasks","columns":[
		{"name":"id","type":"string"},
		{"name":"project_id","type":"string"},
		{"name":"title","type":"string","nullable":true},
		{"name":"n","type":"integer","nullable":true}],
		"primaryKey":"id","scopes":["project:{project_id}"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureSchema(ctx, sc); err != nil {
		t.Fatal(err)
	}
	compiles, err := st.WatchCompiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Config{Schema: sc, Store: st, Gate: sqlGate{},
		Clock: clock.NewManual(time.UnixMilli(1_700_000_000_000))})
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := sc.Table("tasks")
	row := func(id, project string, n int) []byte {
		b, err := tasks.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte(project)},
			{Bytes: []byte(fmt.Sprint("title ", n))}, {Int: int64(n)}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	send := func(who engine.Identity, frames ...ssp2.Frame) (*ssp2.Message, error) {
		body, err := (&ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest, Frames: frames}).AppendEncode(nil)
		if err != nil {
			return nil, err
		}
		var out bytes.Buffer
		if err := e.Sync(ctx, who, body, &out); err != nil {
			return nil, err
		}
		return ssp2.DecodeMessage(out.Bytes())
	}

	type client struct {
		id       string
		who      engine.Identity
		project  string
		projects []string // subscribed, one subscription each
		cursors  []int64
	}
	var clients []*client
	for i := range 4 {
		c := &client{id: fmt.Sprint("c", i), project: fmt.Sprint("pr", i)}
		c.projects = []string{c.project}
		if i == 3 {
			c.projects = append(c.projects, "pr0")
		}
		c.cursors = make([]int64, len(c.projects))
		for j := range c.cursors {
			c.cursors[j] = -1 // bootstraps first
		}
		c.who = engine.Identity{Partition: "p", ActorID: "actor-" + c.id, Scopes: engine.StaticScopes{"project_id": c.projects}}
		clients = append(clients, c)
	}
	m, err := send(clients[0].who, &ssp2.ReqHeader{ClientID: "epoch-probe", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 3})
	if err != nil {
		t.Fatal(err)
	}
	epoch := m.Frames[0].(*ssp2.RespHeader).LogEpoch

	// round runs one round of c: round r inserts row n<r> and updates
	// row h<r%3>, then pulls every subscription from its cursor.
	round := func(c *client, r int) error {
		fs := []ssp2.Frame{
			&ssp2.ReqHeader{ClientID: c.id, SchemaVersion: 1, LogEpoch: &epoch},
			&ssp2.PushCommit{ClientCommitID: fmt.Sprint("k", r), Operations: []ssp2.Operation{
				{Table: "tasks", RowID: fmt.Sprint(c.id, "-n", r), Op: ssp2.OpUpsert, Payload: row(fmt.Sprint(c.id, "-n", r), c.project, r)},
				{Table: "tasks", RowID: fmt.Sprint(c.id, "-h", r%3), Op: ssp2.OpUpsert, Payload: row(fmt.Sprint(c.id, "-h", r%3), c.project, r)},
			}},
			&ssp2.PullHeader{Accept: 3},
		}
		for j, p := range c.projects {
			fs = append(fs, &ssp2.Subscription{ID: fmt.Sprint("s", j), Table: "tasks", Scopes: map[string][]string{"project_id": {p}}, Cursor: c.cursors[j]})
		}
		m, err := send(c.who, fs...)
		if err != nil {
			return fmt.Errorf("client %s round %d: %w", c.id, r, err)
		}
		applied, sub := 0, -1
		for _, f := range m.Frames {
			switch f := f.(type) {
			case *ssp2.SubStart:
				if _, err := fmt.Sscanf(f.ID, "s%d", &sub); err != nil {
					return err
				}
			case *ssp2.PushResult:
				if f.Status != ssp2.PushApplied {
					return fmt.Errorf("client %s round %d: push %+v", c.id, r, f)
				}
				applied++
			case *ssp2.SubEnd:
				c.cursors[sub] = f.NextCursor
			}
		}
		if applied != 1 {
			return fmt.Errorf("client %s round %d: %d push results", c.id, r, applied)
		}
		return nil
	}
	relayPos := map[string]int64{}
	relay := func() error {
		parts, err := st.Partitions(ctx)
		if err != nil {
			return err
		}
		for _, p := range parts {
			if _, err := st.PartitionGet(ctx, p.ID); err != nil {
				return err
			}
			_, cs, err := st.PartitionCommitRange(ctx, p.ID, relayPos[p.ID], 1000)
			if err != nil {
				return err
			}
			if len(cs) > 0 {
				relayPos[p.ID] = cs[len(cs)-1].CommitSeq
			}
		}
		return nil
	}
	// react enqueues two reactions as a push that plans them does, then
	// claims and completes them as the dispatcher does, and claims once
	// more with nothing due (the dispatcher's idle wake-up). The
	// reaction statements are the ones over partial indexes.
	reacted := 0
	react := func() error {
		reacted++
		r := reacted
		now := int64(1_700_000_000_000 + r)
		err := st.WriteTx(ctx, "p", func(tx storage.Tx) error {
			return tx.ReactionEnqueue(ctx, storage.ReactionEnqueueParams{SourceClientID: "c0", SourceClientCommitID: fmt.Sprint("k", r),
				SourceCommitSeq: int64(r + 1), CreatedAtMs: now, Reactions: []storage.ReactionNew{
					{IdempotencyKey: fmt.Sprint(`["p","c0","k`, r, `","a"]`), Type: "notify", Version: 1, Payload: []byte(`{}`), MaxAttempts: 3},
					{IdempotencyKey: fmt.Sprint(`["p","c0","k`, r, `","b"]`), Type: "index", Version: 1, Payload: []byte(`{}`), MaxAttempts: 3},
				}})
		})
		if err != nil {
			return err
		}
		claim := storage.ReactionClaimParams{Partition: "p", Owner: fmt.Sprint("o", r), NowMs: now, LeaseMs: 1000, Limit: 10}
		res, err := st.ReactionClaim(ctx, claim)
		if err != nil {
			return err
		}
		if len(res.Claimed) != 2 {
			return fmt.Errorf("round %d: claimed %d reactions, want 2", r, len(res.Claimed))
		}
		leases := make([]storage.ReactionLease, len(res.Claimed))
		for i, x := range res.Claimed {
			leases[i] = storage.ReactionLease{ReactionKey: x.ReactionKey, Owner: claim.Owner}
		}
		if done, err := st.ReactionComplete(ctx, storage.ReactionCompleteParams{Leases: leases, NowMs: now}); err != nil || len(done) != 2 || !done[0] || !done[1] {
			return fmt.Errorf("round %d: complete %v, %v", r, done, err)
		}
		if res, err := st.ReactionClaim(ctx, claim); err != nil || len(res.Claimed) != 0 {
			return fmt.Errorf("round %d: idle claim %d, %v", r, len(res.Claimed), err)
		}
		return nil
	}
	// relays is how many times each round reads as the relay: while
	// warming up, once per reader, since the readers are taken in turn
	// and the relay's reads are the only ones of their statements.
	relays := readers
	rounds := func(from, n int) {
		t.Helper()
		for r := from; r < from+n; r++ {
			var wg sync.WaitGroup
			errs := make([]error, len(clients))
			for i, c := range clients {
				wg.Go(func() { errs[i] = round(c, r) })
			}
			wg.Wait()
			for range relays {
				errs = append(errs, relay(), react())
			}
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	const warm, steady = 100, 50
	rounds(0, warm)
	if len(compiles.List()) == 0 {
		t.Fatal("the authorizer saw no compilation: it does not count them")
	}
	compiles.Reset()
	relays = 1
	rounds(warm, steady)
	var list []sqlitestore.Compile
	for _, c := range compiles.List() {
		if c.Elsewhere {
			t.Logf("allowed: %s", c) // once per connection, not per round
			continue
		}
		list = append(list, c)
	}
	if len(list) != 0 {
		count := map[string]int{}
		var order []string
		for _, c := range list {
			s := c.String()
			if count[s] == 0 {
				order = append(order, s)
			}
			count[s]++
		}
		var b strings.Builder
		for _, s := range order {
			fmt.Fprintf(&b, "\n%4d× %s", count[s], s)
		}
		t.Fatalf("%d compilations in %d steady rounds of %d clients (%.1f a round):%s",
			len(list), steady, len(clients), float64(len(list))/steady, b.String())
	}
}

// sqlGate admits every request and checks the serve gate's SQL state in
// the serving transaction, as the node's gate does.
type sqlGate struct{}

func (sqlGate) AdmitAt(context.Context, string, string) (engine.Ticket, error) {
	return sqlTicket{}, nil
}
func (sqlGate) Verify(context.Context, string) error { return nil }

type sqlTicket struct{}

func (sqlTicket) Check(ctx context.Context, tx storage.GateReader) error {
	_, err := tx.GateRead(ctx, "p", 1)
	return err
}
