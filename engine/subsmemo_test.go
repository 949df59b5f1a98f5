package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// The memo answers what decodeSubs decodes, keyed by the list's bytes: a
// changed list is decoded afresh, reusing the caller's buffer cannot
// corrupt it, and it keeps no more than its byte bound.
func TestSubsMemo(t *testing.T) {
	var m subsMemo
	list := func(id, scope string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`[{"id":%q,"table":"tasks","scopes":{"project_id":[%q]},"effective":{"project_id":[%q]}}]`, id, scope, scope))
	}
	a := list("s1", "p1")
	want := decodeSubs(a).byID
	if want["s1"].Effective["project_id"][0] != "p1" {
		t.Fatalf("decodeSubs(%s) = %+v", a, want)
	}
	buf := append([]byte(nil), a...)
	if got := m.get(buf).byID; !reflect.DeepEqual(got, want) {
		t.Fatalf("first get = %+v, want %+v", got, want)
	}
	copy(buf, list("s1", "p2")) // the caller reuses its buffer
	if got := m.get(buf).byID; got["s1"].Effective["project_id"][0] != "p2" {
		t.Fatalf("get of a changed list = %+v, want p2", got)
	}
	if got := m.get(a).byID; !reflect.DeepEqual(got, want) {
		t.Fatalf("get after reuse = %+v, want %+v", got, want)
	}
	if m.get(nil) != nil || m.get(json.RawMessage(`{not json`)) != nil {
		t.Fatal("an empty or invalid list decodes as nothing")
	}
	for i := range 20000 {
		m.get(list(fmt.Sprint("s", i), "p1"))
		if m.bytes > subsMemoBytes {
			t.Fatalf("memo holds %d bytes, bound %d", m.bytes, subsMemoBytes)
		}
	}
	big := json.RawMessage(`[{"id":"s","table":"tasks","scopes":{"k":["` + string(make([]byte, subsMemoBytes/8)) + `"]}}]`)
	m.get(big)
	if _, ok := m.m[string(big)]; ok {
		t.Fatal("a list over an eighth of the bound was kept")
	}
}

// encodeSubs keeps a record's bytes exactly when encoding the pull's list
// would give them back: for every pair of lists below (nil against empty
// maps and lists, params written loosely or compactly, HTML-escaped
// strings, another order), its answer is json.Marshal's.
func TestEncodeSubsKeepsOnlyWhatMarshalWouldWrite(t *testing.T) {
	p := func(v ...string) []string { return v }
	lists := [][]registeredSub{
		nil,
		{},
		{{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": p("p1")}, Effective: map[string][]string{"project_id": p("p1")}}},
		{{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": p("p1")}, Effective: map[string][]string{}}},
		{{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": p("p1")}}},
		{{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": p("p2")}}},
		{{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": {}}}},
		{{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": nil}}},
		{{ID: "s", Table: "tasks", Scopes: map[string][]string{}}},
		{{ID: "s", Table: "tasks"}},
		{{ID: "s", Table: "notes", Scopes: map[string][]string{"project_id": p("p1")}}},
		{{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": p("p1")}, Params: json.RawMessage(`{"a":1}`)}},
		{{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": p("p1")}, Params: json.RawMessage(`{ "a" : 1 }`)}},
		{{ID: "<s&>", Table: "tasks", Scopes: map[string][]string{"k": p("<v>", "w")}}},
		{{ID: "a", Table: "tasks"}, {ID: "b", Table: "tasks"}},
		{{ID: "b", Table: "tasks"}, {ID: "a", Table: "tasks"}},
	}
	for i, stored := range lists {
		raw, err := json.Marshal(stored)
		if err != nil {
			t.Fatal(err)
		}
		rec := decodeSubs(raw)
		for j, next := range lists {
			want, err := json.Marshal(next)
			if err != nil {
				t.Fatal(err)
			}
			got, err := encodeSubs(rec, raw, next)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("stored list %d, pull's list %d: encodeSubs = %s, json.Marshal = %s", i, j, got, want)
			}
		}
	}
	// A record written by something else (a looser encoding of the same
	// list) is not canonical: its bytes are never kept.
	loose := json.RawMessage(`[ {"id":"s","table":"tasks","scopes":{"project_id":["p1"]}} ]`)
	rec := decodeSubs(loose)
	if rec == nil || rec.canonical {
		t.Fatalf("decodeSubs(%s) = %+v, want a non-canonical record", loose, rec)
	}
	got, _ := encodeSubs(rec, loose, rec.list)
	if bytes.Equal(got, loose) {
		t.Fatal("a non-canonical record's bytes were kept")
	}
}
