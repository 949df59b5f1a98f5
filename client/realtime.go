package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/syncnode/syncnode/ssp2"
)

// Realtime defaults (SPEC.md §8.4, §8.5).
const (
	DefaultHeartbeatTimeout = 60 * time.Second // twice the server's 30 s heartbeat
	DefaultReconnectMin     = time.Second
	DefaultReconnectMax     = 30 * time.Second
	DefaultWakeJitter       = 2 * time.Second
	DefaultMaxMessageBytes  = 64 << 20
)

// RealtimeConfig configures a realtime session.
type RealtimeConfig struct {
	// HeartbeatTimeout ends a connection that heard nothing for this long
	// and reconnects (default 60s).
	HeartbeatTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the reconnect backoff: it
	// starts at ReconnectMin, doubles per failed attempt up to
	// ReconnectMax, and each wait is drawn uniformly from its upper half
	// (defaults 1s and 30s). A failed recovery round is retried on the
	// same schedule.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// WakeJitter is the largest random delay before the round that
	// answers hello.requiresSync, a wake-up or a dropped delta, so a
	// fleet woken together does not pull together (default 2s; negative:
	// none).
	WakeJitter time.Duration
	// MaxMessageBytes bounds one message read from the socket (default 64
	// MiB).
	MaxMessageBytes int64

	// PresenceFunc is called with every presence event of a peer on a
	// scope key this connection holds, after Peers reflects it;
	// PresenceErrorFunc with the server's refusals of this client's
	// publishes (SPEC.md §8.6). Both run on the session's goroutine.
	PresenceFunc      func(*ssp2.PresenceFanout)
	PresenceErrorFunc func(*ssp2.PresenceError)
	// StateFunc is called on every change of Status.
	StateFunc func(RealtimeStatus)

	Logger *slog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c RealtimeConfig) WithDefaults() RealtimeConfig {
	setD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	setD(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	setD(&c.ReconnectMin, DefaultReconnectMin)
	setD(&c.ReconnectMax, DefaultReconnectMax)
	setD(&c.WakeJitter, DefaultWakeJitter)
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate refuses bad values with field-specific errors.
func (c RealtimeConfig) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("realtime config: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.HeartbeatTimeout < time.Millisecond {
		bad("HeartbeatTimeout", "%v is below 1ms", c.HeartbeatTimeout)
	}
	if c.ReconnectMin < time.Millisecond || c.ReconnectMax < c.ReconnectMin {
		bad("ReconnectMin", "%v must be at least 1ms and at most ReconnectMax %v", c.ReconnectMin, c.ReconnectMax)
	}
	if c.MaxMessageBytes < 1<<10 {
		bad("MaxMessageBytes", "%d is below 1 KiB", c.MaxMessageBytes)
	}
	return errors.Join(errs...)
}

// RealtimeState names the state of a realtime session (SPEC.md §8.8).
type RealtimeState string

// Realtime states.
const (
	// RealtimeConnecting: a connect attempt is in flight.
	RealtimeConnecting RealtimeState = "connecting"
	// RealtimeConnected: the socket is open; rounds ride it.
	RealtimeConnected RealtimeState = "connected"
	// RealtimeLost: a connection ended without Stop; a reconnect is
	// scheduled.
	RealtimeLost RealtimeState = "lost"
	// RealtimeRefused: a connect attempt failed; another is scheduled.
	RealtimeRefused RealtimeState = "refused"
	// RealtimeDisconnected: not started, or stopped.
	RealtimeDisconnected RealtimeState = "disconnected"
)

// RealtimeStatus is the session's state. Lost and refused carry the code
// that reported the failure (an SSP2 code such as
// sync.websocket_connection_limit, transport.failed, or
// client.realtime_lost) and the delay before the next attempt.
type RealtimeStatus struct {
	State      RealtimeState
	Reason     string
	RetryDelay time.Duration
	Err        error
}

// RealtimeStats counts what a session did.
type RealtimeStats struct {
	Connects int64 // connections that reached hello
	// Deltas counts deltas that applied; DeltasSkipped those with nothing
	// to apply (duplicates a round overtook, subscriptions not synced);
	// DeltasDropped those not applied at all (a full queue, a decode or
	// apply failure, or arriving while contiguity was broken), each of
	// which asks for a round.
	Deltas        int64
	DeltasSkipped int64
	DeltasDropped int64
	Wakes         int64 // wake-ups received
	Rounds        int64 // recovery rounds the session ran (each until idle)
	Acks          int64 // acks sent
}

type realtimeStats struct {
	connects, deltas, skipped, dropped, wakes, rounds, acks atomic.Int64
}

// Peer is another connection's presence on a scope key.
type Peer struct {
	ActorID  string
	ClientID string
	Doc      json.RawMessage
}

type peerKey struct{ actor, client string }

// Realtime is a client's realtime session (SPEC.md §8): it keeps a
// WebSocket to GET /realtime open, reconnecting with backoff; applies
// deltas to the replica through the rounds' streaming apply, in order and
// exactly once; acknowledges them; answers hello.requiresSync, wake-ups
// and dropped deltas with a round; carries the client's rounds while
// connected; and publishes and tracks presence.
//
// Contiguity is judged per connection, as the server guarantees it: a
// delta applies while no delta was dropped since the last round that
// completed on this connection, and per section only to a subscription
// that is active, synced and not bootstrapping and whose cursor it
// advances. A section whose commit the cursor already covers is a
// duplicate and is skipped; any other delta that does not apply asks for
// a round instead.
type Realtime struct {
	c          *Client
	cfg        RealtimeConfig
	log        *slog.Logger
	wsURL      *url.URL
	httpClient *http.Client
	stats      realtimeStats

	startOnce sync.Once
	stopOnce  sync.Once
	cancel    context.CancelFunc
	done      chan struct{}

	mu     sync.Mutex
	status RealtimeStatus
	docs   map[string]json.RawMessage // this client's presence, sent again after a reconnect
	peers  map[string]map[peerKey]Peer
}

// NewRealtime returns the client's realtime session, not yet started. A
// client has one session at a time.
func (c *Client) NewRealtime(cfg RealtimeConfig) (*Realtime, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u := *c.baseURL
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	hc := c.cfg.HTTPClient
	if hc.Timeout != 0 {
		// A socket lives longer than any request timeout.
		cp := *hc
		cp.Timeout = 0
		hc = &cp
	}
	rt := &Realtime{c: c, cfg: cfg, log: cfg.Logger, wsURL: u.JoinPath("realtime"), httpClient: hc,
		status: RealtimeStatus{State: RealtimeDisconnected},
		docs:   map[string]json.RawMessage{}, peers: map[string]map[peerKey]Peer{}}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rt != nil {
		return nil, errors.New("new realtime: the client already has a realtime session")
	}
	c.rt = rt
	return rt, nil
}

// url is the socket's address, with the client id.
func (rt *Realtime) url() string {
	u := *rt.wsURL
	u.RawQuery = url.Values{"clientId": {rt.c.ClientID()}}.Encode()
	return u.String()
}

// Start begins connecting in the background; the session runs until Stop
// or until ctx ends. Calling it again does nothing.
func (rt *Realtime) Start(ctx context.Context) error {
	rt.startOnce.Do(func() {
		ctx, rt.cancel = context.WithCancel(ctx)
		rt.done = make(chan struct{})
		go rt.run(ctx)
	})
	return nil
}

// Stop closes the socket with a normal closure and waits for the session
// to end; later rounds use POST /sync. It is idempotent, and the client
// may start a new session afterwards.
func (rt *Realtime) Stop(ctx context.Context) error {
	rt.stopOnce.Do(func() {
		rt.startOnce.Do(func() {}) // a session never started stays so
		if rt.cancel != nil {
			rt.cancel()
		}
	})
	if rt.done != nil {
		select {
		case <-rt.done:
		case <-ctx.Done():
			return fmt.Errorf("stop realtime: %w", ctx.Err())
		}
	}
	c := rt.c
	c.mu.Lock()
	if c.rt == rt {
		c.rt = nil
	}
	c.mu.Unlock()
	return nil
}

// Status returns the session's state.
func (rt *Realtime) Status() RealtimeStatus {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.status
}

// Stats returns the session's counters.
func (rt *Realtime) Stats() RealtimeStats {
	s := &rt.stats
	return RealtimeStats{Connects: s.connects.Load(), Deltas: s.deltas.Load(), DeltasSkipped: s.skipped.Load(),
		DeltasDropped: s.dropped.Load(), Wakes: s.wakes.Load(), Rounds: s.rounds.Load(), Acks: s.acks.Load()}
}

func (rt *Realtime) setStatus(st RealtimeStatus) {
	rt.mu.Lock()
	rt.status = st
	rt.mu.Unlock()
	if rt.cfg.StateFunc != nil {
		rt.cfg.StateFunc(st)
	}
}

// run connects, serves the connection until it ends, and reconnects with
// backoff until ctx ends.
func (rt *Realtime) run(ctx context.Context) {
	defer close(rt.done)
	defer rt.setStatus(RealtimeStatus{State: RealtimeDisconnected})
	failures := 0
	for ctx.Err() == nil {
		rt.setStatus(RealtimeStatus{State: RealtimeConnecting})
		state := RealtimeRefused
		s, err := rt.dial(ctx)
		if err == nil {
			state, failures = RealtimeLost, 0
			err = rt.serve(ctx, s)
		}
		if ctx.Err() != nil {
			return
		}
		delay := rt.backoff(failures)
		failures++
		reason := failureReason(err)
		rt.log.Info("realtime: "+string(state), "reason", reason, "retry", delay, "err", err)
		rt.setStatus(RealtimeStatus{State: state, Reason: reason, RetryDelay: delay, Err: err})
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// failureReason is the stable code of a failed or lost connection.
func failureReason(err error) string {
	var e *Error
	switch {
	case errors.As(err, &e) && e.Code != "":
		return string(e.Code)
	case websocket.CloseStatus(err) != -1, errors.Is(err, errHeartbeat):
		return "client.realtime_lost"
	}
	return "transport.failed"
}

// backoff is the wait before attempt n+1: ReconnectMin·2ⁿ capped at
// ReconnectMax, drawn from its upper half.
func (rt *Realtime) backoff(n int) time.Duration {
	d := rt.cfg.ReconnectMax
	if n < 30 {
		d = min(rt.cfg.ReconnectMin<<n, d)
	}
	return d/2 + rand.N(d/2+1)
}

// jitter is the delay before a recovery round.
func (rt *Realtime) jitter() time.Duration {
	if rt.cfg.WakeJitter <= 0 {
		return 0
	}
	return rand.N(rt.cfg.WakeJitter + 1)
}

// serve runs one connection until it ends: it drains the socket's queue
// in order, runs a round whenever the sync-needed signal is set, and
// carries the client's rounds while it lives.
func (rt *Realtime) serve(ctx context.Context, s *socket) error {
	c := rt.c
	go s.readLoop()
	defer func() {
		c.live.CompareAndSwap(s, nil)
		if ctx.Err() != nil {
			s.closeNormal()
		} else {
			s.fail(errStopped)
		}
		<-s.readDone
	}()
	rt.stats.connects.Add(1)
	rt.clearPeers()

	// A round first unless the server and the replica agree that nothing
	// was missed: hello says so, and no subscription is behind the
	// record's cursor or unsynced.
	needSync := s.hello.RequiresSync
	if _, top, ok := c.cursorFloor(); (!ok && c.hasSubscriptions()) || (ok && top < s.hello.Cursor) {
		needSync = true
	}
	s.mu.Lock()
	s.contiguous = !needSync
	s.wake = needSync
	s.mu.Unlock()
	c.live.Store(s)
	rt.setStatus(RealtimeStatus{State: RealtimeConnected})
	republish := true

	var timer *time.Timer
	var roundC <-chan time.Time
	schedule := func(d time.Duration) {
		if roundC == nil {
			timer = time.NewTimer(d)
			roundC = timer.C
		}
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	retries := 0
	for {
		if republish && !s.wakeSet() {
			rt.republish(ctx, s)
			republish = false
		}
		if s.wakeSet() {
			schedule(rt.jitter())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.dead:
			return s.cause
		case <-s.ready:
			rt.drain(ctx, s)
		case <-roundC:
			roundC = nil
			s.takeWake()
			rt.stats.rounds.Add(1)
			if _, err := c.SyncUntilIdle(ctx); err != nil {
				if s.err() != nil || ctx.Err() != nil {
					continue
				}
				var stop *SchemaUnsupportedError
				if errors.As(err, &stop) {
					rt.log.Error("realtime: the server no longer serves this schema; rounds stop", "err", err)
					continue
				}
				rt.log.Warn("realtime: round failed", "err", err)
				schedule(rt.backoff(retries))
				retries++
				continue
			}
			retries = 0
		}
	}
}

// drain handles the queued messages in arrival order.
func (rt *Realtime) drain(ctx context.Context, s *socket) {
	for {
		m, ok := s.pop()
		if !ok {
			return
		}
		switch {
		case m.presence != nil:
			rt.onPresence(m.presence)
		case m.presenceError != nil:
			if rt.cfg.PresenceErrorFunc != nil {
				rt.cfg.PresenceErrorFunc(m.presenceError)
			}
		default:
			rt.applyDelta(ctx, s, m.delta)
		}
	}
}

// applyDelta applies one delta and acknowledges it, or drops it and asks
// for a round (SPEC.md §8.2).
func (rt *Realtime) applyDelta(ctx context.Context, s *socket, msg []byte) {
	if !s.isContiguous() {
		s.drop()
		return
	}
	ack, needRound, res, err := rt.c.applyDelta(ctx, msg)
	// The stats count a delta before AppliedFunc reports it, so whoever
	// that report wakes sees the delta counted.
	switch {
	case err != nil:
	case res.Commits > 0:
		rt.stats.deltas.Add(1)
	default:
		rt.stats.skipped.Add(1)
	}
	rt.c.notifyApplied(res)
	if err != nil {
		rt.log.Warn("realtime: delta not applied", "err", err)
		s.drop()
		return
	}
	if needRound {
		s.setWake()
	}
	if ack > 0 {
		s.ack(ack)
	}
}

// Publish sets this client's presence document on a scope key it holds
// (SPEC.md §8.6); a nil doc leaves the key. The document is sent now when
// connected, and again after every reconnect. A refusal arrives at
// PresenceErrorFunc.
func (rt *Realtime) Publish(ctx context.Context, scopeKey string, doc json.RawMessage) error {
	b, err := ssp2.MarshalControl(&ssp2.PresencePublish{ScopeKey: scopeKey, Doc: doc})
	if err != nil {
		return fmt.Errorf("publish presence: %w", err)
	}
	rt.mu.Lock()
	if doc == nil {
		delete(rt.docs, scopeKey)
	} else {
		rt.docs[scopeKey] = slices.Clone(doc)
	}
	rt.mu.Unlock()
	s := rt.c.live.Load()
	if s == nil {
		return nil
	}
	if err := s.writeText(ctx, b); err != nil {
		return fmt.Errorf("publish presence: %w", err)
	}
	return nil
}

// republish sends this client's presence documents on a new connection.
func (rt *Realtime) republish(ctx context.Context, s *socket) {
	rt.mu.Lock()
	keys := make([]string, 0, len(rt.docs))
	for k := range rt.docs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	msgs := make([][]byte, 0, len(keys))
	for _, k := range keys {
		if b, err := ssp2.MarshalControl(&ssp2.PresencePublish{ScopeKey: k, Doc: rt.docs[k]}); err == nil {
			msgs = append(msgs, b)
		}
	}
	rt.mu.Unlock()
	for _, b := range msgs {
		if s.writeText(ctx, b) != nil {
			return
		}
	}
}

// Peers returns the other connections present on a scope key, ordered by
// actor and client id.
func (rt *Realtime) Peers(scopeKey string) []Peer {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make([]Peer, 0, len(rt.peers[scopeKey]))
	for _, p := range rt.peers[scopeKey] {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Peer) int {
		if c := strings.Compare(a.ActorID, b.ActorID); c != 0 {
			return c
		}
		return strings.Compare(a.ClientID, b.ClientID)
	})
	return out
}

func (rt *Realtime) onPresence(f *ssp2.PresenceFanout) {
	rt.mu.Lock()
	k := peerKey{f.ActorID, f.ClientID}
	if f.Kind == ssp2.PresenceLeave {
		delete(rt.peers[f.ScopeKey], k)
		if len(rt.peers[f.ScopeKey]) == 0 {
			delete(rt.peers, f.ScopeKey)
		}
	} else {
		if rt.peers[f.ScopeKey] == nil {
			rt.peers[f.ScopeKey] = map[peerKey]Peer{}
		}
		rt.peers[f.ScopeKey][k] = Peer{ActorID: f.ActorID, ClientID: f.ClientID, Doc: f.Doc}
	}
	rt.mu.Unlock()
	if rt.cfg.PresenceFunc != nil {
		rt.cfg.PresenceFunc(f)
	}
}

// clearPeers forgets every peer: a new connection receives the present
// ones again as a join burst (SPEC.md §8.6.2).
func (rt *Realtime) clearPeers() {
	rt.mu.Lock()
	rt.peers = map[string]map[peerKey]Peer{}
	rt.mu.Unlock()
}
