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
	j.key("magic")
	j.str(envelopeMagic)
	j.key("wireVersion")
	j.int(int64(m.WireVersion))
	j.key("msgKind")
	j.str(m.Kind.String())
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
		j.key("clientId")
		j.str(f.ClientID)
		j.key("schemaVersion")
		j.int(int64(f.SchemaVersion))
		j.optStr("logEpoch", f.LogEpoch)
	case *PushCommit:
		j.key("clientCommitId")
		j.str(f.ClientCommitID)
		j.key("operations")
		j.open('[')
		for _, o := range f.Operations {
			j.open('{')
			j.key("table")
			j.str(o.Table)
			j.key("rowId")
			j.str(o.RowID)
			j.key("op")
			j.str(o.Op.String())
			j.optInt("baseVersion", o.BaseVersion)
			if o.Payload != nil {
				j.key("payload")
				j.base64(o.Payload)
			}
			j.close('}')
		}
		j.close(']')
	case *PullHeader:
		j.key("limitCommits")
		j.int(int64(f.LimitCommits))
		j.key("limitSnapshotRows")
		j.int(int64(f.LimitSnapshotRows))
		j.key("maxSnapshotPages")
		j.int(int64(f.MaxSnapshotPages))
		j.key("accept")
		j.int(int64(f.Accept))
	case *Subscription:
		j.key("id")
		j.str(f.ID)
		j.key("table")
		j.str(f.Table)
		j.key("scopes")
		j.scopeLists(f.Scopes)
		j.optRaw("params", f.Params)
		j.key("cursor")
		j.int(f.Cursor)
		j.optRaw("bootstrapState", f.BootstrapState)
	case *RespHeader:
		j.optI32("requiredSchemaVersion", f.RequiredSchemaVersion)
		j.optI32("latestSchemaVersion", f.LatestSchemaVersion)
		if v >= 2 {
			j.key("logEpoch")
			j.str(f.LogEpoch)
			j.key("resetRequired")
			j.bool(f.ResetRequired)
		}
	case *Lease:
		j.key("leaseId")
		j.str(f.LeaseID)
		j.key("expiresAtMs")
		j.int(f.ExpiresAtMs)
	case *PushResult:
		j.key("clientCommitId")
		j.str(f.ClientCommitID)
		j.key("status")
		j.str(f.Status.String())
		j.optInt("commitSeq", f.CommitSeq)
		j.key("results")
		j.open('[')
		for _, o := range f.Results {
			j.open('{')
			j.key("opIndex")
			j.int(int64(o.OpIndex))
			j.key("status")
			j.str(o.Status.String())
			if o.Status != OpApplied {
				j.key("code")
				j.str(o.Code)
				j.key("message")
				j.str(o.Message)
			}
			switch o.Status {
			case OpConflict:
				j.key("serverVersion")
				j.int(o.ServerVersion)
				j.key("serverRow")
				j.base64(o.ServerRow)
				if v >= 3 {
					j.key("conflictColumns")
					j.base64(o.ConflictColumns)
				}
			case OpError:
				j.key("retryable")
				j.bool(o.Retryable)
			}
			j.close('}')
		}
		j.close(']')
	case *PushResultDetails:
		j.key("clientCommitId")
		j.str(f.ClientCommitID)
		j.key("entries")
		j.open('[')
		for _, e := range f.Entries {
			j.open('{')
			j.key("opIndex")
			j.int(int64(e.OpIndex))
			j.key("details")
			j.raw(e.DetailsJSON)
			j.close('}')
		}
		j.close(']')
	case *SubStart:
		j.key("id")
		j.str(f.ID)
		j.key("status")
		j.str(f.Status.String())
		j.key("reasonCode")
		j.str(f.ReasonCode)
		j.key("effectiveScopes")
		j.scopeLists(f.EffectiveScopes)
		j.key("bootstrap")
		j.bool(f.Bootstrap)
	case *Commit:
		j.key("commitSeq")
		j.int(f.CommitSeq)
		j.key("createdAtMs")
		j.int(f.CreatedAtMs)
		j.key("actorId")
		j.str(f.ActorID)
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
			j.key("tableIndex")
			j.int(int64(c.TableIndex))
			j.key("rowId")
			j.str(c.RowID)
			j.key("op")
			j.str(c.Op.String())
			j.optInt("rowVersion", c.RowVersion)
			j.key("scopes")
			j.open('{')
			for _, k := range sortedKeysUTF16(c.Scopes) {
				j.key(k)
				j.str(c.Scopes[k])
			}
			j.close('}')
			if c.Row != nil {
				j.key("row")
				j.base64(c.Row)
			}
			j.close('}')
		}
		j.close(']')
	case *SegmentRef:
		j.key("segmentId")
		j.str(f.SegmentID)
		j.key("mediaType")
		j.str(f.MediaType.String())
		j.key("table")
		j.str(f.Table)
		j.key("byteLength")
		j.int(f.ByteLength)
		j.key("rowCount")
		j.int(f.RowCount)
		j.key("asOfCommitSeq")
		j.int(f.AsOfCommitSeq)
		j.key("scopeDigest")
		j.str(f.ScopeDigest)
		j.optStr("rowCursor", f.RowCursor)
		j.optStr("nextRowCursor", f.NextRowCursor)
		j.optStr("url", f.URL)
		j.optInt("urlExpiresAtMs", f.URLExpiresAtMs)
	case *SegmentInline:
		j.key("payload")
		j.base64(f.Payload)
	case *SubEnd:
		j.key("nextCursor")
		j.int(f.NextCursor)
		j.optRaw("bootstrapState", f.BootstrapState)
	case *ErrorFrame:
		j.key("code")
		j.str(f.Code)
		j.key("message")
		j.str(f.Message)
		j.key("category")
		j.str(f.Category)
		j.key("retryable")
		j.bool(f.Retryable)
		j.key("recommendedAction")
		j.str(f.RecommendedAction)
		j.optRaw("details", f.Details)
	case *Unknown:
		j.key("frameType")
		j.int(int64(f.Type))
		j.key("payload")
		j.base64(f.Payload)
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
		j.key("serverVersion")
		j.int(sv)
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
	j.key("magic")
	j.str(segmentMagic)
	j.key("formatVersion")
	j.int(segmentFormatVersion)
	j.key("table")
	j.str(h.Table)
	j.key("schemaVersion")
	j.int(int64(h.SchemaVersion))
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
		j.key("name")
		j.str(c.Name)
		j.key("type")
		j.str(c.Type.String())
		j.key("nullable")
		j.bool(c.Nullable)
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

func (j *jsonWriter) optStr(k string, v *string) {
	if v != nil {
		j.key(k)
		j.str(*v)
	}
}

func (j *jsonWriter) optInt(k string, v *int64) {
	if v != nil {
		j.key(k)
		j.int(*v)
	}
}

func (j *jsonWriter) optI32(k string, v *int32) {
	if v != nil {
		j.key(k)
		j.int(int64(*v))
	}
}

func (j *jsonWriter) optRaw(k string, v []byte) {
	if v != nil {
		j.key(k)
		j.raw(v)
	}
}

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
