package loadgen

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/syncnode/syncnode/ssp2"
)

// ErrNoRealtime is returned when the server answers the realtime upgrade
// (GET /realtime, SPEC.md §8.1) with 404: it has no realtime channel.
var ErrNoRealtime = errors.New("server has no realtime (404)")

// Channel tags of binary realtime messages (§8.7).
const (
	tagDelta byte = 0x00
	tagRound byte = 0x01
)

// Realtime limits.
const (
	helloTimeout     = 15 * time.Second
	maxRoundResponse = 256 << 20
)

// rtConn is one realtime WebSocket of a virtual client (§8): it waits for
// hello, runs sync rounds over the socket (request and response as 0x01
// chunks, one round at a time), and checks and counts what the server
// pushes between rounds — deltas (0x00), wake-ups, heartbeats. On its own
// it never acks, as the reference load suite's realtime clients do not:
// the server suppresses deltas for such a session and sends wake-ups
// instead. A socketClient drives one the way a reference client does:
// with keepDeltas set the connection keeps each delta section's
// nextCursor for the client to apply, and the client acks (ack).
type rtConn struct {
	ws         *websocket.Conn
	clientID   string
	keepDeltas bool
	hello      chan *ssp2.Hello
	closed     chan struct{} // the reader stopped
	closing    atomic.Bool
	out        []byte

	mu      sync.Mutex
	err     error // first failure; the connection is dead after it
	inRound bool
	chunked bool // a chunk of the current response arrived
	resp    []byte
	scanned int // bytes of resp scanned into whole frames (after the envelope)
	done    chan []byte
	// pending holds, per subscription id, the highest SUB_END.nextCursor
	// of the deltas received since the client last took them (keepDeltas).
	pending map[string]int64

	deltas, wakes, acks atomic.Int64
}

// realtimeURL is the WebSocket URL of the realtime channel for clientID.
func (t *httpTarget) realtimeURL(clientID string) string {
	u := *t.base.JoinPath("realtime")
	u.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
	u.RawQuery = "clientId=" + url.QueryEscape(clientID)
	return u.String()
}

// dialRealtime opens the realtime channel and waits for hello; with
// keepDeltas the connection keeps delta sections for its client to apply.
func (t *httpTarget) dialRealtime(ctx context.Context, clientID string, keepDeltas bool) (*rtConn, error) {
	ctx, cancel := context.WithTimeout(ctx, helloTimeout)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, t.realtimeURL(clientID), &websocket.DialOptions{HTTPClient: t.hc, HTTPHeader: t.header})
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("GET %s: %w", t.base.JoinPath("realtime"), ErrNoRealtime)
		}
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, fmt.Errorf("realtime upgrade: HTTP %d", resp.StatusCode)
		}
		return nil, fmt.Errorf("realtime upgrade: %w", err)
	}
	ws.SetReadLimit(maxRoundResponse)
	c := &rtConn{ws: ws, clientID: clientID, keepDeltas: keepDeltas, hello: make(chan *ssp2.Hello, 1), closed: make(chan struct{}), done: make(chan []byte, 1)}
	go c.read()
	select {
	case h := <-c.hello:
		if h.ClientID != clientID {
			c.close()
			return nil, fmt.Errorf("realtime: hello is for client %q, want %q", h.ClientID, clientID)
		}
		return c, nil
	case <-c.closed:
		c.close()
		return nil, fmt.Errorf("realtime %s: before hello: %w", clientID, c.failure())
	case <-ctx.Done():
		c.close()
		return nil, fmt.Errorf("realtime %s: no hello within %s", clientID, helloTimeout)
	}
}

// close closes the socket and waits for the reader to stop.
func (c *rtConn) close() {
	c.closing.Store(true)
	_ = c.ws.Close(websocket.StatusNormalClosure, "")
	<-c.closed
}

func (c *rtConn) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return errors.New("socket closed")
	}
	return c.err
}

