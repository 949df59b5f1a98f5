package relay

import (
	"encoding/json"
	"testing"
)

// fullAck decodes an acknowledgement as jetstream's PublishMsg does.
func fullAck(b []byte) (seq uint64, plain bool) {
	var ack struct {
		Error     *json.RawMessage `json:"error"`
		Stream    string           `json:"stream"`
		Seq       uint64           `json:"seq"`
		Duplicate bool             `json:"duplicate"`
	}
	if err := json.Unmarshal(b, &ack); err != nil {
		return 0, false
	}
	return ack.Seq, ack.Error == nil && ack.Stream != "" && !ack.Duplicate
}

// TestParsePubAck: the hand-read acknowledgement takes exactly the plain
// ones the server writes (with and without a domain) and leaves errors,
// duplicates and anything unusual to encoding/json.
func TestParsePubAck(t *testing.T) {
	for _, c := range []struct {
		in  string
		seq uint64
		ok  bool
	}{
		{`{"stream":"SYNC_COMMITS","seq":42}`, 42, true},
		{`{"stream":"SYNC_COMMITS","domain":"hub","seq":7}`, 7, true},
		{`{"stream":"S","seq":18446744073709551615}`, 0, false}, // near overflow: left to encoding/json
		{`{"stream":"SYNC_COMMITS","seq":42,"duplicate": true}`, 0, false},
		{`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"S","seq":0}`, 0, false},
		{`{"stream":"","seq":1}`, 0, false},
		{`{"stream":"S","seq":}`, 0, false},
		{`{"stream":"S","seq":12x}`, 0, false},
		{`{"stream":"S","seq":12`, 0, false},
		{`{"stream":"S","seq":012}`, 0, false},
		{`{"stream":"seq":0}`, 0, false},
		{`{"stream":"S\"","seq":1}`, 0, false},
		{`{"stream":"S","seq":0}`, 0, true},
		{`{"stream":"S"}`, 0, false},
		{``, 0, false},
	} {
		seq, ok := parsePubAck([]byte(c.in))
		if seq != c.seq || ok != c.ok {
			t.Errorf("parsePubAck(%s) = %d, %v; want %d, %v", c.in, seq, ok, c.seq, c.ok)
		}
		if ok {
			if full, plain := fullAck([]byte(c.in)); !plain || full != seq {
				t.Errorf("%s: encoding/json reads %d (plain %v)", c.in, full, plain)
			}
		}
	}
}

// FuzzParsePubAck: whatever parsePubAck accepts, encoding/json reads as
// the same plain acknowledgement.
func FuzzParsePubAck(f *testing.F) {
	for _, s := range []string{`{"stream":"SYNC_COMMITS","seq":42}`, `{"stream":"S","domain":"d","seq":7}`, `{"stream":"S","seq":1,"duplicate": true}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, ok := parsePubAck(b)
		if !ok {
			return
		}
		if full, plain := fullAck(b); !plain || full != seq {
			t.Fatalf("parsePubAck(%q) = %d; encoding/json reads %d (plain %v)", b, seq, full, plain)
		}
	})
}
