package client

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/syncnode/syncnode/ssp2"
)

// Channel tags of binary realtime messages (SPEC.md §8.7).
const (
	tagDelta byte = 0x00
	tagRound byte = 0x01
)

// Bounds of one socket.
const (
	// roundChunkBytes is the largest 0x01 message a request is sent in.
	roundChunkBytes = 1 << 20
	// roundQueue is how many response chunks wait for the round's reader
	// before the socket stops reading: a round streams at the pace it is
	// applied.
	roundQueue = 16
	// maxQueuedDeltas and maxQueuedBytes bound the deltas waiting to be
	// applied; past them a delta is dropped, which asks for a round.
	maxQueuedDeltas = 1024
	maxQueuedBytes  = 64 << 20
)

var (
	// errHeartbeat ends a connection that was silent for too long.
	errHeartbeat = errors.New("realtime: nothing heard within the heartbeat timeout")
	// errStopped ends a connection the client closed.
	errStopped = errors.New("realtime: stopped")
	// errNoSocket refuses a round on a socket that is gone.
	errNoSocket = errors.New("realtime: the socket is closed")
)

// socket is one realtime connection. A reader goroutine sorts what
// arrives: round chunks go to the round in flight (blocking when it lags),
// deltas and presence events into an ordered queue the session loop
// drains, wake-ups into a flag. Rounds, acks and presence are written by
// the goroutines that make them.
type socket struct {
	rt       *Realtime
	conn     *websocket.Conn
	hello    *ssp2.Hello
	dead     chan struct{} // closed when the connection ended
	readDone chan struct{} // closed when the reader returned
	ready    chan struct{} // the queue or the wake flag changed
	timer    *time.Timer   // heartbeat timeout
	once     sync.Once
	cause    error // why the connection ended; set before dead closes

	mu    sync.Mutex
	round *roundReader
	queue []inbound
	bytes int // delta bytes queued
	// wake asks the session for a round: a wake-up, hello.requiresSync, a
	// dropped delta, a section a round must repair (SPEC.md §8.4's
	// sync-needed signal). It is cleared when the session's round begins.
	wake bool
	// drops counts deltas not applied; contiguous is false from a drop
	// until a round that began after it completes, and deltas arriving
	// meanwhile are dropped too.
	drops      int64
	contiguous bool
	acked      int64 // highest cursor acknowledged
}

// inbound is one queued message for the session loop.
type inbound struct {
	delta         []byte
	presence      *ssp2.PresenceFanout
	presenceError *ssp2.PresenceError
}

// dial opens the socket and reads hello (SPEC.md §8.1). A refused connect
// is an *Error: the server's JSON answer, or in test mode the in-band
// error event.
func (rt *Realtime) dial(ctx context.Context) (*socket, error) {
	tok, err := rt.c.token(ctx)
	if err != nil {
		return nil, fmt.Errorf("realtime: %w", err)
	}
	h := http.Header{}
	if tok != "" {
		h.Set("Authorization", "Bearer "+tok)
	}
	dctx, cancel := context.WithTimeout(ctx, rt.cfg.HeartbeatTimeout)
	defer cancel()
	conn, resp, err := websocket.Dial(dctx, rt.url(), &websocket.DialOptions{HTTPClient: rt.httpClient, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
			return nil, httpError("realtime", resp.StatusCode, b)
		}
		return nil, fmt.Errorf("realtime: %w", err)
	}
	conn.SetReadLimit(rt.cfg.MaxMessageBytes)
	hello, err := readHello(dctx, conn)
	if err != nil {
		conn.CloseNow()
		return nil, err
	}
	s := &socket{rt: rt, conn: conn, hello: hello, dead: make(chan struct{}), readDone: make(chan struct{}),
		ready: make(chan struct{}, 1), acked: -1}
	s.timer = time.AfterFunc(rt.cfg.HeartbeatTimeout, func() { s.fail(errHeartbeat) })
	return s, nil
}

// readHello reads the connection's first message: hello, or the error
// event of a refusal.
func readHello(ctx context.Context, conn *websocket.Conn) (*ssp2.Hello, error) {
	typ, b, err := conn.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("realtime: read hello: %w", err)
	}
	if typ != websocket.MessageText {
		return nil, errors.New("realtime: the server's first message is not hello")
	}
	m, err := ssp2.ParseControlMessage(b)
	if err != nil {
		return nil, fmt.Errorf("realtime: hello: %w", err)
	}
	switch m := m.(type) {
	case *ssp2.Hello:
		return m, nil
	case *ssp2.UnknownControl:
		var ev struct {
			Data json.RawMessage `json:"data"`
		}
		if m.Name == "error" && json.Unmarshal(m.Raw, &ev) == nil {
			return nil, httpError("realtime", 0, ev.Data)
		}
	}
	return nil, errors.New("realtime: the server's first message is not hello")
}

// fail ends the connection at once with cause.
func (s *socket) fail(cause error) {
	s.once.Do(func() {
		s.cause = cause
		close(s.dead)
		s.timer.Stop()
		_ = s.conn.CloseNow()
	})
}

