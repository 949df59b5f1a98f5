package realtime

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/lifecycle"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// sqlTimeout bounds one SQL read or write of the hub.
const sqlTimeout = 10 * time.Second

// ErrHubStopped is returned by Start after Stop.
var ErrHubStopped = errors.New("realtime hub stopped")

// Hub is a node's realtime channel: the sockets it holds, the commit
// events it follows, the presence it shares with other nodes. It is safe
// for concurrent use; it serves GET /realtime as an http.Handler.
type Hub struct {
	cfg     Config
	log     *slog.Logger
	schema  *schema.Schema
	metrics Metrics
	// node identifies this hub among the nodes of a deployment (presence):
	// the configured name and a random suffix, so a restarted node is a
	// new peer.
	node string

	mu        sync.Mutex
	parts     map[string]*partState // partitions with sessions, by id
	sessions  map[*session]struct{}
	perClient map[clientKey]int
	admitted  int // sockets admitted, upgraded or about to be
	stopping  bool

	work     []chan work
	tail     *bus.Tail
	busUp    atomic.Bool
	presence *presence
	acks     *ackWriter

	ctx     context.Context
	cancel  context.CancelFunc
	bg      sync.WaitGroup  // background goroutines
	conns   lifecycle.Tasks // socket handlers
	started atomic.Bool
	stop    sync.Once
	stopErr error
}

type clientKey struct{ partition, clientID string }

// partState is the hub's view of one partition with sessions: the log
// epoch it last read in SQL (and as commit events carry it), the highest
// commitSeq it processed, and the sessions. Its commits and checks are
// processed by one worker, in order.
type partState struct {
	id       string
	mu       sync.Mutex
	epoch    string
	epochTok string
	lastSeq  int64
	// pend is lastSeq while every event of that commit so far named
	// changes no session can match: its sessions have not been given it
	// yet. The next commit's event proves the commit complete (the relay
	// publishes a partition's events in commit order), and it is then
	// observed unread. Only the partition's worker touches it.
	pend     int64
	pollMax  int64 // the partition's max seq at the previous resync
	sessions map[*session]struct{}
}

func (p *partState) snapshot() []*session {
	out := make([]*session, 0, len(p.sessions))
	for s := range p.sessions {
		out = append(out, s)
	}
	return out
}

type workKind uint8

const (
	workCommit workKind = iota // a commit event
	workCheck                  // read the partition in SQL: epoch, gate
	workPoll                   // workCheck, and wake sessions behind the log (bus down)
	workResync                 // workCheck, and wake sessions behind the previous resync's log
)

type work struct {
	kind     workKind
	part     string
	epochTok string
	seq      int64
	// table and data are the event's table and CommitBody (commits).
	table string
	data  []byte
}

