package relay

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// LogReader is what the relay reads of the commit log. storage.Store
// satisfies it. (The partition row carries the max commitSeq, so
// CommitMaxSeq is not needed.)
type LogReader interface {
	Partitions(ctx context.Context) ([]storage.Partition, error)
	PartitionGet(ctx context.Context, partition string) (storage.Partition, error)
	PartitionCommitRange(ctx context.Context, partition string, afterSeq int64, limit int) (storage.Partition, []storage.Commit, error)
}

var _ LogReader = storage.Store(nil)

// Relay defaults.
const (
	// MaxBatchMessages is the server's default atomic batch limit.
	MaxBatchMessages       = 1000
	DefaultCommitsPerRead  = 1000
	DefaultWorkers         = 4
	DefaultPublishTimeout  = 5 * time.Second
	DefaultRetryMin        = 50 * time.Millisecond
	DefaultRetryMax        = 5 * time.Second
	DefaultResyncInterval  = time.Minute
	maxConflictsPerRun     = 4
	maxCachedPositions     = 100_000
	defaultReadLastTimeout = 2 * time.Second
)

// Config configures a Relay.
type Config struct {
	// Node names this node in ce-source (syncnode://<Node>). Required;
	// [A-Za-z0-9._-]+.
	Node string
	// Schema renders rows as {column: value}. Rows of tables it does not
	// know (or that do not decode) are carried as rowPayload instead.
	Schema *schema.Schema
	// Names is the bus namespace to publish in (the zero Names is
	// production).
	Names bus.Names
	// Streams configures the streams the relay creates or reconciles at
	// Start and recreates if they disappear.
	Streams bus.StreamsConfig
	// BatchMessages bounds one atomic batch (1..MaxBatchMessages, default
	// MaxBatchMessages). 1 publishes every event on its own.
	BatchMessages int
	// CommitsPerRead bounds one CommitRange read (default 1000).
	CommitsPerRead int
	// Workers is how many partitions are relayed concurrently (default 4).
	Workers int
	// PublishTimeout bounds one publish or batch (default 5s).
	PublishTimeout time.Duration
	// RetryMin and RetryMax bound the exponential backoff of a partition
	// whose relaying failed (defaults 50ms, 5s). Its notification is kept
	// and retried until it succeeds.
	RetryMin, RetryMax time.Duration
	// ResyncInterval is how often every partition is checked for gaps,
	// which closes gaps left by another node that died between its SQL
	// commit and its publish (default 1m; negative disables; Start always
	// checks once).
	ResyncInterval time.Duration
	Logger         *slog.Logger
	// Clock paces retries and the periodic resync (default
	// clock.System).
	Clock clock.Clock
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Streams = c.Streams.WithDefaults()
	if c.BatchMessages == 0 {
		c.BatchMessages = MaxBatchMessages
	}
	if c.CommitsPerRead == 0 {
		c.CommitsPerRead = DefaultCommitsPerRead
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.RetryMin == 0 {
		c.RetryMin = DefaultRetryMin
	}
	if c.RetryMax == 0 {
		c.RetryMax = DefaultRetryMax
	}
	if c.ResyncInterval == 0 {
		c.ResyncInterval = DefaultResyncInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Clock = clock.Or(c.Clock)
	return c
}

// Validate reports invalid fields (call after WithDefaults).
func (c Config) Validate() error {
	var errs []error
	if c.Node == "" {
		errs = append(errs, errors.New("relay config: Node is required"))
	} else if err := bus.CheckNode(c.Node); err != nil {
		errs = append(errs, fmt.Errorf("relay config: Node: %w", err))
	}
	if c.BatchMessages < 1 || c.BatchMessages > MaxBatchMessages {
		errs = append(errs, fmt.Errorf("relay config: BatchMessages %d outside 1..%d", c.BatchMessages, MaxBatchMessages))
	}
	if c.CommitsPerRead < 1 || c.CommitsPerRead > storage.MaxCommitRangeLimit {
		errs = append(errs, fmt.Errorf("relay config: CommitsPerRead %d outside 1..%d", c.CommitsPerRead, storage.MaxCommitRangeLimit))
	}
	if c.Workers < 1 || c.Workers > 256 {
		errs = append(errs, fmt.Errorf("relay config: Workers %d outside 1..256", c.Workers))
	}
	if c.PublishTimeout < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("relay config: PublishTimeout %v below 10ms", c.PublishTimeout))
	}
	if c.RetryMin <= 0 || c.RetryMax < c.RetryMin {
		errs = append(errs, fmt.Errorf("relay config: need 0 < RetryMin (%v) <= RetryMax (%v)", c.RetryMin, c.RetryMax))
	}
	errs = append(errs, c.Streams.Validate())
	return errors.Join(errs...)
}

// ErrNotRunning is returned by Flush before Start and after Stop.
var ErrNotRunning = errors.New("relay not running")

// Stats are cumulative counters.
type Stats struct {
	Events    int64 // events stored in the stream by this relay
	Batches   int64 // publish round trips (atomic batches or single events)
	Conflicts int64 // compare-and-set rejections that led to a resync
	Failures  int64 // failed partition runs (retried with backoff, except bad partition ids)
	// Held counts commits published as Committed handed them over,
	// without reading them back from the log.
	Held int64
}

