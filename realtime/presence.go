package realtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/ssp2"
)

// peerID is who a presence document belongs to: last publish wins per
// (scope key, actor, client), whichever connection made it (SPEC.md
// §8.6.1).
type peerID struct{ actor, client string }

type presenceKey struct{ partition, scopeKey string }

// presenceDoc is one peer's document on one key, and the connection that
// published it: a session of this node (local) or one of another node.
type presenceDoc struct {
	local   *session
	node    string
	session string
	doc     json.RawMessage
	gen     uint64 // the resync generation that last confirmed a remote doc
}

// presenceWire is a presence change between nodes, on
// syncrt.<partition>.presence. Doc null is a leave.
type presenceWire struct {
	Node      string          `json:"node"`
	Session   string          `json:"session"`
	Partition string          `json:"partition"`
	ScopeKey  string          `json:"scopeKey"`
	ActorID   string          `json:"actorId"`
	ClientID  string          `json:"clientId"`
	Doc       json.RawMessage `json:"doc"`
}

// nodeWire is an alive announcement or a sync request.
type nodeWire struct {
	Node string `json:"node"`
}

// presence is the hub's presence registry (SPEC.md §8.6.4): in memory
// only, shared with the other nodes over core NATS.
type presence struct {
	h     *Hub
	mu    sync.Mutex
	docs  map[presenceKey]map[peerID]*presenceDoc
	owned map[*session]map[string]struct{} // scope keys each local session holds a document on
	nodes map[string]time.Time             // other nodes, last heard from
	gen   uint64
	subs  []*nats.Subscription
	sync  chan struct{} // a resync is due (start, reconnect)
}

func newPresence(h *Hub) *presence {
	return &presence{h: h, docs: map[presenceKey]map[peerID]*presenceDoc{}, owned: map[*session]map[string]struct{}{},
		nodes: map[string]time.Time{}, sync: make(chan struct{}, 1)}
}

func (p *presence) start() error {
	nc := p.h.cfg.Conn
	for subject, fn := range map[string]nats.MsgHandler{
		p.h.cfg.Names.Presence():      p.onChange,
		p.h.cfg.Names.PresenceAlive(): p.onAlive,
		p.h.cfg.Names.PresenceSync():  p.onSyncRequest,
	} {
		sub, err := nc.Subscribe(subject, fn)
		if err != nil {
			p.stop()
			return fmt.Errorf("presence: subscribe %s: %w", subject, err)
		}
		p.subs = append(p.subs, sub)
	}
	p.resync()
	p.h.goBG(p.run)
	return nil
}

func (p *presence) stop() {
	for _, s := range p.subs {
		_ = s.Unsubscribe()
	}
	p.subs = nil
}

// resync asks, soon, every node for its documents again and drops the
// remote documents not re-announced by then.
func (p *presence) resync() {
	select {
	case p.sync <- struct{}{}:
	default:
	}
}

func (p *presence) run() {
	alive := time.NewTicker(p.h.cfg.PresenceAliveInterval)
	defer alive.Stop()
	var sweep <-chan time.Time
	var sweepGen uint64
	for {
		select {
		case <-p.h.ctx.Done():
			return
		case <-p.sync:
			p.mu.Lock()
			p.gen++
			sweepGen = p.gen
			p.mu.Unlock()
			p.broadcast(p.h.cfg.Names.PresenceSync())
			p.announceAll()
			sweep = time.After(2 * p.h.cfg.PresenceAliveInterval)
		case <-sweep:
			sweep = nil
			p.expire(func(d *presenceDoc) bool { return d.gen < sweepGen })
		case <-alive.C:
			p.broadcast(p.h.cfg.Names.PresenceAlive())
			cutoff := time.Now().Add(-3 * p.h.cfg.PresenceAliveInterval)
			p.mu.Lock()
			gone := map[string]bool{}
			for n, seen := range p.nodes {
				if seen.Before(cutoff) {
					gone[n] = true
					delete(p.nodes, n)
				}
			}
			p.mu.Unlock()
			if len(gone) > 0 {
				p.expire(func(d *presenceDoc) bool { return gone[d.node] })
			}
		}
	}
}

func (p *presence) broadcast(subject string) {
	b, _ := json.Marshal(nodeWire{Node: p.h.node})
	if err := p.h.cfg.Conn.Publish(subject, b); err != nil {
		p.h.log.Debug("realtime: presence broadcast", "subject", subject, "err", err)
	}
}

// publish handles a client's publish or leave (SPEC.md §8.6.2–§8.6.3).
func (p *presence) publish(s *session, m *ssp2.PresencePublish) {
	switch {
	case !s.holds(m.ScopeKey):
		p.reject(s, m.ScopeKey, ssp2.PresenceForbidden)
	case m.Doc == nil:
		p.leave(s, m.ScopeKey)
	case len(bytes.TrimSpace(m.Doc)) > p.h.cfg.MaxPresenceBytes:
		p.reject(s, m.ScopeKey, ssp2.PresenceTooLarge)
	default:
		p.set(s, m.ScopeKey, bytes.TrimSpace(m.Doc))
	}
}

