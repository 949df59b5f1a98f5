package relay

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/bus/bustest"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

// TestRelayCascadedDeletes: the deletes a declared ON DELETE CASCADE
// appends to a commit (SPEC.md §6.11) are ordinary changes, published on
// the bus with the commit, one event per table.
func TestRelayCascadedDeletes(t *testing.T) {
	t.Parallel()
	sc, err := schema.Parse([]byte(`{"version":1,"tables":[
	 {"name":"folders","primaryKey":"id","scopes":["project:{project_id}"],"columns":[
	  {"name":"id","type":"string"},{"name":"project_id","type":"string"}]},
	 {"name":"docs","primaryKey":"id","scopes":["project:{project_id}"],"columns":[
	  {"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"folder_id","type":"string"}],
	  "references":[{"column":"folder_id","parentTable":"folders","onDelete":"CASCADE"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	e := &relayEnv{t: t, ctx: bustest.Context(t), schema: sc, srv: embeddedtest.Start(t)}
	e.js = e.srv.JetStream()
	e.store = openStore(t, filepath.Join(t.TempDir(), "sync.db"))
	if err := e.store.EnsureSchema(e.ctx, sc); err != nil {
		t.Fatal(err)
	}
	r := e.relay(Config{})
	e.start(r)
	eng, err := engine.New(engine.Config{Schema: sc, Store: e.store, OnCommit: r.Notify})
	if err != nil {
		t.Fatal(err)
	}
	who := engine.Identity{Partition: "acme", ActorID: "alice", Scopes: engine.StaticScopes{"project_id": {"*"}}}
	sync := func(frames ...ssp2.Frame) *ssp2.Message {
		t.Helper()
		body, err := (&ssp2.Message{WireVersion: 3, Kind: ssp2.KindRequest, Frames: frames}).AppendEncode(nil)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := eng.Sync(e.ctx, who, body, &out); err != nil {
			t.Fatal(err)
		}
		m, err := ssp2.DecodeMessage(out.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	epoch := sync(&ssp2.ReqHeader{ClientID: "c", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 3}).Frames[0].(*ssp2.RespHeader).LogEpoch
	row := func(table string, vals ...string) ssp2.Operation {
		tb, _ := sc.Table(table)
		sr := ssp2.SparseRow{Present: ssp2.FullColumnBitmap(len(vals)), Values: make([]ssp2.Value, len(vals))}
		for i, v := range vals {
			sr.Values[i] = ssp2.Value{Bytes: []byte(v)}
		}
		payload, err := tb.Sparse.AppendSparseRow(nil, sr)
		if err != nil {
			t.Fatal(err)
		}
		return ssp2.Operation{Table: table, RowID: vals[0], Op: ssp2.OpUpsert, Payload: payload}
	}
	push := func(id string, ops ...ssp2.Operation) int64 {
		t.Helper()
		res := sync(&ssp2.ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: &epoch}, &ssp2.PushCommit{ClientCommitID: id, Operations: ops}).Frames[1].(*ssp2.PushResult)
		if res.Status != ssp2.PushApplied {
			t.Fatalf("push %s = %+v", id, res)
		}
		return *res.CommitSeq
	}
	push("1", row("folders", "F1", "p1"), row("docs", "D1", "p1", "F1"), row("docs", "D2", "p1", "F1"))
	seq := push("2", ssp2.Operation{Table: "folders", RowID: "F1", Op: ssp2.OpDelete})
	e.flush(r)

	var got []string
	for _, ev := range e.checkLogInStream("acme") {
		if ev.CommitSeq != seq {
			continue
		}
		var body bus.CommitBody
		if err := json.Unmarshal(ev.Data, &body); err != nil {
			t.Fatal(err)
		}
		for _, ch := range body.Changes {
			got = append(got, ev.Table+" "+ch.Op+" "+ch.RowID+" "+ch.Scopes["project_id"])
		}
	}
	want := []string{"folders delete F1 p1", "docs delete D1 p1", "docs delete D2 p1"}
	if !slices.Equal(got, want) {
		t.Fatalf("events of the delete commit carry %v, want %v", got, want)
	}
}
