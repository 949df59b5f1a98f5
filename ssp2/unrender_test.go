package ssp2

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"testing"
)

// unrender is the inverse of RenderMessage for tests: it builds a Message
// from a §11 rendering, so vectors that exist only as JSON can go through
// the encoder. json-typed fields come back compact (their original
// whitespace is not in the rendering), which renders the same.
func unrender(t testing.TB, doc []byte) *Message {
	t.Helper()
	var top struct {
		Magic       string            `json:"magic"`
		WireVersion uint16            `json:"wireVersion"`
		MsgKind     string            `json:"msgKind"`
		Frames      []json.RawMessage `json:"frames"`
	}
	mustJSON(t, doc, &top)
	if top.Magic != envelopeMagic {
		t.Fatalf("magic %q", top.Magic)
	}
	m := &Message{WireVersion: top.WireVersion}
	switch top.MsgKind {
	case "request":
		m.Kind = KindRequest
	case "response":
		m.Kind = KindResponse
	default:
		t.Fatalf("msgKind %q", top.MsgKind)
	}
	for _, raw := range top.Frames {
		m.Frames = append(m.Frames, unrenderFrame(t, raw))
	}
	return m
}

// fields is one rendered frame or record: its members by name.
type fields map[string]json.RawMessage

func mustJSON(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("parse %s: %v", b, err)
	}
}

func (f fields) has(k string) bool { _, ok := f[k]; return ok }

func (f fields) str(t testing.TB, k string) string {
	t.Helper()
	var s string
	mustJSON(t, f[k], &s)
	return s
}

func (f fields) optStr(t testing.TB, k string) *string {
	t.Helper()
	if !f.has(k) {
		return nil
	}
	s := f.str(t, k)
	return &s
}

func (f fields) int(t testing.TB, k string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(string(f[k]), 10, 64)
	if err != nil {
		t.Fatalf("member %s = %s: %v", k, f[k], err)
	}
	return v
}

func (f fields) optInt(t testing.TB, k string) *int64 {
	t.Helper()
	if !f.has(k) {
		return nil
	}
	v := f.int(t, k)
	return &v
}

func (f fields) optI32(t testing.TB, k string) *int32 {
	t.Helper()
	if !f.has(k) {
		return nil
	}
	v := int32(f.int(t, k))
	return &v
}

func (f fields) bool(t testing.TB, k string) bool {
	t.Helper()
	var v bool
	mustJSON(t, f[k], &v)
	return v
}

func (f fields) base64(t testing.TB, k string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(f.str(t, k))
	if err != nil {
		t.Fatalf("member %s: %v", k, err)
	}
	return b
}

// raw returns an embedded JSON value compacted, nil when absent.
func (f fields) raw(t testing.TB, k string) json.RawMessage {
	t.Helper()
	if !f.has(k) {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, f[k]); err != nil {
		t.Fatalf("member %s: %v", k, err)
	}
	return buf.Bytes()
}

func (f fields) list(t testing.TB, k string) []fields {
	t.Helper()
	var out []fields
	mustJSON(t, f[k], &out)
	return out
}

func (f fields) scopeLists(t testing.TB, k string) map[string][]string {
	t.Helper()
	m := map[string][]string{}
	mustJSON(t, f[k], &m)
	return m
}