func (p *presence) reject(s *session, key string, code ssp2.PresenceErrorCode) {
	b, err := ssp2.MarshalControl(&ssp2.PresenceError{ScopeKey: key, Code: code, Timestamp: p.h.nowMs()})
	if err == nil {
		s.send(kindControl, b)
	}
}

func (p *presence) set(s *session, key string, doc json.RawMessage) {
	k, peer := presenceKey{s.part.id, key}, peerID{s.ident.ActorID, s.clientID}
	doc = append(json.RawMessage(nil), doc...)
	p.mu.Lock()
	m := p.docs[k]
	if m == nil {
		m = map[peerID]*presenceDoc{}
		p.docs[k] = m
	}
	kind := ssp2.PresenceJoin
	if old := m[peer]; old != nil {
		kind = ssp2.PresenceUpdate
		p.disown(old, key)
	}
	m[peer] = &presenceDoc{local: s, node: p.h.node, session: s.id, doc: doc}
	if p.owned[s] == nil {
		p.owned[s] = map[string]struct{}{}
	}
	p.owned[s][key] = struct{}{}
	p.mu.Unlock()
	p.fanout(k, peer, kind, doc, s)
	p.announce(k, peer, s.id, doc)
}

// disown forgets that a local session owns d (under p.mu).
func (p *presence) disown(d *presenceDoc, key string) {
	if d.local != nil {
		delete(p.owned[d.local], key)
		if len(p.owned[d.local]) == 0 {
			delete(p.owned, d.local)
		}
	}
}

// leave removes s's document on key, if s still owns it, and tells the
// peers.
func (p *presence) leave(s *session, key string) {
	k, peer := presenceKey{s.part.id, key}, peerID{s.ident.ActorID, s.clientID}
	p.mu.Lock()
	d := p.docs[k][peer]
	if d == nil || d.local != s {
		p.mu.Unlock()
		return
	}
	p.remove(k, peer, d)
	p.mu.Unlock()
	p.fanout(k, peer, ssp2.PresenceLeave, nil, s)
	p.announce(k, peer, s.id, nil)
}

// remove deletes a document (under p.mu).
func (p *presence) remove(k presenceKey, peer peerID, d *presenceDoc) {
	p.disown(d, k.scopeKey)
	delete(p.docs[k], peer)
	if len(p.docs[k]) == 0 {
		delete(p.docs, k)
	}
}

// dropAll leaves every key s holds a document on: the connection closed.
func (p *presence) dropAll(s *session) {
	p.mu.Lock()
	keys := keysOf(p.owned[s])
	p.mu.Unlock()
	for _, k := range keys {
		p.leave(s, k)
	}
}

// reconcile follows a registration change (SPEC.md §8.6.3): documents on
// keys s no longer holds leave, keys it newly holds get the snapshot.
func (p *presence) reconcile(s *session, prev map[string]struct{}) {
	cur := s.heldKeys()
	for _, k := range keysOf(prev) {
		if _, ok := cur[k]; !ok {
			p.leave(s, k)
		}
	}
	for _, k := range keysOf(cur) {
		if _, ok := prev[k]; !ok {
			p.snapshot(s, k)
		}
	}
}

// burst sends a newly connected session the peers present on its keys.
func (p *presence) burst(s *session) {
	for _, k := range keysOf(s.heldKeys()) {
		p.snapshot(s, k)
	}
}

// snapshot sends s one join per peer already present on key (SPEC.md
// §8.6.4).
func (p *presence) snapshot(s *session, key string) {
	type entry struct {
		peer peerID
		doc  json.RawMessage
	}
	var out []entry
	p.mu.Lock()
	for peer, d := range p.docs[presenceKey{s.part.id, key}] {
		if d.local != s {
			out = append(out, entry{peer, d.doc})
		}
	}
	p.mu.Unlock()
	for _, e := range out {
		p.deliver(s, key, e.peer, ssp2.PresenceJoin, e.doc)
	}
}

// fanout sends a change to every session of this node registered on the
// key, except the one that made it: presence is visible exactly to the
// key's scope-mates (SPEC.md §8.6.3).
func (p *presence) fanout(k presenceKey, peer peerID, kind ssp2.PresenceKind, doc json.RawMessage, except *session) {
	for _, s := range p.h.partitionSessions(k.partition) {
		if s != except && s.holds(k.scopeKey) {
			p.deliver(s, k.scopeKey, peer, kind, doc)
		}
	}
}

