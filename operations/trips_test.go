package operations

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// TestCommandRoundTrips counts the PostgreSQL round trips of a command
// (after a warm-up has prepared every statement, on one connection) and
// holds them to the budget. A command that writes one new row is four:
// its start (the partition row, the caller's client record and the
// optimistic lookup of its key, in one statement: RequestStart); the
// lock's pipeline (BEGIN, the lock, the partition row and the hinted
// result of the key, so the locked re-check costs none); the read of the
// row it writes, known only once the command ran; the queued writes and
// COMMIT. A push of the same operation through PushAuthoritative is five
// (a touch and a lookup before the same transaction). A retry is its
// start alone: the stored result, replayed as cached. Before the budget a
// command was six (the client record, the touch and the lookup each a
// round trip of its own).
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
	var runs int
	f := File{Commands: []Command{{ID: "add",
		Authorize: func(context.Context, engine.Identity, any) (bool, error) { return true, nil },
		Run: func(_ context.Context, c CommandCall) ([]Mutation, error) {
			runs++
			return []Mutation{task(c.RequestID, "a", "title", 1, false)}, nil
		}}}}
	e := newEnv(t, open, f, nil)
	id := caller("p", "u", engine.Allowed{"project_id": {"a"}})
	command := func(reqID, want string) int64 {
		t.Helper()
		n := trips.N()
		res, err := e.svc.Command(e.ctx, id, Request{Kind: "command", ClientID: "svc", OperationID: "add", RequestID: reqID, Params: Object{}})
		if err != nil || res.Status != want {
			t.Fatalf("command %s: %+v, %v (want %s)", reqID, res, err, want)
		}
		return trips.N() - n
	}
	for i := range 2 { // binds the caller and prepares the statements
		command(fmt.Sprint("warm", i), "applied")
	}
	for i := range 3 {
		if got := command(fmt.Sprint("r", i), "applied"); got > 4 {
			t.Fatalf("command %d: %d round trips, want at most 4", i, got)
		}
	}
	before := runs
	if got := command("r0", "cached"); got > 1 || runs != before {
		t.Fatalf("retry: %d round trips (want at most 1), command ran %d more times", got, runs-before)
	}
}
