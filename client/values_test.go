package client

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

const allTypesSchema = `{"version":1,"tables":[{"name":"things","columns":[
	{"name":"id","type":"integer"},
	{"name":"org","type":"string"},
	{"name":"label","type":"string","nullable":true},
	{"name":"score","type":"float","nullable":true},
	{"name":"ok","type":"boolean","nullable":true},
	{"name":"meta","type":"json","nullable":true},
	{"name":"data","type":"bytes","nullable":true},
	{"name":"att","type":"blob_ref","nullable":true}],
	"primaryKey":"id","scopes":["org:{org}"]}]}`

func TestEncodeRowRoundTrip(t *testing.T) {
	s := mustSchema(t, allTypesSchema)
	tb, _ := s.Table("things")
	blob := `{"blobId":"sha256:` + strings.Repeat("ab", 32) + `","byteLength":3}`
	in := map[string]any{
		"id": json.Number("42"), "org": "o1", "label": "hello", "score": 1.5, "ok": true,
		"meta": map[string]any{"a": []int{1, 2}}, "data": "AQID", "att": blob,
	}
	payload, rowID, err := encodeRow(tb, in)
	if err != nil {
		t.Fatal(err)
	}
	if rowID != "42" {
		t.Fatalf("rowId = %q", rowID)
	}
	got, err := decodeValues(tb, payload)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"id": int64(42), "org": "o1", "label": "hello", "score": 1.5, "ok": true,
		"meta": json.RawMessage(`{"a":[1,2]}`), "data": []byte{1, 2, 3}, "att": json.RawMessage(blob),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %#v\nwant %#v", got, want)
	}

	// Absent nullable columns are NULL.
	payload, _, err = encodeRow(tb, map[string]any{"id": 7, "org": "o1"})
	if err != nil {
		t.Fatal(err)
	}
	got, _ = decodeValues(tb, payload)
	if got["label"] != nil || got["meta"] != nil || got["id"] != int64(7) {
		t.Fatalf("decoded %#v", got)
	}
}

func TestEncodeRowErrors(t *testing.T) {
	s := mustSchema(t, allTypesSchema)
	tb, _ := s.Table("things")
	base := func(k string, v any) map[string]any {
		m := map[string]any{"id": 1, "org": "o1"}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		row    map[string]any
		column string
		reason string
	}{
		{"unknown column", base("nope", 1), "", `unknown column "nope"`},
		{"missing pk", base("id", nil), "id", "missing value"},
		{"null non-nullable", map[string]any{"id": 1, "org": nil}, "org", "null value"},
		{"string as int", base("id", "1"), "id", "cannot use string as integer"},
		{"fractional int", base("id", 1.5), "id", "not a safe integer"},
		{"unsafe int", base("id", int64(1)<<60), "id", "outside"},
		{"unsafe uint", base("id", uint64(1)<<62), "id", "outside"},
		{"int as string", base("label", 3), "label", "cannot use int as string"},
		{"string as bool", base("ok", "true"), "ok", "cannot use string as boolean"},
		{"bad base64", base("data", "!!"), "data", "base64"},
		{"bad raw json", base("meta", json.RawMessage("{")), "meta", "not valid JSON"},
		{"blob_ref not json", base("att", "nope"), "att", "not a JSON document"},
		{"bad number", base("score", json.Number("x")), "score", "not a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := encodeRow(tb, tc.row)
			var ve *ValueError
			if !errors.As(err, &ve) || ve.Column != tc.column || !strings.Contains(ve.Error(), tc.reason) {
				t.Fatalf("err = %v, want a ValueError on %q containing %q", err, tc.column, tc.reason)
			}
		})
	}
	// A blob_ref that is JSON but not a canonical BlobRef fails in the codec.
	if _, _, err := encodeRow(tb, base("att", `{"name":"x"}`)); err == nil {
		t.Fatal("non-canonical blob_ref accepted")
	}
}
