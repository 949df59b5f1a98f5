package ssp2

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
)

// Helpers to hand-build messages byte by byte, bypassing the encoder's own
// checks, so every decode rule can be hit in isolation.

func env(kind MsgKind, v uint16, frames ...[]byte) []byte {
	b := []byte(envelopeMagic)
	b = appendU16(b, v)
	b = append(b, byte(kind), 0)
	for _, f := range frames {
		b = append(b, f...)
	}
	return b
}

var endFrame = []byte{0, 0, 0, 0, 0}

func req(frames ...[]byte) []byte  { return env(KindRequest, 1, append(frames, endFrame)...) }
func resp(frames ...[]byte) []byte { return env(KindResponse, 1, append(frames, endFrame)...) }

func rawFrame(t FrameType, payload []byte) []byte {
	b := []byte{byte(t)}
	b = appendU32(b, uint32(len(payload)))
	return append(b, payload...)
}

// fr encodes a frame without any grammar check (field checks still apply:
// use pl for payloads the encoder would refuse).
func fr(f Frame) []byte { return frV(f, 1) }

func frV(f Frame, v uint16) []byte {
	b, err := appendFrame(nil, f, v, "test")
	if err != nil {
		panic(err)
	}
	return b
}

// pl builds a raw payload with the writer primitives.
func pl(fn func(w *writer)) []byte {
	w := writer{op: "test"}
	fn(&w)
	return w.b
}

func i64p(v int64) *int64 { return &v }
func strp(s string) *string {
	return &s
}

var (
	fReq     = fr(&ReqHeader{ClientID: "c", SchemaVersion: 1})
	fPull    = fr(&PullHeader{Accept: 3})
	fSub     = fr(&Subscription{ID: "s", Table: "t", Scopes: map[string][]string{"p": {"1"}}, Cursor: -1})
	fPush    = fr(&PushCommit{ClientCommitID: "cc", Operations: []Operation{{Table: "t", RowID: "r", Op: OpDelete}}})
	fResp    = fr(&RespHeader{})
	fLease   = fr(&Lease{LeaseID: "l", ExpiresAtMs: 5})
	fApplied = fr(&PushResult{ClientCommitID: "cc", Status: PushApplied, CommitSeq: i64p(1), Results: []OpResult{{Status: OpApplied}}})
	fRejErr  = fr(&PushResult{ClientCommitID: "cc", Status: PushRejected, Results: []OpResult{{OpIndex: 2, Status: OpError, Code: "x", Message: "m"}}})
	fDetails = fr(&PushResultDetails{ClientCommitID: "cc", Entries: []DetailsEntry{{OpIndex: 2, DetailsJSON: []byte(`{"reason":"bad_value"}`)}}})
	fStart   = fr(&SubStart{ID: "s", Status: SubActive, EffectiveScopes: map[string][]string{}})
	fCommit  = fr(&Commit{CommitSeq: 1, Tables: []string{"t"}, Changes: []Change{{RowID: "r", Op: OpDelete, Scopes: map[string]string{}}}})
	fRef     = fr(&SegmentRef{SegmentID: "sha256:x", MediaType: MediaRows, Table: "t"})
	fInline  = fr(&SegmentInline{Payload: emptySegment()})
	fEnd     = fr(&SubEnd{NextCursor: 1})
	fErr     = fr(&ErrorFrame{Code: "sync.internal_error"})
	fUnknown = rawFrame(0x17, []byte("x"))
)

