package realtime

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/ssp2"
)

// roundChunkBytes is how many response bytes a round collects before it
// sends them as one 0x01 message (a flush between sections and the END
// send earlier). Chunk boundaries carry no meaning (SPEC.md §8.7).
const roundChunkBytes = 32 << 10

// chunkPool recycles the chunk buffers of finished rounds: a reconnect
// storm's catch-up rounds each carry a bootstrap segment, which would
// otherwise be one segment-sized allocation per round.
var chunkPool sync.Pool // of *[]byte

// maxPooledChunk bounds the buffers kept for reuse.
const maxPooledChunk = 4 << 20

// onBinary handles a binary message: a 0x01 chunk of a round's request.
// Any other tag, a chunk while a response streams, bytes past END or an
// invalid envelope header close the connection (1008); a request over
// MaxRequestBytes closes it with 1009.
func (s *session) onBinary(b []byte) {
	if len(b) == 0 || b[0] != tagRound {
		s.close(statusViolation, "unknown channel tag")
		return
	}
	s.mu.Lock()
	streaming := s.inRound
	s.mu.Unlock()
	if streaming {
		s.close(statusViolation, "round bytes while a response is in flight")
		return
	}
	if s.scanner == nil {
		s.scanner = ssp2.NewStreamScanner(ssp2.KindRequest, int(s.h.cfg.MaxRequestBytes))
	}
	msg, excess, done, err := s.scanner.Push(b[1:])
	switch {
	case errors.Is(err, ssp2.ErrStreamTooLarge):
		s.close(statusTooBig, "request too large")
		return
	case err != nil:
		s.close(statusViolation, "not an SSP2 request")
		return
	case !done:
		return
	case excess > 0:
		s.close(statusViolation, "bytes past the request's END")
		return
	}
	if s.roundDone != nil {
		<-s.roundDone // the previous round's registration refresh
	}
	s.mu.Lock()
	s.inRound = true
	s.mu.Unlock()
	done2 := make(chan struct{})
	s.roundDone = done2
	go s.runRound(msg, done2)
}

// runRound runs one request through the engine, exactly as POST /sync
// does, and streams the response as 0x01 chunks.
func (s *session) runRound(body []byte, done chan struct{}) {
	defer close(done)
	s.h.metrics.Rounds.Add(1)
	w := &roundWriter{s: s, tr: frameTracker{skip: 8}}
	// The engine decodes the request once, exactly as for POST /sync, and
	// hands it here before it runs.
	err := s.h.cfg.Engine.SyncChecked(s.ctx, s.ident, body, w, func(req *ssp2.Request) error {
		if req.Header.ClientID != s.clientID {
			return ssp2.Errorf(ssp2.CodeInvalidClientID, "a socket round's clientId must be the connection's")
		}
		if req.Pull != nil {
			// Registrations follow the record the round just wrote,
			// before its END leaves: what the client sends after END is
			// judged by them.
			w.beforeEnd = func() {
				if !w.tr.sawError {
					s.refresh(s.ctx, false)
				}
			}
		}
		return nil
	})
	if err != nil && !w.started {
		s.writeFailure(w, binary.LittleEndian.Uint16(body[4:6]), err)
	}
	if !w.ended || w.err != nil {
		// The response cannot be finished: the stream has no end the
		// client could find.
		s.close(statusInternal, "sync round failed")
	}
}

// writeFailure answers a request-level failure as RESP_HEADER, ERROR, END
// (what HTTP answers as JSON with a status).
func (s *session) writeFailure(w *roundWriter, wire uint16, err error) {
	f := ssp2.NewErrorFrame(err)
	if f.Code == string(ssp2.CodeInternalError) {
		s.h.log.Error("realtime: sync round failed", "partition", s.ident.Partition, "client", s.clientID, "err", err)
		f.Message, f.Details = "internal error", nil
	}
	h := &ssp2.RespHeader{}
	if wire >= 2 {
		s.mu.Lock()
		h.LogEpoch = s.epoch
		s.mu.Unlock()
	}
	enc := ssp2.NewResponseEncoder(w, wire)
	if enc.WriteFrame(h) == nil && enc.WriteFrame(f) == nil {
		_ = enc.End()
	}
}

