package ssp2

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"unicode/utf8"
)

// Realtime control messages (§8.1–§8.3, §8.5, §8.6.2): JSON text frames on
// the realtime socket. Server→client messages carry "event", the client ack
// carries "type". Numbers are integers within ±(2^53−1). A message whose
// event (or type) name is not defined here is tolerated: it parses to
// *UnknownControl without error. A defined one with the wrong shape is
// sync.invalid_request.

// ControlMessage is one control message: *Hello, *Wake, *Heartbeat, *Ack,
// *PresencePublish, *PresenceFanout, *PresenceError or *UnknownControl.
type ControlMessage interface {
	appendJSON(dst []byte) ([]byte, *Error)
}

// Hello is the server's connect handshake (§8.1).
type Hello struct {
	ProtocolVersion int64
	SessionID       string
	ActorID         string
	ClientID        string
	Cursor          int64 // the client record's cursor, -1 without one
	LatestCursor    int64
	RequiresSync    bool
	Timestamp       int64
}

// WakeReason is the closed set of wake-up reasons (§8.3).
type WakeReason string

// Wake-up reasons.
const (
	WakeDeltaTooLarge   WakeReason = "delta-too-large"
	WakeCatchupRequired WakeReason = "catchup-required"
	WakeResetRequired   WakeReason = "reset-required"
)

const (
	opParseControl   = "parse control message"
	opMarshalControl = "marshal control message"
)

func (r WakeReason) valid() bool {
	return r == WakeDeltaTooLarge || r == WakeCatchupRequired || r == WakeResetRequired
}

// Wake is the "sync" wake-up event (§8.3); requiresPull is always the
// literal true and so has no field.
type Wake struct {
	Cursor    int64
	Reason    WakeReason
	Timestamp int64
}

// Heartbeat is the server heartbeat (§8.5).
type Heartbeat struct {
	Timestamp int64
}

// Ack is the client's delta acknowledgement {"type":"ack","cursor":n} (§8.2).
type Ack struct {
	Cursor int64
}

// PresencePublish is a client's presence publish (§8.6.2). Doc is a JSON
// object, or nil for {"doc":null}, which leaves the scope key.
type PresencePublish struct {
	ScopeKey string
	Doc      json.RawMessage
}

// PresenceKind is the closed set of fanout kinds.
type PresenceKind string

// Presence fanout kinds.
const (
	PresenceJoin   PresenceKind = "join"
	PresenceUpdate PresenceKind = "update"
	PresenceLeave  PresenceKind = "leave"
)

// PresenceFanout tells a connection that a peer's presence changed. Doc is
// nil (rendered null) exactly for leave, a JSON object otherwise.
type PresenceFanout struct {
	ScopeKey  string
	Kind      PresenceKind
	ActorID   string
	ClientID  string
	Doc       json.RawMessage
	Timestamp int64
}

// PresenceErrorCode is the closed set of presence errors.
type PresenceErrorCode string

// Presence errors, sent to the publisher only.
const (
	PresenceTooLarge  PresenceErrorCode = "presence.too_large"
	PresenceForbidden PresenceErrorCode = "presence.forbidden"
)

// PresenceError rejects a publish, to the publisher only.
type PresenceError struct {
	ScopeKey  string
	Code      PresenceErrorCode
	Timestamp int64
}

// UnknownControl is a control message with an event or type name this
// version does not define. Raw is the message text, re-emitted verbatim.
type UnknownControl struct {
	Name string
	Raw  json.RawMessage
}

// ParseControlMessage parses one control message text. Presence events are
// told apart by their members: "error" marks a presence error, "kind" a
// fanout, neither a publish. Unknown members inside a known event's data
// are ignored.
func ParseControlMessage(b []byte) (ControlMessage, error) {
	m, err := parseControl(b)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func malformed(format string, args ...any) *Error {
	e := Errorf(CodeInvalidRequest, "malformed control message: "+format, args...)
	e.Op = opParseControl
	return e
}

type jsonFields map[string]json.RawMessage

func parseObject(raw []byte, what string) (jsonFields, *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, malformed("%s is not a JSON object", what)
	}
	var f jsonFields
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, malformed("%s is not a JSON object", what)
	}
	return f, nil
}