func emptySegment() []byte {
	var buf bytes.Buffer
	w, err := NewSegmentWriter(&buf, SegmentHeader{Table: "t", SchemaVersion: 1, Columns: []Column{{Name: "id", Type: TypeString}}})
	if err != nil {
		panic(err)
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// TestDecodeRules lists every decode rule the vectors do not pin, each with
// a minimal message. want "" means the message is legal.
func TestDecodeRules(t *testing.T) {
	huge := pl(func(w *writer) { w.str("", "cc"); w.u32(0xFFFFFFFF) })
	tests := []struct {
		name string
		msg  []byte
		want Code   // "" = must decode
		msg2 string // substring of the error message
	}{
		// Envelope and framing (§1.2).
		{"short envelope", []byte("SSP2\x01\x00\x01"), CodeInvalidRequest, "truncated envelope"},
		{"wire version 0", env(KindRequest, 0, fReq, fPull, endFrame), CodeInvalidRequest, "wire version"},
		{"wire version 4", env(KindRequest, 4, fReq, fPull, endFrame), CodeInvalidRequest, "wire version"},
		{"msgKind 0", env(0, 1, fReq, fPull, endFrame), CodeInvalidRequest, "message kind"},
		{"msgKind 3", env(3, 1, fReq, fPull, endFrame), CodeInvalidRequest, "message kind"},
		{"no frames at all", env(KindRequest, 1), CodeInvalidRequest, "no END"},
		{"partial frame header", append(env(KindRequest, 1, fReq, fPull), 0, 0), CodeInvalidRequest, "no END"},
		{"END with length", env(KindRequest, 1, fReq, fPull, []byte{0, 1, 0, 0, 0, 9}), CodeInvalidRequest, "END frame length"},
		{"bytes after END", append(req(fReq, fPull), 0), CodeInvalidRequest, "after END"},
		{"frame after END", append(req(fReq, fPull), fUnknown...), CodeInvalidRequest, "after END"},
		{"frame length past end", env(KindRequest, 1, fReq, []byte{3, 200, 0, 0, 0}), CodeInvalidRequest, "exceeds"},
		{"trailing bytes in known frame", req(fReq, rawFrame(FramePullHeader, append(pl(func(w *writer) { w.i32(0); w.i32(0); w.i32(0); w.u8(3) }), 0))), CodeInvalidRequest, "trailing bytes"},
		{"short known frame", req(fReq, rawFrame(FramePullHeader, []byte{0, 0, 0})), CodeInvalidRequest, "truncated"},

		// Request grammar (§1.5).
		{"minimal pull", req(fReq, fPull), "", ""},
		{"push only", req(fReq, fPush), "", ""},
		{"unknown frames between", req(fReq, fUnknown, fPush, fUnknown, fPull, fUnknown, fSub, fUnknown), "", ""},
		{"every reserved type skips", req(fReq, rawFrame(0x05, nil), rawFrame(0x0F, nil), rawFrame(0x18, nil), rawFrame(0x1A, nil),
			rawFrame(0x1C, nil), rawFrame(0x1E, nil), rawFrame(0x20, nil), rawFrame(0x2F, nil), rawFrame(0x30, nil), rawFrame(0xFF, nil), fPull), "", ""},
		{"END only", req(), CodeInvalidRequest, "must start with REQ_HEADER"},
		{"header missing", req(fPull), CodeInvalidRequest, "must start with REQ_HEADER"},
		{"unknown frame first", req(fUnknown, fReq, fPull), CodeInvalidRequest, "must start with REQ_HEADER"},
		{"duplicate REQ_HEADER", req(fReq, fReq, fPull), CodeInvalidRequest, "duplicate REQ_HEADER"},
		{"no content", req(fReq), CodeInvalidRequest, "neither PUSH_COMMIT nor PULL_HEADER"},
		{"no content but unknown", req(fReq, fUnknown), CodeInvalidRequest, "neither PUSH_COMMIT nor PULL_HEADER"},
		{"push after pull", req(fReq, fPull, fPush), CodeInvalidRequest, "PUSH_COMMIT after PULL_HEADER"},
		{"duplicate PULL_HEADER", req(fReq, fPull, fPull), CodeInvalidRequest, "duplicate PULL_HEADER"},
		{"subscription without pull", req(fReq, fPush, fSub), CodeInvalidRequest, "without a preceding PULL_HEADER"},
		{"response frame in request", req(fReq, fPull, fStart), CodeInvalidRequest, "illegal in a request"},
		{"RESP_HEADER in request", req(fResp), CodeInvalidRequest, "illegal in a request"},

		// Response grammar (§1.6, §7.3.2, §6.3.1).
		{"header only", resp(fResp), "", ""},
		{"full response", resp(fResp, fLease, fApplied, fRejErr, fDetails, fStart, fCommit, fCommit, fEnd, fStart, fRef, fInline, fEnd), "", ""},
		{"unknown anywhere", resp(fResp, fUnknown, fLease, fUnknown, fRejErr, fUnknown, fDetails, fStart, fUnknown, fCommit, fEnd), "", ""},
		{"error inside section", resp(fResp, fStart, fCommit, fErr), "", ""},
		{"error at top", resp(fResp, fApplied, fErr), "", ""},
		{"header missing", resp(fStart, fEnd), CodeInvalidRequest, "must start with RESP_HEADER"},
		{"unknown first", resp(fUnknown, fResp), CodeInvalidRequest, "must start with RESP_HEADER"},
		{"END only", resp(), CodeInvalidRequest, "must start with RESP_HEADER"},
		{"duplicate RESP_HEADER", resp(fResp, fResp), CodeInvalidRequest, "duplicate RESP_HEADER"},
		{"request frame in response", resp(fResp, fSub), CodeInvalidRequest, "illegal in a response"},
		{"duplicate LEASE", resp(fResp, fLease, fLease), CodeInvalidRequest, "duplicate LEASE"},
		{"LEASE after PUSH_RESULT", resp(fResp, fApplied, fLease), CodeInvalidRequest, "directly follow RESP_HEADER"},
		{"LEASE after section", resp(fResp, fStart, fEnd, fLease), CodeInvalidRequest, "directly follow RESP_HEADER"},
		{"PUSH_RESULT after section", resp(fResp, fStart, fEnd, fApplied), CodeInvalidRequest, "PUSH_RESULT after a subscription section"},
		{"details without result", resp(fResp, fDetails), CodeInvalidRequest, "directly follow its PUSH_RESULT"},
		{"details after a later result", resp(fResp, fRejErr, fApplied, fDetails), CodeInvalidRequest, "not rejected"},
		{"details twice", resp(fResp, fRejErr, fDetails, fDetails), CodeInvalidRequest, "directly follow its PUSH_RESULT"},
		{"details after applied", resp(fResp, fApplied, fr(&PushResultDetails{ClientCommitID: "cc", Entries: []DetailsEntry{{OpIndex: 0, DetailsJSON: []byte(`{"reason":"x"}`)}}})), CodeInvalidRequest, "not rejected"},
		{"details id mismatch", resp(fResp, fRejErr, fr(&PushResultDetails{ClientCommitID: "other", Entries: []DetailsEntry{{OpIndex: 2, DetailsJSON: []byte(`{"reason":"x"}`)}}})), CodeInvalidRequest, "does not match"},
		{"details for a non-error op", resp(fResp, fRejErr, fr(&PushResultDetails{ClientCommitID: "cc", Entries: []DetailsEntry{{OpIndex: 0, DetailsJSON: []byte(`{"reason":"x"}`)}}})), CodeInvalidRequest, "does not match an error result"},
		{"details in a section", resp(fResp, fStart, fDetails, fEnd), CodeInvalidRequest, "directly follow its PUSH_RESULT"},
		{"nested SUB_START", resp(fResp, fStart, fStart), CodeInvalidRequest, "inside an open subscription"},
		{"COMMIT outside section", resp(fResp, fCommit), CodeInvalidRequest, "COMMIT outside"},
		{"SEGMENT_REF outside section", resp(fResp, fRef), CodeInvalidRequest, "SEGMENT_REF outside"},
		{"SEGMENT_INLINE outside section", resp(fResp, fStart, fEnd, fInline), CodeInvalidRequest, "SEGMENT_INLINE outside"},
		{"SUB_END outside section", resp(fResp, fEnd), CodeInvalidRequest, "SUB_END without"},
		{"COMMIT then segment", resp(fResp, fStart, fCommit, fInline, fEnd), CodeInvalidRequest, "mixed"},
		{"segment then COMMIT", resp(fResp, fStart, fRef, fCommit, fEnd), CodeInvalidRequest, "mixed"},
		{"mixing is per section", resp(fResp, fStart, fCommit, fEnd, fStart, fRef, fEnd), "", ""},
		{"open section at END", resp(fResp, fStart, fCommit), CodeInvalidRequest, "missing SUB_END"},
		{"frame after ERROR", resp(fResp, fStart, fErr, fEnd), CodeInvalidRequest, "after ERROR"},
		{"unknown after ERROR", resp(fResp, fErr, fUnknown), CodeInvalidRequest, "after ERROR"},

		// Single-frame field rules (§1.7) and primitives.
		{"empty clientId", req(rawFrame(FrameReqHeader, pl(func(w *writer) { w.str("", ""); w.i32(1) })), fPull), CodeInvalidRequest, "clientId is empty"},
		{"schemaVersion 0", req(rawFrame(FrameReqHeader, pl(func(w *writer) { w.str("", "c"); w.i32(0) })), fPull), CodeInvalidRequest, "below 1"},
		{"v1 header with epoch byte", req(rawFrame(FrameReqHeader, pl(func(w *writer) { w.str("", "c"); w.i32(1); w.u8(0) })), fPull), CodeInvalidRequest, "trailing bytes"},
		{"v2 header without epoch byte", env(KindRequest, 2, fReq, fPull, endFrame), CodeInvalidRequest, "truncated"},
		{"v2 header epoch absent", env(KindRequest, 2, frV(&ReqHeader{ClientID: "c", SchemaVersion: 1}, 2), fPull, endFrame), "", ""},
		{"v2 header epoch empty", env(KindRequest, 2, rawFrame(FrameReqHeader, pl(func(w *writer) { w.str("", "c"); w.i32(1); w.u8(1); w.str("", "") })), fPull, endFrame), CodeInvalidRequest, "logEpoch is present but empty"},
		{"v2 resp epoch empty", env(KindResponse, 2, rawFrame(FrameRespHeader, pl(func(w *writer) { w.u8(0); w.u8(0); w.str("", ""); w.bool(false) })), endFrame), CodeInvalidRequest, "logEpoch is empty"},
		{"v2 reset header", env(KindResponse, 2, frV(&RespHeader{LogEpoch: "e", ResetRequired: true}, 2), endFrame), "", ""},
		{"empty clientCommitId", req(fReq, rawFrame(FramePushCommit, pl(func(w *writer) { w.str("", ""); w.u32(0) }))), CodeInvalidRequest, "clientCommitId is empty"},
		{"no operations", req(fReq, rawFrame(FramePushCommit, pl(func(w *writer) { w.str("", "cc"); w.u32(0) }))), CodeEmptyCommit, "no operations"},
		{"2^32−1 operations", req(fReq, rawFrame(FramePushCommit, huge)), CodeInvalidRequest, "cannot fit"},
		{"delete with payload", req(fReq, rawFrame(FramePushCommit, pl(func(w *writer) {
			w.str("", "cc")
			w.u32(1)
			w.str("", "t")
			w.str("", "r")
			w.u8(2)
			w.u8(0)
			w.u8(1)
			w.bytes("", nil)
		}))), CodeInvalidRequest, "payload must be present iff"},
		{"delete with baseVersion", req(fReq, fr(&PushCommit{ClientCommitID: "cc", Operations: []Operation{{Op: OpDelete, BaseVersion: i64p(3)}}})), "", ""},
		{"presence byte 2", req(fReq, rawFrame(FramePushCommit, pl(func(w *writer) {
			w.str("", "cc")
			w.u32(1)
			w.str("", "t")
			w.str("", "r")
			w.u8(2)
			w.u8(2)
			w.u8(0)
		}))), CodeInvalidRequest, "presence byte 0x02"},
		{"baseVersion 2^53", req(fReq, rawFrame(FramePushCommit, pl(func(w *writer) {
			w.str("", "cc")
			w.u32(1)
			w.str("", "t")
			w.str("", "r")
			w.u8(2)
			w.u8(1)
			w.b = binary.LittleEndian.AppendUint64(w.b, 1<<53)
			w.u8(0)
		}))), CodeInvalidRequest, "outside ±(2^53−1)"},
		{"cursor −2^53", req(fReq, fPull, rawFrame(FrameSubscription, pl(func(w *writer) {
			w.str("", "s")
			w.str("", "t")
			w.u32(0)
			w.u8(0)
			w.b = binary.LittleEndian.AppendUint64(w.b, uint64(1<<64-1<<53))
			w.u8(0)
		}))), CodeInvalidRequest, "outside ±(2^53−1)"},
		{"cursor ±(2^53−1) ok", req(fReq, fPull, fr(&Subscription{Cursor: -MaxSafeInt}), fr(&Subscription{Cursor: MaxSafeInt})), "", ""},
		{"accept bit 4", req(fReq, rawFrame(FramePullHeader, pl(func(w *writer) { w.i32(0); w.i32(0); w.i32(0); w.u8(0x13) }))), CodeInvalidRequest, "reserved bits"},
		{"accept zero is not a decode error", req(fReq, fr(&PullHeader{})), "", ""},
		{"invalid UTF-8", req(rawFrame(FrameReqHeader, pl(func(w *writer) { w.bytes("", []byte{0xff}); w.i32(1) })), fPull), CodeInvalidRequest, "UTF-8"},
		{"surrogate in UTF-8", req(rawFrame(FrameReqHeader, pl(func(w *writer) { w.bytes("", []byte{0xed, 0xa0, 0x80}); w.i32(1) })), fPull), CodeInvalidRequest, "UTF-8"},
		{"scope keys out of order", req(fReq, fPull, rawFrame(FrameSubscription, scopePayload("b", "a"))), CodeInvalidRequest, "ascending by UTF-16"},
		{"scope keys duplicate", req(fReq, fPull, rawFrame(FrameSubscription, scopePayload("a", "a"))), CodeInvalidRequest, "ascending by UTF-16"},
		{"scope keys in UTF-8 byte order only", req(fReq, fPull, rawFrame(FrameSubscription, scopePayload("\uff61", "\U0001F600"))), CodeInvalidRequest, "ascending by UTF-16"},
		{"scope keys in UTF-16 order", req(fReq, fPull, rawFrame(FrameSubscription, scopePayload("\U0001F600", "\uff61"))), "", ""},
		{"params not JSON", req(fReq, fPull, rawFrame(FrameSubscription, pl(func(w *writer) {
			w.str("", "s")
			w.str("", "t")
			w.u32(0)
			w.u8(1)
			w.str("", "{")
			w.i64("", 0)
			w.u8(0)
		}))), CodeInvalidRequest, "not a JSON document"},
		{"params scalar JSON", req(fReq, fPull, fr(&Subscription{Params: []byte(` 7 `)})), "", ""},
		{"tableIndex out of range", resp(fResp, fStart, fr(&Unknown{Type: 0x60}), rawFrame(FrameCommit, pl(func(w *writer) {
			w.i64("", 1)
			w.i64("", 1)
			w.str("", "a")
			w.u32(1)
			w.str("", "t")
			w.u32(1)
			w.u16(1)
			w.str("", "r")
			w.u8(2)
			w.u8(0)
			w.u32(0)
			w.u8(0)
		})), fEnd), CodeInvalidRequest, "tableIndex 1 out of range"},
		{"upsert change without row", resp(fResp, fStart, rawFrame(FrameCommit, pl(func(w *writer) {
			w.i64("", 1)
			w.i64("", 1)
			w.str("", "a")
			w.u32(1)
			w.str("", "t")
			w.u32(1)
			w.u16(0)
			w.str("", "r")
			w.u8(1)
			w.u8(1)
			w.i64("", 1)
			w.u32(0)
			w.u8(0)
		})), fEnd), CodeInvalidRequest, "rowVersion and row must be present iff"},
		{"rejected with commitSeq", resp(fResp, rawFrame(FramePushResult, pl(func(w *writer) { w.str("", "cc"); w.u8(3); w.u8(1); w.i64("", 1); w.u32(0) }))), CodeInvalidRequest, "commitSeq must be present iff"},
		{"applied without commitSeq", resp(fResp, rawFrame(FramePushResult, pl(func(w *writer) { w.str("", "cc"); w.u8(1); w.u8(0); w.u32(0) }))), CodeInvalidRequest, "commitSeq must be present iff"},
		{"result status 4", resp(fResp, rawFrame(FramePushResult, pl(func(w *writer) {
			w.str("", "cc")
			w.u8(3)
			w.u8(0)
			w.u32(1)
			w.i32(0)
			w.u8(4)
		}))), CodeInvalidRequest, "result.status byte 4"},
		{"sub status 0", resp(fResp, rawFrame(FrameSubStart, pl(func(w *writer) { w.str("", "s"); w.u8(0); w.str("", ""); w.u32(0); w.bool(false) })), fEnd), CodeInvalidRequest, "SUB_START.status"},
		{"mediaType 3", resp(fResp, fStart, rawFrame(FrameSegmentRef, segRefPayload(3, false, false)), fEnd), CodeInvalidRequest, "mediaType"},
		{"url without expiry", resp(fResp, fStart, rawFrame(FrameSegmentRef, segRefPayload(1, true, false)), fEnd), CodeInvalidRequest, "present iff url"},
		{"expiry without url", resp(fResp, fStart, rawFrame(FrameSegmentRef, segRefPayload(1, false, true)), fEnd), CodeInvalidRequest, "present iff url"},
		{"empty leaseId", resp(fResp, rawFrame(FrameLease, pl(func(w *writer) { w.str("", ""); w.i64("", 1) }))), CodeInvalidRequest, "leaseId is empty"},
		{"inline not a segment", resp(fResp, fStart, rawFrame(FrameSegmentInline, []byte("SSG2")), fEnd), CodeInvalidRequest, "truncated segment"},
		{"inline with trailing byte", resp(fResp, fStart, rawFrame(FrameSegmentInline, append(emptySegment(), 0)), fEnd), CodeInvalidRequest, "after the end marker"},
		{"details empty entries", resp(fResp, fRejErr, rawFrame(FramePushResultDetails, pl(func(w *writer) { w.str("", "cc"); w.u32(0) }))), CodeInvalidRequest, "no entries"},
		{"details negative opIndex", resp(fResp, fRejErr, detailsFrame(-1, `{"reason":"x"}`)), CodeInvalidRequest, "negative"},
		{"details unknown member", resp(fResp, fRejErr, detailsFrame(2, `{"reason":"x","hint":"y"}`)), CodeInvalidRequest, "unknown member"},
		{"details empty object", resp(fResp, fRejErr, detailsFrame(2, `{}`)), CodeInvalidRequest, "no supported member"},
		{"details not an object", resp(fResp, fRejErr, detailsFrame(2, `["reason"]`)), CodeInvalidRequest, "not a JSON object"},
		{"details duplicate member", resp(fResp, fRejErr, detailsFrame(2, `{"reason":"a","reason":"b"}`)), CodeInvalidRequest, "duplicate member"},
		{"details bad path", resp(fResp, fRejErr, detailsFrame(2, `{"fieldPaths":["a..b"]}`)), CodeInvalidRequest, "schema path"},
		{"details empty paths", resp(fResp, fRejErr, detailsFrame(2, `{"fieldPaths":[]}`)), CodeInvalidRequest, "fieldPaths is empty"},
		{"details duplicate path", resp(fResp, fRejErr, detailsFrame(2, `{"fieldPaths":["a","a"]}`)), CodeInvalidRequest, "duplicate field path"},
		{"details bad token", resp(fResp, fRejErr, detailsFrame(2, `{"reason":"Bad"}`)), CodeInvalidRequest, "stable token"},
		{"details token trailing separator", resp(fResp, fRejErr, detailsFrame(2, `{"requiredAction":"edit_"}`)), CodeInvalidRequest, "stable token"},
		{"details reference untrimmed", resp(fResp, fRejErr, detailsFrame(2, `{"references":{"k":" v"}}`)), CodeInvalidRequest, "trimmed"},
		{"details reference control", resp(fResp, fRejErr, detailsFrame(2, `{"references":{"k":"a\u0085b"}}`)), CodeInvalidRequest, "control"},
		{"details reference empty", resp(fResp, fRejErr, detailsFrame(2, `{"references":{}}`)), CodeInvalidRequest, "references is empty"},
		{"details too large", resp(fResp, fRejErr, detailsFrame(2, bigDetails(17))), CodeInvalidRequest, "more than 16"},
		{"details over 4096 bytes", resp(fResp, fRejErr, detailsFrame(2, bigPaths())), CodeInvalidRequest, "exceeds 4096"},
		{"details full shape", resp(fResp, fRejErr, detailsFrame(2, `{"fieldPaths":["title","a.b_c"],"reason":"invalid_value","requiredAction":"edit-fields","references":{"task_id":"t1","z.k":"ünï"}}`)), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := DecodeMessage(tt.msg)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("DecodeMessage: %v", err)
				}
				out, err := m.AppendEncode(nil)
				if err != nil {
					t.Fatalf("AppendEncode: %v", err)
				}
				if !bytes.Equal(out, tt.msg) {
					t.Fatalf("re-encoding differs\n got: %x\nwant: %x", out, tt.msg)
				}
				if _, err := RenderMessage(tt.msg); err != nil {
					t.Fatalf("RenderMessage: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("decoded, want %s", tt.want)
			}
			if got := CodeOf(err); got != tt.want {
				t.Fatalf("code %q, want %q (%v)", got, tt.want, err)
			}
			if !strings.Contains(err.Error(), tt.msg2) || !strings.Contains(err.Error(), "offset ") {
				t.Fatalf("error %q does not mention %q and an offset", err, tt.msg2)
			}
		})
	}
}

func scopePayload(k1, k2 string) []byte {
	return pl(func(w *writer) {
		w.str("", "s")
		w.str("", "t")
		w.u32(2)
		w.str("", k1)
		w.u32(0)
		w.str("", k2)
		w.u32(0)
		w.u8(0)
		w.i64("", 0)
		w.u8(0)
	})
}

func segRefPayload(media uint8, url, expiry bool) []byte {
	return pl(func(w *writer) {
		w.str("", "id")
		w.u8(media)
		w.str("", "t")
		w.i64("", 1)
		w.i64("", 1)
		w.i64("", 1)
		w.str("", "d")
		w.u8(0)
		w.u8(0)
		w.bool(url)
		if url {
			w.str("", "https://x")
		}
		w.bool(expiry)
		if expiry {
			w.i64("", 1)
		}
	})
}

func detailsFrame(opIndex int32, details string) []byte {
	return rawFrame(FramePushResultDetails, pl(func(w *writer) {
		w.str("", "cc")
		w.u32(1)
		w.i32(opIndex)
		w.str("", details)
	}))
}

func bigDetails(n int) string {
	var b strings.Builder
	b.WriteString(`{"references":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + strings.Repeat("a", i+1) + `":"v"`)
	}
	b.WriteString(`}}`)
	return b.String()
}

func bigPaths() string {
	var b strings.Builder
	b.WriteString(`{"fieldPaths":[`)
	for i := range 30 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + strings.Repeat("p", 150) + strconv.Itoa(100+i) + `"`)
	}
	b.WriteString(`]}`)
	return b.String()
}