// Relay publishes the commit log to SYNC_COMMITS. The log is the outbox:
// the relay keeps no state of its own beyond a cache. For each partition
// it reads the last event the stream holds (its headers carry the log
// epoch, commit seq and table), publishes every later commit and
// compare-and-sets each publish on the partition's last stream sequence
// (Nats-Expected-Last-Subject-Sequence over sync.<p>.commit.>), so a
// replay after a crash, a stale cache or a second relay on another node
// can never duplicate or reorder events, inside or outside the duplicate
// window.
type Relay struct {
	cfg       Config
	js        jetstream.JetStream
	nc        *nats.Conn
	log       LogReader
	logger    *slog.Logger
	clock     clock.Clock
	apiPrefix string

	mu       sync.Mutex
	notified map[string]struct{}
	held     map[string]*heldLog // Committed's commits, by partition
	nHeld    int                 // commits in held
	// unheard are partitions notified by Notify or the sweep since their
	// last run began: commits nobody handed over may be in the log, so
	// the run reads it.
	unheard    map[string]struct{}
	sweeping   bool
	idle       chan struct{} // closed while nothing is pending
	idleClosed bool
	lastErr    error
	// gapWaits counts pending gap timers (readTail): the relay is not idle
	// while one runs, since held commits wait for it.
	gapWaits int
	// gapWait is how long a run waits for a commit missing before the
	// held ones (defaultGapWait; tests set it).
	gapWait time.Duration

	wake       chan struct{}
	single     atomic.Bool // atomic batches unavailable on this stream
	maxPayload int

	events, batches, conflicts, failures, heldUsed atomic.Int64

	state    int // 0 new, 1 started, 2 stopped
	stopCh   chan struct{}
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopOnce sync.Once
	stopErr  error

	// testHookAfterAck, when set, runs after the stream acknowledged a
	// publish and before the relay records it; an error makes the relay
	// forget the acknowledgement, as a crash at that point would.
	testHookAfterAck func(ctx context.Context) error
}

// New builds a relay publishing with js the log read from log.
func New(js jetstream.JetStream, log LogReader, cfg Config) (*Relay, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := js.Options()
	prefix := o.APIPrefix
	switch {
	case o.Domain != "":
		prefix = "$JS." + o.Domain + ".API."
	case prefix == "":
		prefix = jetstream.DefaultAPIPrefix
	}
	if prefix[len(prefix)-1] != '.' {
		prefix += "."
	}
	idle := make(chan struct{})
	close(idle)
	return &Relay{
		cfg:        cfg,
		js:         js,
		nc:         js.Conn(),
		log:        log,
		logger:     cfg.Logger.With("component", "relay"),
		clock:      cfg.Clock,
		apiPrefix:  prefix,
		notified:   make(map[string]struct{}),
		held:       make(map[string]*heldLog),
		unheard:    make(map[string]struct{}),
		idle:       idle,
		idleClosed: true,
		gapWait:    defaultGapWait,
		wake:       make(chan struct{}, 1),
		stopCh:     make(chan struct{}),
	}, nil
}

// Start creates or reconciles the streams, then starts relaying: every
// partition is checked for gaps at once and then every ResyncInterval.
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.state != 0 {
		r.mu.Unlock()
		return errors.New("relay start: a relay starts once")
	}
	r.state = 1
	r.mu.Unlock()

	ensure := func(ctx context.Context) error { return bus.EnsureStreams(ctx, r.js, r.cfg.Names, r.cfg.Streams) }
	if err := bus.RetrySetup(ctx, ensure, func(err error) bool { return errors.Is(err, bus.ErrStreamConflict) }); err != nil {
		return fmt.Errorf("relay start: %w", err)
	}
	r.maxPayload = int(r.nc.MaxPayload())
	if m := int(r.cfg.Streams.Commits.MaxMsgSize); m > 0 && m < r.maxPayload {
		r.maxPayload = m
	}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	r.mu.Lock()
	r.sweeping = true
	r.markBusyLocked()
	r.mu.Unlock()
	r.wg.Add(2)
	go r.dispatch(runCtx)
	go r.sweepLoop(runCtx)
	return nil
}

// Stop stops relaying. In-flight publishes may finish until ctx ends;
// then they are cancelled (the compare-and-set makes an abandoned batch
// harmless). Pending notifications are not lost: the log still holds the
// commits and the next Start publishes them. Stop is idempotent.
func (r *Relay) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() {
		r.mu.Lock()
		started := r.state == 1
		r.state = 2
		r.mu.Unlock()
		if !started {
			return
		}
		close(r.stopCh)
		done := make(chan struct{})
		go func() { r.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			r.cancel()
			<-done
			r.stopErr = fmt.Errorf("relay stop: %w", ctx.Err())
		}
		r.cancel()
	})
	return r.stopErr
}

