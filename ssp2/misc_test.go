package ssp2

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"
)

func TestCompareUTF16(t *testing.T) {
	// Reference: compare the UTF-16 encodings unit by unit.
	ref := func(a, b string) int {
		ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
		return slices.Compare(ua, ub)
	}
	words := []string{"", "a", "ab", "b", "project", "team", "\u00e9", "\uff61", "\uffff", "\ue000",
		"\U0001F600", "\U00010000", "\U0010FFFF", "a\U0001F600", "a\uff61", "\U0001F600\uff61", "\U0001F601", "z"}
	for _, a := range words {
		for _, b := range words {
			if got, want := CompareUTF16(a, b), ref(a, b); got != want {
				t.Errorf("CompareUTF16(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
	// The divergence from byte order the spec calls out.
	if CompareUTF16("\U0001F600", "\uff61") >= 0 || strings.Compare("\U0001F600", "\uff61") <= 0 {
		t.Fatal("supplementary characters must sort before U+E000–U+FFFF by UTF-16 units")
	}
}

func TestScopeDigest(t *testing.T) {
	p1 := map[string][]string{"project": {"p1"}}
	if got, want := ScopeDigest(p1), "5a993aa4d503af6f5dc77acc12ad399ff2e9d933c393f4de6af5f6aef4fa2977"; got != want {
		t.Fatalf("ScopeDigest = %s, want %s", got, want)
	}
	tests := []struct {
		in   map[string][]string
		want string
	}{
		{nil, `{}`},
		{map[string][]string{"k": {}}, `{"k":[]}`},
		{map[string][]string{"team": {"t9"}, "project": {"p2", "p1", "p2"}}, `{"project":["p1","p2"],"team":["t9"]}`},
		{map[string][]string{"\uff61": {"x"}, "\U0001F600": {"\uff61", "\U0001F600"}}, `{"😀":["😀","｡"],"｡":["x"]}`},
		// JSON.stringify escaping: only quote, backslash and C0 controls;
		// <, >, & and U+2028/U+2029 stay raw (encoding/json would escape them).
		{map[string][]string{"a": {"<b>&\u2028\u2029\"\\\n\x01\x7f"}}, `{"a":["<b>&` + "\u2028\u2029" + `\"\\\n\u0001` + "\x7f" + `"]}`},
	}
	for _, tt := range tests {
		if got := string(CanonicalScopes(tt.in)); got != tt.want {
			t.Errorf("CanonicalScopes(%v) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestParseScopesHeader(t *testing.T) {
	got, err := ParseScopesHeader(" { \"team\" : [ \"t9\" ] ,\n\"project\":[\"p2\",\"p1\"] } ")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][]string{"team": {"t9"}, "project": {"p2", "p1"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseScopesHeader = %v, want %v", got, want)
	}
	if d := ScopeDigest(got); d != ScopeDigest(map[string][]string{"project": {"p1", "p2"}, "team": {"t9"}}) {
		t.Fatal("digest depends on header order")
	}
	if got, err := ParseScopesHeader(`{"a\u00e9\ud83d\ude00":["\u0041"]}`); err != nil || got["aé😀"][0] != "A" {
		t.Fatalf("escapes: %v %v", got, err)
	}
	for _, bad := range []string{``, `[]`, `null`, `{"a":"b"}`, `{"a":[1]}`, `{"a":[null]}`, `{"a":null}`, `{"a":[],"a":[]}`,
		`{"a":["\ud800"]}`, `{"a":[]} x`, "{\"a\":[\"\xff\"]}", `{"a":[]`} {
		if _, err := ParseScopesHeader(bad); CodeOf(err) != CodeInvalidRequest {
			t.Errorf("ParseScopesHeader(%q) = %v, want sync.invalid_request", bad, err)
		}
	}
}

func TestAppendJSNumber(t *testing.T) {
	tests := []struct {
		f    float64
		want string
	}{
		{0, "0"}, {math.Copysign(0, -1), "0"}, {0.125, "0.125"}, {-1.5, "-1.5"}, {3.5, "3.5"}, {1e21, "1e+21"},
		{1.5e-7, "1.5e-7"}, {1e-7, "1e-7"}, {1e-6, "0.000001"}, {123456789012, "123456789012"}, {0.1, "0.1"}, {1e300, "1e+300"},
		{math.NaN(), "null"}, {math.Inf(1), "null"}, {math.Inf(-1), "null"}, {5e-324, "5e-324"},
	}
	for _, tt := range tests {
		if got := string(appendJSNumber(nil, tt.f)); got != tt.want {
			t.Errorf("appendJSNumber(%v) = %s, want %s", tt.f, got, tt.want)
		}
	}
}

func TestRenderNonFiniteFloats(t *testing.T) {
	cols := []Column{{Name: "f", Type: TypeFloat}, {Name: "serverVersion", Type: TypeInteger}}
	var buf bytes.Buffer
	w, err := NewSegmentWriter(&buf, SegmentHeader{Table: "t", SchemaVersion: 3, Columns: cols})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []float64{math.NaN(), math.Inf(-1), 2.5} {
		if err := w.WriteValues(1, []Value{{Float: f}, {Int: 9}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := RenderSegment(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"magic":"SSG2","formatVersion":1,"table":"t","schemaVersion":3,"columns":[{"name":"f","type":"float","nullable":false},` +
		`{"name":"serverVersion","type":"integer","nullable":false}],"blocks":[[` +
		`{"serverVersion":1,"values":{"f":null,"serverVersion":9}},{"serverVersion":1,"values":{"f":null,"serverVersion":9}},` +
		`{"serverVersion":1,"values":{"f":2.5,"serverVersion":9}}]]}`
	if string(out) != want {
		t.Fatalf("RenderSegment =\n%s\nwant\n%s", out, want)
	}
	// An empty segment renders with no blocks.
	out, err = RenderSegment(emptySegment())
	if err != nil || !strings.HasSuffix(string(out), `"blocks":[]}`) {
		t.Fatalf("empty segment renders %s (%v)", out, err)
	}
}

func TestSegmentWriterBlocks(t *testing.T) {
	h := SegmentHeader{Table: "notes", SchemaVersion: 1, Columns: notesColumns}
	vals := notesValues(2500)
	var buf bytes.Buffer
	w, err := NewSegmentWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	w.MaxBlockBytes = 64 << 10
	var rec writeRecorder
	w.w = &rec
	for i, v := range vals {
		if err := w.WriteValues(int64(i+1), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteValues(0, vals[0]); err == nil {
		t.Fatal("serverVersion 0 accepted")
	}
	if err := w.WriteRow(1, []byte{0}); err == nil {
		t.Fatal("invalid row accepted")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	seg := rec.all()
	// Blocks: at most 1000 rows and 64 KiB each, one Write per block, the
	// end marker riding with the last one.
	r, err := NewSegmentReader(bytes.NewReader(seg))
	if err != nil {
		t.Fatal(err)
	}
	blocks, rows := 0, 0
	for r.NextBlock() {
		blocks++
		rows += r.BlockRows()
		if r.BlockRows() > 1000 || len(r.block) > 64<<10 {
			t.Fatalf("block %d: %d rows, %d bytes", blocks, r.BlockRows(), len(r.block))
		}
	}
	if r.Err() != nil || rows != 2500 || w.Rows() != 2500 {
		t.Fatalf("read %d rows in %d blocks: %v", rows, blocks, r.Err())
	}
	if len(rec.writes) != blocks {
		t.Fatalf("%d writes for %d blocks", len(rec.writes), blocks)
	}
	if !reflect.DeepEqual(r.Header(), h) {
		t.Fatalf("header %+v, want %+v", r.Header(), h)
	}
	if SegmentID(seg) != SegmentID(append([]byte(nil), seg...)) || !strings.HasPrefix(SegmentID(seg), "sha256:") {
		t.Fatal("SegmentID")
	}
	// Writers refuse bad headers.
	if _, err := NewSegmentWriter(io0{}, SegmentHeader{Columns: []Column{{Type: 0}}}); err == nil {
		t.Fatal("type tag 0 accepted")
	}
	if _, err := NewSegmentWriter(io0{}, SegmentHeader{Table: "\xff"}); err == nil {
		t.Fatal("invalid UTF-8 table accepted")
	}
}

type io0 struct{}

func (io0) Write(p []byte) (int, error) { return len(p), nil }

func TestSegmentStructuralErrors(t *testing.T) {
	good := notesSegment(t, 3)
	hdrLen := bytes.Index(good, []byte("blob")) + 4 + 2 // name, type, flags
	mut := func(fn func(b []byte) []byte) []byte { return fn(append([]byte(nil), good...)) }
	tests := []struct {
		name string
		seg  []byte
		msg  string
	}{
		{"bad magic", mut(func(b []byte) []byte { b[3] = '1'; return b }), "magic"},
		{"formatVersion 2", mut(func(b []byte) []byte { b[4] = 2; return b }), "formatVersion"},
		{"flags", mut(func(b []byte) []byte { b[7] = 1; return b }), "flags"},
		{"reserved column flag", mut(func(b []byte) []byte { b[hdrLen-1] = 3; return b }), "reserved flag bits"},
		{"type tag 9", mut(func(b []byte) []byte { b[hdrLen-2] = 9; return b }), "unknown type tag 9"},
		{"type tag 0", mut(func(b []byte) []byte { b[hdrLen-2] = 0; return b }), "unknown type tag 0"},
		{"trailing bytes", append(append([]byte(nil), good...), 0), "after the end marker"},
		{"no end marker", good[:len(good)-4], "missing end marker"},
		{"truncated block", good[:len(good)-10], "truncated"},
		{"byteLength too long", mut(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[hdrLen+4:], binary.LittleEndian.Uint32(b[hdrLen+4:])+1)
			return b
		}), ""},
		{"byteLength too short", mut(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[hdrLen+4:], binary.LittleEndian.Uint32(b[hdrLen+4:])-1)
			return b
		}), ""},
		{"rowCount too large", mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[hdrLen:], 0xFFFFFFFF); return b }), "cannot fit"},
		{"rowCount too small", mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[hdrLen:], 2); return b }), "unconsumed"},
		{"serverVersion 2^53", mut(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[hdrLen+8:], 1<<53); return b }), "serverVersion"},
		{"serverVersion −1", mut(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[hdrLen+8:], math.MaxUint64); return b }), "serverVersion"},
		{"header only", good[:hdrLen], "missing end marker"},
		{"half header", good[:hdrLen/2], ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verr, serr := ValidateSegment(tt.seg), readSegmentStream(tt.seg)
			if CodeOf(verr) != CodeInvalidRequest || CodeOf(serr) != CodeInvalidRequest {
				t.Fatalf("ValidateSegment %v, SegmentReader %v", verr, serr)
			}
			if !strings.Contains(verr.Error(), tt.msg) || !strings.Contains(serr.Error(), tt.msg) {
				t.Fatalf("errors %q / %q do not mention %q", verr, serr, tt.msg)
			}
		})
	}
}

// TestHostileCountsAreCheap: counts and lengths near 2^32 fail without
// allocating anything close to what they claim.
func TestHostileCountsAreCheap(t *testing.T) {
	big := func(b []byte) []byte { return append(b, 0xFF, 0xFF, 0xFF, 0xFF) }
	msgs := [][]byte{
		req(fReq, rawFrame(FramePushCommit, big(pl(func(w *writer) { w.str("", "cc") })))),
		req(fReq, fPull, rawFrame(FrameSubscription, big(pl(func(w *writer) { w.str("", "s"); w.str("", "t") })))),
		req(fReq, fPull, rawFrame(FrameSubscription, big(pl(func(w *writer) { w.str("", "s"); w.str("", "t"); w.u32(1); w.str("", "k") })))),
		resp(fResp, fStart, rawFrame(FrameCommit, big(pl(func(w *writer) { w.i64("", 1); w.i64("", 1); w.str("", "a") }))), fEnd),
		resp(fResp, rawFrame(FramePushResult, big(pl(func(w *writer) { w.str("", "cc"); w.u8(3); w.u8(0) })))),
		resp(fResp, rawFrame(FramePushResultDetails, big(pl(func(w *writer) { w.str("", "cc") })))),
		req(big(pl(func(w *writer) { w.u8(1); w.u32(4) }))),
	}
	segHead := pl(func(w *writer) {
		appendSegmentHeader(w, SegmentHeader{Table: "t", Columns: []Column{{Name: "b", Type: TypeBytes}}})
	})
	segs := [][]byte{
		append(append([]byte(nil), segHead...), 1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF),                   // byteLength 2^32−1
		append(append([]byte(nil), segHead...), 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 1, 2), // rowCount 2^32−1
		big([]byte("SSG2\x01\x00\x00\x00")),                                                           // table length 2^32−1
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, m := range msgs {
		if _, err := DecodeMessage(m); CodeOf(err) != CodeInvalidRequest {
			t.Errorf("hostile count decoded: %v", err)
		}
	}
	for _, s := range segs {
		if err := ValidateSegment(s); CodeOf(err) != CodeInvalidRequest {
			t.Errorf("hostile segment validated: %v", err)
		}
		if err := readSegmentStream(s); CodeOf(err) != CodeInvalidRequest {
			t.Errorf("hostile segment streamed: %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Fatalf("hostile counts allocated %d bytes", grew)
	}
}

func TestControlMessages(t *testing.T) {
	valid := []struct {
		in   string
		want ControlMessage
	}{
		{`{"type":"ack","cursor":12}`, &Ack{Cursor: 12}},
		{`{"event":"heartbeat","data":{"timestamp":5,"extra":"ignored"}}`, &Heartbeat{Timestamp: 5}},
		{`{"event":"sync","data":{"cursor":6.4e1,"requiresPull":true,"reason":"delta-too-large","timestamp":-0}}`, &Wake{Cursor: 64, Reason: WakeDeltaTooLarge}},
		{`{"event":"presence","data":{"scopeKey":"project:p1","doc":null}}`, &PresencePublish{ScopeKey: "project:p1"}},
		{`{"event":"presence","data":{"scopeKey":"k","kind":"leave","actorId":"a","clientId":"c","doc":null,"timestamp":9}}`,
			&PresenceFanout{ScopeKey: "k", Kind: PresenceLeave, ActorID: "a", ClientID: "c", Timestamp: 9}},
		{`{"event":"presence","data":{"scopeKey":"k","error":"presence.forbidden","timestamp":1}}`,
			&PresenceError{ScopeKey: "k", Code: PresenceForbidden, Timestamp: 1}},
		{`{"event":"welcome","data":42}`, &UnknownControl{Name: "welcome", Raw: []byte(`{"event":"welcome","data":42}`)}},
		{`{"type":"ping"}`, &UnknownControl{Name: "ping", Raw: []byte(`{"type":"ping"}`)}},
	}
	for _, tt := range valid {
		got, err := ParseControlMessage([]byte(tt.in))
		if err != nil {
			t.Errorf("ParseControlMessage(%s): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseControlMessage(%s) = %#v, want %#v", tt.in, got, tt.want)
		}
	}
	invalid := []string{
		``, `[]`, `"hello"`, `{}`, `{"event":7}`, `{"type":false}`, `{"event":"hello"}`, `{"event":"hello","data":[]}`,
		`{"event":"hello","data":{"protocolVersion":1}}`,
		`{"event":"sync","data":{"cursor":1,"requiresPull":"true","reason":"catchup-required","timestamp":1}}`,
		`{"event":"sync","data":{"cursor":1,"requiresPull":true,"reason":"later","timestamp":1}}`,
		`{"event":"sync","data":{"cursor":9007199254740992,"requiresPull":true,"reason":"reset-required","timestamp":1}}`,
		`{"event":"heartbeat","data":{"timestamp":"1"}}`, `{"event":"heartbeat","data":{"timestamp":1e400}}`,
		`{"type":"ack","cursor":1.5}`, `{"type":"ack"}`,
		`{"event":"presence","data":{"scopeKey":"","doc":{}}}`, `{"event":"presence","data":{"scopeKey":"k"}}`,
		`{"event":"presence","data":{"scopeKey":"k","doc":[]}}`, `{"event":"presence","data":{"doc":{}}}`,
		`{"event":"presence","data":{"scopeKey":"k","kind":"leave","actorId":"a","clientId":"c","doc":{},"timestamp":1}}`,
		`{"event":"presence","data":{"scopeKey":"k","kind":"join","actorId":"a","clientId":"c","doc":null,"timestamp":1}}`,
		`{"event":"presence","data":{"scopeKey":"k","error":"presence.gone","timestamp":1}}`,
	}
	for _, in := range invalid {
		if _, err := ParseControlMessage([]byte(in)); CodeOf(err) != CodeInvalidRequest {
			t.Errorf("ParseControlMessage(%s) = %v, want sync.invalid_request", in, err)
		}
	}
	// Marshalling: spec field order, JSON.stringify escaping, refusals.
	b, err := MarshalControl(&Hello{ProtocolVersion: 1, SessionID: "s<1>", ActorID: "a", ClientID: "c", Cursor: -1, LatestCursor: 3, RequiresSync: true, Timestamp: 7})
	if want := `{"event":"hello","data":{"protocolVersion":1,"sessionId":"s<1>","actorId":"a","clientId":"c","cursor":-1,"latestCursor":3,"requiresSync":true,"timestamp":7}}`; err != nil || string(b) != want {
		t.Fatalf("MarshalControl(hello) = %s (%v)", b, err)
	}
	if b, err := json.Marshal(&Ack{Cursor: 4}); err != nil || string(b) != `{"type":"ack","cursor":4}` {
		t.Fatalf("json.Marshal(ack) = %s (%v)", b, err)
	}
	for _, m := range []ControlMessage{
		&Wake{Reason: "soon"}, &Ack{Cursor: 1 << 53}, &PresencePublish{ScopeKey: "", Doc: []byte(`{}`)},
		&PresencePublish{ScopeKey: "k", Doc: []byte(`"x"`)}, &PresenceFanout{Kind: PresenceJoin},
		&PresenceFanout{Kind: PresenceLeave, Doc: []byte(`{}`)}, &PresenceFanout{Kind: "snapshot", Doc: []byte(`{}`)},
		&PresenceError{Code: "presence.gone"}, &Hello{SessionID: "\xff"}, nil, (*Ack)(nil),
	} {
		if _, err := MarshalControl(m); err == nil {
			t.Errorf("MarshalControl(%#v) accepted", m)
		}
	}
}

func TestValidJSONDepth(t *testing.T) {
	nest := func(depth int, mixed bool) []byte {
		var open, close strings.Builder
		for i := range depth {
			if mixed && i%3 == 1 {
				open.WriteString(`{"k":`)
				close.WriteString(`}`)
			} else {
				open.WriteString(`[`)
				close.WriteString(`]`)
			}
		}
		s := open.String() + "1"
		c := []byte(close.String())
		slices.Reverse(c)
		return append([]byte(s), c...)
	}
	for _, d := range []int{1, 63, 64, 65, 66, 127, 128, 129, 500, 9999, 10000, 10001, 12000} {
		for _, mixed := range []bool{false, true} {
			b := nest(d, mixed)
			if got, want := validJSON(b), json.Valid(b); got != want {
				t.Errorf("depth %d mixed %v: validJSON %v, encoding/json %v", d, mixed, got, want)
			}
			// A wrong closer deep inside must be caught.
			bad := bytes.Clone(b)
			if k := bytes.LastIndexAny(bad, "]}"); k > 0 && d > 1 {
				bad[k-d/2] ^= '[' ^ '{' // swap ] and } somewhere in the closing run
				if got, want := validJSON(bad), json.Valid(bad); got != want {
					t.Errorf("depth %d mixed %v corrupted: validJSON %v, encoding/json %v", d, mixed, got, want)
				}
			}
		}
	}
}

// TestSegmentReaderValues checks both ways Values serves a row: from the
// values kept while validating an ordinary block, and by decoding again
// for a block too big to keep.
func TestSegmentReaderValues(t *testing.T) {
	for _, rowsPerBlock := range []int{1000, 9000} {
		vals := notesValues(9000)
		var buf bytes.Buffer
		w, err := NewSegmentWriter(&buf, SegmentHeader{Table: "notes", SchemaVersion: 1, Columns: notesColumns})
		if err != nil {
			t.Fatal(err)
		}
		w.MaxBlockRows, w.MaxBlockBytes = rowsPerBlock, 64<<20
		for i, v := range vals {
			if err := w.WriteValues(int64(i+1), v); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := NewSegmentReader(&buf)
		if err != nil {
			t.Fatal(err)
		}
		var got []Value
		n := 0
		for r.NextBlock() {
			if want := rowsPerBlock*len(notesColumns) <= maxKeptValues; r.kept != want {
				t.Fatalf("block of %d rows: kept %v, want %v", r.BlockRows(), r.kept, want)
			}
			for r.Next() {
				if got, err = r.Values(got); err != nil {
					t.Fatal(err)
				}
				view := r.RowValues()
				for c, col := range notesColumns {
					if !sameValue(col, got[c], vals[n][c]) || !sameValue(col, view[c], vals[n][c]) {
						t.Fatalf("row %d column %s: got %+v and %+v, want %+v", n, col.Name, got[c], view[c], vals[n][c])
					}
				}
				if r.ServerVersion() != int64(n+1) {
					t.Fatalf("row %d serverVersion %d", n, r.ServerVersion())
				}
				n++
			}
		}
		if r.Err() != nil || n != len(vals) {
			t.Fatalf("read %d rows: %v", n, r.Err())
		}
	}
}

// TestLongDetailsFrame: duplicate and membership checks over a details
// frame stay near-linear (a quadratic check would make this hang).
func TestLongDetailsFrame(t *testing.T) {
	const n = 100000
	res := &PushResult{ClientCommitID: "cc", Status: PushRejected, Results: make([]OpResult, n)}
	det := &PushResultDetails{ClientCommitID: "cc", Entries: make([]DetailsEntry, n)}
	for i := range n {
		res.Results[i] = OpResult{OpIndex: int32(n - 1 - i), Status: OpError, Code: "x"}
		det.Entries[i] = DetailsEntry{OpIndex: int32(i), DetailsJSON: []byte(`{"reason":"r"}`)}
	}
	m := &Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, res, det}}
	b, err := m.AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeMessage(b); err != nil {
		t.Fatal(err)
	}
	det.Entries[n-1].OpIndex = 0 // a repeat at the very end
	if _, err := m.AppendEncode(nil); err == nil || !strings.Contains(err.Error(), "repeats") {
		t.Fatalf("repeated opIndex encoded: %v", err)
	}
}