// TestEncodeRefusals checks that encoders refuse what decoders reject.
func TestEncodeRefusals(t *testing.T) {
	seg := emptySegment()
	tests := []struct {
		name string
		m    Message
		msg  string
	}{
		{"unsupported version", Message{WireVersion: 4, Kind: KindRequest}, "wire version"},
		{"unknown kind", Message{WireVersion: 1, Kind: 9}, "message kind"},
		{"no frames", Message{WireVersion: 1, Kind: KindRequest}, "must start with REQ_HEADER"},
		{"nil frame", Message{WireVersion: 1, Kind: KindRequest, Frames: []Frame{nil}}, "nil"},
		{"typed nil frame", Message{WireVersion: 1, Kind: KindRequest, Frames: []Frame{(*ReqHeader)(nil)}}, "nil"},
		{"unknown under registered type", Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, &Unknown{Type: FrameSubStart}}}, "registered type"},
		{"unknown under END", Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, &Unknown{Type: FrameEnd}}}, "registered type"},
		{"no content", Message{WireVersion: 1, Kind: KindRequest, Frames: []Frame{&ReqHeader{ClientID: "c", SchemaVersion: 1}}}, "neither PUSH_COMMIT"},
		{"empty clientId", Message{WireVersion: 1, Kind: KindRequest, Frames: []Frame{&ReqHeader{SchemaVersion: 1}, &PullHeader{}}}, "clientId is empty"},
		{"epoch on v1", Message{WireVersion: 1, Kind: KindRequest, Frames: []Frame{&ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: strp("e")}, &PullHeader{}}}, "wire version 2"},
		{"v2 resp without epoch", Message{WireVersion: 2, Kind: KindResponse, Frames: []Frame{&RespHeader{}}}, "logEpoch is empty"},
		{"epoch on v1 resp", Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{ResetRequired: true}}}, "wire version 2"},
		{"empty commit", Message{WireVersion: 1, Kind: KindRequest, Frames: []Frame{&ReqHeader{ClientID: "c", SchemaVersion: 1}, &PushCommit{ClientCommitID: "cc"}}}, "no operations"},
		{"upsert without payload", Message{WireVersion: 1, Kind: KindRequest, Frames: []Frame{&ReqHeader{ClientID: "c", SchemaVersion: 1}, &PushCommit{ClientCommitID: "cc", Operations: []Operation{{Op: OpUpsert}}}}}, "payload must be present"},
		{"op 3", Message{WireVersion: 1, Kind: KindRequest, Frames: []Frame{&ReqHeader{ClientID: "c", SchemaVersion: 1}, &PushCommit{ClientCommitID: "cc", Operations: []Operation{{Op: 3}}}}}, "not upsert or delete"},
		{"baseVersion 2^53", Message{WireVersion: 1, Kind: KindRequest, Frames: []Frame{&ReqHeader{ClientID: "c", SchemaVersion: 1}, &PushCommit{ClientCommitID: "cc", Operations: []Operation{{Op: OpDelete, BaseVersion: i64p(1 << 53)}}}}}, "outside"},
		{"accept bit 7", Message{WireVersion: 1, Kind: KindRequest, Frames: []Frame{&ReqHeader{ClientID: "c", SchemaVersion: 1}, &PullHeader{Accept: 0x80}}}, "reserved bits"},
		{"invalid UTF-8", Message{WireVersion: 1, Kind: KindRequest, Frames: []Frame{&ReqHeader{ClientID: "\xff", SchemaVersion: 1}, &PullHeader{}}}, "UTF-8"},
		{"params not JSON", Message{WireVersion: 1, Kind: KindRequest, Frames: []Frame{&ReqHeader{ClientID: "c", SchemaVersion: 1}, &PullHeader{}, &Subscription{Params: []byte("{")}}}, "not a JSON document"},
		{"change tie", Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, &SubStart{Status: SubActive}, &Commit{Tables: []string{"t"}, Changes: []Change{{Op: OpUpsert, Row: []byte{}}}}, &SubEnd{}}}, "rowVersion and row"},
		{"tableIndex", Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, &SubStart{Status: SubActive}, &Commit{Changes: []Change{{Op: OpDelete}}}, &SubEnd{}}}, "out of range"},
		{"commitSeq tie", Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, &PushResult{ClientCommitID: "cc", Status: PushApplied}}}, "commitSeq"},
		{"applied result with code", Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, &PushResult{ClientCommitID: "cc", Status: PushApplied, CommitSeq: i64p(1), Results: []OpResult{{Status: OpApplied, Code: "x"}}}}}, "applied carries no"},
		{"url tie", Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, &SubStart{Status: SubActive}, &SegmentRef{MediaType: MediaRows, URL: strp("u")}, &SubEnd{}}}, "iff url"},
		{"bad inline", Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, &SubStart{Status: SubActive}, &SegmentInline{Payload: seg[:len(seg)-1]}, &SubEnd{}}}, "not a valid rows segment"},
		{"sub status 0", Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, &SubStart{}, &SubEnd{}}}, "SUB_START.status"},
		{"grammar: mixed section", Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, &SubStart{Status: SubActive}, &Commit{}, &SegmentInline{Payload: seg}, &SubEnd{}}}, "mixed"},
		{"grammar: open section", Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, &SubStart{Status: SubActive}}}, "missing SUB_END"},
		{"bad details", Message{WireVersion: 1, Kind: KindResponse, Frames: []Frame{&RespHeader{}, &PushResult{ClientCommitID: "cc", Status: PushRejected, Results: []OpResult{{Status: OpError}}}, &PushResultDetails{ClientCommitID: "cc", Entries: []DetailsEntry{{DetailsJSON: []byte(`{"x":1}`)}}}}}, "unknown member"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := []byte("prefix")
			out, err := tt.m.AppendEncode(dst)
			if err == nil {
				t.Fatalf("encoded %x, want a refusal", out)
			}
			if CodeOf(err) != CodeInternalError || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %v, want sync.internal_error mentioning %q", err, tt.msg)
			}
			if string(out) != "prefix" {
				t.Fatalf("dst changed to %q on refusal", out)
			}
		})
	}
}

