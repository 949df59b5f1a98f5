package bus

import (
	"encoding/base64"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Header values shared by every message; nats.Header.Set replaces a
// slice, never writes into it, so sharing is safe.
var (
	hvSpecVersion = []string{SpecVersion}
	hvTypeCommit  = []string{EventTypeCommit}
	hvContentType = []string{ContentTypeJSON}
	hvNoReactions = []string{"0"}
)

// Encoder turns commits into commit-event messages: one per (commit,
// table), CloudEvents binary mode (see the package doc). It keeps scratch
// buffers: use one Encoder per goroutine.
type Encoder struct {
	names      Names
	source     []string // ce-source header value
	schema     *schema.Schema
	maxPayload int // largest message (headers + body) the server accepts

	vals   []ssp2.Value
	tables []string
	keys   []string
}

// CommitMsg is one encoded commit-event message and the commit it
// belongs to.
type CommitMsg struct {
	Msg       *nats.Msg
	CommitSeq int64
}

// NewEncoder builds an Encoder for events of namespace names from node
// (ce-source syncnode://<node>, see CheckNode). Rows are rendered with s.
// A message whose body would exceed maxPayload (the server's max_payload;
// <= 0 is unlimited) leaves out its rows, then its changes.
func NewEncoder(names Names, node string, s *schema.Schema, maxPayload int) *Encoder {
	return &Encoder{names: names, source: []string{Source(node)}, schema: s, maxPayload: maxPayload}
}

// AppendCommit appends the messages of one commit to dst, tables in order
// of first appearance, each table's changes in commit order. Each header
// map has room for the publisher's compare-and-set and batch headers.
func (e *Encoder) AppendCommit(dst []CommitMsg, p Partition, logEpoch string, c storage.Commit) []CommitMsg {
	return e.appendCommit(dst, p, logEpoch, c, nil)
}

// AppendCommitReactions is AppendCommit for a commit known to have
// enqueued this many durable reactions (0 or more): its messages carry
// ce-reactions, so reaction runners skip the claim that a commit without
// reactions would otherwise cost them.
func (e *Encoder) AppendCommitReactions(dst []CommitMsg, p Partition, logEpoch string, c storage.Commit, reactions int) []CommitMsg {
	hv := hvNoReactions
	if reactions > 0 {
		hv = []string{strconv.Itoa(reactions)}
	}
	return e.appendCommit(dst, p, logEpoch, c, hv)
}

// appendCommit is AppendCommit with ce-reactions set to hReactions when
// it is not nil.
func (e *Encoder) appendCommit(dst []CommitMsg, p Partition, logEpoch string, c storage.Commit, hReactions []string) []CommitMsg {
	e.tables = e.tables[:0]
	for i := range c.Changes {
		if !slices.Contains(e.tables, c.Changes[i].Table) {
			e.tables = append(e.tables, c.Changes[i].Table)
		}
	}
	epoch := EscapeEpoch(logEpoch)
	hEpoch := []string{epoch}
	hSeq := []string{strconv.FormatInt(c.CommitSeq, 10)}
	hTime := []string{time.UnixMilli(c.CreatedAtMs).UTC().Format(timeLayoutMillis)}
	hTok := []string{p.token}
	for _, table := range e.tables {
		id := eventID(p.token, epoch, c.CommitSeq, table)
		hid := []string{id}
		// Room for the relay's compare-and-set and batch headers too, so
		// the map never grows.
		h := make(nats.Header, 19)
		h[HeaderSpecVersion] = hvSpecVersion
		h[HeaderID] = hid
		h[HeaderType] = hvTypeCommit
		h[HeaderSource] = e.source
		h[HeaderTime] = hTime
		h[HeaderSubject] = []string{p.token + "/" + table}
		h[HeaderContentType] = hvContentType
		h[HeaderPartition] = hTok
		h[HeaderLogEpoch] = hEpoch
		h[HeaderCommitSeq] = hSeq
		h[HeaderTable] = []string{table}
		h[jetstream.MsgIDHeader] = hid
		if p.Hashed() {
			h[HeaderSyncPartition] = []string{p.escaped}
		}
		if hReactions != nil {
			h[HeaderReactions] = hReactions
		}
		subject := e.names.commitSubject(p.token, table)
		body := e.body(p, logEpoch, c, table, bodyFull)
		// Headers are well under 4 KiB unless the partition is hashed
		// (its escaped id rides along): only near the limit count them.
		if e.maxPayload > 0 && len(body)+4096+len(p.escaped) > e.maxPayload {
			hsize := headerSize(h) + len(subject) + 256 // batch and CAS headers
			if hsize+len(body) > e.maxPayload {
				body = e.body(p, logEpoch, c, table, bodyNoRows)
			}
			if hsize+len(body) > e.maxPayload {
				body = e.body(p, logEpoch, c, table, bodyNoChanges)
			}
		}
		dst = append(dst, CommitMsg{
			Msg:       &nats.Msg{Subject: subject, Header: h, Data: body},
			CommitSeq: c.CommitSeq,
		})
	}
	return dst
}

func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

type bodyMode int

const (
	bodyFull bodyMode = iota
	bodyNoRows
	bodyNoChanges
)

// body renders the CommitBody JSON of one table's changes by hand: the
// field order is fixed and the rows come straight from the row codec.
func (e *Encoder) body(p Partition, logEpoch string, c storage.Commit, table string, mode bodyMode) []byte {
	n := 0
	for i := range c.Changes {
		if c.Changes[i].Table == table {
			n++
		}
	}
	b := make([]byte, 0, 256+n*128)
	b = append(b, `{"partition":`...)
	b = appendString(b, p.id)
	b = append(b, `,"logEpoch":`...)
	b = appendString(b, logEpoch)
	b = append(b, `,"commitSeq":`...)
	b = strconv.AppendInt(b, c.CommitSeq, 10)
	b = append(b, `,"createdAtMs":`...)
	b = strconv.AppendInt(b, c.CreatedAtMs, 10)
	b = append(b, `,"actorId":`...)
	b = appendString(b, c.ActorID)
	b = append(b, `,"clientId":`...)
	b = appendString(b, c.ClientID)
	b = append(b, `,"clientCommitId":`...)
	b = appendString(b, c.ClientCommitID)
	b = append(b, `,"schemaVersion":`...)
	b = strconv.AppendInt(b, int64(c.SchemaVersion), 10)
	b = append(b, `,"table":`...)
	b = appendString(b, table)
	b = append(b, `,"changeCount":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `,"changes":[`...)
	var t *schema.Table
	if e.schema != nil {
		t, _ = e.schema.Table(table)
	}
	if mode != bodyNoChanges {
		first := true
		for i := range c.Changes {
			ch := &c.Changes[i]
			if ch.Table != table {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = e.appendChange(b, t, ch, mode == bodyFull)
		}
	}
	b = append(b, ']')
	switch mode {
	case bodyNoRows:
		b = append(b, `,"rowsOmitted":true`...)
	case bodyNoChanges:
		b = append(b, `,"changesOmitted":true`...)
	}
	return append(b, '}')
}

func (e *Encoder) appendChange(b []byte, t *schema.Table, ch *storage.Change, rows bool) []byte {
	b = append(b, `{"rowId":`...)
	b = appendString(b, ch.RowID)
	if ch.Op == storage.OpDelete {
		b = append(b, `,"op":"delete"`...)
	} else {
		b = append(b, `,"op":"upsert","rowVersion":`...)
		b = strconv.AppendInt(b, ch.RowVersion, 10)
	}
	b = append(b, `,"scopes":{`...)
	e.keys = e.keys[:0]
	for k := range ch.Scopes {
		e.keys = append(e.keys, k)
	}
	slices.Sort(e.keys)
	for i, k := range e.keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, ch.Scopes[k])
	}
	b = append(b, '}')
	if rows && ch.Op != storage.OpDelete && ch.Row != nil {
		if row, ok := e.appendRow(b, t, ch.Row); ok {
			b = row
		} else {
			// Not decodable with the running schema (an unknown table,
			// or a row written under another schema version): carry the
			// codec bytes so nothing is lost.
			b = append(b, `,"rowPayload":"`...)
			b = base64.StdEncoding.AppendEncode(b, ch.Row)
			b = append(b, '"')
		}
	}
	return append(b, '}')
}

// appendRow appends ,"row":{column: value} or reports false, leaving b
// as it was.
func (e *Encoder) appendRow(b []byte, t *schema.Table, payload []byte) ([]byte, bool) {
	if t == nil {
		return b, false
	}
	vals, err := t.Codec.DecodeRow(payload, e.vals)
	if err != nil {
		return b, false
	}
	e.vals = vals
	cols := t.WireColumns()
	b = append(b, `,"row":{`...)
	for i, col := range cols {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, col.Name)
		b = append(b, ':')
		b = appendValue(b, col.Type, vals[i])
	}
	return append(b, '}'), true
}

func appendValue(b []byte, t ssp2.ColumnType, v ssp2.Value) []byte {
	if v.Null {
		return append(b, "null"...)
	}
	switch t {
	case ssp2.TypeString:
		return appendBytesString(b, v.Bytes)
	case ssp2.TypeInteger:
		return strconv.AppendInt(b, v.Int, 10)
	case ssp2.TypeFloat:
		if math.IsNaN(v.Float) || math.IsInf(v.Float, 0) {
			return append(b, "null"...) // JSON has no non-finite numbers
		}
		return strconv.AppendFloat(b, v.Float, 'g', -1, 64)
	case ssp2.TypeBoolean:
		return strconv.AppendBool(b, v.Bool)
	case ssp2.TypeJSON, ssp2.TypeBlobRef:
		// The row codec validated the JSON text when decoding.
		return append(b, v.Bytes...)
	default: // bytes, crdt
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v.Bytes)
		return append(b, '"')
	}
}

const hexLower = "0123456789abcdef"

// appendString appends s as a JSON string: ", \ and control characters
// escaped, invalid UTF-8 replaced by U+FFFD.
func appendString(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return appendEscaped(b, s)
}

// appendBytesString appends a string column value, which the row codec
// has already checked to be UTF-8.
func appendBytesString(b []byte, s []byte) []byte {
	if !utf8.Valid(s) {
		return appendString(b, string(s))
	}
	return appendEscaped(b, s)
}

func appendEscaped[T string | []byte](b []byte, s T) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexLower[c>>4], hexLower[c&0xF])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