// New validates cfg and returns a Hub; Start connects it to the bus.
func New(cfg Config) (*Hub, error) {
	cfg = cfg.WithDefaults()
	if err := errors.Join(cfg.checkWiring(), cfg.Validate()); err != nil {
		return nil, err
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	h := &Hub{
		cfg: cfg, log: cfg.Logger, schema: cfg.Engine.Schema(),
		node:      cfg.Node + "-" + hex.EncodeToString(suffix[:]),
		parts:     map[string]*partState{},
		sessions:  map[*session]struct{}{},
		perClient: map[clientKey]int{},
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.presence = newPresence(h)
	h.acks = newAckWriter(h)
	return h, nil
}

// nowMs is the hub's clock in Unix milliseconds.
func (h *Hub) nowMs() int64 { return h.cfg.Clock.Now().UnixMilli() }

// Metrics returns the hub's counters.
func (h *Hub) Metrics() *Metrics { return &h.metrics }

// Start follows the live tail of commit events and starts the hub's
// background work.
//
// The hub reads every commit it delivers from SQL; an event only tells it
// which commit of which partition (and epoch) to read, and whether some
// session's registrations may match it (table, scopes in the body). So it
// follows the tail on core NATS (bus.TailCommits) rather than a consumer
// of the stream, which would load every event from the stream's file
// store and keep its message blocks' buffers resident (see bus/tail.go).
// What it relies on, and why the tail gives it:
//   - Per-partition commit order, for pend in processCommit: one
//     publisher (the relay) per partition, whose order NATS keeps.
//   - No silent gap: a missed event is either followed by the next one
//     of its partition (a seq gap: the session is woken) or, for the
//     last, covered by the tail's OnGap (a drop or a reconnect), which
//     polls every partition in SQL (workPoll) and wakes the sessions
//     behind the log, and by the ResyncInterval check for a commit that
//     never reached the bus at all.
//   - Duplicates and stale events harmless: processCommit ignores a seq
//     below lastSeq, and one equal to it unless that commit is still
//     pending (every event so far matched nothing); an event under
//     another epoch makes it re-read the partition in SQL.
//
// While the connection is down, FallbackPollInterval polls stand in for
// the events (watchBus); once it is back, the tail's OnGap polls once
// more after the subscription is live again.
func (h *Hub) Start(ctx context.Context) error {
	if h.ctx.Err() != nil {
		return ErrHubStopped
	}
	if !h.started.CompareAndSwap(false, true) {
		return errors.New("realtime hub already started")
	}
	h.work = make([]chan work, h.cfg.Workers)
	for i := range h.work {
		h.work[i] = make(chan work, 1024)
		h.goBG(func() { h.runWorker(h.work[i]) })
	}
	h.goBG(h.acks.run)
	if err := h.presence.start(); err != nil {
		h.cancel()
		h.bg.Wait()
		return fmt.Errorf("start realtime: %w", err)
	}
	h.busUp.Store(h.cfg.Conn.IsConnected())
	// The status listener goes first, so a drop right after the subscribe
	// is seen.
	status := h.cfg.Conn.StatusChanged()
	t, err := bus.TailCommits(h.cfg.Conn, h.cfg.Names, bus.TailConfig{
		OnEvent: h.onEvent, OnGap: h.onGap, Logger: h.log,
		PendingMsgs: h.cfg.TailPendingMsgs, PendingBytes: h.cfg.TailPendingBytes,
	})
	if err != nil {
		h.cfg.Conn.RemoveStatusListener(status)
		h.presence.stop()
		h.cancel()
		h.bg.Wait()
		return fmt.Errorf("start realtime: %w", err)
	}
	h.tail = t
	h.goBG(func() { h.watchBus(status) })
	h.goBG(h.heartbeats)
	return nil
}

func (h *Hub) goBG(fn func()) {
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		fn()
	}()
}

// Stop refuses new sockets, closes every open one with 1001 (going away),
// waits for their handlers, persists pending acks and leaves the bus. It
// is idempotent.
func (h *Hub) Stop(ctx context.Context) error {
	h.stop.Do(func() {
		h.mu.Lock()
		h.stopping = true
		all := make([]*session, 0, len(h.sessions))
		for s := range h.sessions {
			all = append(all, s)
		}
		h.mu.Unlock()
		var ferr error
		if h.tail != nil {
			ferr = h.tail.Stop(ctx)
		}
		for _, s := range all {
			s.close(statusGoingAway, "server shutting down")
		}
		if err := h.conns.Wait(ctx); err != nil {
			h.stopErr = fmt.Errorf("stop realtime: sockets still closing: %w", err)
		}
		h.acks.flush(ctx)
		h.presence.stop()
		h.cancel()
		h.bg.Wait()
		h.stopErr = errors.Join(h.stopErr, ferr)
	})
	return h.stopErr
}

// GateChanged re-reads a partition ("" for every partition) in SQL after
// its serve gate changed: a rotated epoch or a refusing gate answers its
// sessions with reset-required. It does not block (gate.Config.OnChange).
func (h *Hub) GateChanged(partition string) {
	go h.checkAll(workCheck, partition)
}

// RefreshScopes re-resolves, now, the registrations of the partition's
// sessions — of actorID's only, when it is not "" — instead of at their
// next round: the host changed what an actor may see (SPEC.md §8.7). It
// fails closed: a session whose resolution or client record read fails
// loses every registration until its next round. Presence follows the new
// registrations.
func (h *Hub) RefreshScopes(ctx context.Context, partition, actorID string) {
	for _, s := range h.partitionSessions(partition) {
		if actorID == "" || s.ident.ActorID == actorID {
			s.refresh(ctx, true)
		}
	}
}

// checkAll queues a check of one partition, or of all when partition is
// "".
func (h *Hub) checkAll(kind workKind, partition string) {
	h.mu.Lock()
	var ids []string
	for id := range h.parts {
		if partition == "" || id == partition {
			ids = append(ids, id)
		}
	}
	h.mu.Unlock()
	for _, id := range ids {
		h.enqueue(work{kind: kind, part: id})
	}
}

func (h *Hub) enqueue(w work) {
	if h.work == nil {
		return
	}
	f := fnv.New32a()
	_, _ = f.Write([]byte(w.part))
	select {
	case h.work[f.Sum32()%uint32(len(h.work))] <- w:
	case <-h.ctx.Done():
	}
}

// onEvent receives every commit event, in publish order, and hands those
// of partitions with sessions to the partition's worker. Blocking here
// fills the tail's pending queue; past its limits the tail drops events
// and onGap resyncs from SQL, which is the backpressure wanted: bounded
// memory, and sessions told to catch up rather than fed stale deltas.
func (h *Hub) onEvent(ev bus.TailEvent) {
	h.metrics.BusEvents.Add(1)
	id := ev.Partition.ID()
	h.mu.Lock()
	_, ok := h.parts[id]
	h.mu.Unlock()
	if ok {
		h.enqueue(work{kind: workCommit, part: id, epochTok: ev.LogEpoch, seq: ev.CommitSeq, table: ev.Table, data: ev.Data})
	}
}

// onGap is the tail's report that events may have been missed (dropped
// as a slow consumer, or published while the connection was down): every
// partition with sessions is read in SQL and its sessions behind the log
// are woken (workPoll), as while the bus is down.
func (h *Hub) onGap(bus.Gap) {
	h.checkAll(workPoll, "")
	h.metrics.TailGaps.Add(1)
}

func (h *Hub) runWorker(ch chan work) {
	for {
		select {
		case <-h.ctx.Done():
			return
		case w := <-ch:
			if w.kind == workCommit {
				h.processCommit(w)
			} else {
				h.checkPartition(w)
			}
		}
	}
}

func (h *Hub) lookup(id string) *partState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.parts[id]
}

