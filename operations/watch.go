package operations

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/lifecycle"
)

// MaxWatchesPerConnection bounds one watch session.
const MaxWatchesPerConnection = 256

// HubConfig configures the watch hub.
type HubConfig struct {
	Service *Service
	// Conn is the node's NATS connection, on which the hub follows the
	// live tail of commit events.
	Conn   *nats.Conn
	Names  bus.Names
	Logger *slog.Logger
}

// Hub runs the live query watches of REMOTE.md §6: it follows the commit
// events and re-runs every watch of the commit's partition whose query
// reads the commit's table.
//
// A re-run reads SQL, so all the hub needs of an event is (partition,
// table): it follows the live tail on core NATS (bus.TailCommits), which
// never loads events from the stream's file store (see bus/tail.go).
// A duplicate or stale event costs one extra re-run, coalesced with any
// running one; a gap (events dropped, or published while the connection
// was down) re-runs every watch, which is what having missed any commit
// of any table requires.
type Hub struct {
	cfg      HubConfig
	log      *slog.Logger
	mu       sync.Mutex
	watches  map[string]map[*watch]struct{} // partition → watches
	tail     *bus.Tail
	ctx      context.Context
	cancel   context.CancelFunc
	sessions lifecycle.Tasks
	metrics  HubMetrics
}

// HubMetrics count the hub's work.
type HubMetrics struct {
	Watches   atomic.Int64 // active
	Reruns    atomic.Int64
	Snapshots atomic.Int64
	// Gaps counts resyncs after commit events may have been missed: every
	// watch was re-run. Incremented once the re-runs are triggered.
	Gaps atomic.Int64
}

// NewHub returns a hub; Start follows the commit events.
func NewHub(cfg HubConfig) (*Hub, error) {
	if cfg.Service == nil || cfg.Conn == nil {
		return nil, errors.New("operations hub: Service and Conn are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Hub{cfg: cfg, log: cfg.Logger, watches: map[string]map[*watch]struct{}{}, ctx: ctx, cancel: cancel}, nil
}

// Metrics returns the hub's counters.
func (h *Hub) Metrics() *HubMetrics { return &h.metrics }

// Start follows the node's commit events.
func (h *Hub) Start(context.Context) error {
	t, err := bus.TailCommits(h.cfg.Conn, h.cfg.Names, bus.TailConfig{
		OnEvent: func(ev bus.TailEvent) { h.Committed(ev.Partition.ID(), ev.Table) },
		OnGap:   func(bus.Gap) { h.rerunAll() },
		Logger:  h.log,
	})
	if err != nil {
		return err
	}
	h.tail = t
	return nil
}

// rerunAll re-runs every watch: commits may have gone unseen.
func (h *Hub) rerunAll() {
	h.mu.Lock()
	var all []*watch
	for _, ws := range h.watches {
		for w := range ws {
			all = append(all, w)
		}
	}
	h.mu.Unlock()
	for _, w := range all {
		h.metrics.Reruns.Add(1)
		w.trigger()
	}
	h.metrics.Gaps.Add(1)
}

// Stop stops following and ends every session.
func (h *Hub) Stop(ctx context.Context) error {
	h.cancel()
	var err error
	if h.tail != nil {
		err = h.tail.Stop(ctx)
	}
	if werr := h.sessions.Wait(ctx); werr != nil {
		return werr
	}
	return err
}

// Committed re-runs the watches a commit to (partition, table) touches.
func (h *Hub) Committed(partition, table string) {
	h.mu.Lock()
	var touched []*watch
	for w := range h.watches[partition] {
		if slices.Contains(w.tables, table) {
			touched = append(touched, w)
		}
	}
	h.mu.Unlock()
	for _, w := range touched {
		h.metrics.Reruns.Add(1)
		w.trigger()
	}
}

// watch is one registered watch of a session.
type watch struct {
	s       *session
	id      string
	req     Request
	tables  []string
	mu      sync.Mutex
	running bool
	dirty   bool
	removed bool
}

type session struct {
	h       *Hub
	ctx     context.Context
	id      engine.Identity
	w       *socketWriter
	watches map[string]*watch
}

func (h *Hub) serve(rctx context.Context, conn *websocket.Conn, id engine.Identity) {
	if !h.sessions.Enter() {
		_ = conn.Close(websocket.StatusGoingAway, "the node is stopping")
		return
	}
	defer h.sessions.Done()
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	stop := context.AfterFunc(rctx, cancel)
	defer stop()
	s := &session{h: h, ctx: ctx, id: id, w: &socketWriter{conn: conn}, watches: map[string]*watch{}}
	defer s.close()
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			_ = conn.Close(websocket.StatusNormalClosure, "")
			return
		}
		s.handle(b)
	}
}