func TestResponseEncoderGrammar(t *testing.T) {
	var rec writeRecorder
	e := NewResponseEncoder(&rec, 2)
	if err := e.WriteFrame(&SubStart{Status: SubActive}); err == nil {
		t.Fatal("SUB_START accepted before RESP_HEADER")
	}
	if len(rec.writes) != 0 {
		t.Fatal("refused frame was written")
	}
	if err := e.WriteFrame(&RespHeader{}); err == nil {
		t.Fatal("v2 RESP_HEADER without logEpoch accepted")
	}
	must := func(f Frame) {
		t.Helper()
		if err := e.WriteFrame(f); err != nil {
			t.Fatalf("WriteFrame(%s): %v", f.FrameType(), err)
		}
	}
	must(&RespHeader{LogEpoch: "e1"})
	must(&SubStart{ID: "s", Status: SubActive})
	if !e.InSubscription() {
		t.Fatal("InSubscription false inside a section")
	}
	if err := e.End(); err == nil {
		t.Fatal("End accepted inside an open section")
	}
	if err := e.WriteFrame(&Lease{LeaseID: "l"}); err == nil {
		t.Fatal("LEASE accepted after SUB_START")
	}
	must(&Commit{CommitSeq: 1, Tables: []string{"t"}, Changes: []Change{{Op: OpDelete, Scopes: map[string]string{"p": "1"}}}})
	if err := e.WriteFrame(&SegmentInline{Payload: emptySegment()}); err == nil {
		t.Fatal("segment accepted after COMMIT in one section")
	}
	if err := e.WriteFrame(&Unknown{Type: FrameCommit, Payload: nil}); err == nil {
		t.Fatal("Unknown under a registered type accepted")
	}
	must(&Unknown{Type: 0x2A, Payload: []byte("future")})
	must(&ErrorFrame{Code: "sync.internal_error"})
	if err := e.WriteFrame(&SubEnd{}); err == nil {
		t.Fatal("frame accepted after ERROR")
	}
	if err := e.End(); err != nil {
		t.Fatalf("End: %v", err)
	}
	if err := e.End(); err == nil {
		t.Fatal("second End accepted")
	}
	if e.BytesWritten() != int64(len(rec.all())) {
		t.Fatalf("BytesWritten %d, wrote %d", e.BytesWritten(), len(rec.all()))
	}
	m, err := DecodeMessage(rec.all())
	if err != nil {
		t.Fatalf("streamed response does not decode: %v", err)
	}
	if len(m.Frames) != 5 || len(rec.writes) != 6 {
		t.Fatalf("%d frames in %d writes, want 5 frames in 6 writes", len(m.Frames), len(rec.writes))
	}
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errTestWrite
	}
	w.n--
	return len(p), nil
}