// Notify tells the relay that partition has new commits. It never blocks;
// notifications of one partition coalesce.
func (r *Relay) Notify(partition string) {
	r.mu.Lock()
	if r.state == 2 {
		// Stopped: the log keeps the commit for the next start.
		r.mu.Unlock()
		return
	}
	r.notified[partition] = struct{}{}
	r.unheard[partition] = struct{}{}
	r.markBusyLocked()
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// heldLog is what Committed handed over for one partition and no run has
// taken yet: commits of one log epoch in ascending commitSeq.
type heldLog struct {
	epoch   string
	commits []heldCommit
	// gapAt is when a run found the commit after gapAfter missing before
	// the held ones (zero: no gap seen); see readTail.
	gapAt    time.Time
	gapAfter int64
	gapTimer *time.Timer
}

// defaultGapWait is how long a run at the tail waits for the hand-over
// of a commit missing before the held ones before it reads the log. The
// members of one group commit (sqlitestore) return together and hand
// their commits over from their own goroutines, in no particular order:
// a run woken by the second one's hand-over would otherwise read the log
// for a commit that is microseconds away (a quarter of the events of a
// 20-client push + pull node came from the log that way, without
// ce-reactions, each costing every reaction runner a claim). A commit
// that is not on its way (another node's, in a cluster on one
// PostgreSQL) is read after this wait, as before.
const defaultGapWait = 5 * time.Millisecond

// heldCommit is a commit Committed handed over and the number of durable
// reactions it enqueued, which its events carry (ce-reactions).
type heldCommit struct {
	storage.Commit
	reactions int
}

// maxHeld bounds the commits held across all partitions: past it a
// partition's held commits are dropped and its run reads them from SQL.
const maxHeld = 4096

// Committed hands the relay a commit this process appended and made
// durable, with the log epoch it was appended under, and wakes the
// relay like Notify: a run at the stream's tail publishes it without
// reading it back from the log. The log stays the source of truth: a run
// uses held commits only when they continue the stream's tail exactly
// (same epoch, the next commitSeq, no gap) and reads the log otherwise,
// and a partition also notified by Notify or the sweep is read. Committed
// never blocks. c must not be modified afterwards. reactions is the
// number of durable reactions the commit enqueued: its events say so
// (ce-reactions), and reaction runners skip their claim for a commit
// that enqueued none.
func (r *Relay) Committed(partition, logEpoch string, c storage.Commit, reactions int) {
	r.mu.Lock()
	if r.state == 2 {
		r.mu.Unlock()
		return
	}
	r.holdLocked(partition, logEpoch, heldCommit{c, reactions})
	r.notified[partition] = struct{}{}
	r.markBusyLocked()
	r.mu.Unlock()
	r.poke()
}

func (r *Relay) holdLocked(partition, logEpoch string, c heldCommit) {
	h := r.held[partition]
	if h == nil || h.epoch != logEpoch {
		if h != nil {
			r.nHeld -= len(h.commits)
		}
		h = &heldLog{epoch: logEpoch}
		r.held[partition] = h
	}
	if r.nHeld >= maxHeld {
		// Full: this partition's run reads the log instead, and so does
		// any other's whose commits do not fit.
		r.nHeld -= len(h.commits)
		h.commits = h.commits[:0]
		if r.nHeld >= maxHeld {
			delete(r.held, partition)
			return
		}
	}
	// Concurrent pushes may hand their commits over out of order.
	i := len(h.commits)
	for i > 0 && h.commits[i-1].CommitSeq >= c.CommitSeq {
		i--
	}
	if i < len(h.commits) && h.commits[i].CommitSeq == c.CommitSeq {
		h.commits[i] = c
		return
	}
	h.commits = slices.Insert(h.commits, i, c)
	r.nHeld++
}

// takeUnheard reports whether partition was notified by Notify or the
// sweep since its last run began, and clears that.
func (r *Relay) takeUnheard(partition string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.unheard[partition]
	delete(r.unheard, partition)
	return ok
}

// takeHeld removes and returns the held commits of partition that follow
// after without a gap, at most limit, when they are of the log epoch
// whose escaped form is epoch; held commits at or before after are
// dropped (published already). none reports that nothing is held past
// after at all. wait reports held commits past a gap right after after
// that is fresh (seen first less than gapWait ago): the run should end
// and let the missing commit's hand-over, or the timer started here when
// the gap is new, wake the next one.
func (r *Relay) takeHeld(partition string, after int64, epoch string, limit int) (commits []heldCommit, logEpoch string, none, wait bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.held[partition]
	if h == nil {
		return nil, "", true, false
	}
	if bus.EscapeEpoch(h.epoch) != epoch {
		r.nHeld -= len(h.commits)
		r.clearGapLocked(h)
		delete(r.held, partition)
		return nil, "", false, false
	}
	drop := 0
	for drop < len(h.commits) && h.commits[drop].CommitSeq <= after {
		drop++
	}
	n := 0
	for n < len(h.commits)-drop && n < limit && h.commits[drop+n].CommitSeq == after+1+int64(n) {
		n++
	}
	none = drop == len(h.commits)
	if n == 0 && !none {
		wait = r.gapLocked(partition, h, after)
	} else {
		r.clearGapLocked(h)
	}
	commits = slices.Clone(h.commits[drop : drop+n])
	h.commits = slices.Delete(h.commits, 0, drop+n)
	r.nHeld -= drop + n
	if len(h.commits) == 0 {
		delete(r.held, partition)
	}
	return commits, h.epoch, none, wait
}

// gapLocked handles held commits of partition past a gap after after: a
// gap seen for the first time starts a timer that notifies the partition
// once gapWait has passed, and reports wait; a gap that has lasted that
// long reports read-the-log (false). It uses real time, not the relay's
// clock: what it waits for is a goroutine, not anything the clock paces.
func (r *Relay) gapLocked(partition string, h *heldLog, after int64) (wait bool) {
	now := time.Now()
	if !h.gapAt.IsZero() && h.gapAfter == after {
		return now.Sub(h.gapAt) < r.gapWait
	}
	r.clearGapLocked(h)
	h.gapAt, h.gapAfter = now, after
	r.gapWaits++
	var t *time.Timer
	t = time.AfterFunc(r.gapWait, func() {
		r.mu.Lock()
		if h.gapTimer == t {
			h.gapTimer = nil
		}
		r.gapWaits--
		if r.state == 1 {
			r.notified[partition] = struct{}{}
		}
		r.mu.Unlock()
		r.poke()
	})
	h.gapTimer = t
	return true
}

// clearGapLocked forgets h's gap and stops its timer, which then no
// longer keeps the relay busy.
func (r *Relay) clearGapLocked(h *heldLog) {
	h.gapAt = time.Time{}
	if h.gapTimer != nil && h.gapTimer.Stop() {
		r.gapWaits--
	}
	h.gapTimer = nil
}

// Flush waits until every notified partition has been published (and the
// start-up gap check is done), or ctx ends.
func (r *Relay) Flush(ctx context.Context) error {
	for {
		r.mu.Lock()
		idle, lastErr, state := r.idle, r.lastErr, r.state
		r.mu.Unlock()
		if state != 1 {
			return ErrNotRunning
		}
		select {
		case <-idle:
			return nil
		case <-r.stopCh:
			return ErrNotRunning
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("relay flush: %w (last relay error: %v)", ctx.Err(), lastErr)
			}
			return fmt.Errorf("relay flush: %w", ctx.Err())
		}
	}
}

