package ssp2

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
)

// MsgKind is the envelope's message kind byte.
type MsgKind uint8

// Message kinds.
const (
	KindRequest  MsgKind = 1
	KindResponse MsgKind = 2
)

var msgKindNames = [...]string{KindRequest: "request", KindResponse: "response"}

func (k MsgKind) String() string { return enumString("MsgKind", msgKindNames[:], k) }

// enumString names a one-byte enum value from its table of spec names
// (indexed by value, "" where no value is defined), or Type(n) for a value
// the table does not name.
func enumString[T ~uint8](typ string, names []string, v T) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, uint8(v))
}

// Envelope constants (§1.2).
const (
	envelopeMagic   = "SSP2"
	envelopeSize    = 8 // magic, wireVersion, msgKind, flags
	frameHeaderSize = 5 // type u8, length u32
)

// Wire versions this codec speaks. Version 3 changed the push payload to
// the sparse row (SparseCodec) and added conflictColumns to conflict
// records; every other layout is the version 2 one.
const (
	MinWireVersion uint16 = 1
	MaxWireVersion uint16 = 3
)

// SupportedWireVersion reports whether v is a wire version this codec
// speaks (1, 2 and 3).
func SupportedWireVersion(v uint16) bool { return v >= MinWireVersion && v <= MaxWireVersion }

// SparsePayloads reports whether push payloads of wire version v are sparse
// rows (version 3) rather than full rows (versions 1 and 2).
func SparsePayloads(v uint16) bool { return v >= 3 }

// WireWindow is the closed range of wire versions a server accepts. A
// request outside it is refused as an unknown version before any frame is
// read (§1.2, §9).
type WireWindow struct {
	Min, Max uint16
}

// DefaultWireWindow serves version 2 and version 3 clients side by side.
var DefaultWireWindow = WireWindow{Min: 2, Max: 3}

// codecWindow is every version the codec speaks: what DecodeMessage
// accepts.
var codecWindow = WireWindow{Min: MinWireVersion, Max: MaxWireVersion}

// preV3Window is what DecodeRequest accepts: the versions whose push
// payloads are full rows, so a server that has not adopted version 3 push
// semantics never sees a sparse payload.
var preV3Window = WireWindow{Min: 1, Max: 2}

// Accepts reports whether v is inside the window.
func (w WireWindow) Accepts(v uint16) bool { return v >= w.Min && v <= w.Max }

// Validate refuses an empty window or one reaching past the versions this
// codec speaks.
func (w WireWindow) Validate() error {
	switch {
	case !SupportedWireVersion(w.Min):
		return fmt.Errorf("wire window: min %d is not a supported wire version (%d..%d)", w.Min, MinWireVersion, MaxWireVersion)
	case !SupportedWireVersion(w.Max):
		return fmt.Errorf("wire window: max %d is not a supported wire version (%d..%d)", w.Max, MinWireVersion, MaxWireVersion)
	case w.Min > w.Max:
		return fmt.Errorf("wire window: min %d is above max %d", w.Min, w.Max)
	}
	return nil
}

func (w WireWindow) String() string { return fmt.Sprintf("[%d, %d]", w.Min, w.Max) }

// Message is one SSP2 message: the envelope fields and its frames in wire
// order, END excluded. Unknown frames stay in place as *Unknown.
type Message struct {
	WireVersion uint16
	Kind        MsgKind
	Frames      []Frame
}

const opDecodeMessage = "decode message"

