package realtime

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/ssp2"
)

// Channel tags of binary messages (SPEC.md §8.7).
const (
	tagDelta byte = 0x00
	tagRound byte = 0x01
)

// Close codes.
const (
	statusGoingAway = websocket.StatusGoingAway
	statusViolation = websocket.StatusPolicyViolation
	statusTooBig    = websocket.StatusMessageTooBig
	statusInternal  = websocket.StatusInternalError
)

var errClosed = errors.New("realtime: connection closed")

type msgKind uint8

const (
	kindControl msgKind = iota // hello, presence errors, …
	kindDelta
	kindRound
	kindPresence
	kindWake
)

// outMsg is one message waiting for the socket.
type outMsg struct {
	kind   msgKind
	text   bool
	data   []byte
	reason ssp2.WakeReason
	// done, for round chunks, receives the write's outcome; endsRound
	// marks the chunk that ends the round's response (its END).
	done      chan error
	endsRound bool
}

// session is one realtime connection.
type session struct {
	h        *Hub
	conn     *websocket.Conn
	id       string
	ident    engine.Identity
	clientID string
	part     *partState
	ctx      context.Context
	cancel   context.CancelFunc
	ready    chan struct{} // the writer has something to send
	once     sync.Once

	mu         sync.Mutex
	epoch      string
	wire       uint16
	regs       []engine.Registration
	regKey     string              // wire version and registrations: what a delta's encoding depends on
	keys       map[string]struct{} // scope keys held: the presence grant
	cursor     int64               // highest acked
	persisted  int64               // highest ack written to the client record
	highest    int64               // highest commitSeq observed
	suppressed bool                // deltas wait for an ack reaching highest
	stale      bool                // on an epoch the partition left: reset-required
	inRound    bool                // a round's response is streaming
	queue      []outMsg
	queued     int // bytes in queue
	wake       ssp2.WakeReason
	heartbeat  bool
	closed     bool

	// Reader goroutine only.
	scanner   *ssp2.StreamScanner
	roundDone chan struct{}
}

func newSession(h *Hub, conn *websocket.Conn, id engine.Identity, clientID string) *session {
	s := &session{h: h, conn: conn, id: randomID(), ident: id, clientID: clientID, ready: make(chan struct{}, 1)}
	s.ctx, s.cancel = context.WithCancel(h.ctx)
	return s
}

// start initializes the session from its attachment and queues hello
// (SPEC.md §8.1). It runs under the partition's lock, so no commit of
// the partition is delivered before it.
func (s *session) start(a engine.Attachment, latest int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch, s.highest, s.cursor, s.persisted = a.Partition.LogEpoch, latest, -1, -1
	if a.HasClient {
		s.wire, s.cursor, s.persisted = a.Client.WireVersion, a.Client.Cursor, a.Client.Cursor
	}
	s.setRegsLocked(a.Registrations)
	s.suppressed = !a.HasClient || s.cursor < latest
	hello, _ := ssp2.MarshalControl(&ssp2.Hello{
		ProtocolVersion: 1, SessionID: s.id, ActorID: s.ident.ActorID, ClientID: s.clientID,
		Cursor: s.cursor, LatestCursor: latest, RequiresSync: s.suppressed, Timestamp: s.h.nowMs(),
	})
	s.enqueueLocked(outMsg{kind: kindControl, text: true, data: hello}, false)
}

// setRegsLocked replaces the registrations and the scope keys they hold,
// and keys the deltas they encode (under the wire version set before).
func (s *session) setRegsLocked(regs []engine.Registration) {
	s.regs = regs
	var b strings.Builder
	b.WriteString(strconv.Itoa(int(s.wire)))
	b.WriteByte('/')
	keys := map[string]struct{}{}
	for _, r := range regs {
		b.WriteString(strconv.Quote(r.ID))
		b.WriteString(strconv.Quote(r.Table))
		vars := make([]string, 0, len(r.Effective))
		for k := range r.Effective {
			vars = append(vars, k)
		}
		sort.Strings(vars)
		t, _ := s.h.schema.Table(r.Table)
		for _, k := range vars {
			b.WriteString(strconv.Quote(k))
			for _, v := range r.Effective[k] {
				b.WriteString(strconv.Quote(v))
				if t != nil {
					if sc, ok := t.Scope(k); ok {
						keys[sc.Prefix+":"+v] = struct{}{}
					}
				}
			}
			b.WriteByte(';')
		}
		b.WriteByte('|')
	}
	s.regKey, s.keys = b.String(), keys
}

// holds reports whether the session is registered on scope key k.
func (s *session) holds(k string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.keys[k]
	return ok
}

func (s *session) heldKeys() map[string]struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys
}