// Stats returns cumulative counters.
func (r *Relay) Stats() Stats {
	return Stats{
		Events:    r.events.Load(),
		Batches:   r.batches.Load(),
		Conflicts: r.conflicts.Load(),
		Failures:  r.failures.Load(),
		Held:      r.heldUsed.Load(),
	}
}

func (r *Relay) markBusyLocked() {
	if r.idleClosed {
		r.idle = make(chan struct{})
		r.idleClosed = false
	}
}

// sweepLoop notifies every partition at start and every ResyncInterval.
func (r *Relay) sweepLoop(ctx context.Context) {
	defer r.wg.Done()
	attempt := 0
	for {
		err := r.sweep(ctx)
		var wait time.Duration
		if err != nil {
			attempt++
			wait = r.backoff(attempt)
			r.logger.Warn("relay: listing partitions failed; retrying", "err", err, "retry_in", wait)
		} else {
			attempt = 0
			r.mu.Lock()
			r.sweeping = false
			r.mu.Unlock()
			r.poke()
			if r.cfg.ResyncInterval < 0 {
				return
			}
			wait = r.cfg.ResyncInterval
		}
		select {
		case <-r.stopCh:
			return
		case <-r.clock.After(wait):
		}
	}
}

func (r *Relay) sweep(ctx context.Context) error {
	parts, err := r.log.Partitions(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	for _, p := range parts {
		r.notified[p.ID] = struct{}{}
		r.unheard[p.ID] = struct{}{}
	}
	if len(parts) > 0 {
		r.markBusyLocked()
	}
	r.mu.Unlock()
	r.poke()
	return nil
}

func (r *Relay) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Relay) backoff(attempt int) time.Duration {
	d := r.cfg.RetryMin
	for i := 1; i < attempt && d < r.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, r.cfg.RetryMax)
	// ±20% jitter, so relays on several nodes do not retry in step.
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// position is what the relay knows of a partition's tail in the stream.
type position struct {
	synced        bool   // read from the stream (or set by our own ack)
	lastStreamSeq uint64 // stream sequence of the partition's last event; 0: none
	epoch         string // its escaped log epoch
	commitSeq     int64  // its commit
	table         string // its table
	// complete is true when that event was the last one of its commit.
	// An event read back from the stream may be followed by more tables of
	// the same commit (a crash inside a one-by-one publish): false.
	complete bool
}

type partState struct {
	id      string
	pos     position
	dirty   bool
	queued  bool
	running bool
	attempt int
	retryAt time.Time
	index   int // in the retry heap, -1 when absent
}

type job struct {
	st  *partState
	pos position
}

type result struct {
	st  *partState
	pos position
	err error
}

// dispatch owns the per-partition scheduling state: at most one worker
// per partition, notifications during a run re-queue the partition, and
// failed partitions wait in a retry heap.
func (r *Relay) dispatch(ctx context.Context) {
	defer r.wg.Done()
	jobs := make(chan job, r.cfg.Workers)
	results := make(chan result, r.cfg.Workers)
	var workers sync.WaitGroup
	for range r.cfg.Workers {
		workers.Go(func() {
			w := &worker{encs: [2]*bus.Encoder{
				bus.NewEncoder(r.cfg.Names, r.cfg.Node, r.cfg.Schema, r.maxPayload),
				bus.NewEncoder(r.cfg.Names, r.cfg.Node, r.cfg.Schema, r.maxPayload),
			}}
			for j := range jobs {
				pos, err := r.relayPartition(ctx, w, j.st.id, j.pos)
				results <- result{st: j.st, pos: pos, err: err}
			}
		})
	}
	defer workers.Wait()
	defer close(jobs)

	states := make(map[string]*partState)
	var ready []*partState
	var retries retryHeap
	running := 0
	stopping := false
	stopCh := r.stopCh

	enqueue := func(st *partState) {
		if st.running || st.queued || st.index >= 0 {
			return
		}
		st.queued = true
		ready = append(ready, st)
	}
	for {
		// Take new notifications.
		r.mu.Lock()
		for id := range r.notified {
			st := states[id]
			if st == nil {
				st = &partState{id: id, index: -1}
				states[id] = st
			}
			st.dirty = true
			// A partition in backoff keeps waiting: new commits do not
			// make an unavailable NATS available.
			enqueue(st)
		}
		clear(r.notified)
		r.mu.Unlock()

		// Release due retries.
		now := r.clock.Now()
		for len(retries) > 0 && !retries[0].retryAt.After(now) {
			st := heap.Pop(&retries).(*partState)
			st.retryAt = time.Time{}
			enqueue(st)
		}

		// Hand out work.
		for !stopping && running < r.cfg.Workers && len(ready) > 0 {
			st := ready[0]
			ready[0] = nil
			ready = ready[1:]
			st.queued, st.running, st.dirty = false, true, false
			running++
			jobs <- job{st: st, pos: st.pos}
		}

		// Publish idleness for Flush.
		r.mu.Lock()
		busy := running > 0 || len(ready) > 0 || len(retries) > 0 || len(r.notified) > 0 || r.sweeping || r.gapWaits > 0
		if !busy && !r.idleClosed {
			close(r.idle)
			r.idleClosed = true
			r.lastErr = nil
		}
		r.mu.Unlock()

		if stopping && running == 0 {
			return
		}
		var timer <-chan time.Time
		if len(retries) > 0 && !stopping {
			timer = r.clock.After(retries[0].retryAt.Sub(now))
		}
		select {
		case <-r.wake:
		case <-timer:
		case <-stopCh:
			stopping = true
			stopCh = nil // a closed channel would spin the loop
		case res := <-results:
			running--
			st := res.st
			st.running = false
			st.pos = res.pos
			switch {
			case res.err == nil:
				st.attempt = 0
				if st.dirty {
					enqueue(st)
				} else if len(states) > maxCachedPositions && !st.queued {
					delete(states, st.id)
				}
			case errors.Is(res.err, errPermanent):
				r.failures.Add(1)
				r.logger.Error("relay: partition cannot be published", "partition", st.id, "err", res.err)
				st.attempt = 0
			case ctx.Err() != nil:
				// Stopping: the log keeps the commits for the next start.
			default:
				r.failures.Add(1)
				st.attempt++
				wait := r.backoff(st.attempt)
				r.logger.Warn("relay: publishing failed; retrying", "partition", st.id, "attempt", st.attempt, "retry_in", wait, "err", res.err)
				r.mu.Lock()
				r.lastErr = res.err
				r.mu.Unlock()
				st.retryAt = r.clock.Now().Add(wait)
				heap.Push(&retries, st)
			}
		}
	}
}

