package ssp2

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/syncnode/syncnode/internal/testvectors"
)

// seedFromVectors adds every vector file of the v1/v2 set under the given
// kinds (valid and invalid) matching ext to the corpus. Without vectors the
// fuzz targets still run on their own seeds.
func seedFromVectors(f *testing.F, ext string, kinds ...string) {
	dir, ok := testvectors.Lookup("SSP2_VECTORS", "ssp2-vectors")
	if !ok {
		if os.Getenv("CI") != "" {
			testvectors.Dir(f) // fails: the vectors are required under CI
		}
		return
	}
	for _, k := range kinds {
		for _, pattern := range []string{"*." + ext, "invalid/*." + ext} {
			files, _ := filepath.Glob(filepath.Join(dir, k, pattern))
			for _, name := range files {
				if filepath.Base(name) == "manifest.json" {
					continue
				}
				if b, err := os.ReadFile(name); err == nil {
					f.Add(b)
				}
			}
		}
	}
}

// FuzzDecodeMessage: decoding never panics, whatever decodes re-encodes to
// the identical bytes (through Message and, for responses, through the
// streaming encoder) and renders to valid JSON; failures carry a code.
func FuzzDecodeMessage(f *testing.F) {
	seedFromVectors(f, "bin", "request", "response")
	f.Add(req(fReq, fUnknown, fPush, fPull, fSub))
	f.Add(resp(fResp, fLease, fRejErr, fDetails, fStart, fCommit, fEnd, fStart, fRef, fInline, fEnd))
	f.Add(env(KindRequest, 2, frV(&ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: strp("e")}, 2), fPull, endFrame))
	// Wire version 3: the v3 set is JSON only, so its cases are encoded.
	for _, b := range v3Messages(f) {
		f.Add(b)
	}
	f.Add(resp3(fResp3, frV(rejected(conflict([]byte{0x02})), 3)))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		if err != nil {
			if c := CodeOf(err); c != CodeInvalidRequest && c != CodeEmptyCommit {
				t.Fatalf("decode error without a decode code: %v", err)
			}
			if _, rerr := RenderMessage(b); CodeOf(rerr) != CodeOf(err) {
				t.Fatalf("RenderMessage disagrees: %v vs %v", rerr, err)
			}
			return
		}
		out, err := m.AppendEncode(nil)
		if err != nil {
			t.Fatalf("decoded message does not re-encode: %v", err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encoding differs\n got: %x\nwant: %x", out, b)
		}
		if m.Kind == KindResponse {
			var buf bytes.Buffer
			e := NewResponseEncoder(&buf, m.WireVersion)
			for _, fr := range m.Frames {
				if err := e.WriteFrame(fr); err != nil {
					t.Fatalf("WriteFrame(%s): %v", fr.FrameType(), err)
				}
			}
			if err := e.End(); err != nil {
				t.Fatalf("End: %v", err)
			}
			if !bytes.Equal(buf.Bytes(), b) {
				t.Fatalf("streamed bytes differ")
			}
		} else if _, err := DecodeRequestWindow(b, codecWindow); err != nil {
			t.Fatalf("DecodeRequestWindow: %v", err)
		}
		r, err := RenderMessage(b)
		if err != nil || !json.Valid(r) {
			t.Fatalf("rendering failed or is not JSON (%v): %s", err, r)
		}
	})
}

// FuzzSegment: ValidateSegment and the streaming reader agree, a valid
// segment re-encodes identically through SegmentWriter and renders.
func FuzzSegment(f *testing.F) {
	seedFromVectors(f, "bin", "segment")
	f.Add(emptySegment())
	f.Add(notesSegment(f, 5))
	f.Fuzz(func(t *testing.T, b []byte) {
		verr := ValidateSegment(b)
		serr := readSegmentStream(b)
		if CodeOf(verr) != CodeOf(serr) {
			t.Fatalf("ValidateSegment %v, SegmentReader %v", verr, serr)
		}
		if verr != nil {
			if CodeOf(verr) != CodeInvalidRequest {
				t.Fatalf("segment error without sync.invalid_request: %v", verr)
			}
			return
		}
		if out := reencodeSegment(t, b); !bytes.Equal(out, b) {
			t.Fatalf("re-encoding differs\n got: %x\nwant: %x", out, b)
		}
		r, err := RenderSegment(b)
		if err != nil || !json.Valid(r) {
			t.Fatalf("rendering failed or is not JSON (%v): %s", err, r)
		}
	})
}

