package realtime

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

const scanSchema = `{"version":1,"tables":[{"name":"docs","columns":[
	{"name":"id","type":"string"},
	{"name":"project_id","type":"string"},
	{"name":"meta","type":"json","nullable":true},
	{"name":"scopes","type":"json","nullable":true}],
	"primaryKey":"id","scopes":["project:{project_id}"]}]}`

// jsonScopes is the reference: the changes' scopes as encoding/json reads
// the body, or false when it omits them.
func jsonScopes(t *testing.T, data []byte) ([]map[string]string, bool) {
	var body struct {
		Changes []struct {
			Scopes map[string]string `json:"scopes"`
		} `json:"changes"`
		ChangesOmitted bool `json:"changesOmitted"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		t.Fatalf("the encoder wrote invalid JSON: %v", err)
	}
	out := []map[string]string{}
	for _, c := range body.Changes {
		out = append(out, c.Scopes)
	}
	return out, !body.ChangesOmitted
}

// changeScopes reads what bus.Encoder writes: whenever it answers, it
// answers what a JSON decoder reads; it declines (never guesses) on
// escapes, a json column holding a "scopes" object, omitted changes.
func TestChangeScopesAgreesWithTheEncoder(t *testing.T) {
	s, err := schema.Parse([]byte(scanSchema))
	if err != nil {
		t.Fatal(err)
	}
	tbl, _ := s.Table("docs")
	p, err := bus.NewPartition("acme")
	if err != nil {
		t.Fatal(err)
	}
	names, err := bus.NewNames("")
	if err != nil {
		t.Fatal(err)
	}
	jsonValue := func(doc string) ssp2.Value {
		if doc == "" {
			return ssp2.Value{Null: true}
		}
		return ssp2.Value{Bytes: []byte(doc)}
	}
	// doc goes in meta; one starting with "scopes:" in the scopes column.
	row := func(id, project, doc string) []byte {
		meta, sc := jsonValue(doc), jsonValue("")
		if d, ok := strings.CutPrefix(doc, "scopes:"); ok {
			meta, sc = jsonValue(""), jsonValue(d)
		}
		b, err := tbl.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte(project)}, meta, sc})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	up := func(id, project, doc string) storage.Change {
		return storage.Change{Table: "docs", RowID: id, Op: storage.OpUpsert, RowVersion: 3, Scopes: map[string]string{"project_id": project}, Row: row(id, project, doc)}
	}
	cases := []struct {
		name    string
		changes []storage.Change
		max     int
		known   bool
	}{
		{"one", []storage.Change{up("a", "p1", "")}, 1 << 20, true},
		{"several and a delete", []storage.Change{up("a", "p1", `{"x":1}`), up("b", "p2", ""),
			{Table: "docs", RowID: "c", Op: storage.OpDelete, Scopes: map[string]string{"project_id": "p3"}}}, 1 << 20, true},
		{"a json column holding scopes", []storage.Change{up("a", "p1", `scopes:{"project_id":"p2"}`)}, 1 << 20, false},
		{"an escaped scope value", []storage.Change{up("a", `p"1`, "")}, 1 << 20, false},
		{"rows omitted", []storage.Change{up("a", "p1", `{"big":"`+strings.Repeat("x", 2000)+`"}`)}, 1000, true},
		{"changes omitted", []storage.Change{up("a", "p1", ""), up("b", "p2", "")}, 420, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			enc := bus.NewEncoder(names, "n1", s, c.max)
			msgs := enc.AppendCommit(nil, p, "e1", storage.Commit{CommitSeq: 7, ActorID: "alice", ClientID: "c", ClientCommitID: "x", SchemaVersion: 1, Changes: c.changes})
			if len(msgs) != 1 {
				t.Fatalf("%d events", len(msgs))
			}
			data := msgs[0].Msg.Data
			got, ok := changeScopes(data)
			want, wantOK := jsonScopes(t, data)
			if ok != c.known {
				t.Fatalf("changeScopes answered %v, want %v, for %s", ok, c.known, data)
			}
			if ok && (!wantOK || !reflect.DeepEqual(got, want)) {
				t.Fatalf("changeScopes read %v, JSON %v (%v), of %s", got, want, wantOK, data)
			}
		})
	}
}

func FuzzChangeScopes(f *testing.F) {
	f.Add([]byte(`{"changeCount":1,"changes":[{"rowId":"a","op":"delete","scopes":{"k":"v"}}]}`))
	f.Add([]byte(`{"changeCount":2,"changes":[{"scopes":{"k":"v","j":"w"}},{"scopes":{}}]}`))
	f.Add([]byte(`{"changeCount":1,"changes":[{"scopes":{"k":`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := changeScopes(b)
		if !ok && got != nil {
			t.Fatal("scopes without an answer")
		}
	})
}

// TestChangeScopesHugeCount: a changeCount the body cannot hold is
// refused before anything is sized by it (the fuzzer found a count that
// made the scan allocate until the process died).
func TestChangeScopesHugeCount(t *testing.T) {
	for _, body := range []string{
		`{"changeCount":99999999999999,"changes":[{"scopes":{"k":"v"}}]}`,
		`{"changeCount":1000000,"changes":[{"scopes":{"k":"v"}}]}`,
	} {
		if got, ok := changeScopes([]byte(body)); ok || got != nil {
			t.Fatalf("%s: %v, %v", body, got, ok)
		}
	}
}