func parseControl(b []byte) (ControlMessage, *Error) {
	if !utf8.Valid(b) || !validJSON(b) {
		return nil, malformed("not a JSON document")
	}
	root, err := parseObject(b, "message")
	if err != nil {
		return nil, err
	}
	if _, ok := root["event"]; ok {
		name, err := fieldString(root, "event")
		if err != nil {
			return nil, err
		}
		switch name {
		case "hello", "sync", "heartbeat", "presence":
		default:
			return &UnknownControl{Name: name, Raw: b}, nil
		}
		data, err := parseObject(root["data"], name+".data")
		if err != nil {
			return nil, err
		}
		return parseEvent(name, data)
	}
	if _, ok := root["type"]; ok {
		name, err := fieldString(root, "type")
		if err != nil {
			return nil, err
		}
		if name != "ack" {
			return &UnknownControl{Name: name, Raw: b}, nil
		}
		c, err := fieldInt(root, "cursor", "ack")
		if err != nil {
			return nil, err
		}
		return &Ack{Cursor: c}, nil
	}
	return nil, malformed("neither an event nor a type")
}

func parseEvent(name string, d jsonFields) (ControlMessage, *Error) {
	var err *Error
	switch name {
	case "hello":
		h := &Hello{}
		h.ProtocolVersion, err = fieldInt(d, "protocolVersion", name)
		if err == nil {
			h.SessionID, err = fieldString(d, "sessionId")
		}
		if err == nil {
			h.ActorID, err = fieldString(d, "actorId")
		}
		if err == nil {
			h.ClientID, err = fieldString(d, "clientId")
		}
		if err == nil {
			h.Cursor, err = fieldInt(d, "cursor", name)
		}
		if err == nil {
			h.LatestCursor, err = fieldInt(d, "latestCursor", name)
		}
		if err == nil {
			h.RequiresSync, err = fieldBool(d, "requiresSync")
		}
		if err == nil {
			h.Timestamp, err = fieldInt(d, "timestamp", name)
		}
		return h, err
	case "sync":
		w := &Wake{}
		if string(d["requiresPull"]) != "true" {
			return nil, malformed("sync.data.requiresPull must be the literal true")
		}
		var reason string
		reason, err = fieldString(d, "reason")
		if err == nil && !WakeReason(reason).valid() {
			err = malformed("unknown wake reason %q", reason)
		}
		w.Reason = WakeReason(reason)
		if err == nil {
			w.Cursor, err = fieldInt(d, "cursor", name)
		}
		if err == nil {
			w.Timestamp, err = fieldInt(d, "timestamp", name)
		}
		return w, err
	case "heartbeat":
		h := &Heartbeat{}
		h.Timestamp, err = fieldInt(d, "timestamp", name)
		return h, err
	}
	return parsePresence(d)
}

func parsePresence(d jsonFields) (ControlMessage, *Error) {
	scopeKey, err := fieldString(d, "scopeKey")
	if err != nil {
		return nil, err
	}
	if _, ok := d["error"]; ok {
		p := &PresenceError{ScopeKey: scopeKey}
		var code string
		code, err = fieldString(d, "error")
		p.Code = PresenceErrorCode(code)
		if err == nil && p.Code != PresenceTooLarge && p.Code != PresenceForbidden {
			err = malformed("unknown presence error %q", code)
		}
		if err == nil {
			p.Timestamp, err = fieldInt(d, "timestamp", "presence")
		}
		return p, err
	}
	if _, ok := d["kind"]; ok {
		p := &PresenceFanout{ScopeKey: scopeKey}
		var kind string
		kind, err = fieldString(d, "kind")
		p.Kind = PresenceKind(kind)
		if err == nil && p.Kind != PresenceJoin && p.Kind != PresenceUpdate && p.Kind != PresenceLeave {
			err = malformed("unknown presence kind %q", kind)
		}
		if err == nil {
			p.ActorID, err = fieldString(d, "actorId")
		}
		if err == nil {
			p.ClientID, err = fieldString(d, "clientId")
		}
		if err == nil {
			p.Doc, err = fieldDoc(d)
		}
		if err == nil && (p.Doc == nil) != (p.Kind == PresenceLeave) {
			err = malformed("presence doc must be null exactly for leave (kind %q)", kind)
		}
		if err == nil {
			p.Timestamp, err = fieldInt(d, "timestamp", "presence")
		}
		return p, err
	}
	if scopeKey == "" {
		return nil, malformed("presence.data.scopeKey is empty")
	}
	doc, err := fieldDoc(d)
	if err != nil {
		return nil, err
	}
	return &PresencePublish{ScopeKey: scopeKey, Doc: doc}, nil
}