// retryHeap orders failed partitions by retry time.
type retryHeap []*partState

func (h retryHeap) Len() int           { return len(h) }
func (h retryHeap) Less(i, j int) bool { return h[i].retryAt.Before(h[j].retryAt) }
func (h retryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *retryHeap) Push(x any) {
	st := x.(*partState)
	st.index = len(*h)
	*h = append(*h, st)
}
func (h *retryHeap) Pop() any {
	old := *h
	st := old[len(old)-1]
	old[len(old)-1] = nil
	st.index = -1
	*h = old[:len(old)-1]
	return st
}

// worker holds one relay goroutine's buffers: two encoders and event
// buffers (the chunk being published and the one read ahead).
type worker struct {
	encs [2]*bus.Encoder
	bufs [2][]bus.CommitMsg
	msgs []*nats.Msg
}

var (
	errPermanent = errors.New("permanent")
	// errConflict marks a compare-and-set rejection: someone else (a
	// replay, another relay) moved the partition's tail.
	errConflict = errors.New("stream tail moved")
	// errDuplicate is a conflict reported by the deduplication window.
	errDuplicate     = fmt.Errorf("%w: duplicate message id", errConflict)
	errStreamMissing = errors.New("stream missing")
	errUnregistered  = &ssp2.Error{Code: ssp2.CodeStoragePartitionUnregistered}
)

// chunk is one CommitRange read, encoded.
type chunk struct {
	after   int64
	part    storage.Partition // read before the commits
	again   storage.Partition // read with them, in their snapshot
	commits []storage.Commit
	events  []bus.CommitMsg
	err     error
}

// readChunk reads the commits after after and encodes them into events
// (reusing its capacity). part, when non-nil, is the partition row already
// read for this chunk. The events of commit after+1 up to and including
// table skipThrough are left out (they are in the stream already).
func (r *Relay) readChunk(ctx context.Context, p bus.Partition, after int64, part *storage.Partition, enc *bus.Encoder, events []bus.CommitMsg, skipThrough string) chunk {
	ch := chunk{after: after, events: events[:0]}
	if part != nil {
		ch.part = *part
	} else {
		var err error
		if ch.part, err = r.log.PartitionGet(ctx, p.ID()); err != nil {
			ch.err = fmt.Errorf("read partition: %w", err)
			return ch
		}
	}
	// The commits belong to part.LogEpoch only if no rotation happened
	// around the read: again is the row of the commits' own snapshot.
	again, commits, err := r.log.PartitionCommitRange(ctx, p.ID(), after, r.cfg.CommitsPerRead)
	if err != nil {
		ch.err = fmt.Errorf("read commits after %d: %w", after, err)
		return ch
	}
	ch.again, ch.commits = again, commits
	if len(commits) == 0 {
		return ch
	}
	if ch.again.LogEpoch != ch.part.LogEpoch {
		return ch
	}
	for _, c := range commits {
		n := len(ch.events)
		ch.events = enc.AppendCommit(ch.events, p, ch.part.LogEpoch, c)
		if c.CommitSeq == after+1 && skipThrough != "" {
			// Drop the tables of a partly published commit that the
			// stream already holds. (If the table is not in the commit
			// at all, the stream holds something else for it: skip the
			// whole commit.)
			drop := len(ch.events)
			for i := n; i < len(ch.events); i++ {
				if tableOf(ch.events[i].Msg) == skipThrough {
					drop = i + 1
					break
				}
			}
			ch.events = append(ch.events[:n], ch.events[drop:]...)
		}
	}
	return ch
}