// closeNormal ends the connection with a close handshake (1000).
func (s *socket) closeNormal() {
	s.once.Do(func() {
		s.cause = errStopped
		close(s.dead)
		s.timer.Stop()
		_ = s.conn.Close(websocket.StatusNormalClosure, "")
	})
}

// err is why the connection ended (nil while it lives).
func (s *socket) err() error {
	select {
	case <-s.dead:
		return s.cause
	default:
		return nil
	}
}

func (s *socket) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// readLoop reads until the connection ends. Every message restarts the
// heartbeat timeout (SPEC.md §8.5).
func (s *socket) readLoop() {
	defer close(s.readDone)
	for {
		typ, b, err := s.conn.Read(context.Background())
		if err != nil {
			s.fail(err)
			return
		}
		s.timer.Stop()
		if typ == websocket.MessageText {
			s.onText(b)
		} else {
			s.onBinary(b)
		}
		if s.err() != nil {
			return
		}
		s.timer.Reset(s.rt.cfg.HeartbeatTimeout)
	}
}

// onText handles a control message. Unknown events are ignored; a
// malformed one is logged and taken as a wake-up, since it may have been
// one (SPEC.md §8.1, §8.3).
func (s *socket) onText(b []byte) {
	m, err := ssp2.ParseControlMessage(b)
	if err != nil {
		s.rt.log.Warn("realtime: malformed control message", "err", err)
		s.setWake()
		return
	}
	switch m := m.(type) {
	case *ssp2.Wake:
		s.rt.stats.wakes.Add(1)
		s.setWake()
	case *ssp2.PresenceFanout:
		s.push(inbound{presence: m})
	case *ssp2.PresenceError:
		s.push(inbound{presenceError: m})
	}
	// hello again, heartbeats and unknown events carry nothing to do.
}

// onBinary sorts a binary message by its tag; unknown tags are ignored
// (SPEC.md §8.7).
func (s *socket) onBinary(b []byte) {
	if len(b) == 0 {
		return
	}
	switch b[0] {
	case tagDelta:
		s.push(inbound{delta: b[1:]})
	case tagRound:
		s.onRoundChunk(b[1:])
	}
}

// push queues a message for the session loop. A delta that does not fit
// is dropped, which asks for a round; presence that does not fit is lost.
func (s *socket) push(m inbound) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) >= maxQueuedDeltas || s.bytes+len(m.delta) > maxQueuedBytes {
		if m.delta != nil {
			s.dropLocked()
		}
		return
	}
	s.queue = append(s.queue, m)
	s.bytes += len(m.delta)
	s.signal()
}

// pop takes the oldest queued message.
func (s *socket) pop() (inbound, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return inbound{}, false
	}
	m := s.queue[0]
	s.queue[0] = inbound{}
	s.queue = s.queue[1:]
	s.bytes -= len(m.delta)
	return m, true
}

func (s *socket) setWake() {
	s.mu.Lock()
	s.wake = true
	s.mu.Unlock()
	s.signal()
}

// takeWake clears the sync-needed signal as a round begins and reports
// whether it was set.
func (s *socket) takeWake() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.wake
	s.wake = false
	return w
}

func (s *socket) wakeSet() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wake
}

// dropLocked records a delta not applied: deltas stop applying until a
// round that begins after it completes, and a round is asked for.
func (s *socket) dropLocked() {
	s.drops++
	s.contiguous = false
	s.wake = true
	s.rt.stats.dropped.Add(1)
	s.signal()
}

func (s *socket) drop() {
	s.mu.Lock()
	s.dropLocked()
	s.mu.Unlock()
}

// dropMark returns the drop count as a round begins (0 without a socket).
func (s *socket) dropMark() int64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drops
}

// roundDone is told that a round which began at drop count mark
// completed: without a drop since, deltas continue from what it pulled.
// It acknowledges floor, the cursor floor, when ok (SPEC.md §8.2).
func (s *socket) roundDone(mark, floor int64, ok bool) {
	s.mu.Lock()
	if s.drops == mark {
		s.contiguous = true
	}
	s.mu.Unlock()
	if ok {
		s.ack(floor)
	}
}

func (s *socket) isContiguous() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contiguous
}

// ack sends {"type":"ack","cursor":n} unless a cursor as high was acked.
func (s *socket) ack(n int64) {
	s.mu.Lock()
	due := n > s.acked
	if due {
		s.acked = n
	}
	s.mu.Unlock()
	if !due {
		return
	}
	b, err := ssp2.MarshalControl(&ssp2.Ack{Cursor: n})
	if err != nil {
		return
	}
	if s.writeText(context.Background(), b) == nil {
		s.rt.stats.acks.Add(1)
	}
}

// writeText sends a control message; a write that fails ends the
// connection.
func (s *socket) writeText(ctx context.Context, b []byte) error {
	return s.write(ctx, websocket.MessageText, b)
}