func fieldString(d jsonFields, k string) (string, *Error) {
	raw := d[k]
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", malformed("%s must be a string", k)
	}
	return s, nil
}

func fieldBool(d jsonFields, k string) (bool, *Error) {
	switch string(d[k]) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, malformed("%s must be a boolean", k)
}

// fieldInt accepts a JSON number whose value is an integer within
// ±(2^53−1), as JavaScript's Number.isSafeInteger judges it (so 64.0 and
// 6.4e1 pass, 57.5 does not).
func fieldInt(d jsonFields, k, event string) (int64, *Error) {
	raw := d[k]
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, malformed("%s.%s must be an integer", event, k)
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > MaxSafeInt {
		return 0, malformed("%s.%s must be an integer within ±(2^53−1), not %s", event, k, raw)
	}
	return int64(f), nil
}

// fieldDoc reads a required doc member: a JSON object (kept raw) or null.
func fieldDoc(d jsonFields) (json.RawMessage, *Error) {
	raw, ok := d["doc"]
	switch {
	case !ok:
		return nil, malformed("presence doc is missing")
	case string(raw) == "null":
		return nil, nil
	case len(raw) > 0 && raw[0] == '{':
		return raw, nil
	}
	return nil, malformed("presence doc must be a JSON object or null")
}

// MarshalControl encodes m with its members in the order the spec shows,
// strings escaped as JSON.stringify does. It refuses values a parser would
// reject.
func MarshalControl(m ControlMessage) ([]byte, error) {
	if m == nil || reflect.ValueOf(m).IsNil() {
		return nil, encodeError(opMarshalControl, "nil control message")
	}
	b, err := m.appendJSON(nil)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// controlWriter appends members and keeps the first refusal.
type controlWriter struct {
	b   []byte
	err *Error
}

func (w *controlWriter) lit(s string) { w.b = append(w.b, s...) }

func (w *controlWriter) str(k, v string) {
	if !utf8.ValidString(v) {
		w.refuse("%s is not valid UTF-8", k)
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
	w.b = appendJSString(w.b, v)
}

func (w *controlWriter) int(k string, v int64) {
	if !safeInt(v) {
		w.refuse("%s %d outside ±(2^53−1)", k, v)
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
	w.b = strconv.AppendInt(w.b, v, 10)
}

func (w *controlWriter) doc(v json.RawMessage) {
	w.b = append(w.b, `"doc":`...)
	if v == nil {
		w.b = append(w.b, "null"...)
		return
	}
	t := bytes.TrimSpace(v)
	if len(t) == 0 || t[0] != '{' || !utf8.Valid(t) || !validJSON(t) {
		w.refuse("doc is not a JSON object")
	}
	w.b = append(w.b, t...)
}

func (w *controlWriter) refuse(format string, args ...any) {
	if w.err == nil {
		w.err = encodeError(opMarshalControl, format, args...)
	}
}

func (w *controlWriter) result() ([]byte, *Error) {
	if w.err != nil {
		return nil, w.err
	}
	return w.b, nil
}

func (h *Hello) appendJSON(dst []byte) ([]byte, *Error) {
	w := controlWriter{b: dst}
	w.lit(`{"event":"hello","data":{`)
	w.int("protocolVersion", h.ProtocolVersion)
	w.lit(",")
	w.str("sessionId", h.SessionID)
	w.lit(",")
	w.str("actorId", h.ActorID)
	w.lit(",")
	w.str("clientId", h.ClientID)
	w.lit(",")
	w.int("cursor", h.Cursor)
	w.lit(",")
	w.int("latestCursor", h.LatestCursor)
	w.lit(`,"requiresSync":` + strconv.FormatBool(h.RequiresSync) + ",")
	w.int("timestamp", h.Timestamp)
	w.lit("}}")
	return w.result()
}

func (x *Wake) appendJSON(dst []byte) ([]byte, *Error) {
	w := controlWriter{b: dst}
	if !x.Reason.valid() {
		w.refuse("unknown wake reason %q", x.Reason)
	}
	w.lit(`{"event":"sync","data":{`)
	w.int("cursor", x.Cursor)
	w.lit(`,"requiresPull":true,`)
	w.str("reason", string(x.Reason))
	w.lit(",")
	w.int("timestamp", x.Timestamp)
	w.lit("}}")
	return w.result()
}

func (x *Heartbeat) appendJSON(dst []byte) ([]byte, *Error) {
	w := controlWriter{b: dst}
	w.lit(`{"event":"heartbeat","data":{`)
	w.int("timestamp", x.Timestamp)
	w.lit("}}")
	return w.result()
}

func (x *Ack) appendJSON(dst []byte) ([]byte, *Error) {
	w := controlWriter{b: dst}
	w.lit(`{"type":"ack",`)
	w.int("cursor", x.Cursor)
	w.lit("}")
	return w.result()
}

func (x *PresencePublish) appendJSON(dst []byte) ([]byte, *Error) {
	w := controlWriter{b: dst}
	if x.ScopeKey == "" {
		w.refuse("presence scopeKey is empty")
	}
	w.lit(`{"event":"presence","data":{`)
	w.str("scopeKey", x.ScopeKey)
	w.lit(",")
	w.doc(x.Doc)
	w.lit("}}")
	return w.result()
}

func (x *PresenceFanout) appendJSON(dst []byte) ([]byte, *Error) {
	w := controlWriter{b: dst}
	switch x.Kind {
	case PresenceJoin, PresenceUpdate, PresenceLeave:
	default:
		w.refuse("unknown presence kind %q", x.Kind)
	}
	if (x.Doc == nil) != (x.Kind == PresenceLeave) {
		w.refuse("presence doc must be null exactly for leave")
	}
	w.lit(`{"event":"presence","data":{`)
	w.str("scopeKey", x.ScopeKey)
	w.lit(",")
	w.str("kind", string(x.Kind))
	w.lit(",")
	w.str("actorId", x.ActorID)
	w.lit(",")
	w.str("clientId", x.ClientID)
	w.lit(",")
	w.doc(x.Doc)
	w.lit(",")
	w.int("timestamp", x.Timestamp)
	w.lit("}}")
	return w.result()
}

func (x *PresenceError) appendJSON(dst []byte) ([]byte, *Error) {
	w := controlWriter{b: dst}
	if x.Code != PresenceTooLarge && x.Code != PresenceForbidden {
		w.refuse("unknown presence error %q", x.Code)
	}
	w.lit(`{"event":"presence","data":{`)
	w.str("scopeKey", x.ScopeKey)
	w.lit(",")
	w.str("error", string(x.Code))
	w.lit(",")
	w.int("timestamp", x.Timestamp)
	w.lit("}}")
	return w.result()
}

func (x *UnknownControl) appendJSON(dst []byte) ([]byte, *Error) {
	if !utf8.Valid(x.Raw) || !validJSON(x.Raw) {
		return nil, encodeError(opMarshalControl, "unknown control message is not JSON")
	}
	return append(dst, x.Raw...), nil
}

// MarshalJSON methods let encoding/json embed control messages; they
// produce the same text as MarshalControl.

func (h *Hello) MarshalJSON() ([]byte, error)           { return MarshalControl(h) }
func (x *Wake) MarshalJSON() ([]byte, error)            { return MarshalControl(x) }
func (x *Heartbeat) MarshalJSON() ([]byte, error)       { return MarshalControl(x) }
func (x *Ack) MarshalJSON() ([]byte, error)             { return MarshalControl(x) }
func (x *PresencePublish) MarshalJSON() ([]byte, error) { return MarshalControl(x) }
func (x *PresenceFanout) MarshalJSON() ([]byte, error)  { return MarshalControl(x) }
func (x *PresenceError) MarshalJSON() ([]byte, error)   { return MarshalControl(x) }
