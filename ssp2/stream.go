package ssp2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// MessageReader decodes a message from an io.Reader frame by frame (§1.4):
// it holds the envelope state, the grammar state and the one frame being
// decoded, never the whole message. Each frame is decoded and checked
// against the grammar exactly as DecodeMessage checks it, so a streaming
// reader accepts the same messages as a buffered one.
//
// Byte fields of a returned frame (rows, payloads, raw JSON) alias the
// reader's buffer and stay valid only until the next call to Next.
type MessageReader struct {
	r       io.Reader
	m       Message // envelope fields; Frames stays empty
	g       grammar
	off     int // absolute offset of the next unread byte
	buf     []byte
	err     error // sticky
	ended   bool
	hdr     [frameHeaderSize]byte
	trailer [1]byte
}

const opReadMessage = "read message"

// NewMessageReader reads and checks the 8-byte envelope header from r.
func NewMessageReader(r io.Reader) (*MessageReader, error) {
	mr := &MessageReader{r: r}
	var env [envelopeSize]byte
	if n, err := io.ReadFull(r, env[:]); err != nil {
		return nil, mr.readError(n, err, "envelope header")
	}
	mr.off = envelopeSize
	if string(env[:4]) != envelopeMagic {
		return nil, decodeError(opReadMessage, 0, "bad magic %q", env[:4])
	}
	mr.m.WireVersion = binary.LittleEndian.Uint16(env[4:6])
	mr.m.Kind = MsgKind(env[6])
	if !SupportedWireVersion(mr.m.WireVersion) {
		return nil, decodeError(opReadMessage, 4, "unsupported wire version %d", mr.m.WireVersion)
	}
	if mr.m.Kind != KindRequest && mr.m.Kind != KindResponse {
		return nil, decodeError(opReadMessage, 6, "unknown message kind %d", env[6])
	}
	if env[7] != 0 {
		return nil, decodeError(opReadMessage, 7, "envelope flags 0x%02x are not zero", env[7])
	}
	mr.g = newGrammar(mr.m.Kind)
	return mr, nil
}

// WireVersion is the message's wire version.
func (mr *MessageReader) WireVersion() uint16 { return mr.m.WireVersion }

// Kind is the message kind.
func (mr *MessageReader) Kind() MsgKind { return mr.m.Kind }

// Next decodes the next frame. After END it checks that nothing follows
// and returns io.EOF. A truncated stream, a malformed frame or a grammar
// violation is an *Error with code sync.invalid_request (sync.empty_commit
// for a PUSH_COMMIT without operations); a failed read of the underlying
// reader is returned wrapped, without an SSP2 code: it is the transport's
// failure, not the peer's. Errors are sticky.
func (mr *MessageReader) Next() (Frame, error) {
	if mr.err != nil {
		return nil, mr.err
	}
	if mr.ended {
		return nil, io.EOF
	}
	f, err := mr.next()
	if err != nil {
		mr.err = err
		return nil, err
	}
	return f, nil
}

func (mr *MessageReader) next() (Frame, error) {
	at := mr.off
	if n, err := io.ReadFull(mr.r, mr.hdr[:]); err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return nil, decodeError(opReadMessage, at, "truncated message: no END frame")
		}
		return nil, mr.readError(n, err, "frame header")
	}
	mr.off += frameHeaderSize
	t := FrameType(mr.hdr[0])
	n := binary.LittleEndian.Uint32(mr.hdr[1:])
	if t == FrameEnd {
		if n != 0 {
			return nil, decodeError(opReadMessage, at+1, "END frame length %d is not zero", n)
		}
		if k, _ := io.ReadFull(mr.r, mr.trailer[:]); k != 0 {
			return nil, decodeError(opReadMessage, mr.off, "bytes after END")
		}
		if v := mr.g.end(); v != "" {
			return nil, decodeError(opReadMessage, at, "%s", v)
		}
		mr.ended = true
		return nil, io.EOF
	}
	payload, err := mr.read(int(n))
	if err != nil {
		return nil, err
	}
	start := mr.off
	mr.off += int(n)
	f, derr := decodeFrame(t, payload, start, &mr.m)
	if derr != nil {
		derr.Op = opReadMessage
		return nil, derr
	}
	if v := mr.g.check(f); v != "" {
		return nil, decodeError(opReadMessage, at, "%s", v)
	}
	mr.g.apply(f)
	return f, nil
}

// read returns the next n bytes in the reader's buffer. The buffer grows
// with the data actually received, so a hostile frame length costs no
// more memory than the stream delivers.
func (mr *MessageReader) read(n int) ([]byte, error) {
	const chunk = 1 << 20
	buf := mr.buf[:0]
	for len(buf) < n {
		want := min(n-len(buf), chunk)
		buf = slices.Grow(buf, want)
		k, err := io.ReadFull(mr.r, buf[len(buf):len(buf)+want])
		buf = buf[:len(buf)+k]
		if err != nil {
			mr.buf = buf
			return nil, mr.readError(len(buf), err, "frame payload")
		}
	}
	mr.buf = buf
	return buf[:n:n], nil
}

// readError classifies a failed read of what after got bytes: running out
// of input is truncation; anything else is the transport's failure.
func (mr *MessageReader) readError(got int, err error, what string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return decodeError(opReadMessage, mr.off+got, "truncated message: incomplete %s", what)
	}
	return fmt.Errorf("%s: %s: %w", opReadMessage, what, err)
}

// InSubscription reports whether a SUB_START is open: frames up to its
// SUB_END belong to that subscription.
func (mr *MessageReader) InSubscription() bool { return mr.g.inSub }
