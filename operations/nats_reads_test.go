package operations_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/operations"
)

// TestNATSCommandReadRefusals: the reads a NATS command handler sends to
// its call's read subject are refused one by one without ending the call
// — an unknown kind, a getRow of a table the schema lacks, a query of an
// ungranted project (operation.forbidden), an unknown query — a row the
// caller's scopes do not grant reads as null, and read MaxCommandReads+1
// is refused; the handler's reply still commits.
func TestNATSCommandReadRefusals(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		var runs atomic.Int64
		ops := goOps(&runs)
		ops.Commands = append(ops.Commands, operations.Command{ID: "probeReads", NATS: true, AllowActors: []string{"svc"}, TimeoutMs: 30000})
		n := nodetest.Start(t, b.with(t, func(c *node.Config) { c.Operations.Registry = ops }))
		nc := n.NATS.Conn()
		reqSubject := (bus.Names{}).OperationRequests()
		wide := nodetest.Token(t, "svc", "acme", map[string][]string{"project_id": {"p1", "p2"}})
		if res := natsCall(t, nc, reqSubject, wide, commandObj("svc-1", "addTodo", "seed", operations.Object{{Key: "id", Value: "t2"}, {Key: "project", Value: "p2"}, {Key: "title", Value: "x"}})); mustGet(res, "status") != "applied" {
			t.Fatalf("seed: %v", res)
		}
		handler, err := n.NATS.Connect()
		if err != nil {
			t.Fatal(err)
		}
		defer handler.Close()
		subject, _ := (bus.Names{}).OperationCommand("probeReads")
		answers := make(chan []operations.Object, 1)
		sub, err := handler.Subscribe(subject, func(m *nats.Msg) {
			v, _ := operations.Decode(m.Data)
			rs, _ := mustGet(v.(operations.Object), "readSubject").(string)
			read := func(o operations.Object) operations.Object {
				body, _ := operations.Encode(append(operations.Object{{Key: "revision", Value: int64(1)}}, o...))
				r, err := handler.Request(rs, body, 10*time.Second)
				if err != nil {
					return operations.Object{{Key: "kind", Value: "transport"}, {Key: "message", Value: err.Error()}}
				}
				out, _ := operations.Decode(r.Data)
				return out.(operations.Object)
			}
			got := []operations.Object{
				read(operations.Object{{Key: "kind", Value: "drop"}}),
				read(operations.Object{{Key: "kind", Value: "getRow"}, {Key: "table", Value: "nope"}, {Key: "rowId", Value: "t2"}}),
				read(operations.Object{{Key: "kind", Value: "query"}, {Key: "operationId", Value: "todos"}, {Key: "params", Value: []any{"p2"}}}),
				read(operations.Object{{Key: "kind", Value: "query"}, {Key: "operationId", Value: "nope"}, {Key: "params", Value: []any{}}}),
				read(operations.Object{{Key: "kind", Value: "getRow"}, {Key: "table", Value: "todos"}, {Key: "rowId", Value: "t2"}}),
			}
			for range operations.MaxCommandReads - len(got) {
				read(operations.Object{{Key: "kind", Value: "query"}, {Key: "operationId", Value: "todos"}, {Key: "params", Value: []any{"p1"}}})
			}
			got = append(got, read(operations.Object{{Key: "kind", Value: "query"}, {Key: "operationId", Value: "todos"}, {Key: "params", Value: []any{"p1"}}}))
			answers <- got
			reply, _ := operations.Encode(operations.Object{{Key: "revision", Value: int64(1)}, {Key: "kind", Value: "mutations"}, {Key: "mutations", Value: []any{
				operations.Object{{Key: "op", Value: "upsert"}, {Key: "table", Value: "todos"}, {Key: "row", Value: operations.Object{
					{Key: "id", Value: "t9"}, {Key: "project_id", Value: "p1"}, {Key: "title", Value: "probe"}, {Key: "done", Value: false}}}}}}})
			_ = m.Respond(reply)
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := handler.Flush(); err != nil {
			t.Fatal(err)
		}
		narrow := nodetest.Token(t, "svc", "acme", map[string][]string{"project_id": {"p1"}})
		if res := natsCall(t, nc, reqSubject, narrow, commandObj("svc-1", "probeReads", "p", operations.Object{})); mustGet(res, "status") != "applied" {
			t.Fatalf("probeReads: %v", res)
		}
		got := <-answers
		for i, want := range []string{operations.CodeInvalidRequest, operations.CodeInvalidRequest, operations.CodeForbidden, operations.CodeUnknown} {
			if mustGet(got[i], "kind") != "error" || mustGet(got[i], "code") != want {
				t.Errorf("read %d: %v, want %s", i, got[i], want)
			}
		}
		if r := got[4]; mustGet(r, "kind") != "row" || mustGet(r, "row") != nil {
			t.Errorf("getRow of an ungranted row: %v, want row null", r)
		}
		if r := got[5]; mustGet(r, "kind") != "error" || mustGet(r, "code") != operations.CodeInvalidRequest {
			t.Errorf("read %d: %v, want the cap's refusal", operations.MaxCommandReads+1, r)
		}
	})
}
