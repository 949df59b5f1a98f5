package reliability

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

// TestClientIDTakeover: actor mallory, who holds project p2 only, replays
// alice's client id and commit ids — push-only, then with a pull. Alice's
// stored results (a conflict's serverRow of a p1 row among them) are never
// returned to her, her own writes are neither answered cached nor
// dropped silently, and alice keeps her client id.
func TestClientIDTakeover(t *testing.T) {
	onBothStores(t, func(t *testing.T, st store) {
		n := startNode(t, st, nil)
		ctx := context.Background()
		sch := mustSchema(t)
		items, _ := sch.Table("items")
		row := func(id, project, body string) []byte {
			b, err := items.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte(project)}, {Bytes: []byte(body)}, {Null: true}, {Null: true}, {Float: 1}})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		alice, mallory := token(t, "alice", "acme", "p1"), token(t, "mallory", "acme", "p2")
		ep := epoch(t, n.URL(), alice)
		hdr := &ssp2.ReqHeader{ClientID: "alice-phone", SchemaVersion: 1, LogEpoch: &ep}
		base := int64(9)
		send := func(tok string, frames ...ssp2.Frame) response {
			t.Helper()
			r, err := post(ctx, http.DefaultClient, n.URL(), tok, encode(t, 2, append([]ssp2.Frame{hdr}, frames...)...), nil)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		send(alice, &ssp2.PushCommit{ClientCommitID: "k1", Operations: []ssp2.Operation{{Table: "items", RowID: "secret", Op: ssp2.OpUpsert, Payload: row("secret", "p1", "confidential")}}})
		r := send(alice, &ssp2.PushCommit{ClientCommitID: "k2", Operations: []ssp2.Operation{{Table: "items", RowID: "secret", Op: ssp2.OpUpsert, Payload: row("secret", "p1", "stale"), BaseVersion: &base}}})
		if res := frames[*ssp2.PushResult](r.msg); len(res) != 1 || len(res[0].Results) != 1 || len(res[0].Results[0].ServerRow) == 0 {
			t.Fatalf("alice's conflict = %+v", res)
		}
		before, _ := n.Store.CommitMaxSeq(ctx, "acme")

		mine := func(ccid string) *ssp2.PushCommit {
			return &ssp2.PushCommit{ClientCommitID: ccid, Operations: []ssp2.Operation{{Table: "items", RowID: "m-" + ccid, Op: ssp2.OpUpsert, Payload: row("m-"+ccid, "p2", "mallory")}}}
		}
		for _, attempt := range [][]ssp2.Frame{
			{mine("k1"), mine("k2")},
			{mine("k1"), &ssp2.PullHeader{Accept: 3}, &ssp2.Subscription{ID: "s", Table: "items", Scopes: map[string][]string{"project_id": {"p2"}}, Cursor: -1}},
		} {
			r := send(mallory, attempt...)
			if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), string(ssp2.CodeInvalidClientID)) {
				t.Fatalf("mallory under alice's client id: %d %s; want 400 %s", r.status, r.body, ssp2.CodeInvalidClientID)
			}
		}
		if after, _ := n.Store.CommitMaxSeq(ctx, "acme"); after != before {
			t.Fatalf("mallory's attempts changed the log: seq %d → %d", before, after)
		}
		r = send(alice, &ssp2.PushCommit{ClientCommitID: "k3", Operations: []ssp2.Operation{{Table: "items", RowID: "a3", Op: ssp2.OpUpsert, Payload: row("a3", "p1", "x")}}},
			&ssp2.PullHeader{Accept: 3}, &ssp2.Subscription{ID: "s", Table: "items", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: -1})
		if res := frames[*ssp2.PushResult](r.msg); r.status != http.StatusOK || len(res) != 1 || res[0].Status != ssp2.PushApplied {
			t.Fatalf("alice afterwards: %d %+v", r.status, res)
		}
	})
}
