package ssp2

import (
	"encoding/base64"
	"strconv"
)

// The canonical JSON debug rendering of §11.1: non-contractual for the
// wire, contractual for the golden vectors. Frames render in wire order
// with END omitted, fields in field-table order, absent opt() fields
// omitted, enums by name, accept as a number, binary fields (SEGMENT_INLINE
// payload included) as standard base64, json fields embedded as JSON,
// unknown frames as {"type":"UNKNOWN","frameType":n,"payload":…} and
// non-finite floats as null. PUSH_RESULT_DETAILS entries render their
// detailsJson embedded under "details", as the reference does. A v3
// conflict record renders conflictColumns as base64 after serverRow.

// RenderMessage decodes b (failing as DecodeMessage fails) and returns its
// §11 rendering.
func RenderMessage(b []byte) ([]byte, error) {
	m, err := decodeMessage(b, codecWindow)
	if err != nil {
		return nil, err
	}
	var j jsonWriter
	j.open('{')
	j.strField("magic", envelopeMagic)
	j.intField("wireVersion", int64(m.WireVersion))
	j.strField("msgKind", m.Kind.String())
	j.key("frames")
	j.open('[')
	for _, f := range m.Frames {
		renderFrame(&j, f, m.WireVersion)
	}
	j.close(']')
	j.close('}')
	return j.b, nil
}

func renderFrame(j *jsonWriter, f Frame, v uint16) {
	j.open('{')
	j.key("type")
	if _, ok := f.(*Unknown); ok {
		j.str("UNKNOWN")
	} else {
		j.str(f.FrameType().String())
	}
	switch f := f.(type) {
	case *ReqHeader:
		j.strField("clientId", f.ClientID)
		j.intField("schemaVersion", int64(f.SchemaVersion))
		j.optStr("logEpoch", f.LogEpoch)
	case *PushCommit:
		j.strField("clientCommitId", f.ClientCommitID)
		j.key("operations")
		j.open('[')
		for _, o := range f.Operations {
			j.open('{')
			j.strField("table", o.Table)
			j.strField("rowId", o.RowID)
			j.strField("op", o.Op.String())
			j.optInt("baseVersion", o.BaseVersion)
			j.optBase64("payload", o.Payload)
			j.close('}')
		}
		j.close(']')
	case *PullHeader:
		j.intField("limitCommits", int64(f.LimitCommits))
		j.intField("limitSnapshotRows", int64(f.LimitSnapshotRows))
		j.intField("maxSnapshotPages", int64(f.MaxSnapshotPages))
		j.intField("accept", int64(f.Accept))
	case *Subscription:
		j.strField("id", f.ID)
		j.strField("table", f.Table)
		j.key("scopes")
		j.scopeLists(f.Scopes)
		j.optRaw("params", f.Params)
		j.intField("cursor", f.Cursor)
		j.optRaw("bootstrapState", f.BootstrapState)
	case *RespHeader:
		j.optI32("requiredSchemaVersion", f.RequiredSchemaVersion)
		j.optI32("latestSchemaVersion", f.LatestSchemaVersion)
		if v >= 2 {
			j.strField("logEpoch", f.LogEpoch)
			j.boolField("resetRequired", f.ResetRequired)
		}
	case *Lease:
		j.strField("leaseId", f.LeaseID)
		j.intField("expiresAtMs", f.ExpiresAtMs)
	case *PushResult:
		j.strField("clientCommitId", f.ClientCommitID)
		j.strField("status", f.Status.String())
		j.optInt("commitSeq", f.CommitSeq)
		j.key("results")
		j.open('[')
		for _, o := range f.Results {
			j.open('{')
			j.intField("opIndex", int64(o.OpIndex))
			j.strField("status", o.Status.String())
			if o.Status != OpApplied {
				j.strField("code", o.Code)
				j.strField("message", o.Message)
			}
			switch o.Status {
			case OpConflict:
				j.intField("serverVersion", o.ServerVersion)
				j.base64Field("serverRow", o.ServerRow)
				if v >= 3 {
					j.base64Field("conflictColumns", o.ConflictColumns)
				}
			case OpError:
				j.boolField("retryable", o.Retryable)
			}
			j.close('}')
		}
		j.close(']')
	case *PushResultDetails:
		j.strField("clientCommitId", f.ClientCommitID)
		j.key("entries")
		j.open('[')
		for _, e := range f.Entries {
			j.open('{')
			j.intField("opIndex", int64(e.OpIndex))
			j.rawField("details", e.DetailsJSON)
			j.close('}')
		}
		j.close(']')
	case *SubStart:
		j.strField("id", f.ID)
		j.strField("status", f.Status.String())
		j.strField("reasonCode", f.ReasonCode)
		j.key("effectiveScopes")
		j.scopeLists(f.EffectiveScopes)
		j.boolField("bootstrap", f.Bootstrap)
	case *Commit:
		j.intField("commitSeq", f.CommitSeq)
		j.intField("createdAtMs", f.CreatedAtMs)
		j.strField("actorId", f.ActorID)
		j.key("tables")
		j.open('[')
		for _, t := range f.Tables {
			j.str(t)
		}
		j.close(']')
		j.key("changes")
		j.open('[')
		for _, c := range f.Changes {
			j.open('{')
			j.intField("tableIndex", int64(c.TableIndex))
			j.strField("rowId", c.RowID)
			j.strField("op", c.Op.String())
			j.optInt("rowVersion", c.RowVersion)
			j.key("scopes")
			j.scopes(c.Scopes)
			j.optBase64("row", c.Row)
			j.close('}')
		}
		j.close(']')
	case *SegmentRef:
		j.strField("segmentId", f.SegmentID)
		j.strField("mediaType", f.MediaType.String())
		j.strField("table", f.Table)
		j.intField("byteLength", f.ByteLength)
		j.intField("rowCount", f.RowCount)
		j.intField("asOfCommitSeq", f.AsOfCommitSeq)
		j.strField("scopeDigest", f.ScopeDigest)
		j.optStr("rowCursor", f.RowCursor)
		j.optStr("nextRowCursor", f.NextRowCursor)
		j.optStr("url", f.URL)
		j.optInt("urlExpiresAtMs", f.URLExpiresAtMs)
	case *SegmentInline:
		j.base64Field("payload", f.Payload)
	case *SubEnd:
		j.intField("nextCursor", f.NextCursor)
		j.optRaw("bootstrapState", f.BootstrapState)
	case *ErrorFrame:
		j.strField("code", f.Code)
		j.strField("message", f.Message)
		j.strField("category", f.Category)
		j.boolField("retryable", f.Retryable)
		j.strField("recommendedAction", f.RecommendedAction)
		j.optRaw("details", f.Details)
	case *Unknown:
		j.intField("frameType", int64(f.Type))
		j.base64Field("payload", f.Payload)
	}
	j.close('}')
}

