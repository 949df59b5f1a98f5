package reactions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/internal/lifecycle"
	"github.com/syncnode/syncnode/storage"
)

// Store is what a Runner needs of storage.Store.
type Store interface {
	ReactionClaim(ctx context.Context, p storage.ReactionClaimParams) (storage.ReactionClaimResult, error)
	ReactionComplete(ctx context.Context, p storage.ReactionCompleteParams) ([]bool, error)
	ReactionExtend(ctx context.Context, p storage.ReactionExtendParams) ([]bool, error)
	ReactionFail(ctx context.Context, p storage.ReactionFailParams) (storage.ReactionStatus, bool, error)
	ReactionPrune(ctx context.Context, p storage.ReactionPruneParams) (storage.ReactionPruneResult, error)
	ReactionCounts(ctx context.Context) (storage.ReactionCounts, error)
}

// Handler runs one attempt of a reaction in this process. Returning nil
// completes it; a *Failure (Retry, Permanent) fails it as asked; any other
// error, or a panic, fails the attempt with CodeHandlerFailed (the error
// text is logged, never stored). ctx is cancelled when the lease is lost
// (the runner could not extend it in time and another may run the
// reaction) or the runner stops; the outcome is then not recorded. A
// handler must treat Version values it does not know as permanent
// failures, and pass r.IdempotencyKey to the systems it calls.
type Handler func(ctx context.Context, r storage.Reaction) error

// Config configures a Runner.
type Config struct {
	Store Store
	// Conn is the node's NATS connection: commit events and requeued
	// events wake the runner through it, worker requests and lifecycle
	// events go out on it. Required.
	Conn *nats.Conn
	// Node names the runner in lease-owner tokens and ce-source.
	Node string
	// Names is the bus namespace of the commit events the runner watches
	// and of its work requests and lifecycle events (the zero Names is
	// production).
	Names bus.Names
	// Handlers run reactions in process, by type; every other type goes
	// to NATS workers on syncreact.work.<type>.
	Handlers map[string]Handler
	// Types restricts the runner to these types; nil runs every type.
	Types []string

	// Concurrency bounds the reactions in flight (default 64).
	Concurrency int
	// ClaimBatch bounds the rows of one claim (default Concurrency, at
	// most storage.MaxReactionBatch).
	ClaimBatch int
	// Lease is how long a claim holds a reaction (default 30 s). A Go
	// handler's lease is extended every Heartbeat while it runs; a worker
	// must reply within the lease.
	Lease     time.Duration
	Heartbeat time.Duration // default Lease/3
	// InitialBackoff and MaxBackoff shape the retry delay
	// min(MaxBackoff, InitialBackoff · 2^(attempt−1)) (defaults 1 s, 5 min).
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// SweepInterval is the safety-net timer that claims in every
	// partition (default 30 s).
	SweepInterval time.Duration
	// CompletedRetention and DeadLetterRetention are how long terminal
	// rows are kept (defaults 30 and 90 days); the runner prunes every
	// PruneInterval (default 1 h) in passes of PruneBatch rows (default
	// 1000). A negative PruneInterval disables pruning.
	CompletedRetention  time.Duration
	DeadLetterRetention time.Duration
	PruneInterval       time.Duration
	PruneBatch          int

	// Clock is the clock of leases, backoff and retention (default
	// clock.System); the runner's timers pace themselves on the wall
	// clock.
	Clock  clock.Clock
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultConcurrency         = 64
	DefaultLease               = 30 * time.Second
	DefaultInitialBackoff      = time.Second
	DefaultMaxBackoff          = 5 * time.Minute
	DefaultSweepInterval       = 30 * time.Second
	DefaultCompletedRetention  = 30 * 24 * time.Hour
	DefaultDeadLetterRetention = 90 * 24 * time.Hour
	DefaultPruneInterval       = time.Hour
	DefaultPruneBatch          = 1000
)

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.ClaimBatch == 0 {
		c.ClaimBatch = min(c.Concurrency, storage.MaxReactionBatch)
	}
	set(&c.Lease, DefaultLease)
	set(&c.Heartbeat, c.Lease/3)
	set(&c.InitialBackoff, DefaultInitialBackoff)
	set(&c.MaxBackoff, DefaultMaxBackoff)
	set(&c.SweepInterval, DefaultSweepInterval)
	set(&c.CompletedRetention, DefaultCompletedRetention)
	set(&c.DeadLetterRetention, DefaultDeadLetterRetention)
	set(&c.PruneInterval, DefaultPruneInterval)
	if c.PruneBatch == 0 {
		c.PruneBatch = DefaultPruneBatch
	}
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Node == "" {
		c.Node = "syncnode"
	}
	return c
}