// note is one commit as every session of its partition sees it.
type note struct {
	seq   int64
	epoch string
	// commit is nil when it could not be read (pruned, or SQL failed):
	// sessions are woken instead.
	commit *storage.Commit
	// skipped marks a commit not read: none of its changes could match a
	// session's registrations when its events arrived.
	skipped bool
	refused bool // the gate refuses the partition
	// deltas caches encoded deltas by wire version and registrations:
	// sessions registered alike share one encoding. Only the partition's
	// worker touches it.
	deltas map[string]encodedDelta
}

// processCommit handles one event of a commit. A commit is read from SQL
// once, at the first of its events that some session's registrations
// may match; a commit none of whose events may is observed unread when
// the next commit's event shows it complete.
func (h *Hub) processCommit(w work) {
	p := h.lookup(w.part)
	if p == nil {
		return
	}
	p.mu.Lock()
	if w.epochTok != p.epochTok {
		p.mu.Unlock()
		h.checkPartition(work{kind: workCheck, part: w.part})
		return
	}
	if w.seq < p.lastSeq || (w.seq == p.lastSeq && p.pend != w.seq) {
		p.mu.Unlock()
		return
	}
	var done int64 // a complete commit no session could match
	if w.seq > p.lastSeq {
		done, p.pend, p.lastSeq = p.pend, 0, w.seq
	}
	epoch := p.epoch
	sessions := p.snapshot()
	p.mu.Unlock()
	if done != 0 {
		h.metrics.CommitsSkipped.Add(1)
		skip := &note{seq: done, epoch: epoch, skipped: true}
		for _, s := range sessions {
			s.deliver(skip)
		}
	}
	if len(sessions) == 0 {
		return
	}
	if !mayMatch(sessions, w.table, w.data) {
		p.mu.Lock()
		p.pend = w.seq
		p.mu.Unlock()
		return
	}
	p.mu.Lock()
	p.pend = 0
	p.mu.Unlock()
	h.readAndDeliver(w.part, w.seq, epoch, sessions)
}

