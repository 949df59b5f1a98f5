package operations

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/storage"
)

func queryReq(op string, params ...any) Request {
	if params == nil {
		params = []any{}
	}
	return Request{Kind: "query", ClientID: "svc", OperationID: op, Params: params}
}

// query runs a query as id with the client id "cli-<actor>".
func (e *env) query(id engine.Identity, op string, params ...any) (QueryResult, error) {
	req := queryReq(op, params...)
	req.ClientID = "cli-" + id.ActorID
	return e.svc.Query(e.ctx, id, req)
}

func errCode(err error) string {
	if err == nil {
		return ""
	}
	return toError(err).Code
}

// TestScopedQueryOracle writes random rows into three partitions and asks
// random scoped queries as random actors: a query never returns a row of
// another partition or of an ungranted scope, and returns exactly the
// rows the rows API (RowScan) holds for the covered value — even for a
// query whose SQL does not filter (the relations do).
func TestScopedQueryOracle(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		e := newEnv(t, open, validFile(), nil)
		rng := rand.New(rand.NewPCG(1, 2))
		parts := []string{"p0", "p1", "p2"}
		projects := []string{"a", "b", "c", "d"}
		for _, p := range parts {
			var muts []Mutation
			for i := range 40 {
				muts = append(muts, task(fmt.Sprintf("%s-t%02d", p, i), projects[rng.IntN(len(projects))], "title", int64(i), i%2 == 0))
			}
			e.put(p, muts...)
		}
		for trial := range 60 {
			part := parts[rng.IntN(len(parts))]
			var grant []string
			for _, pr := range projects {
				if rng.IntN(2) == 0 {
					grant = append(grant, pr)
				}
			}
			if trial%10 == 0 {
				grant = []string{engine.Wildcard}
			}
			want := projects[rng.IntN(len(projects))]
			op := []string{"byProject", "sloppy", "selfJoin"}[trial%3]
			id := caller(part, fmt.Sprintf("actor%d", trial), engine.Allowed{"project_id": grant})
			res, err := e.query(id, op, want)
			granted := slices.Contains(grant, want) || slices.Contains(grant, engine.Wildcard)
			if !granted {
				if errCode(err) != CodeForbidden {
					t.Fatalf("trial %d: ungranted %q answered %v, %v", trial, want, res, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
			var oracle []string
			if err := e.store.ReadTx(e.ctx, func(tx storage.ReadTx) error {
				rows, err := tx.RowScan(e.ctx, storage.ScanParams{Partition: part, Table: "tasks", Scopes: map[string][]string{"project_id": {want}}, Limit: 1000})
				for _, r := range rows {
					oracle = append(oracle, r.RowID)
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range res.Rows {
				v, _ := r.Get("id")
				got = append(got, v.(string))
			}
			if !slices.Equal(got, oracle) {
				t.Fatalf("trial %d (%s, %s, %s): got %v, the rows API holds %v", trial, op, part, want, got, oracle)
			}
			if res.MaxCommitSeq != 1 {
				t.Fatalf("maxCommitSeq %d, want 1", res.MaxCommitSeq)
			}
		}
	})
}

// TestMaxRowsExact: a result of exactly maxRows is returned whole, one
// more row fails as operation.result_too_large, never a partial result —
// also for a query with an outermost LIMIT of its own, whose rows keep
// their order under the store's LIMIT maxRows + 1 (the statement text is
// checked by each store's TestQueryStatementLimit).
func TestMaxRowsExact(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		e := newEnv(t, open, validFile(), nil)
		id := caller("p", "u", engine.Allowed{"project_id": {"a"}})
		for i := range 5 {
			e.put("p", task(fmt.Sprintf("t%d", i), "a", "x", 1, false))
		}
		res, err := e.query(id, "five", "a")
		if err != nil || len(res.Rows) != 5 || res.MaxCommitSeq != 5 {
			t.Fatalf("5 rows under maxRows 5: %d rows, seq %d, %v", len(res.Rows), res.MaxCommitSeq, err)
		}
		e.put("p", task("t5", "a", "x", 1, false))
		if _, err := e.query(id, "five", "a"); errCode(err) != CodeResultTooLarge {
			t.Fatalf("6 rows under maxRows 5: %v", err)
		}
		if _, err := e.query(id, "fiveOwnLimit", "a"); errCode(err) != CodeResultTooLarge {
			t.Fatalf("6 rows of LIMIT 6 under maxRows 5: %v", err)
		}
		res, err = e.query(id, "threeOwnLimit", "a")
		if err != nil || fmt.Sprint(res.Rows) != "[[{id t5} {title x}] [{id t4} {title x}] [{id t3} {title x}]]" {
			t.Fatalf("LIMIT 3 under maxRows 5: %v, %v", res.Rows, err)
		}
	})
}

// TestQueryValues: values come back in their declared types on both
// stores; a NULL under a non-nullable declaration is
// operation.query_failed; bad params are operation.invalid_request;
// privileged queries follow allowActors.
func TestQueryValues(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		e := newEnv(t, open, validFile(), nil)
		m := task("t1", "a", "x", 42, true)
		m.Row["meta"] = `{"k":1}`
		e.put("p", m, Mutation{Op: "upsert", Table: "tasks", Row: map[string]any{"id": "t2", "project_id": "a", "title": nil, "prio": int64(-7), "done": false, "meta": nil}})
		id := caller("p", "u", engine.Allowed{"project_id": {"a"}})
		res, err := e.query(id, "typed", "a")
		if err != nil {
			t.Fatal(err)
		}
		want := []Object{
			{{"id", "t1"}, {"prio", int64(42)}, {"done", true}, {"meta", `{"k":1}`}},
			{{"id", "t2"}, {"prio", int64(-7)}, {"done", false}, {"meta", nil}},
		}
		if fmt.Sprint(res.Rows) != fmt.Sprint(want) {
			t.Fatalf("rows %v, want %v", res.Rows, want)
		}
		if _, err := e.query(id, "nullTitle", "a"); errCode(err) != CodeQueryFailed {
			t.Fatalf("NULL for a non-nullable column: %v", err)
		}
		for _, params := range [][]any{{}, {"a", "b"}, {[]any{"a"}}} {
			if _, err := e.svc.Query(e.ctx, id, Request{Kind: "query", ClientID: "cli-u", OperationID: "typed", Params: params}); errCode(err) != CodeInvalidRequest {
				t.Fatalf("params %v: %v", params, err)
			}
		}
		if _, err := e.query(id, "nope"); errCode(err) != CodeUnknown {
			t.Fatalf("unknown query: %v", err)
		}
		if _, err := e.query(id, "count", "a"); errCode(err) != CodeForbidden {
			t.Fatalf("privileged query as a stranger: %v", err)
		}
		admin := caller("p", "admin", nil)
		res, err = e.query(admin, "count", "a")
		if err != nil || fmt.Sprint(res.Rows) != fmt.Sprint([]Object{{{"total", int64(2)}, {"three", int64(3)}, {"prio", int64(35)}}}) {
			t.Fatalf("privileged count: %v %v", res.Rows, err)
		}
		// Another partition's rows are not there, even privileged.
		res, err = e.query(caller("other", "admin", nil), "count", "a")
		if err != nil || fmt.Sprint(res.Rows) != fmt.Sprint([]Object{{{"total", int64(0)}, {"three", int64(3)}, {"prio", nil}}}) {
			t.Fatalf("privileged count of an empty partition: %v %v", res.Rows, err)
		}
		// That first query of a partition without a row, by a client
		// without a record, created the row and bound the client.
		if c, ok, err := e.store.ClientGet(e.ctx, "other", "cli-admin"); err != nil || !ok || c.ActorID != "admin" {
			t.Fatalf("the first query's caller: %+v %v %v", c, ok, err)
		}
		if p, err := e.store.PartitionGet(e.ctx, "other"); err != nil || p.ID != "other" {
			t.Fatalf("the first query's partition: %+v %v", p, err)
		}
		// A client id bound to another actor is refused.
		if _, err := e.svc.Query(e.ctx, caller("p", "v", engine.Allowed{"project_id": {"a"}}), Request{Kind: "query", ClientID: "cli-u", OperationID: "typed", Params: []any{"a"}}); errCode(err) != "sync.invalid_client_id" {
			t.Fatalf("client id of another actor: %v", err)
		}
	})
}