// DecodeMessage decodes and fully validates one message: envelope, framing,
// every frame's layout, primitives, enums, presence ties and the request or
// response grammar. Byte fields (payloads, rows, raw JSON, unknown frame
// payloads) alias b. Failures are *Error with code sync.invalid_request, or
// sync.empty_commit for a PUSH_COMMIT without operations.
func DecodeMessage(b []byte) (*Message, error) {
	m, err := decodeMessage(b, codecWindow)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// decodeMessage decodes b, refusing a wire version outside window before
// reading any frame.
func decodeMessage(b []byte, window WireWindow) (*Message, *Error) {
	if len(b) < envelopeSize {
		return nil, decodeError(opDecodeMessage, 0, "truncated envelope header: %d bytes", len(b))
	}
	if string(b[:4]) != envelopeMagic {
		return nil, decodeError(opDecodeMessage, 0, "bad magic %q", b[:4])
	}
	m := &Message{
		WireVersion: binary.LittleEndian.Uint16(b[4:6]),
		Kind:        MsgKind(b[6]),
	}
	if !SupportedWireVersion(m.WireVersion) || !window.Accepts(m.WireVersion) {
		return nil, decodeError(opDecodeMessage, 4, "unsupported wire version %d (accepted: %s)", m.WireVersion, window)
	}
	if m.Kind != KindRequest && m.Kind != KindResponse {
		return nil, decodeError(opDecodeMessage, 6, "unknown message kind %d", b[6])
	}
	if b[7] != 0 {
		return nil, decodeError(opDecodeMessage, 7, "envelope flags 0x%02x are not zero", b[7])
	}
	g := newGrammar(m.Kind)
	off := envelopeSize
	for {
		if len(b)-off < frameHeaderSize {
			return nil, decodeError(opDecodeMessage, off, "truncated message: no END frame")
		}
		t := FrameType(b[off])
		n := binary.LittleEndian.Uint32(b[off+1:])
		start := off + frameHeaderSize
		if uint64(n) > uint64(len(b)-start) {
			return nil, decodeError(opDecodeMessage, off+1, "frame length %d exceeds the remaining %d bytes", n, len(b)-start)
		}
		if t == FrameEnd {
			if n != 0 {
				return nil, decodeError(opDecodeMessage, off+1, "END frame length %d is not zero", n)
			}
			if start != len(b) {
				return nil, decodeError(opDecodeMessage, start, "%d bytes after END", len(b)-start)
			}
			if v := g.end(); v != "" {
				return nil, decodeError(opDecodeMessage, off, "%s", v)
			}
			return m, nil
		}
		payload := b[start : start+int(n) : start+int(n)]
		f, err := decodeFrame(t, payload, start, m)
		if err != nil {
			return nil, err
		}
		if v := g.check(f); v != "" {
			return nil, decodeError(opDecodeMessage, off, "%s", v)
		}
		g.apply(f)
		m.Frames = append(m.Frames, f)
		off = start + int(n)
	}
}

// decodeFrame decodes one frame payload of message m. A type registered
// for the other kind is an error; an unregistered type becomes *Unknown.
func decodeFrame(t FrameType, payload []byte, base int, m *Message) (Frame, *Error) {
	k := t.kind()
	if k == 0 {
		return &Unknown{Type: t, Payload: payload}, nil
	}
	if k != m.Kind {
		return nil, decodeError(opDecodeMessage, base-frameHeaderSize, "%s is a %s frame and illegal in a %s", t, k, m.Kind)
	}
	r := newReader(payload, base, opDecodeMessage)
	var f Frame
	switch t {
	case FrameReqHeader:
		f = decodeReqHeader(&r, m.WireVersion)
	case FramePushCommit:
		f = decodePushCommit(&r)
	case FramePullHeader:
		f = decodePullHeader(&r)
	case FrameSubscription:
		f = decodeSubscription(&r)
	case FrameRespHeader:
		f = decodeRespHeader(&r, m.WireVersion)
	case FrameLease:
		f = decodeLease(&r)
	case FramePushResult:
		f = decodePushResult(&r, m.WireVersion)
	case FramePushResultDetails:
		f = decodePushResultDetails(&r)
	case FrameSubStart:
		f = decodeSubStart(&r)
	case FrameCommit:
		f = decodeCommit(&r)
	case FrameSegmentRef:
		f = decodeSegmentRef(&r)
	case FrameSegmentInline:
		f = decodeSegmentInline(&r)
	case FrameSubEnd:
		f = decodeSubEnd(&r)
	case FrameError:
		f = decodeErrorFrame(&r)
	}
	r.done(t.String() + " payload")
	if r.err != nil {
		return nil, r.err
	}
	return f, nil
}

const opEncodeMessage = "encode message"

// AppendEncode appends the encoding of m to dst. It refuses (with an *Error,
// code sync.internal_error, and dst unchanged) anything a decoder would
// reject: an unsupported version or kind, an illegal frame order, a field
// out of range, a violated presence tie, invalid UTF-8 or JSON, an Unknown
// frame under a registered type.
func (m *Message) AppendEncode(dst []byte) ([]byte, error) {
	start := len(dst)
	if !SupportedWireVersion(m.WireVersion) {
		return dst, encodeError(opEncodeMessage, "unsupported wire version %d", m.WireVersion)
	}
	if m.Kind != KindRequest && m.Kind != KindResponse {
		return dst, encodeError(opEncodeMessage, "unknown message kind %d", m.Kind)
	}
	dst = append(dst, envelopeMagic...)
	dst = appendU16(dst, m.WireVersion)
	dst = append(dst, byte(m.Kind), 0)
	g := newGrammar(m.Kind)
	for i, f := range m.Frames {
		if frameIsNil(f) {
			return dst[:start], encodeError(opEncodeMessage, "frame %d is nil", i)
		}
		if v := g.check(f); v != "" {
			return dst[:start], encodeError(opEncodeMessage, "frame %d: %s", i, v)
		}
		g.apply(f)
		var err *Error
		if dst, err = appendFrame(dst, f, m.WireVersion, opEncodeMessage); err != nil {
			return dst[:start], err
		}
	}
	if v := g.end(); v != "" {
		return dst[:start], encodeError(opEncodeMessage, "%s", v)
	}
	return append(dst, byte(FrameEnd), 0, 0, 0, 0), nil
}

// appendFrame appends one frame (header and payload), patching the length
// once the payload is known. On refusal dst comes back at its old length.
func appendFrame(dst []byte, f Frame, v uint16, op string) ([]byte, *Error) {
	start := len(dst)
	w := writer{b: append(dst, byte(f.FrameType()), 0, 0, 0, 0), op: op}
	f.appendPayload(&w, v)
	if w.err != nil {
		return w.b[:start], w.err
	}
	n := len(w.b) - start - frameHeaderSize
	if uint64(n) > math.MaxUint32 {
		return w.b[:start], encodeError(op, "%s payload of %d bytes exceeds the u32 frame length", f.FrameType(), n)
	}
	binary.LittleEndian.PutUint32(w.b[start+1:], uint32(n))
	return w.b, nil
}

// frameIsNil catches nil interfaces and typed nil pointers, which would
// otherwise panic inside an encoder.
func frameIsNil(f Frame) bool {
	if f == nil {
		return true
	}
	v := reflect.ValueOf(f)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Request is a decoded request in the shape a server consumes it. Its
// operation payloads are full rows (RowCodec) below wire version 3 and
// sparse rows (SparseCodec) from version 3 on; see SparsePayloads.
type Request struct {
	WireVersion   uint16
	Header        *ReqHeader
	Commits       []*PushCommit   // in client commit order
	Pull          *PullHeader     // nil for a push-only request
	Subscriptions []*Subscription // in request order
	// Message holds every frame in wire order, unknown frames included.
	Message *Message
}

// DecodeRequest decodes b as a request message of wire version 1 or 2 (see
// DecodeMessage) and sorts its frames into a Request. A response message
// is an error. A server that serves version 3 uses DecodeRequestWindow.
func DecodeRequest(b []byte) (*Request, error) { return DecodeRequestWindow(b, preV3Window) }

// DecodeRequestWindow is DecodeRequest for a server that accepts the wire
// versions of window (DefaultWireWindow: 2 and 3): any other version is
// sync.invalid_request, found before a frame is read.
func DecodeRequestWindow(b []byte, window WireWindow) (*Request, error) {
	m, err := decodeMessage(b, window)
	if err != nil {
		return nil, err
	}
	if m.Kind != KindRequest {
		return nil, decodeError(opDecodeMessage, 6, "expected a request, got a %s", m.Kind)
	}
	req := &Request{WireVersion: m.WireVersion, Message: m}
	for _, f := range m.Frames {
		switch f := f.(type) {
		case *ReqHeader:
			req.Header = f
		case *PushCommit:
			req.Commits = append(req.Commits, f)
		case *PullHeader:
			req.Pull = f
		case *Subscription:
			req.Subscriptions = append(req.Subscriptions, f)
		}
	}
	return req, nil
}