func unrenderFrame(t testing.TB, raw json.RawMessage) Frame {
	t.Helper()
	var f fields
	mustJSON(t, raw, &f)
	switch typ := f.str(t, "type"); typ {
	case "REQ_HEADER":
		return &ReqHeader{ClientID: f.str(t, "clientId"), SchemaVersion: int32(f.int(t, "schemaVersion")), LogEpoch: f.optStr(t, "logEpoch")}
	case "PUSH_COMMIT":
		pc := &PushCommit{ClientCommitID: f.str(t, "clientCommitId")}
		for _, o := range f.list(t, "operations") {
			op := Operation{Table: o.str(t, "table"), RowID: o.str(t, "rowId"), Op: parseOp(t, o.str(t, "op")), BaseVersion: o.optInt(t, "baseVersion")}
			if o.has("payload") {
				op.Payload = o.base64(t, "payload")
			}
			pc.Operations = append(pc.Operations, op)
		}
		return pc
	case "PULL_HEADER":
		return &PullHeader{LimitCommits: int32(f.int(t, "limitCommits")), LimitSnapshotRows: int32(f.int(t, "limitSnapshotRows")),
			MaxSnapshotPages: int32(f.int(t, "maxSnapshotPages")), Accept: uint8(f.int(t, "accept"))}
	case "SUBSCRIPTION":
		return &Subscription{ID: f.str(t, "id"), Table: f.str(t, "table"), Scopes: f.scopeLists(t, "scopes"), Params: f.raw(t, "params"),
			Cursor: f.int(t, "cursor"), BootstrapState: f.raw(t, "bootstrapState")}
	case "RESP_HEADER":
		h := &RespHeader{RequiredSchemaVersion: f.optI32(t, "requiredSchemaVersion"), LatestSchemaVersion: f.optI32(t, "latestSchemaVersion")}
		if f.has("logEpoch") {
			h.LogEpoch, h.ResetRequired = f.str(t, "logEpoch"), f.bool(t, "resetRequired")
		}
		return h
	case "LEASE":
		return &Lease{LeaseID: f.str(t, "leaseId"), ExpiresAtMs: f.int(t, "expiresAtMs")}
	case "PUSH_RESULT":
		pr := &PushResult{ClientCommitID: f.str(t, "clientCommitId"), Status: parseEnum(t, f.str(t, "status"), PushApplied, PushRejected), CommitSeq: f.optInt(t, "commitSeq")}
		for _, o := range f.list(t, "results") {
			r := OpResult{OpIndex: int32(o.int(t, "opIndex")), Status: parseEnum(t, o.str(t, "status"), OpApplied, OpError)}
			switch r.Status {
			case OpConflict:
				r.Code, r.Message, r.ServerVersion, r.ServerRow = o.str(t, "code"), o.str(t, "message"), o.int(t, "serverVersion"), o.base64(t, "serverRow")
				if o.has("conflictColumns") {
					r.ConflictColumns = o.base64(t, "conflictColumns")
				}
			case OpError:
				r.Code, r.Message, r.Retryable = o.str(t, "code"), o.str(t, "message"), o.bool(t, "retryable")
			}
			pr.Results = append(pr.Results, r)
		}
		return pr
	case "PUSH_RESULT_DETAILS":
		d := &PushResultDetails{ClientCommitID: f.str(t, "clientCommitId")}
		for _, e := range f.list(t, "entries") {
			d.Entries = append(d.Entries, DetailsEntry{OpIndex: int32(e.int(t, "opIndex")), DetailsJSON: e.raw(t, "details")})
		}
		return d
	case "SUB_START":
		return &SubStart{ID: f.str(t, "id"), Status: parseEnum(t, f.str(t, "status"), SubActive, SubReset), ReasonCode: f.str(t, "reasonCode"),
			EffectiveScopes: f.scopeLists(t, "effectiveScopes"), Bootstrap: f.bool(t, "bootstrap")}
	case "COMMIT":
		c := &Commit{CommitSeq: f.int(t, "commitSeq"), CreatedAtMs: f.int(t, "createdAtMs"), ActorID: f.str(t, "actorId")}
		mustJSON(t, f["tables"], &c.Tables)
		for _, ch := range f.list(t, "changes") {
			x := Change{TableIndex: uint16(ch.int(t, "tableIndex")), RowID: ch.str(t, "rowId"), Op: parseOp(t, ch.str(t, "op")), RowVersion: ch.optInt(t, "rowVersion")}
			mustJSON(t, ch["scopes"], &x.Scopes)
			if ch.has("row") {
				x.Row = ch.base64(t, "row")
			}
			c.Changes = append(c.Changes, x)
		}
		return c
	case "SEGMENT_REF":
		return &SegmentRef{SegmentID: f.str(t, "segmentId"), MediaType: parseEnum(t, f.str(t, "mediaType"), MediaRows, MediaSQLite), Table: f.str(t, "table"),
			ByteLength: f.int(t, "byteLength"), RowCount: f.int(t, "rowCount"), AsOfCommitSeq: f.int(t, "asOfCommitSeq"), ScopeDigest: f.str(t, "scopeDigest"),
			RowCursor: f.optStr(t, "rowCursor"), NextRowCursor: f.optStr(t, "nextRowCursor"), URL: f.optStr(t, "url"), URLExpiresAtMs: f.optInt(t, "urlExpiresAtMs")}
	case "SEGMENT_INLINE":
		return &SegmentInline{Payload: f.base64(t, "payload")}
	case "SUB_END":
		return &SubEnd{NextCursor: f.int(t, "nextCursor"), BootstrapState: f.raw(t, "bootstrapState")}
	case "ERROR":
		return &ErrorFrame{Code: f.str(t, "code"), Message: f.str(t, "message"), Category: f.str(t, "category"), Retryable: f.bool(t, "retryable"),
			RecommendedAction: f.str(t, "recommendedAction"), Details: f.raw(t, "details")}
	case "UNKNOWN":
		return &Unknown{Type: FrameType(f.int(t, "frameType")), Payload: f.base64(t, "payload")}
	default:
		t.Fatalf("unknown rendered frame type %q", typ)
		return nil
	}
}