// RenderSegment validates the rows segment b (failing as ValidateSegment
// fails) and returns its §11.1 rule 8 rendering.
func RenderSegment(b []byte) ([]byte, error) {
	var j jsonWriter
	lastBlock := -1
	var vals []Value
	h, err := walkSegment(b, 0, opDecodeSegment, func(h *SegmentHeader, codec *RowCodec, block int, sv int64, row []byte) {
		if lastBlock < 0 {
			renderSegmentHeader(&j, h)
		}
		if block != lastBlock {
			if lastBlock >= 0 {
				j.close(']')
			}
			j.open('[')
			lastBlock = block
		}
		vals = vals[:cap(vals)]
		if len(vals) < len(h.Columns) {
			vals = make([]Value, len(h.Columns))
		}
		codec.decodeTrusted(row, vals)
		j.open('{')
		j.intField("serverVersion", sv)
		j.key("values")
		j.open('{')
		for i, c := range h.Columns {
			j.key(c.Name)
			renderValue(&j, c.Type, vals[i])
		}
		j.close('}')
		j.close('}')
	})
	if err != nil {
		return nil, err
	}
	if lastBlock < 0 { // no rows
		renderSegmentHeader(&j, &h)
	} else {
		j.close(']')
	}
	j.close(']')
	j.close('}')
	return j.b, nil
}

func renderSegmentHeader(j *jsonWriter, h *SegmentHeader) {
	j.open('{')
	j.strField("magic", segmentMagic)
	j.intField("formatVersion", segmentFormatVersion)
	j.strField("table", h.Table)
	j.intField("schemaVersion", int64(h.SchemaVersion))
	renderColumns(j, h.Columns)
	j.key("blocks")
	j.open('[')
}

// renderColumns writes the "columns" member of rule 8 (and rule 11).
func renderColumns(j *jsonWriter, cols []Column) {
	j.key("columns")
	j.open('[')
	for _, c := range cols {
		j.open('{')
		j.strField("name", c.Name)
		j.strField("type", c.Type.String())
		j.boolField("nullable", c.Nullable)
		j.close('}')
	}
	j.close(']')
}