// readTail is the steady state of a run: the stream's tail is known and
// ends a whole commit, so the commits after it and the partition row come
// from one read, in one snapshot, and no separate partition read is
// needed to find where to resume. It returns the chunk to publish, or
// done when the log holds nothing after the tail. A read that does not
// confirm the tail (another epoch, a log pruned past it or behind it) or
// that fails returns neither: the caller takes the general path, which
// reads the partition first and reports errors.
func (r *Relay) readTail(ctx context.Context, p bus.Partition, pos position, cursor int64, mustRead *bool, enc *bus.Encoder, events []bus.CommitMsg) (ch chunk, done bool) {
	if !pos.synced || pos.lastStreamSeq == 0 || !pos.complete || (cursor >= 0 && cursor != pos.commitSeq) {
		return chunk{}, false
	}
	var (
		held       []heldCommit
		epoch      string
		none, wait bool
	)
	if !*mustRead {
		held, epoch, none, wait = r.takeHeld(p.ID(), pos.commitSeq, pos.epoch, r.cfg.CommitsPerRead)
	}
	if none || wait {
		// Only Committed woke this run, and what it handed over is
		// published, or follows a commit whose hand-over is most likely
		// on its way (takeHeld): that one, or the gap's timer, wakes the
		// next run.
		return chunk{}, true
	}
	if len(held) > 0 {
		// The commits this process appended right after the tail: the
		// log would return exactly these. MaxCommitSeq is the last of
		// them, so the run reads no further ahead; later commits come
		// with their own notification.
		part := storage.Partition{ID: p.ID(), LogEpoch: epoch, MaxCommitSeq: held[len(held)-1].CommitSeq}
		ch = chunk{after: pos.commitSeq, part: part, again: part, commits: make([]storage.Commit, len(held)), events: events[:0]}
		for i, c := range held {
			ch.commits[i] = c.Commit
			ch.events = enc.AppendCommitReactions(ch.events, p, epoch, c.Commit, c.reactions)
		}
		r.heldUsed.Add(int64(len(held)))
		return ch, false
	}
	part, commits, err := r.log.PartitionCommitRange(ctx, p.ID(), pos.commitSeq, r.cfg.CommitsPerRead)
	if err == nil {
		*mustRead = false
	}
	if err != nil || bus.EscapeEpoch(part.LogEpoch) != pos.epoch ||
		pos.commitSeq < part.HorizonSeq || pos.commitSeq > part.MaxCommitSeq {
		return chunk{}, false
	}
	if len(commits) == 0 {
		return chunk{}, true
	}
	// This is what resumePoint returns for part, and the commits are the
	// log of part's epoch: they were read in its snapshot.
	ch = chunk{after: pos.commitSeq, part: part, again: part, commits: commits, events: events[:0]}
	for _, c := range commits {
		ch.events = enc.AppendCommit(ch.events, p, part.LogEpoch, c)
	}
	return ch, false
}

// relayPartition publishes every commit of one partition that the stream
// does not hold yet. With a backlog it reads and encodes the next chunk of
// the log while the current one is being published.
func (r *Relay) relayPartition(ctx context.Context, w *worker, id string, pos position) (_ position, runErr error) {
	defer func() {
		if runErr != nil {
			// The retry reads the log: what this run took from held or
			// was told to read may not be published.
			r.mu.Lock()
			r.unheard[id] = struct{}{}
			r.mu.Unlock()
		}
	}()
	p, err := bus.NewPartition(id)
	if err != nil {
		return pos, fmt.Errorf("%w: %w", errPermanent, err)
	}
	filter := r.cfg.Names.PartitionCommits(p)
	conflicts := 0
	// mustRead: this run reads the log at least once, because something
	// other than Committed notified the partition.
	mustRead := r.takeUnheard(id)
	// cursor is the last commit this run has fully published (or read
	// and found without events); -1 until then.
	cursor := int64(-1)
	// dupTail is the stream tail when a publish was refused as a
	// duplicate; -1 when it was not.
	dupTail := int64(-1)
	noMsgID := false
	// The read-ahead: at most one chunk in flight, in the other buffer.
	var pending chan chunk
	slot := 0
	drain := func() {
		if pending != nil {
			<-pending
			pending = nil
		}
	}
	defer drain()
	for {
		if err := ctx.Err(); err != nil {
			return pos, err
		}
		var ch chunk
		if pending != nil {
			ch = <-pending
			pending = nil
			slot ^= 1
			w.bufs[slot] = ch.events
			usable := ch.err == nil && pos.synced && cursor == ch.after && len(ch.commits) > 0 &&
				ch.again.LogEpoch == ch.part.LogEpoch && bus.EscapeEpoch(ch.part.LogEpoch) == pos.epoch
			if !usable {
				ch = chunk{}
			}
		}
		if ch.commits == nil {
			var done bool
			if ch, done = r.readTail(ctx, p, pos, cursor, &mustRead, w.encs[slot], w.bufs[slot]); done {
				return pos, nil
			}
			if ch.commits != nil {
				w.bufs[slot] = ch.events
			}
		}
		if ch.commits == nil {
			part, err := r.log.PartitionGet(ctx, id)
			if errors.Is(err, errUnregistered) {
				return pos, fmt.Errorf("%w: %w", errPermanent, err)
			}
			if err != nil {
				return pos, fmt.Errorf("relay %s: read partition: %w", p.Token(), err)
			}
			if !pos.synced {
				if pos, err = r.readLast(ctx, filter); err != nil {
					if errors.Is(err, errStreamMissing) {
						err = r.recreateStreams(ctx, err)
					}
					return pos, err
				}
				if dupTail >= 0 && int64(pos.lastStreamSeq) == dupTail && !noMsgID {
					// Refused as duplicates, yet the stream does not
					// hold them: it was purged, and its deduplication
					// window still remembers the ids. The
					// compare-and-set alone keeps the republish
					// exactly-once.
					r.logger.Info("relay: stream purged within its duplicate window; republishing without Nats-Msg-Id", "partition", p.ID())
					noMsgID = true
				}
				dupTail = -1
			}
			after, skipThrough := r.resumePoint(p, part, bus.EscapeEpoch(part.LogEpoch), pos)
			if cursor > after {
				after, skipThrough = cursor, ""
			}
			if after >= part.MaxCommitSeq {
				return pos, nil
			}
			ch = r.readChunk(ctx, p, after, &part, w.encs[slot], w.bufs[slot], skipThrough)
			w.bufs[slot] = ch.events
			if ch.err != nil {
				return pos, fmt.Errorf("relay %s: %w", p.Token(), ch.err)
			}
			mustRead = false
			if len(ch.commits) == 0 {
				return pos, nil // pruned meanwhile; the next run starts at the horizon
			}
			if ch.again.LogEpoch != ch.part.LogEpoch {
				cursor = -1
				continue
			}
		}
		last := ch.commits[len(ch.commits)-1].CommitSeq
		if len(ch.commits) == r.cfg.CommitsPerRead && last < ch.again.MaxCommitSeq {
			next := make(chan chunk, 1)
			enc, buf := w.encs[slot^1], w.bufs[slot^1]
			go func() { next <- r.readChunk(ctx, p, last, nil, enc, buf, "") }()
			pending = next
		}
		if noMsgID {
			for _, ev := range ch.events {
				ev.Msg.Header.Del(jetstream.MsgIDHeader)
			}
		}
		tail := pos.lastStreamSeq
		pos, err = r.publish(ctx, w, ch.events, filter, bus.EscapeEpoch(ch.part.LogEpoch), pos)
		switch {
		case errors.Is(err, errConflict):
			drain()
			if errors.Is(err, errDuplicate) {
				dupTail = int64(tail)
			}
			r.conflicts.Add(1)
			conflicts++
			pos.synced = false
			cursor = -1
			if conflicts >= maxConflictsPerRun {
				// Someone else keeps moving the tail (a relay on
				// another node): back off instead of spinning.
				return pos, fmt.Errorf("relay %s: %w %d times", p.Token(), errConflict, conflicts)
			}
			continue
		case errors.Is(err, errStreamMissing):
			pos.synced = false
			return pos, r.recreateStreams(ctx, err)
		case err != nil:
			return pos, fmt.Errorf("relay %s: %w", p.Token(), err)
		}
		cursor = last
		if cursor >= ch.again.MaxCommitSeq && pending == nil {
			// Caught up with what the log held when read; commits after
			// that come with their own notification.
			return pos, nil
		}
	}
}

