package ssp2

import (
	"bytes"
	"strings"
	"testing"
)

// Frames encoded for wire version 3.
var (
	fReq3   = frV(&ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: strp("e")}, 3)
	fResp3  = frV(&RespHeader{LogEpoch: "e"}, 3)
	fPull3  = frV(&PullHeader{Accept: 3}, 3)
	fStart3 = frV(&SubStart{ID: "s", Status: SubActive, EffectiveScopes: map[string][]string{}}, 3)
	fEnd3   = frV(&SubEnd{NextCursor: 1}, 3)
)

func req3(frames ...[]byte) []byte  { return env(KindRequest, 3, append(frames, endFrame)...) }
func resp3(frames ...[]byte) []byte { return env(KindResponse, 3, append(frames, endFrame)...) }

// TestV3EnvelopeNegatives writes the request/ and response/ invalid cases
// of the v3 set (whose .bin files are missing) from the §1.2, §1.5 and
// Conventions rules, at wire version 3.
func TestV3EnvelopeNegatives(t *testing.T) {
	upsert := func(payload []byte) []byte {
		return rawFrame(FramePushCommit, pl(func(w *writer) {
			w.str("", "cc")
			w.u32(1)
			w.str("", "notes")
			w.str("", "n-1")
			w.u8(uint8(OpUpsert))
			w.u8(0)
			if payload == nil {
				w.u8(0)
			} else {
				w.u8(1)
				w.bytes("", payload)
			}
		}))
	}
	valid := req3(fReq3, upsert([]byte{0x01, 0x00}), fPull3)
	mutate := func(b []byte, off int, v byte) []byte {
		out := append([]byte(nil), b...)
		out[off] = v
		return out
	}
	badOp := req3(fReq3, upsert([]byte{1}))
	opAt := bytes.Index(badOp, []byte("n-1")) + 3
	cases := []struct {
		name string
		b    []byte
		msg  string
	}{
		{"truncated-no-end", valid[:len(valid)-len(endFrame)], "no END"},
		{"bad-magic", append([]byte("SSP1"), valid[4:]...), "bad magic"},
		{"unsupported-wire-version", mutate(mutate(valid, 4, 0xe7), 5, 0x03), "unsupported wire version 999"},
		{"nonzero-flags", mutate(valid, 7, 1), "flags"},
		{"overlong-frame-length", mutate(valid, envelopeSize+1, 0xff), "exceeds"},
		{"op-enum-out-of-range", mutate(badOp, opAt, 3), "not 1 (upsert) or 2 (delete)"},
		{"upsert-without-payload", req3(fReq3, upsert(nil)), "payload must be present"},
		{"bool-byte-out-of-range", resp3(fResp3, mutate(fStart3, len(fStart3)-1, 2), fEnd3), "bool byte 0x02"},
	}
	if _, err := DecodeMessage(valid); err != nil {
		t.Fatalf("the unmutated request does not decode: %v", err)
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeMessage(tt.b)
			if CodeOf(err) != CodeInvalidRequest || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %v, want sync.invalid_request mentioning %q", err, tt.msg)
			}
			if _, err := readAll(bytes.NewReader(tt.b)); CodeOf(err) != CodeInvalidRequest {
				t.Fatalf("MessageReader error %v", err)
			}
		})
	}
}

func conflict(cc []byte) OpResult {
	return OpResult{Status: OpConflict, Code: "sync.version_conflict", Message: "m", ServerVersion: 7, ServerRow: []byte{0}, ConflictColumns: cc}
}

func rejected(results ...OpResult) *PushResult {
	return &PushResult{ClientCommitID: "cc", Status: PushRejected, Results: results}
}

// TestConflictColumns: the v3 conflict record ends with conflictColumns;
// v1 and v2 records have none, and each version's decoder holds the record
// to its own layout.
func TestConflictColumns(t *testing.T) {
	m := &Message{WireVersion: 3, Kind: KindResponse, Frames: []Frame{&RespHeader{LogEpoch: "e"}, rejected(conflict([]byte{0x02}))}}
	b, err := m.AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(b, append([]byte{1, 0, 0, 0, 0x02}, endFrame...)) {
		t.Fatalf("conflictColumns is not the record's last field: %x", b)
	}
	back, err := DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Frames[1].(*PushResult).Results[0].ConflictColumns; !bytes.Equal(got, []byte{0x02}) {
		t.Fatalf("conflictColumns %x", got)
	}
	if r := mustRender(t, b); !bytes.Contains(r, []byte(`"serverRow":"AA==","conflictColumns":"Ag=="`)) {
		t.Fatalf("rendering %s", r)
	}

	// Empty bytes are the decoder's business (§1.7), so they round-trip;
	// nil is a conflict built without its columns, refused.
	m.Frames[1] = rejected(conflict([]byte{}))
	b, err = m.AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := DecodeMessage(b); err != nil || len(back.Frames[1].(*PushResult).Results[0].ConflictColumns) != 0 {
		t.Fatalf("empty conflictColumns: %v", err)
	}
	m.Frames[1] = rejected(conflict(nil))
	if _, err := m.AppendEncode(nil); CodeOf(err) != CodeInternalError || !strings.Contains(err.Error(), "carries conflictColumns") {
		t.Fatalf("v3 conflict without conflictColumns: %v", err)
	}

	decode := []struct {
		name string
		b    []byte
		msg  string
	}{
		{"v3 record without conflictColumns", resp3(fResp3, frV(rejected(conflict(nil)), 2)), "truncated"},
		{"v2 record with conflictColumns", env(KindResponse, 2, frV(&RespHeader{LogEpoch: "e"}, 2), frV(rejected(conflict([]byte{1})), 3), endFrame), "trailing"},
		{"v1 record with conflictColumns", resp(fResp, frV(rejected(conflict([]byte{1})), 3)), "trailing"},
	}
	for _, tt := range decode {
		if _, err := DecodeMessage(tt.b); CodeOf(err) != CodeInvalidRequest || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.msg)
		}
	}

	refuse := []struct {
		name string
		m    Message
		msg  string
	}{
		{"v2 conflict with columns", Message{WireVersion: 2, Kind: KindResponse, Frames: []Frame{&RespHeader{LogEpoch: "e"}, rejected(conflict([]byte{1}))}}, "needs wire version 3"},
		{"v1 conflict with columns", Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, rejected(conflict([]byte{}))}}, "needs wire version 3"},
		{"error with columns", Message{WireVersion: 3, Kind: KindResponse, Frames: []Frame{&RespHeader{LogEpoch: "e"}, rejected(OpResult{Status: OpError, ConflictColumns: []byte{1}})}}, "error carries no"},
		{"applied with columns", Message{WireVersion: 3, Kind: KindResponse, Frames: []Frame{&RespHeader{LogEpoch: "e"},
			&PushResult{ClientCommitID: "cc", Status: PushApplied, CommitSeq: i64p(1), Results: []OpResult{{Status: OpApplied, ConflictColumns: []byte{1}}}}}}, "applied carries no"},
	}
	for _, tt := range refuse {
		if _, err := tt.m.AppendEncode(nil); CodeOf(err) != CodeInternalError || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: error %v, want a refusal mentioning %q", tt.name, err, tt.msg)
		}
	}
}

