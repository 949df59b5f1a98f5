package operations

import (
	"bytes"
	"testing"
)

// FuzzDecode: the tagged decoder never panics, and whatever it accepts
// re-encodes to bytes it decodes to the same value.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"t":"null"}`, `{"t":"integer","v":"-42"}`, `{"t":"bytes","v":"AAE="}`,
		`{"t":"object","v":[["a",{"t":"array","v":[{"t":"boolean","v":true},{"t":"number","v":1.5}]}]]}`,
		`{"t":"string","v":"x"}`, `{"t":"integer","v":"007"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Decode(b)
		if err != nil {
			return
		}
		enc, err := Encode(v)
		if err != nil {
			t.Fatalf("decoded %q but cannot encode it: %v", b, err)
		}
		v2, err := Decode(enc)
		if err != nil {
			t.Fatalf("re-encoded %q does not decode: %v", enc, err)
		}
		enc2, _ := Encode(v2)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("not stable: %q then %q", enc, enc2)
		}
	})
}

// TestValueEncoding pins REMOTE.md §4's forms and refusals.
func TestValueEncoding(t *testing.T) {
	v := Object{{"n", nil}, {"b", true}, {"f", 1.5}, {"s", "x"}, {"i", int64(-9223372036854775808)}, {"y", []byte{0, 1}}, {"a", []any{int64(1)}}}
	b, err := Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"t":"object","v":[["n",{"t":"null"}],["b",{"t":"boolean","v":true}],["f",{"t":"number","v":1.5}],["s",{"t":"string","v":"x"}],["i",{"t":"integer","v":"-9223372036854775808"}],["y",{"t":"bytes","v":"AAE="}],["a",{"t":"array","v":[{"t":"integer","v":"1"}]}]]}`
	if string(b) != want {
		t.Fatalf("encoded %s", b)
	}
	for _, bad := range []string{`{"t":"integer","v":"01"}`, `{"t":"integer","v":"+1"}`, `{"t":"integer","v":"9223372036854775808"}`,
		`{"t":"integer","v":1}`, `{"t":"bytes","v":"AAE"}`, `{"t":"bytes","v":"AAF="}`, `{"t":"null","v":null}`,
		`{"t":"object","v":[["a",{"t":"null"}],["a",{"t":"null"}]]}`, `{"t":"what"}`, `{"t":"string","v":"x","x":1}`, `{"t":"boolean","v":"true"}`} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}