func (s *socket) write(ctx context.Context, typ websocket.MessageType, b []byte) error {
	if err := s.err(); err != nil {
		return errNoSocket
	}
	ctx, cancel := context.WithTimeout(ctx, s.rt.cfg.HeartbeatTimeout)
	defer cancel()
	if err := s.conn.Write(ctx, typ, b); err != nil {
		s.fail(err)
		return fmt.Errorf("realtime: write: %w", err)
	}
	return nil
}

// roundTrip sends one request as 0x01 chunks and returns the response
// stream (SPEC.md §8.7). The caller holds the client's round lock, so one
// round at a time rides the socket.
func (s *socket) roundTrip(ctx context.Context, body []byte) (io.ReadCloser, error) {
	rr := &roundReader{s: s, ctx: ctx, chunks: make(chan []byte, roundQueue), gone: make(chan struct{}), end: responseEnd{at: 8}}
	s.mu.Lock()
	if s.err() != nil || s.round != nil {
		s.mu.Unlock()
		return nil, errNoSocket
	}
	s.round = rr
	s.mu.Unlock()
	for off := 0; off < len(body); off += roundChunkBytes {
		chunk := body[off:min(off+roundChunkBytes, len(body))]
		msg := make([]byte, 1+len(chunk))
		msg[0] = tagRound
		copy(msg[1:], chunk)
		if err := s.write(ctx, websocket.MessageBinary, msg); err != nil {
			return nil, err
		}
	}
	return rr, nil
}

// onRoundChunk passes a response chunk to the round in flight. A chunk
// outside a round, or bytes past the response's END, break the framing:
// the connection ends.
func (s *socket) onRoundChunk(p []byte) {
	s.mu.Lock()
	rr := s.round
	s.mu.Unlock()
	if rr == nil {
		s.fail(errors.New("realtime: a round chunk outside a round"))
		return
	}
	done, excess := rr.end.feed(p)
	if done && excess > 0 {
		s.fail(errors.New("realtime: bytes past the round response's END"))
		return
	}
	if done {
		rr.ended.Store(true)
	}
	select {
	case rr.chunks <- p:
	case <-rr.gone:
		return
	case <-s.dead:
		return
	}
	if done {
		s.mu.Lock()
		s.round = nil
		s.mu.Unlock()
		close(rr.chunks)
	}
}

// roundReader is a round's response as the client's streaming apply reads
// it: the chunks' concatenation, ending at END.
type roundReader struct {
	s      *socket
	ctx    context.Context
	chunks chan []byte   // closed after the chunk holding END
	gone   chan struct{} // closed when the reader abandons the round
	end    responseEnd   // the socket reader's framing state
	ended  atomic.Bool   // END was seen by the socket reader
	cur    []byte
	eof    bool
	closed bool
}

func (r *roundReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.eof {
			return 0, io.EOF
		}
		b, ok, err := r.next()
		if err != nil {
			return 0, err
		}
		if !ok {
			r.eof = true
			return 0, io.EOF
		}
		r.cur = b
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// next waits for the next chunk; ok is false after the last one.
func (r *roundReader) next() (b []byte, ok bool, err error) {
	select {
	case b, ok = <-r.chunks: // what arrived before the connection ended
		return b, ok, nil
	default:
	}
	select {
	case b, ok = <-r.chunks:
		return b, ok, nil
	case <-r.s.dead:
		return nil, false, fmt.Errorf("realtime round: %w", r.s.cause)
	case <-r.ctx.Done():
		return nil, false, r.ctx.Err()
	}
}

// Close ends the round. A response not read to its END is read there
// when the socket has seen END (a header-only reset answer); otherwise
// the connection ends, since the next round could not tell its bytes
// from this one's.
func (r *roundReader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	if r.eof {
		return nil
	}
	if r.ended.Load() {
		for {
			if _, ok, err := r.next(); err != nil || !ok {
				return nil
			}
		}
	}
	close(r.gone)
	r.s.fail(errors.New("realtime: a round response abandoned before its END"))
	return nil
}

// responseEnd finds where one SSP2 message ends in a chunked stream by
// following its frame lengths (SPEC.md §1.2): an 8-byte envelope, then
// frames of a type byte and a u32 payload length, the last one END.
type responseEnd struct {
	fed  int64   // bytes fed
	at   int64   // offset of the next frame header
	head [5]byte // that header, gathered across chunks
	got  int
}

// feed takes the next chunk; once END is complete it reports how many
// bytes of the chunk follow it.
func (e *responseEnd) feed(p []byte) (done bool, excess int) {
	start := e.fed
	e.fed += int64(len(p))
	for e.at+int64(e.got) < e.fed {
		e.got += copy(e.head[e.got:], p[e.at+int64(e.got)-start:])
		if e.got < len(e.head) {
			break
		}
		e.got = 0
		if ssp2.FrameType(e.head[0]) == ssp2.FrameEnd {
			return true, int(e.fed - e.at - int64(len(e.head)))
		}
		e.at += int64(len(e.head)) + int64(binary.LittleEndian.Uint32(e.head[1:]))
	}
	return false, 0
}
