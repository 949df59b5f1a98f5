package realtime_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

// twoTables is taskSchema plus notes, a table no test session reads.
const twoTables = `{"version":1,"tables":[{"name":"tasks","columns":[
	{"name":"id","type":"string"},
	{"name":"project_id","type":"string"},
	{"name":"title","type":"string","nullable":true}],
	"primaryKey":"id","scopes":["project:{project_id}"]},
	{"name":"notes","columns":[
	{"name":"id","type":"string"},
	{"name":"project_id","type":"string"}],
	"primaryKey":"id","scopes":["project:{project_id}"]}]}`

func withTwoTables(t *testing.T) func(*node.Config) {
	s, err := schema.Parse([]byte(twoTables))
	if err != nil {
		t.Fatal(err)
	}
	return func(c *node.Config) { c.Schema = s }
}

// pushNotes commits one note in project, and a task when task is set
// (the commit's events: notes, then tasks), and returns its seq.
func (p *pusher) pushNotes(project string, task [2]string) int64 {
	p.t.Helper()
	s, _ := schema.Parse([]byte(twoTables))
	notes, _ := s.Table("notes")
	p.n++
	id := fmt.Sprintf("n%d", p.n)
	nr, err := notes.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte(project)}})
	if err != nil {
		p.t.Fatal(err)
	}
	ops := []ssp2.Operation{{Table: "notes", RowID: id, Op: ssp2.OpUpsert, Payload: nr}}
	if task[0] != "" {
		ops = append(ops, ssp2.Operation{Table: "tasks", RowID: task[0], Op: ssp2.OpUpsert, Payload: row(p.t, task[0], task[1], id)})
	}
	ep := p.epoch
	status, b := postSync(p.t, p.base, p.tok, encode(p.t, 2, &ssp2.ReqHeader{ClientID: p.client, SchemaVersion: 1, LogEpoch: &ep},
		&ssp2.PushCommit{ClientCommitID: fmt.Sprintf("c%d", p.n), Operations: ops}))
	if status != http.StatusOK {
		p.t.Fatalf("push: %d %s", status, b)
	}
	res := framesOf[*ssp2.PushResult](decode(p.t, b))
	if len(res) != 1 || res[0].Status != ssp2.PushApplied {
		p.t.Fatalf("push answered %+v", res)
	}
	return *res[0].CommitSeq
}

// expectDeltas applies the next deltas, checks they carry want, in order,
// and that no other delta arrived.
func expectDeltas(t *testing.T, c *wsClient, from int, want ...int64) {
	t.Helper()
	for i, seq := range want {
		m := c.applyDelta(from + i)
		if got := deltaSeq(t, m); got != seq {
			t.Fatalf("delta %d carries commit %d, want %d", from+i, got, seq)
		}
		if se := framesOf[*ssp2.SubEnd](m); len(se) != 1 || se[0].NextCursor != seq {
			t.Fatalf("delta %d ends %+v, want cursor %d", from+i, se, seq)
		}
	}
	if got := c.numDeltas(); got != from+len(want) {
		t.Fatalf("%d deltas arrived, want %d", got, from+len(want))
	}
}

// Commits no session can match — another table, another scope — are not
// read from SQL and send nothing; the next matching commit is a delta at
// its cursor, contiguous with what the session observed. A commit that
// touches an unread table first and a read one after is read once.
func TestCommitsNoSessionMatchesAreNotRead(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		n := startNode(t, b.on(t), withTwoTables(t))
		m := n.Realtime.Metrics()
		a := newPusher(t, n.URL(), "alice", "p1", "p2")
		c := mustDial(t, n.URL(), token(t, "bob", "p1", "p2"), "bob-1")
		// The first commit follows the round, as a delta: a commit still in
		// flight when a round runs would rightly wake the session.
		c.subscribe("tasks", "p1")
		c.sync()
		waitMetric(t, "the round's ack", m.Acks.Load, 1)
		expectDeltas(t, c, 0, a.push([2]string{"t0", "p1"}))
		reads := m.CommitReads.Load()

		a.pushNotes("p1", [2]string{}) // another table
		a.push([2]string{"x1", "p2"})  // another scope
		a.pushNotes("p2", [2]string{}) // both
		want := a.push([2]string{"t1", "p1"})
		both := a.pushNotes("p1", [2]string{"t2", "p1"})
		expectDeltas(t, c, 1, want, both)
		waitMetric(t, "skipped commits", m.CommitsSkipped.Load, 3)
		if got := m.CommitReads.Load() - reads; got != 2 {
			t.Fatalf("%d commits read, want 2 (the matching ones, once each)", got)
		}
		if got := m.Wakes(); got != 0 {
			t.Fatalf("%d wake-ups sent, want none", got)
		}
		assertMatchesServer(t, n.Store, c, "p1")
	})
}

// A session that registers on more mid-stream gets what it now matches:
// the commit skipped before its round comes in the round's pull, the
// next one as a delta.
func TestSubscriptionChangeMidStreamAfterSkips(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		n := startNode(t, b.on(t), withTwoTables(t))
		m := n.Realtime.Metrics()
		a := newPusher(t, n.URL(), "alice", "p1", "p2")
		c := mustDial(t, n.URL(), token(t, "bob", "p1", "p2"), "bob-1")
		c.subscribe("p1", "p1")
		c.sync()
		waitMetric(t, "the round's ack", m.Acks.Load, 1)
		expectDeltas(t, c, 0, a.push([2]string{"t0", "p1"}))

		skipped := a.push([2]string{"x1", "p2"})
		first := a.push([2]string{"t1", "p1"})
		expectDeltas(t, c, 1, first)
		waitMetric(t, "skipped commits", m.CommitsSkipped.Load, 1)

		c.subscribe("p2", "p2")
		c.sync()
		if !containsSeq(c, skipped) {
			t.Fatalf("the round did not bring commit %d", skipped)
		}
		next := a.push([2]string{"x2", "p2"})
		expectDeltas(t, c, 2, next)
		assertMatchesServer(t, n.Store, c, "p1", "p2")
		if got := m.Wakes(); got != 0 {
			t.Fatalf("%d wake-ups sent, want none", got)
		}
	})
}

func containsSeq(c *wsClient, seq int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.rep.seqs {
		if s == seq {
			return true
		}
	}
	return false
}