func (s *session) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// enqueueLocked queues m; it refuses when the session is closed or, unless
// force, when the queue is full.
func (s *session) enqueueLocked(m outMsg, force bool) bool {
	if s.closed {
		return false
	}
	if !force && (len(s.queue) >= s.h.cfg.SendQueueMessages || s.queued+len(m.data) > s.h.cfg.SendQueueBytes) {
		return false
	}
	s.queue = append(s.queue, m)
	s.queued += len(m.data)
	s.signal()
	return true
}

// send queues a message that must reach the client: if the queue is full
// the client is too slow to keep, and is dropped.
func (s *session) send(kind msgKind, data []byte) {
	s.mu.Lock()
	ok := s.enqueueLocked(outMsg{kind: kind, text: true, data: data}, false)
	closed := s.closed
	s.mu.Unlock()
	if !ok && !closed {
		s.drop()
	}
}

// wakeRank orders reasons when wake-ups coalesce: the strongest wins.
func wakeRank(r ssp2.WakeReason) int {
	switch r {
	case ssp2.WakeResetRequired:
		return 3
	case ssp2.WakeDeltaTooLarge:
		return 2
	case ssp2.WakeCatchupRequired:
		return 1
	}
	return 0
}

// wakeLocked suppresses deltas and marks a wake-up to send; wake-ups
// pending together coalesce into one.
func (s *session) wakeLocked(r ssp2.WakeReason) {
	s.suppressed = true
	if wakeRank(r) > wakeRank(s.wake) {
		s.wake = r
	}
	s.signal()
}

// deliver answers one commit of the partition (see the package doc).
func (s *session) deliver(n *note) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || n.seq <= s.highest {
		return
	}
	gap := n.seq != s.highest+1
	s.highest = n.seq
	switch {
	case s.stale || n.epoch != s.epoch || n.refused:
		s.wakeLocked(ssp2.WakeResetRequired)
		return
	case gap || n.commit == nil && !n.skipped:
		s.wakeLocked(ssp2.WakeCatchupRequired)
		return
	case n.skipped:
		return
	}
	d := s.delta(n)
	switch {
	case !d.match:
	case s.suppressed || s.inRound:
		s.wakeLocked(ssp2.WakeCatchupRequired)
	case d.unsendable || len(d.b)-1 > s.h.cfg.MaxDeltaBytes:
		s.wakeLocked(ssp2.WakeDeltaTooLarge)
	case !s.enqueueLocked(outMsg{kind: kindDelta, data: d.b}, false):
		s.wakeLocked(ssp2.WakeCatchupRequired)
	}
}

// encodedDelta is one session's delta of a commit: nothing matched, or the
// tagged message, or a match this build cannot encode (the client
// record's wire version is not one it writes) — sent as a delta-too-large
// wake-up.
type encodedDelta struct {
	b          []byte
	match      bool
	unsendable bool
}

// delta returns the delta of n for this session's registrations, from the
// note's cache when a session registered alike already asked.
func (s *session) delta(n *note) encodedDelta {
	if len(s.regs) == 0 {
		return encodedDelta{}
	}
	key := s.regKey
	if d, ok := n.deltas[key]; ok {
		return d
	}
	s.h.metrics.DeltaEncodes.Add(1)
	b, ok, err := engine.AppendDelta([]byte{tagDelta}, s.wire, n.epoch, s.regs, n.commit)
	d := encodedDelta{b: b, match: ok}
	if err != nil {
		s.h.log.Warn("realtime: encode delta", "partition", s.part.id, "seq", n.seq, "wire", s.wire, "err", err)
		d = encodedDelta{match: true, unsendable: true}
	}
	n.deltas[key] = d
	return d
}

// check answers a read of the partition in SQL: epoch, gate and, when
// wakeBelow is set, whether the session is behind it.
func (s *session) check(epoch string, maxSeq int64, refused bool, wakeBelow int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
	case s.epoch != epoch:
		s.stale = true
		s.wakeLocked(ssp2.WakeResetRequired)
	case refused:
		s.wakeLocked(ssp2.WakeResetRequired)
	case s.highest < wakeBelow:
		s.highest = max(s.highest, maxSeq)
		s.wakeLocked(ssp2.WakeCatchupRequired)
	}
}

// onAck applies {"type":"ack","cursor":n} (SPEC.md §8.2) and queues its
// persistence.
func (s *session) onAck(c int64) {
	s.mu.Lock()
	s.cursor = max(s.cursor, c)
	s.highest = max(s.highest, c)
	if !s.stale && c >= s.highest {
		s.suppressed = false
	}
	s.mu.Unlock()
	s.h.metrics.Acks.Add(1) // counted once applied: tests wait on it
	s.h.acks.add(s)
}