// Validate refuses values out of range, naming the field (call after
// WithDefaults). New also requires the wiring: Store and Conn.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("reactions: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	for typ, h := range c.Handlers {
		if err := storage.CheckReactionType(typ); err != nil {
			bad("Handlers", "%v", err)
		}
		if h == nil {
			bad("Handlers", "nil handler for %s", typ)
		}
	}
	for _, typ := range c.Types {
		if err := storage.CheckReactionType(typ); err != nil {
			bad("Types", "%v", err)
		}
	}
	if c.Concurrency < 1 || c.Concurrency > 10_000 {
		bad("Concurrency", "%d is outside 1..10000", c.Concurrency)
	}
	if c.ClaimBatch < 1 || c.ClaimBatch > storage.MaxReactionBatch {
		bad("ClaimBatch", "%d is outside 1..%d", c.ClaimBatch, storage.MaxReactionBatch)
	}
	if c.Lease < 10*time.Millisecond {
		bad("Lease", "%s is below 10ms", c.Lease)
	}
	if c.Heartbeat <= 0 || c.Heartbeat >= c.Lease {
		bad("Heartbeat", "%s must be positive and shorter than the lease (%s)", c.Heartbeat, c.Lease)
	}
	if c.InitialBackoff <= 0 || c.MaxBackoff < c.InitialBackoff {
		bad("InitialBackoff", "%s must be positive and at most MaxBackoff (%s)", c.InitialBackoff, c.MaxBackoff)
	}
	if c.SweepInterval <= 0 {
		bad("SweepInterval", "must be positive")
	}
	if c.CompletedRetention < 0 || c.DeadLetterRetention < 0 {
		bad("CompletedRetention", "retentions must not be negative")
	}
	if c.PruneBatch < 1 || c.PruneBatch > storage.MaxReactionBatch {
		bad("PruneBatch", "%d is outside 1..%d", c.PruneBatch, storage.MaxReactionBatch)
	}
	return errors.Join(errs...)
}

// Stats are monotonically increasing counters of a Runner's work.
type Stats struct {
	Claims       atomic.Int64 // claim statements that returned rows
	Claimed      atomic.Int64 // rows claimed
	Completed    atomic.Int64
	Failed       atomic.Int64 // attempts failed with a retry scheduled
	DeadLettered atomic.Int64
	// LostLeases counts outcomes not recorded because the lease was no
	// longer this runner's.
	LostLeases atomic.Int64
	Pruned     atomic.Int64
	// SkippedWakes counts commit events that cost no claim because their
	// commits enqueued no reactions.
	SkippedWakes atomic.Int64
}

// Runner claims reactions and runs them. Start it once; Stop is
// idempotent.
type Runner struct {
	cfg     Config
	log     *slog.Logger
	pub     publisher
	stats   Stats
	metrics *metrics

	// wake asks the scheduler to look at the dirty set.
	wake chan struct{}
	mu   sync.Mutex
	// dirty are partitions to claim in; all asks for a claim across every
	// partition. They stay set while claims come back full. Each mark
	// holds the generation it was set at (all: 0 when unset), so a claim
	// clears only the mark it answered: a commit event arriving while the
	// claim runs marks again and is not lost.
	dirty map[string]uint64
	all   uint64
	gen   uint64
	// nextRetry is the earliest retry this runner scheduled.
	nextRetry time.Time
	// inflight counts claimed reactions whose outcome is not recorded.
	inflight int
	// leases are the Go handlers running or waiting for their completion
	// to be recorded, for heartbeats.
	leases map[storage.ReactionKey]*job

	acks    chan *job
	jobCtx  context.Context
	cancel  context.CancelFunc
	jobs    sync.WaitGroup
	loops   sync.WaitGroup
	stop    chan struct{}
	ackStop chan struct{}
	// scheduled closes when the claim loop has returned: only it adds
	// jobs, so Stop waits for it before waiting for the jobs (a
	// WaitGroup's Add must not race its Wait).
	scheduled chan struct{}

	watcher  *bus.Watcher
	requeued *nats.Subscription
	life     lifecycle.Once
}

// New validates cfg and returns a Runner; Start starts it.
func New(cfg Config) (*Runner, error) {
	cfg = cfg.WithDefaults()
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("reactions: Store: required"))
	}
	if cfg.Conn == nil {
		errs = append(errs, errors.New("reactions: Conn: required"))
	}
	if err := errors.Join(append(errs, cfg.Validate())...); err != nil {
		return nil, err
	}
	r := &Runner{
		cfg:       cfg,
		log:       cfg.Logger,
		pub:       publisher{nc: cfg.Conn, names: cfg.Names, node: cfg.Node, log: cfg.Logger},
		wake:      make(chan struct{}, 1),
		dirty:     map[string]uint64{},
		leases:    map[storage.ReactionKey]*job{},
		acks:      make(chan *job, cfg.Concurrency),
		stop:      make(chan struct{}),
		ackStop:   make(chan struct{}),
		scheduled: make(chan struct{}),
	}
	r.metrics = newMetrics(r)
	r.jobCtx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// now is the runner's clock.
