package ssp2

import (
	"io"
	"sync"
)

const opEncodeResponse = "encode response"

// ResponseEncoder streams a response message frame by frame (§1.4): it
// never holds more than the frame being written. Each WriteFrame makes
// exactly one Write call carrying that frame's complete bytes (the first
// also carries the 8-byte envelope header), and End makes one Write with
// the END frame, so a WebSocket binding can turn every Write into one
// 0x01-tagged message and the last one ends exactly at END (§8.7).
//
// The encoder enforces the response grammar as it goes: a frame that would
// make the response illegal is refused with an *Error and nothing is
// written, leaving the encoder usable (a server that hits a bug can still
// write ERROR and END). A failed Write is sticky.
type ResponseEncoder struct {
	w       io.Writer
	version uint16
	buf     []byte
	pooled  *[]byte // the framePool entry buf came from, reused to return it
	g       grammar
	err     error // sticky: a failed Write or a bad version
	ended   bool
	written int64
}

// NewResponseEncoder returns an encoder writing a response of wireVersion
// to w. An unsupported version makes every call fail.
func NewResponseEncoder(w io.Writer, wireVersion uint16) *ResponseEncoder {
	e := &ResponseEncoder{w: w, version: wireVersion, g: newGrammar(KindResponse)}
	if !SupportedWireVersion(wireVersion) {
		e.err = encodeError(opEncodeResponse, "unsupported wire version %d", wireVersion)
	}
	return e
}

// framePool recycles the frame buffers of ended responses: a server
// inlining a large segment into every bootstrap response would otherwise
// allocate (and collect) one segment-sized buffer per response.
var framePool sync.Pool // of *[]byte

// maxPooledFrame bounds the buffers kept for reuse.
const maxPooledFrame = 4 << 20

// endFrameBytes is the END frame's bytes, shared: a writer must not modify
// what it is given (io.Writer), and a literal passed to one escapes.
var endFrameBytes = [...]byte{byte(FrameEnd), 0, 0, 0, 0}

// errEnded is returned for writes after End.
var errEnded = encodeError(opEncodeResponse, "response already ended")

// WriteFrame encodes f and writes it. The first frame must be RESP_HEADER.
func (e *ResponseEncoder) WriteFrame(f Frame) error {
	if e.err != nil {
		return e.err
	}
	if e.ended {
		return errEnded
	}
	if frameIsNil(f) {
		return encodeError(opEncodeResponse, "nil frame")
	}
	if v := e.g.check(f); v != "" {
		return encodeError(opEncodeResponse, "%s", v)
	}
	if e.buf == nil {
		if p, ok := framePool.Get().(*[]byte); ok {
			e.buf, e.pooled = *p, p
		}
	}
	buf := e.buf[:0]
	if e.g.frames == 0 {
		buf = append(buf, envelopeMagic...)
		buf = appendU16(buf, e.version)
		buf = append(buf, byte(KindResponse), 0)
	}
	buf, err := appendFrame(buf, f, e.version, opEncodeResponse)
	e.buf = buf[:0]
	if err != nil {
		return err
	}
	if err := e.write(buf); err != nil {
		return err
	}
	e.g.apply(f)
	return nil
}

// End checks that the response may end here (no open subscription section
// unless after ERROR) and writes the END frame.
func (e *ResponseEncoder) End() error {
	if e.err != nil {
		return e.err
	}
	if e.ended {
		return errEnded
	}
	if v := e.g.end(); v != "" {
		return encodeError(opEncodeResponse, "%s", v)
	}
	if err := e.write(endFrameBytes[:]); err != nil {
		return err
	}
	e.ended = true
	// The writer returned: nothing holds the frame buffer any more.
	if b := e.buf[:0]; b != nil && cap(b) <= maxPooledFrame {
		// The pointer the buffer came in, when it did, carries it back.
		p := e.pooled
		if p == nil {
			p = new([]byte)
		}
		*p = b
		framePool.Put(p)
	}
	e.buf, e.pooled = nil, nil
	return nil
}

// BytesWritten is the number of response bytes written so far.
func (e *ResponseEncoder) BytesWritten() int64 { return e.written }

// InSubscription reports whether a SUB_START is open, so a server aborting
// mid-stream knows it must write ERROR (not just END).
func (e *ResponseEncoder) InSubscription() bool { return e.g.inSub }

func (e *ResponseEncoder) write(p []byte) error {
	n, err := e.w.Write(p)
	e.written += int64(n)
	if err == nil && n != len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		e.err = &Error{Code: CodeInternalError, Op: opEncodeResponse, Message: "write response", err: err}
		return e.err
	}
	return nil
}