func (s *session) beat() {
	s.mu.Lock()
	s.heartbeat = true
	s.mu.Unlock()
	s.signal()
}

// next takes the next message for the socket: queued ones first, then a
// pending wake-up, then a heartbeat.
func (s *session) next() (outMsg, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return outMsg{}, false
	}
	now := s.h.nowMs()
	switch {
	case len(s.queue) > 0:
		m := s.queue[0]
		s.queue[0] = outMsg{}
		s.queue = s.queue[1:]
		if len(s.queue) == 0 {
			s.queue = nil
		}
		s.queued -= len(m.data)
		if m.endsRound {
			// The round is over when its END leaves: the client may start
			// the next one as soon as END arrives.
			s.inRound = false
		}
		return m, true
	case s.wake != "":
		b, _ := ssp2.MarshalControl(&ssp2.Wake{Cursor: s.highest, Reason: s.wake, Timestamp: now})
		m := outMsg{kind: kindWake, text: true, data: b, reason: s.wake}
		s.wake = ""
		return m, true
	case s.heartbeat:
		s.heartbeat = false
		b, _ := ssp2.MarshalControl(&ssp2.Heartbeat{Timestamp: now})
		return outMsg{kind: kindControl, text: true, data: b}, true
	}
	return outMsg{}, false
}

// writeLoop drains the session to the socket; a write that fails or takes
// longer than WriteTimeout ends the connection.
//
// One timer bounds every write, dropping the connection when a write
// overruns; the writes take a context that is never done, so the socket
// library arms no watcher of its own per message (with a per-write
// timeout context that was ~20 allocations per socket round). Closing the
// session ends a write in flight as before: the socket closes under it.
func (s *session) writeLoop() {
	wctx := context.WithoutCancel(s.ctx)
	timer := time.AfterFunc(time.Hour, s.drop)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.ready:
		}
		for {
			m, ok := s.next()
			if !ok {
				break
			}
			typ := websocket.MessageBinary
			if m.text {
				typ = websocket.MessageText
			}
			timer.Reset(s.h.cfg.WriteTimeout)
			err := s.conn.Write(wctx, typ, m.data)
			timedOut := !timer.Stop()
			if m.done != nil {
				m.done <- err
			}
			if err != nil {
				if timedOut {
					s.drop()
				} else {
					s.close(statusInternal, "write failed")
				}
				return
			}
			switch m.kind {
			case kindDelta:
				s.h.metrics.Deltas.Add(1)
			case kindWake:
				s.h.metrics.wake(m.reason)
			case kindPresence:
				s.h.metrics.PresenceOut.Add(1)
			}
		}
	}
}

// close ends the connection with code: the close handshake runs in the
// background, queued messages are dropped and a waiting round chunk is
// released.
func (s *session) close(code websocket.StatusCode, reason string) {
	s.once.Do(func() {
		s.mu.Lock()
		s.shutLocked()
		s.mu.Unlock()
		go func() {
			_ = s.conn.Close(code, reason)
			s.cancel()
		}()
	})
}

// drop disconnects a slow consumer at once: its socket does not drain, so
// neither would a close frame.
func (s *session) drop() {
	s.once.Do(func() {
		s.h.metrics.Dropped.Add(1)
		s.h.log.Info("realtime: dropping a slow consumer", "partition", s.ident.Partition, "client", s.clientID)
		s.mu.Lock()
		s.shutLocked()
		s.mu.Unlock()
		_ = s.conn.CloseNow()
		s.cancel()
	})
}

// shutLocked marks the session closed, drops what is queued and releases
// a waiting round chunk.
func (s *session) shutLocked() {
	s.closed = true
	for _, m := range s.queue {
		if m.done != nil {
			m.done <- errClosed
		}
	}
	s.queue, s.queued = nil, 0
}

// readLoop reads the client's messages until the connection ends.
func (s *session) readLoop() {
	for {
		typ, data, err := s.conn.Read(s.ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageText {
			s.onText(data)
		} else {
			s.onBinary(data)
		}
	}
}

// onText handles a control message: an ack or a presence publish. Unknown
// events are ignored; a malformed known one closes the connection.
func (s *session) onText(b []byte) {
	m, err := ssp2.ParseControlMessage(b)
	if err != nil {
		s.close(statusViolation, "malformed control message")
		return
	}
	switch m := m.(type) {
	case *ssp2.Ack:
		s.onAck(m.Cursor)
	case *ssp2.PresencePublish:
		s.h.metrics.PresenceIn.Add(1)
		s.h.presence.publish(s, m)
	}
}

// keysOf returns the scope keys in a set, sorted.
func keysOf(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
