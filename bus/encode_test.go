package bus

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	cejs "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus/bustest"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

func str(s string) ssp2.Value { return ssp2.Value{Bytes: []byte(s)} }

func todoRow(t testing.TB, s *schema.Schema, id, project, title string, rank int64) []byte {
	t.Helper()
	tbl, _ := s.Table("todos")
	row, err := tbl.Codec.AppendRow(nil, []ssp2.Value{
		str(id), str(project), str(title), {Bool: true}, {Int: rank},
		{Float: 1.5}, str(`{"tags":["a","b"],"n":1}`), {Bytes: []byte{0, 1, 2, 255}}, {Null: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return row
}

func projectRow(t testing.TB, s *schema.Schema, id, name string) []byte {
	t.Helper()
	tbl, _ := s.Table("projects")
	row, err := tbl.Codec.AppendRow(nil, []ssp2.Value{str(id), str(name)})
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// multiTableCommit touches todos (two upserts and a delete) and projects.
func multiTableCommit(t testing.TB, s *schema.Schema) storage.Commit {
	return storage.Commit{
		CommitSeq: 42, CreatedAtMs: 1767225600123, ActorID: "user-1", ClientID: "client-a",
		ClientCommitID: "cc-7", SchemaVersion: 3,
		Changes: []storage.Change{
			{Table: "todos", RowID: "t1", Op: storage.OpUpsert, RowVersion: 2, Scopes: map[string]string{"project_id": "p1"}, Row: todoRow(t, s, "t1", "p1", "Buy \"milk\"\n", 1<<40)},
			{Table: "projects", RowID: "p1", Op: storage.OpUpsert, RowVersion: 1, Scopes: map[string]string{"id": "p1"}, Row: projectRow(t, s, "p1", "Home")},
			{Table: "todos", RowID: "t2", Op: storage.OpDelete, Scopes: map[string]string{"project_id": "p1"}},
		},
	}
}

func TestEncodeCommit(t *testing.T) {
	t.Parallel()
	s := bustest.Schema(t)
	p := mustPartition(t, "acme/eu")
	enc := NewEncoder(prod, "node-1", s, 1<<20)
	evs := enc.AppendCommit(nil, p, "ep1", multiTableCommit(t, s))
	if len(evs) != 2 {
		t.Fatalf("%d messages, want 2 (one per table)", len(evs))
	}
	m := evs[0].Msg
	if m.Subject != "sync.acme=2Feu.commit.todos" || evs[1].Msg.Subject != "sync.acme=2Feu.commit.projects" {
		t.Fatalf("subjects %q, %q", m.Subject, evs[1].Msg.Subject)
	}
	want := map[string]string{
		"ce-specversion": "1.0",
		"ce-id":          "acme=2Feu:ep1:42:todos",
		"Nats-Msg-Id":    "acme=2Feu:ep1:42:todos",
		"ce-type":        "dev.syncnode.commit.v1",
		"ce-source":      "syncnode://node-1",
		"ce-time":        "2026-01-01T00:00:00.123Z",
		"ce-subject":     "acme=2Feu/todos",
		"ce-partition":   "acme=2Feu",
		"ce-logepoch":    "ep1",
		"ce-commitseq":   "42",
		"ce-table":       "todos",
		"content-type":   "application/json",
	}
	for k, v := range want {
		if got := m.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if m.Header.Get(HeaderSyncPartition) != "" {
		t.Errorf("Sync-Partition set for a short id")
	}
	body, err := DecodeBody(m.Data)
	if err != nil {
		t.Fatalf("%v\n%s", err, m.Data)
	}
	if body.Partition != "acme/eu" || body.CommitSeq != 42 || body.ActorID != "user-1" || body.ClientCommitID != "cc-7" ||
		body.SchemaVersion != 3 || body.Table != "todos" || body.ChangeCount != 2 || len(body.Changes) != 2 || body.LogEpoch != "ep1" {
		t.Fatalf("body = %+v", body)
	}
	up, del := body.Changes[0], body.Changes[1]
	if up.Op != OpUpsert || up.RowVersion != 2 || up.Scopes["project_id"] != "p1" || del.Op != OpDelete || del.Row != nil || del.RowID != "t2" {
		t.Errorf("changes = %+v", body.Changes)
	}
	var row map[string]any
	dec := json.NewDecoder(strings.NewReader(string(up.Row)))
	dec.UseNumber()
	if err := dec.Decode(&row); err != nil {
		t.Fatal(err)
	}
	if row["title"] != "Buy \"milk\"\n" || row["done"] != true || row["rank"] != json.Number("1099511627776") ||
		row["score"] != json.Number("1.5") || row["blob"] != "AAEC/w==" || row["note"] != nil {
		t.Errorf("row = %#v", row)
	}
	if meta, ok := row["meta"].(map[string]any); !ok || meta["n"] != json.Number("1") {
		t.Errorf("json column not embedded as JSON: %#v", row["meta"])
	}
	t.Logf("body: %s", m.Data)
}

func TestEncodeHashedPartition(t *testing.T) {
	t.Parallel()
	s := bustest.Schema(t)
	p := mustPartition(t, strings.Repeat("tenant.", 20))
	evs := NewEncoder(prod, "n", s, 0).AppendCommit(nil, p, "e", multiTableCommit(t, s))
	h := evs[0].Msg.Header
	if h.Get(HeaderPartition) != p.Token() || h.Get(HeaderSyncPartition) != p.Escaped() {
		t.Fatalf("headers %v", h)
	}
	meta, err := prod.ParseMeta(evs[0].Msg.Subject, h)
	if err != nil || meta.Partition.ID() != p.ID() {
		t.Fatalf("ParseMeta = %+v, %v", meta, err)
	}
}

func TestEncodeOversizeAndUndecodable(t *testing.T) {
	t.Parallel()
	s := bustest.Schema(t)
	p := mustPartition(t, "p")
	c := multiTableCommit(t, s)
	big := strings.Repeat("x", 4000)
	c.Changes[0].Row = todoRow(t, s, "t1", "p1", big, 1)
	evs := NewEncoder(prod, "n", s, 3000).AppendCommit(nil, p, "e", c)
	b, err := DecodeBody(evs[0].Msg.Data)
	if err != nil || !b.RowsOmitted || len(b.Changes) != 2 || b.Changes[0].Row != nil {
		t.Fatalf("oversize row: %+v, %v", b, err)
	}
	for i := range 200 {
		c.Changes = append(c.Changes, storage.Change{Table: "todos", RowID: strings.Repeat("r", 40) + string(rune('a'+i%26)), Op: storage.OpDelete})
	}
	evs = NewEncoder(prod, "n", s, 3000).AppendCommit(nil, p, "e", c)
	b, err = DecodeBody(evs[0].Msg.Data)
	if err != nil || !b.ChangesOmitted || b.ChangeCount != 202 || len(b.Changes) != 0 {
		t.Fatalf("oversize change list: changes %d, count %d, omitted %v, %v", len(b.Changes), b.ChangeCount, b.ChangesOmitted, err)
	}

	// A row the running schema cannot decode travels as rowPayload.
	c = multiTableCommit(t, s)
	c.Changes[0].Row = []byte{1, 2, 3}
	c.Changes[1].Table = "gone"
	evs = NewEncoder(prod, "n", s, 0).AppendCommit(nil, p, "e", c)
	for _, ev := range evs {
		b, err := DecodeBody(ev.Msg.Data)
		if err != nil || b.Changes[0].Row != nil || len(b.Changes[0].RowPayload) == 0 {
			t.Errorf("%s: undecodable row: %+v, %v", ev.Msg.Subject, b.Changes[0], err)
		}
	}
}

func TestAppendValueNonFinite(t *testing.T) {
	t.Parallel()
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got := string(appendValue(nil, ssp2.TypeFloat, ssp2.Value{Float: f})); got != "null" {
			t.Errorf("%v renders %q", f, got)
		}
	}
	if got := string(appendString(nil, "a\xffb\x01")); got != `"a`+"\uFFFD"+`b\u0001"` {
		t.Errorf("appendString = %q", got)
	}
}

// TestCloudEventsSDKDecodes publishes an encoded event through a real
// server and decodes what a core subscriber receives with the CloudEvents
// SDK's NATS binding (binary mode).
func TestCloudEventsSDKDecodes(t *testing.T) {
	t.Parallel()
	s := bustest.Schema(t)
	srv := embeddedtest.Start(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync(prod.AllCommits())
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	p := mustPartition(t, "acme")
	evs := NewEncoder(prod, "node-1", s, 0).AppendCommit(nil, p, "ep1", multiTableCommit(t, s))
	for _, ev := range evs {
		if err := srv.Conn().PublishMsg(ev.Msg); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range evs {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := binding.ToEvent(context.Background(), cejs.NewMessage(m))
		if err != nil {
			t.Fatalf("sdk decode: %v", err)
		}
		if err := ev.Validate(); err != nil {
			t.Fatalf("sdk validate: %v", err)
		}
		if ev.ID() != want.Msg.Header.Get(HeaderID) || ev.Type() != EventTypeCommit || ev.Source() != "syncnode://node-1" ||
			ev.DataContentType() != ContentTypeJSON || ev.Time().UnixMilli() != 1767225600123 || ev.SpecVersion() != "1.0" {
			t.Errorf("sdk event = %s", ev)
		}
		ext := ev.Extensions()
		if ext["partition"] != "acme" || ext["logepoch"] != "ep1" || ext["commitseq"] != "42" || ext["table"] == nil {
			t.Errorf("extensions = %v", ext)
		}
		var body CommitBody
		if err := ev.DataAs(&body); err != nil || body.CommitSeq != 42 {
			t.Errorf("DataAs = %+v, %v", body, err)
		}
	}
}

// BenchmarkEncodeCommit: one three-change, two-table commit encoded into
// its two messages, as the relay does for every commit.
func BenchmarkEncodeCommit(b *testing.B) {
	s := bustest.Schema(b)
	p := mustPartition(b, "acme")
	c := multiTableCommit(b, s)
	enc := NewEncoder(prod, "node-1", s, 1<<20)
	var evs []CommitMsg
	b.ReportAllocs()
	for b.Loop() {
		evs = enc.AppendCommit(evs[:0], p, "ep1", c)
	}
	if len(evs) != 2 {
		b.Fatalf("%d messages", len(evs))
	}
}

// An event says how many reactions its commit enqueued only when the
// encoder was told (ce-reactions); ParseMeta reads -1 for an event that
// does not say, and for a value that is not a count.
func TestEncodeCommitReactions(t *testing.T) {
	t.Parallel()
	s := bustest.Schema(t)
	p := mustPartition(t, "acme")
	enc := NewEncoder(prod, "node-1", s, 1<<20)
	c := multiTableCommit(t, s)
	for _, tc := range []struct {
		evs    []CommitMsg
		header string
		meta   int
	}{
		{enc.AppendCommit(nil, p, "ep1", c), "", -1},
		{enc.AppendCommitReactions(nil, p, "ep1", c, 0), "0", 0},
		{enc.AppendCommitReactions(nil, p, "ep1", c, 3), "3", 3},
	} {
		if len(tc.evs) != 2 {
			t.Fatalf("%d messages, want 2", len(tc.evs))
		}
		for _, ev := range tc.evs {
			if got := ev.Msg.Header.Get(HeaderReactions); got != tc.header {
				t.Errorf("ce-reactions %q, want %q", got, tc.header)
			}
			m, err := prod.ParseMeta(ev.Msg.Subject, ev.Msg.Header)
			if err != nil || m.Reactions != tc.meta {
				t.Errorf("ParseMeta: Reactions %d, %v; want %d", m.Reactions, err, tc.meta)
			}
		}
	}
	h := enc.AppendCommitReactions(nil, p, "ep1", c, 0)[0].Msg.Header
	for _, bad := range []string{"-1", "x", "1.5"} {
		h.Set(HeaderReactions, bad)
		if m, err := prod.ParseMeta("sync.acme.commit.todos", h); err != nil || m.Reactions != -1 {
			t.Errorf("ce-reactions %q: Reactions %d, %v; want -1 (unknown)", bad, m.Reactions, err)
		}
	}
}
