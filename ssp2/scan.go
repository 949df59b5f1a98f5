package ssp2

import (
	"encoding/binary"
	"errors"
)

// ErrStreamTooLarge is returned by StreamScanner.Push when a message grows
// past the scanner's limit before its END frame.
var ErrStreamTooLarge = errors.New("ssp2: message exceeds the stream limit")

const opScanStream = "scan message stream"

// StreamScanner reassembles one message from a byte stream that arrives in
// chunks at arbitrary boundaries (the realtime socket's round framing,
// SPEC.md §8.7). It checks the 8-byte envelope header and follows frame
// lengths to the END frame; it decodes no frame, so a message it returns
// may still fail DecodeMessage. A stream whose envelope header is invalid
// has no findable end: Push reports it and the stream must be abandoned.
type StreamScanner struct {
	kind MsgKind
	max  int
	buf  []byte
	next int // offset of the next frame header in buf
}

// NewStreamScanner returns a scanner for one message of kind, refusing
// messages longer than maxBytes.
func NewStreamScanner(kind MsgKind, maxBytes int) *StreamScanner {
	return &StreamScanner{kind: kind, max: maxBytes, next: envelopeSize}
}

// Started reports whether part of a message has been pushed.
func (s *StreamScanner) Started() bool { return len(s.buf) > 0 }

// Push appends chunk to the message. Once the END frame is in, it returns
// the whole message (done) and how many bytes of chunk followed END
// (excess); those bytes are not part of the message, and the scanner is
// ready for the next one. An invalid envelope header is an *Error
// (sync.invalid_request); a message over the limit is ErrStreamTooLarge.
func (s *StreamScanner) Push(chunk []byte) (msg []byte, excess int, done bool, err error) {
	if len(s.buf)+len(chunk) > s.max {
		s.reset()
		return nil, 0, false, ErrStreamTooLarge
	}
	had := len(s.buf)
	s.buf = append(s.buf, chunk...)
	if had < envelopeSize && len(s.buf) >= envelopeSize {
		if err := s.checkEnvelope(); err != nil {
			s.reset()
			return nil, 0, false, err
		}
	}
	for len(s.buf) >= envelopeSize && len(s.buf)-s.next >= frameHeaderSize {
		t := FrameType(s.buf[s.next])
		n := int(binary.LittleEndian.Uint32(s.buf[s.next+1:]))
		end := s.next + frameHeaderSize + n
		if end > s.max {
			s.reset()
			return nil, 0, false, ErrStreamTooLarge
		}
		if end > len(s.buf) {
			break
		}
		s.next = end
		if t == FrameEnd {
			msg = s.buf[:end:end]
			excess = len(s.buf) - end
			s.buf, s.next = nil, envelopeSize
			return msg, excess, true, nil
		}
	}
	return nil, 0, false, nil
}

func (s *StreamScanner) reset() { s.buf, s.next = nil, envelopeSize }

func (s *StreamScanner) checkEnvelope() *Error {
	b := s.buf
	switch {
	case string(b[:4]) != envelopeMagic:
		return decodeError(opScanStream, 0, "bad magic %q", b[:4])
	case !SupportedWireVersion(binary.LittleEndian.Uint16(b[4:6])):
		return decodeError(opScanStream, 4, "unsupported wire version %d", binary.LittleEndian.Uint16(b[4:6]))
	case MsgKind(b[6]) != s.kind:
		return decodeError(opScanStream, 6, "message kind %d is not %s", b[6], s.kind)
	case b[7] != 0:
		return decodeError(opScanStream, 7, "envelope flags 0x%02x are not zero", b[7])
	}
	return nil
}