// fail records the connection's first failure.
func (c *rtConn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

// read handles every server message until the socket closes.
func (c *rtConn) read() {
	defer close(c.closed)
	var buf bytes.Buffer
	helloSeen := false
	for {
		typ, r, err := c.ws.Reader(context.Background())
		if err == nil {
			buf.Reset()
			_, err = buf.ReadFrom(r)
		}
		if err != nil {
			if !c.closing.Load() {
				c.fail(fmt.Errorf("realtime %s: socket: %w", c.clientID, err))
			}
			return
		}
		if typ == websocket.MessageText {
			err = c.control(buf.Bytes(), &helloSeen)
		} else {
			err = c.binary(buf.Bytes())
		}
		if err != nil {
			c.fail(fmt.Errorf("realtime %s: %w", c.clientID, err))
			_ = c.ws.CloseNow()
			return
		}
	}
}

// control handles a JSON control message (§8.1–§8.3, §8.5).
func (c *rtConn) control(b []byte, helloSeen *bool) error {
	m, err := ssp2.ParseControlMessage(b)
	if err != nil {
		return fmt.Errorf("control message: %w", err)
	}
	switch m := m.(type) {
	case *ssp2.Hello:
		if *helloSeen {
			return errors.New("a second hello")
		}
		*helloSeen = true
		c.hello <- m
	case *ssp2.Wake:
		c.wakes.Add(1)
	}
	// Heartbeats, presence and unknown events need nothing.
	return nil
}

// binary handles a tagged binary message (§8.7).
func (c *rtConn) binary(b []byte) error {
	if len(b) == 0 {
		return errors.New("an empty binary message")
	}
	switch b[0] {
	case tagDelta:
		c.mu.Lock()
		mid := c.inRound && c.chunked
		c.mu.Unlock()
		if mid {
			return errors.New("a delta (0x00) in the middle of a round response (§8.7)")
		}
		var keep func(id string, next int64)
		if c.keepDeltas {
			keep = c.keep
		}
		if err := readDelta(b[1:], keep); err != nil {
			return fmt.Errorf("delta: %w", err)
		}
		c.deltas.Add(1)
		return nil
	case tagRound:
		return c.chunk(b[1:])
	}
	return nil // unknown tags are ignored (§8.7)
}

// readDelta decodes a delta: one complete SSP2 response. section, when
// set, receives each section's subscription id and SUB_END.nextCursor.
func readDelta(b []byte, section func(id string, next int64)) error {
	mr, err := ssp2.NewMessageReader(bytes.NewReader(b))
	if err != nil {
		return err
	}
	if mr.Kind() != ssp2.KindResponse {
		return fmt.Errorf("a %s, want a response", mr.Kind())
	}
	var id string
	for {
		f, err := mr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *ssp2.ErrorFrame:
			return fmt.Errorf("in-band ERROR %s: %s", f.Code, f.Message)
		case *ssp2.SubStart:
			id = f.ID
		case *ssp2.SubEnd:
			if section != nil {
				section(id, f.NextCursor)
			}
		}
	}
}

// keep records a delta section for the client to apply.
func (c *rtConn) keep(id string, next int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		c.pending = map[string]int64{}
	}
	if cur, ok := c.pending[id]; !ok || next > cur {
		c.pending[id] = next
	}
}

// takeDeltas hands the sections kept since the last call to f, one per
// subscription id with its highest nextCursor.
func (c *rtConn) takeDeltas(f func(id string, next int64)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, next := range c.pending {
		f(id, next)
		delete(c.pending, id)
	}
}

// ack sends {"type":"ack","cursor":n} (§8.2) within timeout.
func (c *rtConn) ack(ctx context.Context, cursor int64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b, err := ssp2.MarshalControl(&ssp2.Ack{Cursor: cursor})
	if err != nil {
		return fmt.Errorf("realtime %s: ack: %w", c.clientID, err)
	}
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("realtime %s: ack: %w", c.clientID, err)
	}
	c.acks.Add(1)
	return nil
}

// chunk appends a round response chunk; the round completes when the
// stream's END frame is consumed, which must end the chunk exactly.
func (c *rtConn) chunk(p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.inRound {
		return errors.New("a round chunk (0x01) with no round in flight")
	}
	if len(c.resp)+len(p) > maxRoundResponse {
		return fmt.Errorf("a round response over %d bytes", maxRoundResponse)
	}
	c.chunked = true
	c.resp = append(c.resp, p...)
	end, err := messageEnd(c.resp, &c.scanned)
	if err != nil || end < 0 {
		return err
	}
	if end != len(c.resp) {
		return fmt.Errorf("%d bytes after the response's END in its last chunk (§8.7)", len(c.resp)-end)
	}
	c.inRound = false
	c.done <- c.resp
	return nil
}