func parseOp(t testing.TB, s string) Op { return parseEnum(t, s, OpUpsert, OpDelete) }

// parseEnum maps a rendered enum name back to its byte, trying every value
// in [lo, hi].
func parseEnum[E interface {
	~uint8
	fmt.Stringer
}](t testing.TB, name string, lo, hi E) E {
	t.Helper()
	for e := lo; e <= hi; e++ {
		if e.String() == name {
			return e
		}
	}
	t.Fatalf("enum name %q not in %s..%s", name, lo, hi)
	return 0
}

// unrenderSparseRow builds a SparseRow for codec from a rule-11 rendering
// ({columns, values}); the rendering's columns must be the codec's.
func unrenderSparseRow(t testing.TB, codec *SparseCodec, doc []byte) SparseRow {
	t.Helper()
	var top struct {
		Columns []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			Nullable bool   `json:"nullable"`
		} `json:"columns"`
		Values map[string]json.RawMessage `json:"values"`
	}
	mustJSON(t, doc, &top)
	cols := codec.Columns()
	if len(top.Columns) != len(cols) {
		t.Fatalf("rendering has %d columns, codec %d", len(top.Columns), len(cols))
	}
	r := SparseRow{Present: NewColumnBitmap(len(cols)), Values: make([]Value, len(cols))}
	for i, c := range cols {
		if rc := top.Columns[i]; rc.Name != c.Name || rc.Type != c.Type.String() || rc.Nullable != c.Nullable {
			t.Fatalf("column %d rendered as %+v, codec has %+v", i, rc, c)
		}
		raw, ok := top.Values[c.Name]
		if !ok {
			continue
		}
		r.Present.Set(i)
		r.Values[i] = unrenderValue(t, c, raw)
	}
	if len(top.Values) != r.Present.Count() {
		t.Fatalf("rendering names %d values, %d match a column", len(top.Values), r.Present.Count())
	}
	return r
}

func unrenderValue(t testing.TB, c Column, raw json.RawMessage) Value {
	t.Helper()
	if string(raw) == "null" {
		if !c.Nullable {
			t.Fatalf("column %s: null for a non-nullable column (a non-finite float cannot be unrendered)", c.Name)
		}
		return Value{Null: true}
	}
	f := fields{"v": raw}
	switch c.Type {
	case TypeString:
		return Value{Bytes: []byte(f.str(t, "v"))}
	case TypeInteger:
		return Value{Int: f.int(t, "v")}
	case TypeFloat:
		x, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || math.IsInf(x, 0) {
			t.Fatalf("column %s: float %s", c.Name, raw)
		}
		return Value{Float: x}
	case TypeBoolean:
		return Value{Bool: f.bool(t, "v")}
	case TypeJSON, TypeBlobRef:
		return Value{Bytes: f.raw(t, "v")}
	default:
		return Value{Bytes: f.base64(t, "v")}
	}
}