func (s *session) close() {
	for _, w := range s.watches {
		s.remove(w)
	}
}

func (s *session) remove(w *watch) {
	w.mu.Lock()
	w.removed = true
	w.mu.Unlock()
	s.h.mu.Lock()
	delete(s.h.watches[s.id.Partition], w)
	if len(s.h.watches[s.id.Partition]) == 0 {
		delete(s.h.watches, s.id.Partition)
	}
	s.h.mu.Unlock()
	delete(s.watches, w.id)
	s.h.metrics.Watches.Add(-1)
}

func (s *session) fail(watchID string, e *Error) {
	o := ErrorObject(e)
	if watchID != "" {
		o = append(o, Field{"watchId", watchID})
	}
	_ = s.w.send(s.ctx, o)
}

// handle runs one client message: watch or unwatch.
func (s *session) handle(b []byte) {
	v, err := Decode(b)
	if err != nil {
		s.fail("", errorf(CodeInvalidRequest, "%v", err))
		return
	}
	o, _ := v.(Object)
	wid, _ := o.Get("watchId")
	watchID, _ := wid.(string)
	if watchID == "" {
		s.fail("", errorf(CodeInvalidRequest, "watchId must be a non-empty string"))
		return
	}
	rest := make(Object, 0, len(o))
	for _, f := range o {
		if f.Key != "watchId" {
			rest = append(rest, f)
		}
	}
	kind, _ := o.Get("kind")
	switch kind {
	case "unwatch":
		if len(rest) != 2 {
			s.fail(watchID, errorf(CodeInvalidRequest, "an unwatch carries revision, kind and watchId only"))
			return
		}
		if !isRevision(first(rest.Get("revision"))) {
			s.fail(watchID, errorf(CodeInvalidRequest, "revision must be %d", Revision))
			return
		}
		if w, ok := s.watches[watchID]; ok {
			s.remove(w)
		}
	case "watch":
		for i := range rest {
			if rest[i].Key == "kind" {
				rest[i].Value = "query"
			}
		}
		req, err := requestFrom(rest, "query")
		if err != nil {
			s.fail(watchID, toError(err))
			return
		}
		if _, dup := s.watches[watchID]; dup {
			s.fail(watchID, errorf(CodeInvalidRequest, "watch %q is already active", watchID))
			return
		}
		if len(s.watches) >= MaxWatchesPerConnection {
			s.fail(watchID, errorf(CodeInvalidRequest, "a connection holds at most %d watches", MaxWatchesPerConnection))
			return
		}
		tables, ok := s.h.cfg.Service.Registry().Tables(req.OperationID)
		if !ok {
			s.fail(watchID, errorf(CodeUnknown, "no query %q is registered", req.OperationID))
			return
		}
		w := &watch{s: s, id: watchID, req: req, tables: tables}
		s.watches[watchID] = w
		s.h.mu.Lock()
		if s.h.watches[s.id.Partition] == nil {
			s.h.watches[s.id.Partition] = map[*watch]struct{}{}
		}
		s.h.watches[s.id.Partition][w] = struct{}{}
		s.h.mu.Unlock()
		s.h.metrics.Watches.Add(1)
		w.trigger()
	default:
		s.fail(watchID, errorf(CodeInvalidRequest, "kind %v is neither watch nor unwatch", kind))
	}
}

func first(v any, _ bool) any { return v }

// trigger runs the watch's query now, or once more after the running
// one: commits during a run set one dirty flag.
func (w *watch) trigger() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.removed {
		return
	}
	if w.running {
		w.dirty = true
		return
	}
	w.running = true
	go w.loop()
}

func (w *watch) loop() {
	for {
		res, err := w.s.h.cfg.Service.Query(w.s.ctx, w.s.id, w.req)
		w.mu.Lock()
		if w.removed || w.s.ctx.Err() != nil {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		if err != nil {
			w.s.fail(w.id, toError(err))
		} else {
			o := res.object(w.req.OperationID)
			o[1].Value = "snapshot"
			o = append(o, Field{"watchId", w.id})
			w.s.h.metrics.Snapshots.Add(1)
			_ = w.s.w.send(w.s.ctx, o)
		}
		w.mu.Lock()
		if !w.dirty || w.removed {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.dirty = false
		w.mu.Unlock()
	}
}