// SSP2 framing (§1.2): an 8-byte envelope, then frames of a type byte and
// a u32 LE length, ended by END (type 0x00).
const (
	envelopeBytes    = 8
	frameHeaderBytes = 5
)

// messageEnd finds where the SSP2 message at the start of b ends: the
// offset just past its END frame, or -1 while b is still incomplete.
// *scanned remembers how far whole frames were already skipped, so a
// stream that arrives chunk by chunk is scanned once. The frames
// themselves are checked when the message is decoded.
func messageEnd(b []byte, scanned *int) (int, error) {
	if *scanned == 0 {
		if len(b) < envelopeBytes {
			return -1, nil
		}
		*scanned = envelopeBytes
	}
	for {
		at := *scanned
		if len(b)-at < frameHeaderBytes {
			return -1, nil
		}
		n := int64(binary.LittleEndian.Uint32(b[at+1:]))
		if b[at] == byte(ssp2.FrameEnd) {
			return at + frameHeaderBytes, nil
		}
		if n > maxRoundResponse {
			return 0, fmt.Errorf("a frame of %d bytes", n)
		}
		if int64(len(b)-at-frameHeaderBytes) < n {
			return -1, nil
		}
		*scanned = at + frameHeaderBytes + int(n)
	}
}

// roundTrip runs one sync round over the socket: the request as one 0x01
// message, the response reassembled from 0x01 chunks.
func (c *rtConn) roundTrip(ctx context.Context, req []byte) (io.Reader, func(), error) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, nil, err
	}
	c.inRound, c.chunked, c.resp, c.scanned = true, false, c.resp[:0], 0
	c.mu.Unlock()
	c.out = append(append(c.out[:0], tagRound), req...)
	if err := c.ws.Write(ctx, websocket.MessageBinary, c.out); err != nil {
		return nil, nil, fmt.Errorf("realtime %s: send round: %w", c.clientID, err)
	}
	select {
	case b := <-c.done:
		return bytes.NewReader(b), func() {}, nil
	case <-c.closed:
		return nil, nil, fmt.Errorf("mid-round: %w", c.failure())
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("realtime %s: round: %w", c.clientID, ctx.Err())
	}
}

// timedRT bounds each socket round by the round timeout.
type timedRT struct {
	c       *rtConn
	timeout time.Duration
}

func (t timedRT) roundTrip(ctx context.Context, req []byte) (io.Reader, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return t.c.roundTrip(ctx, req)
}

// socketClient syncs a virtual client over its own realtime connection
// the way a reference client does once connected (SPEC.md §8.2, §8.7).
// Before each round it applies the delta sections that arrived since the
// previous one — a section of a subscription that has synced and is not
// bootstrapping moves its cursor forward; an older one is a duplicate —
// and acks the highest nextCursor it applied. Each round runs on the
// socket. After each round it acks its cursor floor, the lowest cursor of
// the subscriptions that have synced and are not bootstrapping (none, no
// ack): the ack that lifts the server's delta suppression. Wake-ups need
// nothing more, the user's next round being the pull they ask for.
type socketClient struct {
	c       *vclient
	conn    *rtConn
	timeout time.Duration
}

func (s *socketClient) roundTrip(ctx context.Context, req []byte) (io.Reader, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.conn.roundTrip(ctx, req)
}

// beforeRound applies the deltas received since the last round.
func (s *socketClient) beforeRound(ctx context.Context) error {
	applied := int64(-1)
	s.conn.takeDeltas(func(id string, next int64) {
		if s.c.applyDelta(id, next) {
			applied = max(applied, next)
		}
	})
	if applied < 0 {
		return nil
	}
	return s.conn.ack(ctx, applied, s.timeout)
}

// afterRound acks the cursor floor.
func (s *socketClient) afterRound(ctx context.Context) error {
	if floor, ok := s.c.cursorFloor(); ok {
		return s.conn.ack(ctx, floor, s.timeout)
	}
	return nil
}