// FuzzControlMessage: parsing never panics; a parsed message marshals, and
// marshalling is a fixed point (parse(marshal(m)) == m).
func FuzzControlMessage(f *testing.F) {
	seedFromVectors(f, "json", "realtime")
	for _, s := range []string{
		`{"type":"ack","cursor":7}`, `{"type":"ping"}`, `{"event":"heartbeat","data":{"timestamp":1}}`,
		`{"event":"future","data":[1]}`, `{"event":"presence","data":{"scopeKey":"k","doc":null}}`,
		`{"event":"presence","data":{"scopeKey":"k","kind":"leave","actorId":"a","clientId":"c","doc":null,"timestamp":2}}`,
		`{"event":"presence","data":{"scopeKey":"k","error":"presence.too_large","timestamp":3}}`,
		`{"event":"sync","data":{"cursor":6.4e1,"requiresPull":true,"reason":"reset-required","timestamp":-0}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseControlMessage(b)
		if err != nil {
			if CodeOf(err) != CodeInvalidRequest {
				t.Fatalf("parse error without sync.invalid_request: %v", err)
			}
			return
		}
		out, err := MarshalControl(m)
		if err != nil {
			t.Fatalf("parsed message does not marshal: %v", err)
		}
		m2, err := ParseControlMessage(out)
		if err != nil {
			t.Fatalf("marshalled message does not parse: %v\n%s", err, out)
		}
		if u, ok := m.(*UnknownControl); ok {
			m2.(*UnknownControl).Raw = u.Raw
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("marshal is not a fixed point\n in: %#v\nout: %#v", m, m2)
		}
		out2, _ := MarshalControl(m2)
		if !bytes.Equal(out, out2) {
			t.Fatalf("marshal not stable\n%s\n%s", out, out2)
		}
	})
}

// FuzzValidJSON: the fast validator agrees with encoding/json.Valid plus
// UTF-8 validity, and the UTF-8 fast path with utf8.Valid.
func FuzzValidJSON(f *testing.F) {
	seedFromVectors(f, "json", "request", "response", "segment", "realtime")
	for _, s := range append(append([]string{}, edgeJSON...),
		``, ` `, `{`, `[1,]`, `{"a":1,}`, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `"\u12"`, `"\x"`, "\"\x01\"",
		"\"\xff\"", "\"\xed\xa0\x80\"", `tru`, `nul`, `[[[[[[[[[[[[[[[[[[[[`, `{"a" 1}`, `{1:2}`, "\ufeff{}", `"\ud800"`,
		"  [ 1 , 2 ]\t\n", `{"a":{"b":[{"c":null}]}}`) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := json.Valid(b) && utf8.Valid(b)
		if got := validJSON(b); got != want {
			t.Fatalf("validJSON(%q) = %v, encoding/json+utf8 say %v", b, got, want)
		}
		if got, want := validUTF8(b), utf8.Valid(b); got != want {
			t.Fatalf("validUTF8(%q) = %v, utf8.Valid says %v", b, got, want)
		}
	})
}

// FuzzRowCodec: for a column list drawn from the input, decoding never
// panics and a decoded row re-encodes to the same bytes.
func FuzzRowCodec(f *testing.F) {
	codec, rows := notesRows(f, 8)
	spec := make([]byte, len(codec.cols))
	for i, c := range codec.cols {
		spec[i] = byte(c.Type) - 1
		if c.Nullable {
			spec[i] |= 8
		}
	}
	for _, r := range rows {
		f.Add(spec, r)
	}
	f.Add([]byte{7, 15, 6}, []byte{0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, spec, row []byte) {
		if len(spec) > 80 {
			spec = spec[:80]
		}
		cols := make([]Column, len(spec))
		for i, s := range spec {
			cols[i] = Column{Name: "c", Type: ColumnType(s&7) + 1, Nullable: s&8 != 0}
		}
		codec, err := NewRowCodec(cols)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := codec.DecodeRow(row, nil)
		if verr := codec.ValidateRow(row); (verr == nil) != (err == nil) {
			t.Fatalf("ValidateRow %v, DecodeRow %v", verr, err)
		}
		if err != nil {
			if CodeOf(err) != CodeInvalidRequest {
				t.Fatalf("decode error without sync.invalid_request: %v", err)
			}
			return
		}
		out, err := codec.AppendRow(nil, vals)
		if err != nil || !bytes.Equal(out, row) {
			t.Fatalf("re-encoding differs (%v)\n got: %x\nwant: %x", err, out, row)
		}
	})
}

// FuzzSparseRow: for a column list drawn from the input (column 0 the
// primary key), decoding never panics, agrees with validation, fails only
// with a *SparseRowError carrying sync.invalid_request, re-encodes a
// decoded row to the same bytes, and a row presenting every column is the
// presence bitmap followed by a full row.
func FuzzSparseRow(f *testing.F) {
	spec := make([]byte, len(pushColumns))
	for i, c := range pushColumns {
		spec[i] = byte(c.Type) - 1
		if c.Nullable {
			spec[i] |= 8
		}
	}
	codec := pushCodec(f)
	for _, r := range []SparseRow{
		sparseOf(map[int]Value{0: {Bytes: []byte("n-1")}, 1: {Null: true}, 6: {Bytes: []byte(`{"tags":["a"]}`)}}),
		sparseOf(map[int]Value{0: {Bytes: []byte("n-2")}, 1: {Null: true}, 2: {Bytes: []byte("body")}, 3: {Int: -7}, 4: {Float: 0.125},
			5: {}, 6: {Bytes: []byte(`{"k":true}`)}, 7: {Bytes: []byte{0, 1}}, 8: {Bytes: []byte{1, 2, 0xfe}}}),
	} {
		b, err := codec.AppendSparseRow(nil, r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(spec, b)
	}
	notesSpec := make([]byte, len(notesColumns))
	for i, c := range notesColumns {
		notesSpec[i] = byte(c.Type) - 1
		if c.Nullable {
			notesSpec[i] |= 8
		}
	}
	for _, b := range v3Messages(f) {
		if m, err := DecodeMessage(b); err == nil {
			for _, fr := range m.Frames {
				if pc, ok := fr.(*PushCommit); ok {
					for _, op := range pc.Operations {
						if op.Payload != nil {
							f.Add(notesSpec, op.Payload)
						}
					}
				}
			}
		}
	}
	_, rows := notesSparseRows(f, 6, 2)
	for _, r := range rows {
		f.Add(notesSpec, r)
	}
	f.Fuzz(func(t *testing.T, spec, row []byte) {
		if len(spec) == 0 {
			return
		}
		if len(spec) > 80 {
			spec = spec[:80]
		}
		cols := make([]Column, len(spec))
		for i, s := range spec {
			cols[i] = Column{Name: "c", Type: ColumnType(s&7) + 1, Nullable: s&8 != 0 && i != 0}
		}
		codec, err := NewSparseCodec(cols, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := codec.DecodeSparseRow(row, nil)
		if verr := codec.ValidateSparseRow(row); (verr == nil) != (err == nil) {
			t.Fatalf("ValidateSparseRow %v, DecodeSparseRow %v", verr, err)
		}
		if err != nil {
			var se *SparseRowError
			if !errors.As(err, &se) || CodeOf(err) != CodeInvalidRequest {
				t.Fatalf("decode error %v is not a *SparseRowError with sync.invalid_request", err)
			}
			return
		}
		out, err := codec.AppendSparseRow(nil, got)
		if err != nil || !bytes.Equal(out, row) {
			t.Fatalf("re-encoding differs (%v)\n got: %x\nwant: %x", err, out, row)
		}
		if got.Present.Count() == len(cols) {
			full, err := NewRowCodec(cols)
			if err != nil {
				t.Fatal(err)
			}
			if fr, err := full.AppendRow(nil, got.Values); err != nil || !bytes.Equal(fr, row[len(got.Present):]) {
				t.Fatalf("full sparse row is not presence + full row (%v)", err)
			}
		}
		if r, err := RenderSparseRow(codec, row); err != nil || !json.Valid(r) {
			t.Fatalf("rendering failed or is not JSON (%v): %s", err, r)
		}
	})
}