func (r *Runner) now() time.Time { return r.cfg.Clock.Now() }

// Stats returns the runner's counters.
func (r *Runner) Stats() *Stats { return &r.stats }

// Start subscribes to commit and requeued events and starts claiming,
// beginning with a sweep of every partition (work left by a previous run).
// A runner starts once.
func (r *Runner) Start(ctx context.Context) error {
	return r.life.Start(func() error { return r.start(ctx) })
}

func (r *Runner) start(ctx context.Context) error {
	w, err := bus.WatchPartitions(r.cfg.Conn, r.cfg.Names, bus.WatchConfig{
		OnChange: r.onChange,
		OnResync: r.markAll,
		Logger:   r.log,
	})
	if err != nil {
		return fmt.Errorf("reactions: %w", err)
	}
	fail := func(err error) error {
		_ = w.Stop(context.WithoutCancel(ctx))
		if r.requeued != nil {
			_ = r.requeued.Unsubscribe()
		}
		return fmt.Errorf("reactions: %w", err)
	}
	r.watcher = w
	filter, _ := r.cfg.Names.ReactionEventFilter(bus.ReactionRequeued)
	if r.requeued, err = r.cfg.Conn.Subscribe(filter, r.onRequeued); err != nil {
		return fail(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.cfg.Conn.FlushWithContext(fctx); err != nil {
		return fail(err)
	}
	r.markAll()
	r.loops.Add(3)
	go r.schedule()
	go r.ack()
	go r.heartbeat()
	if r.cfg.PruneInterval > 0 {
		r.loops.Add(1)
		go r.prune()
	}
	return nil
}

// onChange claims in a partition whose commits may have enqueued
// reactions. Commits that say they enqueued none (ce-reactions "0", what
// the relay sets for the pushes it is handed) cost no claim: without
// this every commit of a node that plans no reactions at all paid a
// write-path read here.
func (r *Runner) onChange(ch bus.PartitionChange) {
	if !ch.MayReact {
		r.stats.SkippedWakes.Add(1)
		return
	}
	r.markPartition(ch.Partition.ID())
}

// Wake makes the runner claim in partition soon, as a commit event that
// may have enqueued reactions does. The node calls it for a commit whose
// reactions no commit event announces (one without row changes). It
// never blocks.
func (r *Runner) Wake(partition string) { r.markPartition(partition) }

func (r *Runner) onRequeued(m *nats.Msg) {
	tok, _, _, ok := r.cfg.Names.ParseReactionEventSubject(m.Subject)
	if !ok {
		return
	}
	p, err := bus.PartitionFromToken(tok, m.Header.Get(bus.HeaderSyncPartition))
	if err != nil {
		r.markAll()
		return
	}
	r.markPartition(p.ID())
}

// Stop stops claiming, waits for running reactions until ctx ends (then
// cancels them; their leases expire and another runner retries them),
// records the outcomes that arrived, and unsubscribes. It is idempotent
// and does nothing before Start.
func (r *Runner) Stop(ctx context.Context) error {
	return r.life.Stop(func() error {
		werr := r.watcher.Stop(ctx)
		_ = r.requeued.Unsubscribe()
		close(r.stop)
		<-r.scheduled
		done := make(chan struct{})
		go func() { r.jobs.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			r.cancel()
			<-done
		}
		close(r.ackStop)
		r.loops.Wait()
		r.cancel()
		return werr
	})
}

func (r *Runner) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Runner) markPartition(p string) {
	r.mu.Lock()
	r.gen++
	r.dirty[p] = r.gen
	r.mu.Unlock()
	r.signal()
}

func (r *Runner) markAll() {
	r.mu.Lock()
	r.gen++
	r.all = r.gen
	r.mu.Unlock()
	r.signal()
}

// scheduleRetry makes the scheduler sweep when a retry falls due.
func (r *Runner) scheduleRetry(at time.Time) {
	r.mu.Lock()
	if r.nextRetry.IsZero() || at.Before(r.nextRetry) {
		r.nextRetry = at
	}
	r.mu.Unlock()
	r.signal()
}

// schedule is the claim loop: it waits for a wake-up, then claims while
// there are free slots and marked partitions.
func (r *Runner) schedule() {
	defer r.loops.Done()
	defer close(r.scheduled)
	sweep := time.NewTicker(r.cfg.SweepInterval)
	defer sweep.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-r.wake:
		case <-sweep.C:
			r.markAll()
		case <-retry.C:
			r.mu.Lock()
			r.gen++
			r.all, r.nextRetry = r.gen, time.Time{}
			r.mu.Unlock()
		}
		r.mu.Lock()
		if !r.nextRetry.IsZero() {
			retry.Reset(max(r.nextRetry.Sub(r.now()), 0))
		}
		r.mu.Unlock()
		r.drain()
	}
}