// TestScopedQueryTwoValues: a scope variable covered by two parameters
// reads the rows of both values when both are granted (and not the rows
// of a third), and is forbidden when one is not.
func TestScopedQueryTwoValues(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		e := newEnv(t, open, validFile(), nil)
		e.put("p", task("a1", "a", "x", 1, false), task("b1", "b", "x", 1, false), task("c1", "c", "x", 1, false))
		res, err := e.query(caller("p", "u", engine.Allowed{"project_id": {"a", "b", "c"}}), "twoProjects", "a", "b")
		if err != nil || fmt.Sprint(res.Rows) != fmt.Sprint([]Object{{{"id", "a1"}, {"title", "x"}}, {{"id", "b1"}, {"title", "x"}}}) {
			t.Fatalf("two granted values: %v %v", res.Rows, err)
		}
		res, err = e.query(caller("p", "u", engine.Allowed{"project_id": {"a", "b"}}), "twoProjects", "a", "a")
		if err != nil || len(res.Rows) != 1 {
			t.Fatalf("one value twice: %v %v", res.Rows, err)
		}
		if _, err := e.query(caller("p", "u", engine.Allowed{"project_id": {"a"}}), "twoProjects", "a", "b"); errCode(err) != CodeForbidden {
			t.Fatalf("one value ungranted: %v", err)
		}
	})
}
