package engine

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// The memo answers what registered decodes, keyed by the list's bytes: a
// changed list is decoded afresh, reusing the caller's buffer cannot
// corrupt it, and it keeps no more than its byte bound.
func TestSubsMemo(t *testing.T) {
	var m subsMemo
	list := func(id, scope string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`[{"id":%q,"table":"tasks","scopes":{"project_id":[%q]},"effective":{"project_id":[%q]}}]`, id, scope, scope))
	}
	a := list("s1", "p1")
	want := registered(a)
	if want["s1"].Effective["project_id"][0] != "p1" {
		t.Fatalf("registered(%s) = %+v", a, want)
	}
	buf := append([]byte(nil), a...)
	if got := m.get(buf); !reflect.DeepEqual(got, want) {
		t.Fatalf("first get = %+v, want %+v", got, want)
	}
	copy(buf, list("s1", "p2")) // the caller reuses its buffer
	if got := m.get(buf); got["s1"].Effective["project_id"][0] != "p2" {
		t.Fatalf("get of a changed list = %+v, want p2", got)
	}
	if got := m.get(a); !reflect.DeepEqual(got, want) {
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