// readAndDeliver reads commit seq and answers the sessions with it.
func (h *Hub) readAndDeliver(part string, seq int64, epoch string, sessions []*session) {
	h.metrics.CommitReads.Add(1)
	n := &note{seq: seq, epoch: epoch, deltas: map[string]encodedDelta{}}
	ctx, cancel := context.WithTimeout(h.ctx, sqlTimeout)
	defer cancel()
	cs, err := h.cfg.Store.CommitRange(ctx, part, seq-1, 1)
	switch {
	case err != nil:
		h.log.Warn("realtime: read commit; waking its sessions", "partition", part, "seq", seq, "err", err)
	case len(cs) == 1 && cs[0].CommitSeq == seq:
		n.commit = &cs[0]
	default:
		h.log.Debug("realtime: commit no longer in the log; waking its sessions", "partition", part, "seq", seq)
	}
	if n.commit != nil {
		n.refused, n.commit = h.refused(ctx, part, n.epoch, n.commit)
	}
	for _, s := range sessions {
		s.deliver(n)
	}
}

// mayMatch reports whether one event's changes (to table, as its body
// lists them) may match a session's registrations: the registration's
// table and every scope variable it constrains (Registration.Matches). A
// body that does not say — changes omitted, unreadable — may.
func mayMatch(sessions []*session, table string, data []byte) bool {
	var scopes []map[string]string
	read := false
	for _, s := range sessions {
		s.mu.Lock()
		regs := s.regs
		s.mu.Unlock()
		for i := range regs {
			r := &regs[i]
			if r.Table != table {
				continue
			}
			if !read {
				var ok bool
				if scopes, ok = changeScopes(data); !ok {
					return true
				}
				read = true
			}
			for _, sc := range scopes {
				if r.Matches(&storage.Change{Table: table, Scopes: sc}) {
					return true
				}
			}
		}
	}
	return false
}

// changeScopes returns the scopes of each change a CommitBody lists, or
// false when it cannot tell for sure. It scans for the "scopes" objects
// instead of decoding the body, whose rows are most of it: the body is
// bus.Encoder's compact JSON, in which that key can appear raw (not
// inside a string) only as a change's scopes or inside a json column's
// value — so finding exactly changeCount of them, each a flat object of
// escape-free strings, is the changes' scopes; anything else (other
// formatting, changes omitted, an escape) answers false.
func changeScopes(data []byte) ([]map[string]string, bool) {
	const countKey, scopesKey = `"changeCount":`, `"scopes":{`
	i := bytes.Index(data, []byte(countKey))
	if i < 0 {
		return nil, false
	}
	rest := data[i+len(countKey):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	want, err := strconv.Atoi(string(rest[:j]))
	// Each change's scopes take at least len(scopesKey) bytes, so a
	// count the body cannot hold is refused before it sizes anything.
	if err != nil || want < 1 || want > len(data)/len(scopesKey) {
		return nil, false
	}
	rest = rest[j:]
	out := make([]map[string]string, 0, want)
	for {
		k := bytes.Index(rest, []byte(scopesKey))
		if k < 0 {
			break
		}
		if len(out) == want {
			return nil, false
		}
		rest = rest[k+len(scopesKey):]
		m := map[string]string{}
		for len(rest) > 0 && rest[0] != '}' {
			if len(m) > 0 {
				if rest[0] != ',' {
					return nil, false
				}
				rest = rest[1:]
			}
			key, r, ok := plainString(rest)
			if !ok || len(r) == 0 || r[0] != ':' {
				return nil, false
			}
			val, r, ok := plainString(r[1:])
			if !ok {
				return nil, false
			}
			m[key], rest = val, r
		}
		if len(rest) == 0 {
			return nil, false
		}
		out = append(out, m)
	}
	if len(out) != want {
		return nil, false
	}
	return out, true
}

// plainString reads a JSON string without escapes at the start of b.
func plainString(b []byte) (string, []byte, bool) {
	if len(b) == 0 || b[0] != '"' {
		return "", nil, false
	}
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			return "", nil, false
		case '"':
			return string(b[1:i]), b[i+1:], true
		}
	}
	return "", nil, false
}