// next picks what to claim: every partition first, then one marked
// partition, with the generation of its mark. ok is false when nothing
// is marked or no slot is free.
func (r *Runner) next() (partition string, all bool, n int, gen uint64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	free := r.cfg.Concurrency - r.inflight
	if free <= 0 {
		return "", false, 0, 0, false
	}
	n = min(free, r.cfg.ClaimBatch)
	if r.all != 0 {
		return "", true, n, r.all, true
	}
	for p, g := range r.dirty {
		return p, false, n, g, true
	}
	return "", false, 0, 0, false
}

// drain claims until nothing marked is left or every slot is taken. A
// claim that comes back full leaves its mark: there may be more. A claim
// that comes back short clears its mark unless the mark was set again
// meanwhile (a commit event that arrived during the claim, whose rows the
// claim may not have seen).
func (r *Runner) drain() {
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		partition, all, n, gen, ok := r.next()
		if !ok {
			return
		}
		got, err := r.claim(partition, all, n)
		r.mu.Lock()
		if err != nil || got < n {
			if all && r.all == gen {
				r.all = 0
			} else if !all && r.dirty[partition] == gen {
				delete(r.dirty, partition)
			}
		}
		r.mu.Unlock()
		if err != nil {
			r.log.Warn("reactions: claim failed; the sweep retries", "partition", partition, "err", err)
			return
		}
	}
}

// claim leases up to n reactions and starts them.
func (r *Runner) claim(partition string, all bool, n int) (int, error) {
	now := r.now()
	owner := r.cfg.Node + ":" + nuid.Next()
	res, err := r.cfg.Store.ReactionClaim(context.WithoutCancel(r.jobCtx), storage.ReactionClaimParams{
		Partition: partition, AllPartitions: all, Types: r.cfg.Types, Owner: owner,
		NowMs: now.UnixMilli(), LeaseMs: r.cfg.Lease.Milliseconds(), Limit: n,
	})
	if err != nil {
		return 0, err
	}
	for _, d := range res.DeadLettered {
		r.stats.DeadLettered.Add(1)
		r.metrics.terminal(bus.ReactionDeadLettered, d.Attempts)
		r.pub.publish(bus.ReactionDeadLettered, d, CodeLeaseExpired, 0, now)
	}
	if len(res.Claimed) == 0 {
		return 0, nil
	}
	r.stats.Claims.Add(1)
	r.stats.Claimed.Add(int64(len(res.Claimed)))
	r.mu.Lock()
	r.inflight += len(res.Claimed)
	r.mu.Unlock()
	for _, rx := range res.Claimed {
		r.metrics.claimed(now, rx)
		j := &job{r: rx, lease: storage.ReactionLease{ReactionKey: rx.ReactionKey, Owner: owner}}
		r.jobs.Add(1)
		if h, ok := r.cfg.Handlers[rx.Type]; ok {
			go r.runHandler(j, h)
		} else {
			go r.dispatch(j)
		}
	}
	return len(res.Claimed), nil
}

// release frees the slots of finished reactions and wakes the scheduler
// if anything is still marked.
func (r *Runner) release(n int) {
	r.mu.Lock()
	r.inflight -= n
	pending := r.all != 0 || len(r.dirty) > 0
	r.mu.Unlock()
	if pending {
		r.signal()
	}
}

// prune removes aged terminal rows every PruneInterval, in passes of
// PruneBatch rows until a pass comes back short.
func (r *Runner) prune() {
	defer r.loops.Done()
	t := time.NewTicker(r.cfg.PruneInterval)
	defer t.Stop()
	for {
		r.prunePasses()
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
	}
}

func (r *Runner) prunePasses() {
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		now := r.now()
		res, err := r.cfg.Store.ReactionPrune(r.jobCtx, storage.ReactionPruneParams{
			AllPartitions:      true,
			CompletedBeforeMs:  now.Add(-r.cfg.CompletedRetention).UnixMilli(),
			DeadLetterBeforeMs: now.Add(-r.cfg.DeadLetterRetention).UnixMilli(),
			Limit:              r.cfg.PruneBatch,
		})
		if err != nil {
			r.log.Warn("reactions: prune failed", "err", err)
			return
		}
		r.stats.Pruned.Add(res.Completed + res.DeadLetter)
		if !res.MayHaveMore {
			return
		}
	}
}