func tableOf(m *nats.Msg) string {
	return m.Header.Get(bus.HeaderTable)
}

// resumePoint returns the commitSeq after which to read, and, when the
// stream's last event may be in the middle of its commit, the table of
// that commit through which events are already published.
func (r *Relay) resumePoint(p bus.Partition, part storage.Partition, epoch string, pos position) (after int64, skipThrough string) {
	switch {
	case pos.lastStreamSeq == 0:
		return part.HorizonSeq, ""
	case pos.epoch != epoch:
		// The epoch rotated (a restore): the log is a new log. Publish
		// what it still holds, under the new epoch.
		r.logger.Info("relay: log epoch changed; publishing the retained log under the new epoch",
			"partition", p.ID(), "stream_epoch", pos.epoch, "epoch", epoch, "from_seq", part.HorizonSeq+1)
		return part.HorizonSeq, ""
	case pos.commitSeq < part.HorizonSeq:
		r.logger.Warn("relay: commits were pruned before they were published; the stream has a gap",
			"partition", p.ID(), "stream_commit_seq", pos.commitSeq, "horizon", part.HorizonSeq)
		return part.HorizonSeq, ""
	case pos.commitSeq > part.MaxCommitSeq:
		r.logger.Warn("relay: the stream is ahead of the log under the same epoch (restored without an epoch rotation?)",
			"partition", p.ID(), "stream_commit_seq", pos.commitSeq, "max_commit_seq", part.MaxCommitSeq)
		return pos.commitSeq, ""
	case !pos.complete:
		return pos.commitSeq - 1, pos.table
	}
	return pos.commitSeq, ""
}

// publish sends w.events in atomic batches (whole commits, at most
// BatchMessages messages each) or one by one, each batch compare-and-set
// on the partition's last stream sequence.
func (r *Relay) publish(ctx context.Context, w *worker, events []bus.CommitMsg, filter, epoch string, pos position) (position, error) {
	for len(events) > 0 {
		n := 1
		if !r.single.Load() && r.cfg.BatchMessages > 1 {
			n = batchLen(events, r.cfg.BatchMessages)
			if n <= smallRun && singleMessageCommits(events[:n]) {
				// Runs of one-message commits up to smallRun go out one
				// by one: each is atomic on its own, and the server stages
				// every atomic batch in a temporary store (directories,
				// files, a sync), which costs more than that many
				// in-process publishes.
				n = 1
			}
		}
		batch := events[:n]
		seq, err := r.publishBatch(ctx, w, batch, filter, pos.lastStreamSeq)
		if err != nil {
			if bus.IsAPIError(err, bus.JSErrBatchPublishDisabled) {
				r.logger.Warn("relay: atomic batch publish is not enabled on the stream; publishing one by one")
				r.single.Store(true)
				continue
			}
			return pos, err
		}
		if r.testHookAfterAck != nil {
			if err := r.testHookAfterAck(ctx); err != nil {
				return pos, err
			}
		}
		last := batch[n-1]
		complete := n == len(events) || events[n].CommitSeq != last.CommitSeq
		pos = position{
			synced:        true,
			lastStreamSeq: seq,
			epoch:         epoch,
			commitSeq:     last.CommitSeq,
			table:         tableOf(last.Msg),
			complete:      complete,
		}
		r.events.Add(int64(n))
		r.batches.Add(1)
		events = events[n:]
	}
	return pos, nil
}