// refused asks the gate whether the partition may be served: a refusal
// (sync.schema_not_ready) reports true; another failure drops the commit
// so its sessions are woken.
func (h *Hub) refused(ctx context.Context, partition, epoch string, c *storage.Commit) (bool, *storage.Commit) {
	if h.cfg.Gate == nil {
		return false, c
	}
	_, err := h.cfg.Gate.AdmitAt(ctx, partition, epoch)
	switch {
	case err == nil:
		return false, c
	case ssp2.CodeOf(err) == ssp2.CodeSchemaNotReady:
		return true, c
	}
	h.log.Warn("realtime: serve gate; waking the partition's sessions", "partition", partition, "err", err)
	return false, nil
}

// checkPartition reads the partition in SQL and answers its sessions:
// reset-required to those on another epoch or when the gate refuses, and,
// for polls, catchup-required to those behind the log.
func (h *Hub) checkPartition(w work) {
	p := h.lookup(w.part)
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(h.ctx, sqlTimeout)
	defer cancel()
	part, err := h.cfg.Store.PartitionGet(ctx, w.part)
	h.metrics.PartitionChecks.Add(1)
	if err != nil {
		h.log.Warn("realtime: read partition", "partition", w.part, "err", err)
		return
	}
	refused := false
	if h.cfg.Gate != nil {
		_, err := h.cfg.Gate.AdmitAt(ctx, w.part, part.LogEpoch)
		refused = ssp2.CodeOf(err) == ssp2.CodeSchemaNotReady
	}
	p.mu.Lock()
	if part.LogEpoch != p.epoch {
		// A new epoch: whatever the relay republishes under it up to here
		// is history, not news.
		p.epoch, p.epochTok, p.lastSeq, p.pend = part.LogEpoch, bus.EpochToken(part.LogEpoch), part.MaxCommitSeq, 0
	}
	var wakeBelow int64
	switch w.kind {
	case workPoll:
		wakeBelow = part.MaxCommitSeq
		p.lastSeq = max(p.lastSeq, part.MaxCommitSeq)
	case workResync:
		wakeBelow, p.pollMax = p.pollMax, part.MaxCommitSeq
	}
	// A skipped commit still waiting for the next one to show it complete
	// when the log has held it an interval (or the bus is down) is read,
	// as it would have been at once, rather than woken for.
	pend, epoch := p.pend, p.epoch
	if pend != 0 && pend <= wakeBelow {
		p.pend = 0
	} else {
		pend = 0
	}
	sessions := p.snapshot()
	p.mu.Unlock()
	if pend != 0 {
		h.readAndDeliver(w.part, pend, epoch, sessions)
	}
	for _, s := range sessions {
		s.check(part.LogEpoch, part.MaxCommitSeq, refused, wakeBelow)
	}
}