// RenderSparseRow decodes the sparse row b (failing as DecodeSparseRow
// fails) and returns its §11.1 rule 11 rendering: the codec's columns, and
// values keyed by name for the present columns only.
func RenderSparseRow(c *SparseCodec, b []byte) ([]byte, error) {
	r, err := c.DecodeSparseRow(b, nil)
	if err != nil {
		return nil, err
	}
	var j jsonWriter
	j.open('{')
	renderColumns(&j, c.Columns())
	j.key("values")
	j.open('{')
	for i, col := range c.Columns() {
		if r.Present.Has(i) {
			j.key(col.Name)
			renderValue(&j, col.Type, r.Values[i])
		}
	}
	j.close('}')
	j.close('}')
	return j.b, nil
}

func renderValue(j *jsonWriter, t ColumnType, v Value) {
	if v.Null {
		j.sep()
		j.b = append(j.b, "null"...)
		return
	}
	switch t {
	case TypeString:
		j.str(string(v.Bytes))
	case TypeInteger:
		j.int(v.Int)
	case TypeFloat:
		j.sep()
		j.b = appendJSNumber(j.b, v.Float)
	case TypeBoolean:
		j.bool(v.Bool)
	case TypeJSON, TypeBlobRef:
		j.raw(v.Bytes)
	default: // bytes, crdt
		j.base64(v.Bytes)
	}
}

// jsonWriter builds a JSON document, placing commas itself.
type jsonWriter struct {
	b        []byte
	first    []bool // per open container: nothing written in it yet
	afterKey bool
}

func (j *jsonWriter) sep() {
	if j.afterKey {
		j.afterKey = false
		return
	}
	if n := len(j.first); n > 0 {
		if !j.first[n-1] {
			j.b = append(j.b, ',')
		}
		j.first[n-1] = false
	}
}

func (j *jsonWriter) open(c byte) {
	j.sep()
	j.b = append(j.b, c)
	j.first = append(j.first, true)
}

func (j *jsonWriter) close(c byte) {
	j.b = append(j.b, c)
	j.first = j.first[:len(j.first)-1]
}

func (j *jsonWriter) key(k string) {
	j.sep()
	j.b = appendJSString(j.b, k)
	j.b = append(j.b, ':')
	j.afterKey = true
}

func (j *jsonWriter) str(s string) {
	j.sep()
	j.b = appendJSString(j.b, s)
}

func (j *jsonWriter) int(v int64) {
	j.sep()
	j.b = strconv.AppendInt(j.b, v, 10)
}

func (j *jsonWriter) bool(v bool) {
	j.sep()
	j.b = strconv.AppendBool(j.b, v)
}

// raw embeds an already validated JSON text.
func (j *jsonWriter) raw(b []byte) {
	j.sep()
	j.b = append(j.b, b...)
}

func (j *jsonWriter) base64(b []byte) {
	j.sep()
	j.b = append(j.b, '"')
	j.b = base64.StdEncoding.AppendEncode(j.b, b)
	j.b = append(j.b, '"')
}

// Object members: a key and its value.

func (j *jsonWriter) strField(k, v string) {
	j.key(k)
	j.str(v)
}

func (j *jsonWriter) intField(k string, v int64) {
	j.key(k)
	j.int(v)
}

func (j *jsonWriter) boolField(k string, v bool) {
	j.key(k)
	j.bool(v)
}

func (j *jsonWriter) rawField(k string, v []byte) {
	j.key(k)
	j.raw(v)
}

func (j *jsonWriter) base64Field(k string, v []byte) {
	j.key(k)
	j.base64(v)
}

// Optional members, omitted when absent (nil).

func (j *jsonWriter) optStr(k string, v *string) {
	if v != nil {
		j.strField(k, *v)
	}
}

func (j *jsonWriter) optInt(k string, v *int64) {
	if v != nil {
		j.intField(k, *v)
	}
}

func (j *jsonWriter) optI32(k string, v *int32) {
	if v != nil {
		j.intField(k, int64(*v))
	}
}

func (j *jsonWriter) optRaw(k string, v []byte) {
	if v != nil {
		j.rawField(k, v)
	}
}

func (j *jsonWriter) optBase64(k string, v []byte) {
	if v != nil {
		j.base64Field(k, v)
	}
}

// scopes writes a map str → str, keys in UTF-16 code unit order.
func (j *jsonWriter) scopes(m map[string]string) {
	j.open('{')
	for _, k := range sortedKeysUTF16(m) {
		j.strField(k, m[k])
	}
	j.close('}')
}

// scopeLists writes a map str → list(str), keys in UTF-16 code unit order.
func (j *jsonWriter) scopeLists(m map[string][]string) {
	j.open('{')
	for _, k := range sortedKeysUTF16(m) {
		j.key(k)
		j.open('[')
		for _, v := range m[k] {
			j.str(v)
		}
		j.close(']')
	}
	j.close('}')
}