// smallRun is the largest run of one-message commits published one by one
// (each compare-and-set on the previous acknowledgement, the same chain as
// any single publish) rather than as an atomic batch. The server stages
// every atomic batch of a file stream in a temporary file store (mkdir,
// create, sync, rename, removal), a fixed cost of milliseconds per batch.
// BenchmarkRelayRuns (embedded NATS, CPU of the whole process per event,
// median of 3 under load 12–17): one by one costs 38–46 µs per event at
// every run length; an atomic batch of 32 costs 155, of 64 62, of 128 48,
// of 256 37. Group commit makes runs of 20–100 commits the common case
// under concurrent pushes; with the threshold at 16 those went as batches
// and the staging store was 11–15% of a 20-VU push-pull node's CPU. At
// 128, paired 20-VU push-pull runs cost the server 0.43 → 0.37 ms per
// round on SQLite and 0.74 → 0.60 on PostgreSQL (medians of 5 pairs),
// although the node's own subscribers (reaction runner, hubs) now see
// the events one at a time. Commits of several messages always go as
// atomic batches: that is what keeps them whole.
const smallRun = 128

// singleMessageCommits reports whether every commit in events has exactly
// one event (touches one table).
func singleMessageCommits(events []bus.CommitMsg) bool {
	for i := 1; i < len(events); i++ {
		if events[i].CommitSeq == events[i-1].CommitSeq {
			return false
		}
	}
	return true
}

// batchLen takes whole commits up to max messages; a single commit larger
// than max is split (its tail goes into the next batch).
func batchLen(events []bus.CommitMsg, max int) int {
	if len(events) <= max {
		return len(events)
	}
	n := max
	for n > 0 && events[n].CommitSeq == events[n-1].CommitSeq {
		n--
	}
	if n == 0 {
		return max
	}
	return n
}

// publishBatch publishes msgs (one atomic batch, or a single message) with
// the compare-and-set headers on the first message and returns the stream
// sequence of the last one.
func (r *Relay) publishBatch(ctx context.Context, w *worker, batch []bus.CommitMsg, filter string, lastSeq uint64) (uint64, error) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	first := batch[0].Msg
	first.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(lastSeq, 10))
	first.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, filter)
	if len(batch) == 1 {
		seq, duplicate, err := r.publishOne(pctx, first)
		if err != nil {
			return 0, classify(err)
		}
		if duplicate {
			// Stored before (a replay inside the duplicate window).
			return 0, errDuplicate
		}
		return seq, nil
	}
	w.msgs = w.msgs[:0]
	for _, e := range batch {
		w.msgs = append(w.msgs, e.Msg)
	}
	ack, err := jetstreamext.PublishMsgBatch(pctx, r.js, w.msgs)
	if err != nil {
		return 0, classify(err)
	}
	return ack.Sequence, nil
}

func classify(err error) error {
	switch {
	case bus.IsAPIError(err, bus.JSErrBatchDuplicateMsgID):
		return fmt.Errorf("%w: %w", errDuplicate, err)
	case bus.IsAPIError(err, bus.JSErrWrongLastSequence, bus.JSErrWrongLastSequenceConst, bus.JSErrDuplicateMessageConflict):
		return fmt.Errorf("%w: %w", errConflict, err)
	case bus.IsAPIError(err, bus.JSErrStreamNotFound),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return fmt.Errorf("%w: %w", errStreamMissing, err)
	}
	return err
}

func (r *Relay) recreateStreams(ctx context.Context, cause error) error {
	r.logger.Warn("relay: stream missing; recreating", "err", cause)
	if err := bus.EnsureStreams(ctx, r.js, r.cfg.Names, r.cfg.Streams); err != nil {
		return fmt.Errorf("relay: recreate streams: %w", err)
	}
	// Retry soon through the normal backoff; the next run reads the
	// (empty) stream and publishes from the horizon.
	return cause
}

// readLast reads the partition's last event from the stream leader (not a
// direct get, which a lagging replica may answer).
func (r *Relay) readLast(ctx context.Context, filter string) (position, error) {
	rctx, cancel := context.WithTimeout(ctx, defaultReadLastTimeout)
	defer cancel()
	req := []byte(`{"last_by_subj":"` + filter + `"}`)
	msg, err := r.nc.RequestWithContext(rctx, r.apiPrefix+"STREAM.MSG.GET."+r.cfg.Names.CommitStream(), req)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return position{}, fmt.Errorf("read last event: %w: %w", errStreamMissing, err)
		}
		return position{}, fmt.Errorf("read last event: %w", err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject string `json:"subject"`
			Seq     uint64 `json:"seq"`
			Hdrs    []byte `json:"hdrs"`
		} `json:"message"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return position{}, fmt.Errorf("read last event: %w", err)
	}
	if resp.Error != nil {
		switch resp.Error.ErrorCode {
		case jetstream.JSErrCodeMessageNotFound:
			return position{synced: true}, nil
		case bus.JSErrStreamNotFound:
			return position{}, fmt.Errorf("read last event: %w: %w", errStreamMissing, resp.Error)
		}
		return position{}, fmt.Errorf("read last event: %w", resp.Error)
	}
	if resp.Message == nil {
		return position{}, errors.New("read last event: empty response")
	}
	pos := position{synced: true, lastStreamSeq: resp.Message.Seq}
	h, err := nats.DecodeHeadersMsg(resp.Message.Hdrs)
	if err != nil {
		r.logger.Warn("relay: last event has unreadable headers", "subject", resp.Message.Subject, "seq", resp.Message.Seq, "err", err)
		return pos, nil
	}
	pos.epoch = h.Get(bus.HeaderLogEpoch)
	pos.commitSeq, _ = strconv.ParseInt(h.Get(bus.HeaderCommitSeq), 10, 64)
	pos.table = h.Get(bus.HeaderTable)
	if pos.commitSeq <= 0 || pos.table == "" {
		r.logger.Warn("relay: last event on a partition subject is not a commit event", "subject", resp.Message.Subject, "seq", resp.Message.Seq)
		pos.epoch = ""
	}
	return pos, nil
}