// watchBus follows the NATS connection: while it is down, partitions are
// polled in SQL; when it is back, presence is re-synchronized. Every
// resync interval, sessions that missed a commit the log held an interval
// ago are woken.
func (h *Hub) watchBus(status chan nats.Status) {
	defer h.cfg.Conn.RemoveStatusListener(status)
	poll := time.NewTicker(h.cfg.FallbackPollInterval)
	defer poll.Stop()
	var resync <-chan time.Time
	if h.cfg.ResyncInterval > 0 {
		t := time.NewTicker(h.cfg.ResyncInterval)
		defer t.Stop()
		resync = t.C
	}
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-status:
			h.busState()
		case <-poll.C:
			if !h.busState() {
				h.checkAll(workPoll, "")
			}
		case <-resync:
			h.checkAll(workResync, "")
		}
	}
}

// busState records whether the connection is up and reacts to a change.
func (h *Hub) busState() bool {
	up := h.cfg.Conn.IsConnected()
	was := h.busUp.Swap(up)
	switch {
	case was && !up:
		h.log.Warn("realtime: NATS connection lost; waking sessions from SQL until it is back")
		h.checkAll(workPoll, "")
	case !was && up:
		h.log.Info("realtime: NATS connection back; following commit events again")
		h.presence.resync()
	}
	return up
}

func (h *Hub) heartbeats() {
	t := time.NewTicker(h.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
			h.mu.Lock()
			all := make([]*session, 0, len(h.sessions))
			for s := range h.sessions {
				all = append(all, s)
			}
			h.mu.Unlock()
			for _, s := range all {
				s.beat()
			}
		}
	}
}

// limitError refuses a connect with sync.websocket_connection_limit.
func limitError(format string, args ...any) error {
	return ssp2.Errorf(ssp2.CodeWebsocketLimit, format, args...)
}

// admit reserves a socket for (partition, client id) under the caps; the
// returned release gives it back.
func (h *Hub) admit(k clientKey) (func(), error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.stopping:
		return nil, limitError("the server is shutting down")
	case h.admitted >= h.cfg.MaxConnections:
		return nil, limitError("this node holds its maximum of %d realtime connections", h.cfg.MaxConnections)
	case h.perClient[k] >= h.cfg.MaxConnectionsPerClient:
		return nil, limitError("this client holds its maximum of %d realtime connections", h.cfg.MaxConnectionsPerClient)
	}
	h.admitted++
	h.perClient[k]++
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.admitted--
			if h.perClient[k]--; h.perClient[k] <= 0 {
				delete(h.perClient, k)
			}
		})
	}, nil
}

// register adds an attached session to its partition and queues its hello:
// what it has observed is the partition's latest seq as SQL or the bus
// last showed it, whichever is higher.
func (h *Hub) register(s *session, a engine.Attachment) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping {
		return limitError("the server is shutting down")
	}
	id := a.Partition.ID
	p := h.parts[id]
	fresh := p == nil
	if fresh {
		p = &partState{id: id, epoch: a.Partition.LogEpoch, epochTok: bus.EpochToken(a.Partition.LogEpoch),
			lastSeq: a.Partition.MaxCommitSeq, pollMax: a.Partition.MaxCommitSeq, sessions: map[*session]struct{}{}}
		h.parts[id] = p
	}
	p.mu.Lock()
	s.part = p
	s.start(a, max(a.Partition.MaxCommitSeq, p.lastSeq))
	p.sessions[s] = struct{}{}
	stale := p.epoch != a.Partition.LogEpoch
	p.mu.Unlock()
	h.sessions[s] = struct{}{}
	if stale && !fresh {
		go h.enqueue(work{kind: workCheck, part: id})
	}
	return nil
}

func (h *Hub) unregister(s *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.sessions, s)
	if p := s.part; p != nil {
		p.mu.Lock()
		delete(p.sessions, s)
		if len(p.sessions) == 0 && h.parts[p.id] == p {
			delete(h.parts, p.id)
		}
		p.mu.Unlock()
	}
}

// partitionSessions returns the sessions of a partition now.
func (h *Hub) partitionSessions(id string) []*session {
	p := h.lookup(id)
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snapshot()
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