var errTestWrite = Errorf(CodeInternalError, "disk on fire")

func TestResponseEncoderWriteErrorIsSticky(t *testing.T) {
	e := NewResponseEncoder(&failingWriter{n: 1}, 1)
	if err := e.WriteFrame(&RespHeader{}); err != nil {
		t.Fatal(err)
	}
	if err := e.WriteFrame(&SubStart{Status: SubActive}); err == nil {
		t.Fatal("write error not reported")
	}
	if err := e.End(); err == nil {
		t.Fatal("encoder usable after a write error")
	}
	if bad := NewResponseEncoder(&rec0{}, 7); bad.WriteFrame(&RespHeader{}) == nil {
		t.Fatal("unsupported version accepted")
	}
}

type rec0 struct{}

func (rec0) Write(p []byte) (int, error) { return len(p), nil }

func TestNewErrorFrame(t *testing.T) {
	f := NewErrorFrame(Errorf(CodeCursorExpired, "cursor 3 is behind the horizon").WithDetails(map[string]int{"horizon": 9}))
	if f.Code != "sync.cursor_expired" || f.Category != CategoryResetRequired || f.Retryable || f.RecommendedAction != "rebootstrap" ||
		f.Message != "cursor 3 is behind the horizon" || string(f.Details) != `{"horizon":9}` {
		t.Fatalf("NewErrorFrame = %+v", f)
	}
	f = NewErrorFrame(errTestWrite)
	if f.Code != "sync.internal_error" || !f.Retryable {
		t.Fatalf("NewErrorFrame(internal) = %+v", f)
	}
	f = NewErrorFrame(bytes.ErrTooLarge)
	if f.Code != "sync.internal_error" || f.Message != "sync.internal_error" {
		t.Fatalf("NewErrorFrame(plain error) leaks %+v", f)
	}
}

// TestCheckedSegmentInline: a checked frame refuses an invalid payload
// up front and encodes to the same bytes as an unchecked one.
func TestCheckedSegmentInline(t *testing.T) {
	seg := emptySegment()
	if _, err := CheckedSegmentInline(seg[:len(seg)-1]); CodeOf(err) != CodeInvalidRequest {
		t.Fatalf("a truncated segment was accepted: %v", err)
	}
	checked, err := CheckedSegmentInline(seg)
	if err != nil {
		t.Fatal(err)
	}
	encode := func(f Frame) []byte {
		var buf bytes.Buffer
		e := NewResponseEncoder(&buf, 2)
		for _, f := range []Frame{&RespHeader{LogEpoch: "e1"}, &SubStart{ID: "s", Status: SubActive, Bootstrap: true}, f, &SubEnd{}} {
			if err := e.WriteFrame(f); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.End(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	if a, b := encode(checked), encode(&SegmentInline{Payload: seg}); !bytes.Equal(a, b) {
		t.Fatalf("checked frame encodes to\n%x\nunchecked to\n%x", a, b)
	}
}