// TestV3HeadersAreV2Headers: REQ_HEADER and RESP_HEADER are laid out at v3
// exactly as at v2 (SSP2-V3-NOTES §2).
func TestV3HeadersAreV2Headers(t *testing.T) {
	for _, f := range []Frame{
		&ReqHeader{ClientID: "c", SchemaVersion: 2, LogEpoch: strp("e")},
		&ReqHeader{ClientID: "c", SchemaVersion: 2},
		&RespHeader{RequiredSchemaVersion: new(int32), LogEpoch: "e", ResetRequired: true},
	} {
		if v2, v3 := frV(f, 2), frV(f, 3); !bytes.Equal(v2, v3) {
			t.Errorf("%s: v2 %x, v3 %x", f.FrameType(), v2, v3)
		}
	}
	if _, err := (&Message{WireVersion: 3, Kind: KindResponse, Frames: []Frame{&RespHeader{}}}).AppendEncode(nil); err == nil {
		t.Error("v3 RESP_HEADER without logEpoch accepted")
	}
}

func TestWireWindow(t *testing.T) {
	if err := DefaultWireWindow.Validate(); err != nil || DefaultWireWindow != (WireWindow{2, 3}) {
		t.Fatalf("DefaultWireWindow %v: %v", DefaultWireWindow, err)
	}
	for _, w := range []WireWindow{{0, 3}, {1, 4}, {3, 2}, {}} {
		if err := w.Validate(); err == nil {
			t.Errorf("window %v validated", w)
		}
	}
	for _, w := range []WireWindow{{1, 1}, {1, 3}, {3, 3}} {
		if err := w.Validate(); err != nil {
			t.Errorf("window %v: %v", w, err)
		}
	}
	pull := func(v uint16) []byte {
		hdr := fReq
		if v >= 2 {
			hdr = frV(&ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: strp("e")}, v)
		}
		return env(KindRequest, v, hdr, fPull, endFrame)
	}
	for v := uint16(1); v <= 4; v++ {
		_, err := DecodeRequestWindow(pull(v), DefaultWireWindow)
		if want := v == 2 || v == 3; (err == nil) != want {
			t.Errorf("v%d in the default window: %v", v, err)
		}
		if err != nil && (CodeOf(err) != CodeInvalidRequest || !strings.Contains(err.Error(), "offset 4")) {
			t.Errorf("v%d: refused with %v, want sync.invalid_request at the version field", v, err)
		}
		// DecodeRequest keeps its pre-v3 window: v3 is opt-in.
		if _, err := DecodeRequest(pull(v)); (err == nil) != (v <= 2) {
			t.Errorf("DecodeRequest v%d: %v", v, err)
		}
		if _, err := DecodeMessage(pull(v)); (err == nil) != SupportedWireVersion(v) {
			t.Errorf("DecodeMessage v%d: %v", v, err)
		}
	}
	if SparsePayloads(2) || !SparsePayloads(3) {
		t.Error("SparsePayloads disagrees with the wire versions")
	}
}

// TestV3Codes: the push error codes of wire version 3 carry the fixed
// metadata of §10.2.
func TestV3Codes(t *testing.T) {
	for _, tt := range []struct {
		code      Code
		category  string
		retryable bool
		action    string
	}{
		{CodeRowMissing, CategoryNotFound, false, "forceResync"},
		{CodeRowDeleted, CategoryNotFound, false, "fixRequest"},
		{CodeReferenceViolation, CategoryInvalidRequest, false, "fixRequest"},
	} {
		info, ok := tt.code.Info()
		if !ok || info.Category != tt.category || info.Retryable != tt.retryable || info.Action != tt.action {
			t.Errorf("%s: %+v (known %v), want %s/%v/%s", tt.code, info, ok, tt.category, tt.retryable, tt.action)
		}
		f := NewErrorFrame(Errorf(tt.code, "m"))
		if f.Code != string(tt.code) || f.Category != tt.category || f.RecommendedAction != tt.action {
			t.Errorf("%s: error frame %+v", tt.code, f)
		}
	}
}