// refresh re-reads the client record at the end of a successful round
// with a pull: its subscription list replaces the registrations (SPEC.md §8.7)
// and its wire version the deltas' encoding. A record written under
// another epoch than the session's means the client reset onto it: the
// session follows, observing the partition as it is now.
//
// With failClosed (a host-initiated refresh) a failed read leaves the
// session with no registrations; otherwise it keeps the ones it had.
func (s *session) refresh(ctx context.Context, failClosed bool) {
	a, err := s.h.cfg.Engine.Attach(ctx, s.ident, s.clientID)
	if err != nil {
		s.h.log.Debug("realtime: reload registrations", "client", s.clientID, "err", err)
		if !failClosed {
			return
		}
		a = engine.Attachment{}
	}
	s.mu.Lock()
	prev := s.keys
	moved := false
	if a.HasClient {
		// The round's record is authoritative for the cursor floor; later
		// acks raise it from there.
		s.wire, s.cursor, s.persisted = a.Client.WireVersion, a.Client.Cursor, a.Client.Cursor
		if a.Partition.LogEpoch != s.epoch {
			s.epoch, s.stale, moved = a.Partition.LogEpoch, false, true
			s.highest = a.Partition.MaxCommitSeq
			s.suppressed = s.cursor < s.highest
		}
	}
	s.setRegsLocked(a.Registrations)
	s.mu.Unlock()
	if moved {
		go s.h.enqueue(work{kind: workCheck, part: s.part.id})
	}
	s.h.presence.reconcile(s, prev)
}

// roundWriter turns the engine's response writes into 0x01 chunks and
// waits for each to be written, so the response streams at the socket's
// pace.
type roundWriter struct {
	s       *session
	buf     []byte
	tr      frameTracker
	started bool
	ended   bool
	err     error
	// beforeEnd runs once the response's END is written by the engine and
	// before it is sent.
	beforeEnd func()
}

func (w *roundWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.ended {
		return 0, errors.New("realtime: write after the response's END")
	}
	w.started = true
	if w.buf == nil {
		// The chunk's tag leads the buffer, so a chunk is sent without a
		// copy.
		if b, ok := chunkPool.Get().(*[]byte); ok {
			w.buf = *b
		}
		w.buf = append(w.buf[:0], tagRound)
	}
	w.buf = append(w.buf, p...)
	w.tr.feed(p)
	switch {
	case w.tr.ended:
		w.ended = true
		if w.beforeEnd != nil {
			w.beforeEnd()
		}
		w.err = w.send(true)
	case len(w.buf)-1 >= roundChunkBytes:
		w.err = w.send(false)
	}
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// Flush sends what was written so far; the engine flushes between
// sections.
func (w *roundWriter) Flush() error {
	if w.err == nil && len(w.buf) > 1 && !w.ended {
		w.err = w.send(false)
	}
	return w.err
}

// send queues the buffered chunk and waits until it is written. The buffer
// is reused only after a successful write: on any failure the round is
// over and the writer may still hold it.
func (w *roundWriter) send(ends bool) error {
	m := outMsg{kind: kindRound, data: w.buf, done: make(chan error, 1), endsRound: ends}
	s := w.s
	s.mu.Lock()
	ok := s.enqueueLocked(m, true)
	s.mu.Unlock()
	if !ok {
		return errClosed
	}
	select {
	case err := <-m.done:
		if err == nil {
			w.buf = w.buf[:1]
			if ends && cap(w.buf) <= maxPooledChunk {
				b := w.buf
				chunkPool.Put(&b)
				w.buf = nil
			}
		}
		return err
	case <-s.ctx.Done():
		return errClosed
	}
}

// frameTracker follows a response's framing across writes: it notes an
// ERROR frame and stops at END.
type frameTracker struct {
	skip     int // envelope bytes still to pass
	hdr      [5]byte
	hdrN     int
	payload  int64 // payload bytes of the current frame still to pass
	ended    bool
	sawError bool
}

func (t *frameTracker) feed(p []byte) {
	for len(p) > 0 && !t.ended {
		switch {
		case t.skip > 0:
			n := min(t.skip, len(p))
			t.skip -= n
			p = p[n:]
		case t.payload > 0:
			n := int(min(t.payload, int64(len(p))))
			t.payload -= int64(n)
			p = p[n:]
		default:
			n := copy(t.hdr[t.hdrN:], p)
			t.hdrN += n
			p = p[n:]
			if t.hdrN < len(t.hdr) {
				return
			}
			t.hdrN = 0
			switch ssp2.FrameType(t.hdr[0]) {
			case ssp2.FrameEnd:
				t.ended = true
			case ssp2.FrameError:
				t.sawError = true
			}
			t.payload = int64(binary.LittleEndian.Uint32(t.hdr[1:]))
		}
	}
}
