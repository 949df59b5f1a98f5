package operations

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// TestCommandRoundTrips counts the PostgreSQL round trips of commands
// (after a warm-up has prepared every statement, on one connection) and
// holds them to the budget.
//
// A command that writes one new row is four: its start (the partition
// row, the caller's client record and the optimistic lookup of its key,
// in one statement: RequestStart); the lock's pipeline (BEGIN, the lock,
// the partition row and the hinted result of the key, so the locked
// re-check costs none); the read of the row it writes, known only once
// the command ran; the queued writes and COMMIT. (A push of the same
// operation through PushAuthoritative is five: a touch and a lookup
// before the same transaction.) A command of three operations is four as
// well: their rows are read in one round trip (storage.TxRowPrefetcher).
// A NATS command's declared read comes with the lock's pipeline
// (storage.RowPrefetcher), so one that rewrites the row it read is four:
// the row read again by the push path (a row read ahead is taken once)
// in place of the new row's read. A retry is its start alone: the stored
// result, replayed as cached, the command not run.
//
// Before these budgets a command was six, eight with three operations,
// the NATS rewrite seven and a retry three: the client record, the touch
// and the lookup each a round trip of its own, a row read per operation,
// the declared read one of its own.
func TestCommandRoundTrips(t *testing.T) {
	var trips *pgtest.Trips
	open := func(tb testing.TB) storage.Store {
		url, sch := pgtest.Schema(tb)
		proxied, tr := pgtest.Proxy(tb, url)
		trips = tr
		st, err := pgstore.Open(context.Background(), pgstore.Config{URL: proxied, Schema: sch, MaxConns: 1})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = st.Close() })
		return st
	}
	runs := 0
	allow := func(context.Context, engine.Identity, any) (bool, error) { return true, nil }
	f := File{Commands: []Command{
		{ID: "add", Authorize: allow, Run: func(_ context.Context, c CommandCall) ([]Mutation, error) {
			runs++
			return []Mutation{task(c.RequestID, "a", "title", 1, false)}, nil
		}},
		{ID: "add3", Authorize: allow, Run: func(_ context.Context, c CommandCall) ([]Mutation, error) {
			return []Mutation{task(c.RequestID+".1", "a", "t", 1, false), task(c.RequestID+".2", "a", "t", 1, false),
				task(c.RequestID+".3", "a", "t", 1, false)}, nil
		}},
		{ID: "rename", NATS: true, AllowActors: []string{"u"}, Reads: []Read{{Table: "tasks", RowIDParam: "id"}}},
	}}
	e := newEnv(t, open, f, nil)
	// The NATS command's handler, in process: it retitles the row it
	// was sent.
	srv := embeddedtest.Start(t)
	subject, err := (bus.Names{}).OperationCommand("rename")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := srv.Conn().Subscribe(subject, func(m *nats.Msg) {
		v, _ := Decode(m.Data)
		rows, _ := v.(Object).Get("rows")
		row, _ := rows.([]any)[0].(Object).Get("row")
		renamed := Object{}
		for _, fl := range row.(Object) {
			if fl.Key == "title" {
				fl.Value = "renamed"
			}
			renamed = append(renamed, fl)
		}
		reply, _ := Encode(Object{{"revision", int64(1)}, {"kind", "mutations"},
			{"mutations", []any{Object{{"op", "upsert"}, {"table", "tasks"}, {"row", renamed}}}}})
		_ = m.Respond(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if e.svc, err = New(Config{Schema: e.schema, Store: e.store, Engine: e.engine, Registry: e.svc.cfg.Registry, Conn: srv.Conn(), Names: bus.Names{}}); err != nil {
		t.Fatal(err)
	}
	e.put("p", task("t1", "a", "x", 1, false))
	id := caller("p", "u", engine.Allowed{"project_id": {"a"}})
	command := func(op, reqID string, params Object, want string) int64 {
		t.Helper()
		n := trips.N()
		res, err := e.svc.Command(e.ctx, id, Request{Kind: "command", ClientID: "svc", OperationID: op, RequestID: reqID, Params: params})
		if err != nil || res.Status != want {
			t.Fatalf("command %s %s: %+v, %v (want %s)", op, reqID, res, err, want)
		}
		return trips.N() - n
	}
	for i := range 2 { // binds the caller and prepares the statements
		command("add", fmt.Sprint("warm", i), Object{}, "applied")
		command("add3", fmt.Sprint("warm", i), Object{}, "applied")
		command("rename", fmt.Sprint("warm", i), Object{{"id", "t1"}}, "applied")
	}
	for i := range 3 {
		for _, c := range []struct {
			op     string
			params Object
		}{{"add", Object{}}, {"add3", Object{}}, {"rename", Object{{"id", "t1"}}}} {
			if got := command(c.op, fmt.Sprint("r", i), c.params, "applied"); got > 4 {
				t.Fatalf("command %s %d: %d round trips, want at most 4", c.op, i, got)
			}
		}
	}
	var renamed storage.Row
	if err := e.store.ReadTx(e.ctx, func(tx storage.ReadTx) error {
		var ok bool
		renamed, ok, err = tx.RowGet(e.ctx, "p", "tasks", "t1")
		if err == nil && !ok {
			err = fmt.Errorf("no row t1")
		}
		return err
	}); err != nil || renamed.ServerVersion != 6 { // the seed and five renames
		t.Fatalf("the renamed row: %+v %v", renamed, err)
	}
	before := runs
	if got := command("add", "r0", Object{}, "cached"); got > 1 || runs != before {
		t.Fatalf("retry: %d round trips (want at most 1), command ran %d more times", got, runs-before)
	}
}