func (p *presence) deliver(s *session, key string, peer peerID, kind ssp2.PresenceKind, doc json.RawMessage) {
	b, err := ssp2.MarshalControl(&ssp2.PresenceFanout{ScopeKey: key, Kind: kind, ActorID: peer.actor, ClientID: peer.client, Doc: doc, Timestamp: p.h.nowMs()})
	if err != nil {
		p.h.log.Warn("realtime: encode presence", "err", err)
		return
	}
	s.send(kindPresence, b)
}

// announce tells the other nodes about a local change.
func (p *presence) announce(k presenceKey, peer peerID, sessionID string, doc json.RawMessage) {
	part, err := bus.NewPartition(k.partition)
	if err != nil {
		return
	}
	if doc == nil {
		doc = json.RawMessage("null")
	}
	b, err := json.Marshal(presenceWire{Node: p.h.node, Session: sessionID, Partition: k.partition, ScopeKey: k.scopeKey,
		ActorID: peer.actor, ClientID: peer.client, Doc: doc})
	if err != nil {
		return
	}
	if err := p.h.cfg.Conn.Publish(p.h.cfg.Names.PresenceSubject(part), b); err != nil {
		p.h.log.Debug("realtime: publish presence", "err", err)
	}
}

// announceAll re-announces every local document.
func (p *presence) announceAll() {
	type entry struct {
		k       presenceKey
		peer    peerID
		session string
		doc     json.RawMessage
	}
	var out []entry
	p.mu.Lock()
	for k, m := range p.docs {
		for peer, d := range m {
			if d.local != nil {
				out = append(out, entry{k, peer, d.session, d.doc})
			}
		}
	}
	p.mu.Unlock()
	for _, e := range out {
		p.announce(e.k, e.peer, e.session, e.doc)
	}
}

// onChange applies another node's presence change.
func (p *presence) onChange(msg *nats.Msg) {
	var w presenceWire
	if err := json.Unmarshal(msg.Data, &w); err != nil || w.Node == "" || w.ScopeKey == "" {
		p.h.log.Debug("realtime: skipping a malformed presence message", "subject", msg.Subject)
		return
	}
	if w.Node == p.h.node {
		return
	}
	leave := len(w.Doc) == 0 || string(w.Doc) == "null"
	if !leave && (w.Doc[0] != '{' || len(w.Doc) > p.h.cfg.MaxPresenceBytes) {
		return
	}
	k, peer := presenceKey{w.Partition, w.ScopeKey}, peerID{w.ActorID, w.ClientID}
	var kind ssp2.PresenceKind
	p.mu.Lock()
	p.nodes[w.Node] = time.Now()
	d := p.docs[k][peer]
	same := d != nil && d.local == nil && d.node == w.Node && d.session == w.Session
	switch {
	case leave && same:
		p.remove(k, peer, d)
		kind = ssp2.PresenceLeave
	case leave:
	case same && bytes.Equal(d.doc, w.Doc):
		d.gen = p.gen
	default:
		kind = ssp2.PresenceJoin
		if d != nil {
			kind = ssp2.PresenceUpdate
			p.disown(d, k.scopeKey)
		}
		if p.docs[k] == nil {
			p.docs[k] = map[peerID]*presenceDoc{}
		}
		p.docs[k][peer] = &presenceDoc{node: w.Node, session: w.Session, doc: w.Doc, gen: p.gen}
	}
	p.mu.Unlock()
	if kind == ssp2.PresenceLeave {
		w.Doc = nil
	}
	if kind != "" {
		p.fanout(k, peer, kind, w.Doc, nil)
	}
}

func (p *presence) onAlive(msg *nats.Msg) {
	var w nodeWire
	if json.Unmarshal(msg.Data, &w) != nil || w.Node == "" || w.Node == p.h.node {
		return
	}
	p.mu.Lock()
	p.nodes[w.Node] = time.Now()
	p.mu.Unlock()
}

// onSyncRequest answers a node that (re)joined with every local document.
func (p *presence) onSyncRequest(msg *nats.Msg) {
	var w nodeWire
	if json.Unmarshal(msg.Data, &w) != nil || w.Node == "" || w.Node == p.h.node {
		return
	}
	p.announceAll()
}

// expire drops the remote documents drop selects and tells the local
// peers they left.
func (p *presence) expire(drop func(*presenceDoc) bool) {
	type entry struct {
		k    presenceKey
		peer peerID
	}
	var gone []entry
	p.mu.Lock()
	for k, m := range p.docs {
		for peer, d := range m {
			if d.local == nil && drop(d) {
				gone = append(gone, entry{k, peer})
			}
		}
	}
	for _, e := range gone {
		p.remove(e.k, e.peer, p.docs[e.k][e.peer])
	}
	p.mu.Unlock()
	for _, e := range gone {
		p.fanout(e.k, e.peer, ssp2.PresenceLeave, nil, nil)
	}
}
