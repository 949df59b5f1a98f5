package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Store is what the gate needs from storage.
type Store interface {
	GateRead(ctx context.Context, partition string, running int32) (storage.GateState, error)
	SchemaMarker(ctx context.Context) (storage.SchemaMarker, bool, error)
	Partitions(ctx context.Context) ([]storage.Partition, error)
	PartitionRotateEpoch(ctx context.Context, partition string, nowMs int64) (storage.Partition, error)
	Checkpoints(ctx context.Context, partitions ...string) ([]storage.Checkpoint, error)
	CheckpointDeclare(ctx context.Context, key storage.CheckpointKey, nowMs int64) (storage.Checkpoint, error)
	CheckpointClaim(ctx context.Context, key storage.CheckpointKey, nowMs int64) (storage.Checkpoint, error)
	CheckpointActivate(ctx context.Context, p storage.CheckpointActivateParams) (storage.ActivateOutcome, error)
}

// Defaults.
const (
	DefaultResyncInterval = 5 * time.Minute
	// DefaultAttemptTimeout bounds one JetStream API call: a call made
	// before a cluster has a meta leader otherwise blocks for the client's
	// whole default timeout (NATS-NOTES pitfall 11).
	DefaultAttemptTimeout = 500 * time.Millisecond
	// DefaultWatchCheck is how often the watcher checks that the
	// connection did not reconnect under it.
	DefaultWatchCheck = 100 * time.Millisecond
)

// Config configures a Gate.
type Config struct {
	// Store is the SQL source of truth. Required.
	Store Store
	// Schema is the running build's schema; its Version is the running
	// schema version. Required.
	Schema *schema.Schema
	// Declared are the checkpoints this process declared at startup (the
	// declarations it passed to EnsureSchemaWithCheckpoints). Declare adds
	// to them at runtime.
	Declared []storage.CheckpointKey

	// Conn and JetStream are the node's NATS connection. Both nil: the
	// gate runs on SQL alone, without tokens or events.
	Conn      *nats.Conn
	JetStream jetstream.JetStream
	// Names is the bus namespace of the gate bucket and control events
	// (the zero Names is production).
	Names bus.Names
	// Replicas of the KV bucket when the gate creates it (default 1).
	Replicas int
	// Node names this node in event sources. Required with JetStream.
	Node string

	// OnChange is called after another process changed a partition's
	// token and the gate re-read SQL ("" for a node-wide change): the hook
	// that wakes the partition's realtime sessions. It runs on the
	// watcher's goroutine and must not block.
	OnChange func(partition string)

	// ResyncInterval is how often every token is rebuilt from SQL
	// (default DefaultResyncInterval; negative disables).
	ResyncInterval time.Duration
	// AttemptTimeout bounds each JetStream API call (default
	// DefaultAttemptTimeout).
	AttemptTimeout time.Duration
	// WatchCheck is how often the watcher checks the connection (default
	// DefaultWatchCheck).
	WatchCheck time.Duration

	// Clock stamps checkpoint changes and control events (default
	// clock.System).
	Clock  clock.Clock
	Logger *slog.Logger
}

// WithDefaults returns c with unset fields defaulted.
func (c Config) WithDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.ResyncInterval == 0 {
		c.ResyncInterval = DefaultResyncInterval
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = DefaultAttemptTimeout
	}
	if c.WatchCheck == 0 {
		c.WatchCheck = DefaultWatchCheck
	}
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every invalid setting (call after WithDefaults). New
// also requires the wiring: Store, Schema, and Conn with JetStream.
func (c Config) Validate() error {
	var errs []error
	if err := bus.CheckReplicas(c.Replicas); err != nil {
		errs = append(errs, fmt.Errorf("gate config: Replicas %w", err))
	}
	if c.AttemptTimeout < 0 || c.WatchCheck < 0 {
		errs = append(errs, errors.New("gate config: AttemptTimeout and WatchCheck must not be negative"))
	}
	for _, d := range c.Declared {
		if err := d.Check(); err != nil {
			errs = append(errs, fmt.Errorf("gate config: Declared: %w", err))
		} else if c.Schema != nil && d.SchemaVersion != c.Schema.Version {
			errs = append(errs, fmt.Errorf("gate config: Declared: %s is not at the running schema version %d", d, c.Schema.Version))
		}
	}
	return errors.Join(errs...)
}

func (c Config) checkWiring() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("gate config: Store is required"))
	}
	if c.Schema == nil {
		errs = append(errs, errors.New("gate config: Schema is required"))
	}
	if (c.Conn == nil) != (c.JetStream == nil) {
		errs = append(errs, errors.New("gate config: Conn and JetStream go together"))
	}
	if c.JetStream != nil && c.Node == "" {
		errs = append(errs, errors.New("gate config: Node is required with JetStream"))
	}
	return errors.Join(errs...)
}

// Metrics are monotonically increasing counters of a Gate's work.
type Metrics struct {
	Admitted      atomic.Int64 // requests admitted
	AdmitCached   atomic.Int64 // … from the watched view, without SQL
	Refused       atomic.Int64 // refusals (Admit, Check, Verify)
	Checks        atomic.Int64 // in-transaction checks
	TokenWrites   atomic.Int64 // tokens written to KV
	TokenConflict atomic.Int64 // CAS conflicts while writing tokens
	TokenErrors   atomic.Int64 // failed token writes
	WatchUpdates  atomic.Int64 // watched token changes
	WatchApplied  atomic.Int64 // … of which the view is done with (re-read, OnChange called)
	Resyncs       atomic.Int64 // Reconcile passes finished (with or without errors)
	Events        atomic.Int64 // control events published
	EventErrors   atomic.Int64 // control events that could not be published
}

// Gate is a node's serve gate. It is safe for concurrent use.
type Gate struct {
	cfg     Config
	log     *slog.Logger
	build   int32
	metrics Metrics

	declMu   sync.RWMutex
	declared map[storage.CheckpointKey]bool

	// The watched view: per partition token, the count of KV updates seen
	// and the SQL state read after the last one. viewGen rises on every
	// node-wide invalidation (schema token, watcher restart, reconnect);
	// a state read under an older viewGen is not used.
	mu      sync.RWMutex
	view    map[string]*viewEntry
	viewGen atomic.Uint64
	// live is set while the watcher runs caught up on a connection that
	// has not reconnected since it started.
	live      atomic.Bool
	reconcile atomic.Bool // a Reconcile runs

	kv      atomic.Pointer[jetstream.KeyValue]
	started atomic.Bool
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

type viewEntry struct {
	gen     uint64
	state   *storage.GateState
	viewGen uint64
	// partition is the raw id, learned from the token (the key may be a
	// hash): Reconcile rewrites every token the bucket holds.
	partition string
}

// New validates cfg and returns a Gate; Start connects it to KV.
func New(cfg Config) (*Gate, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.checkWiring(); err != nil {
		return nil, err
	}
	g := &Gate{
		cfg:      cfg,
		log:      cfg.Logger,
		build:    cfg.Schema.Version,
		declared: map[storage.CheckpointKey]bool{},
		view:     map[string]*viewEntry{},
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for _, d := range cfg.Declared {
		g.declared[d] = true
	}
	return g, nil
}

// Metrics returns the gate's counters.
func (g *Gate) Metrics() *Metrics { return &g.metrics }

// RunningVersion is the build's schema version.
func (g *Gate) RunningVersion() int32 { return g.build }

// Declared reports whether this process declared the checkpoint.
func (g *Gate) Declared(key storage.CheckpointKey) bool {
	g.declMu.RLock()
	defer g.declMu.RUnlock()
	return g.declared[key]
}

func (g *Gate) declare(key storage.CheckpointKey) (added bool) {
	g.declMu.Lock()
	defer g.declMu.Unlock()
	if g.declared[key] {
		return false
	}
	g.declared[key] = true
	return true
}

func (g *Gate) undeclare(key storage.CheckpointKey) {
	g.declMu.Lock()
	defer g.declMu.Unlock()
	delete(g.declared, key)
}

// Refusal reasons (Details.reason of sync.schema_not_ready).
const (
	ReasonNoSchema          = "no_schema"
	ReasonSchemaNewer       = "schema_newer"
	ReasonSchemaOlder       = "schema_older"
	ReasonCheckpointPending = "checkpoint_pending"
	ReasonTokenChanged      = "token_changed"
)

// RefusalDetails is the Details of a refusal. Checkpoint names stay out
// of the client-visible message; operators see them in Details, logs and
// readiness.
type RefusalDetails struct {
	Reason        string `json:"reason"`
	SchemaVersion int32  `json:"schemaVersion,omitempty"`
	BuildVersion  int32  `json:"buildVersion"`
	Checkpoint    string `json:"checkpoint,omitempty"`
}

func refuse(op, msg string, d RefusalDetails) error {
	e := ssp2.Errorf(ssp2.CodeSchemaNotReady, "%s", msg).WithDetails(d)
	e.Op = op
	return e
}

// decide applies the refusal rule to one SQL read.
func (g *Gate) decide(op, partition string, st storage.GateState) error {
	d := RefusalDetails{SchemaVersion: st.SchemaVersion, BuildVersion: g.build}
	switch {
	case !st.HasMarker:
		d.Reason = ReasonNoSchema
		return refuse(op, "no schema is installed", d)
	case st.SchemaVersion > g.build:
		d.Reason = ReasonSchemaNewer
		return refuse(op, fmt.Sprintf("the stored schema version %d is newer than this server's %d", st.SchemaVersion, g.build), d)
	case st.SchemaVersion < g.build:
		d.Reason = ReasonSchemaOlder
		return refuse(op, fmt.Sprintf("the stored schema version %d is older than this server's %d", st.SchemaVersion, g.build), d)
	}
	for _, p := range st.Pending {
		if !g.Declared(storage.CheckpointKey{Partition: partition, Name: p.Name, SchemaVersion: g.build}) {
			d.Reason, d.Checkpoint = ReasonCheckpointPending, p.Name
			return refuse(op, "a schema migration of this partition is in progress", d)
		}
	}
	return nil
}

// Ticket is one request's admission: the gate state it was admitted
// under. The zero Ticket (no gate) checks nothing.
type Ticket struct {
	g         *Gate
	partition string
	state     storage.GateState
	token     string // bus token; "" when the partition cannot be watched
	trusted   bool   // admitted while the watched view was live
	gen       uint64
	viewGen   uint64
}

// Partition is the admitted partition.
func (t Ticket) Partition() string { return t.partition }

// State is the gate state the request was admitted under.
func (t Ticket) State() storage.GateState { return t.state }

// Admit admits a request for partition: from the watched view when it is
// live and current, else from one SQL read. It returns a
// sync.schema_not_ready error when the partition may not be served.
func (g *Gate) Admit(ctx context.Context, partition string) (Ticket, error) {
	return g.AdmitAt(ctx, partition, "")
}

// AdmitAt is Admit for a caller that just read the partition's log epoch
// in SQL ("" when it did not): a watched view holding another epoch is
// stale — the epoch moved without a token, by a writer without KV — and
// is read again.
func (g *Gate) AdmitAt(ctx context.Context, partition, logEpoch string) (Ticket, error) {
	t := Ticket{g: g, partition: partition}
	tok, tokErr := bus.Token(partition)
	watched := tokErr == nil && g.trusted()
	var gen, vg uint64
	if watched {
		t.token = tok
		vg = g.viewGen.Load()
		g.mu.RLock()
		e := g.view[tok]
		if e != nil {
			gen = e.gen
			if e.state != nil && e.viewGen == vg {
				t.state = *e.state
			}
		}
		cached := e != nil && e.state != nil && e.viewGen == vg && (logEpoch == "" || e.state.LogEpoch == logEpoch)
		g.mu.RUnlock()
		if cached {
			t.trusted, t.gen, t.viewGen = true, gen, vg
			g.metrics.AdmitCached.Add(1)
			return g.admitted(t)
		}
	}
	st, err := g.cfg.Store.GateRead(ctx, partition, g.build)
	if err != nil {
		return Ticket{}, fmt.Errorf("admit: %w", err)
	}
	t.state = st
	if watched {
		// Keep the read only if no update arrived while it ran.
		g.mu.Lock()
		e := g.view[tok]
		if e == nil {
			e = &viewEntry{}
			g.view[tok] = e
		}
		if e.gen == gen && g.viewGen.Load() == vg && g.trusted() {
			s := st
			e.state, e.viewGen = &s, vg
			t.trusted, t.gen, t.viewGen = true, gen, vg
		}
		g.mu.Unlock()
	}
	return g.admitted(t)
}

func (g *Gate) admitted(t Ticket) (Ticket, error) {
	if err := g.decide("admit", t.partition, t.state); err != nil {
		g.metrics.Refused.Add(1)
		return Ticket{}, err
	}
	g.metrics.Admitted.Add(1)
	return t, nil
}

// Check re-reads the gate in tx (the transaction that serves, on its own
// connection and snapshot) and refuses when the partition may not be
// served or its token changed since admission: in SQL (values or
// revisions), or, while the watched view stayed live, in KV.
func (t Ticket) Check(ctx context.Context, tx storage.GateReader) error {
	g := t.g
	if g == nil {
		return nil
	}
	g.metrics.Checks.Add(1)
	st, err := tx.GateRead(ctx, t.partition, g.build)
	if err != nil {
		return fmt.Errorf("gate check: %w", err)
	}
	if err := g.decide("gate check", t.partition, st); err != nil {
		g.metrics.Refused.Add(1)
		return err
	}
	changed := !st.SameToken(t.state)
	if changed && t.trusted {
		// The view admitted on a state SQL no longer has. Unless a watched
		// update explains it, the view missed a change (made without a
		// token): drop it, so the retry reads SQL.
		g.mu.Lock()
		if e := g.view[t.token]; e != nil && e.gen == t.gen {
			e.state = nil
		}
		g.mu.Unlock()
	}
	if !changed && t.trusted && g.trusted() {
		g.mu.RLock()
		e := g.view[t.token]
		changed = e == nil || e.gen != t.gen || g.viewGen.Load() != t.viewGen
		g.mu.RUnlock()
	}
	if changed {
		g.metrics.Refused.Add(1)
		return refuse("gate check", "the partition's serve gate changed during the request",
			RefusalDetails{Reason: ReasonTokenChanged, SchemaVersion: st.SchemaVersion, BuildVersion: g.build})
	}
	return nil
}

// Verify reads the gate in SQL, outside any transaction, and refuses like
// Admit; for requests that serve without a transaction (segment
// downloads).
func (g *Gate) Verify(ctx context.Context, partition string) error {
	st, err := g.cfg.Store.GateRead(ctx, partition, g.build)
	if err != nil {
		return fmt.Errorf("gate verify: %w", err)
	}
	if err := g.decide("gate verify", partition, st); err != nil {
		g.metrics.Refused.Add(1)
		return err
	}
	return nil
}

// Ready reports why this node cannot serve, or nil: a stored schema that
// is not the build's, or unactivated checkpoints of the running version
// that another process declared (their partitions are refused until they
// activate). It reads SQL.
func (g *Gate) Ready(ctx context.Context) error {
	m, ok, err := g.cfg.Store.SchemaMarker(ctx)
	if err != nil {
		return fmt.Errorf("readiness: %w", err)
	}
	if err := g.decide("readiness", "", storage.GateState{HasMarker: ok, SchemaVersion: m.Version}); err != nil {
		return err
	}
	cps, err := g.cfg.Store.Checkpoints(ctx)
	if err != nil {
		return fmt.Errorf("readiness: %w", err)
	}
	var pending []string
	for _, c := range cps {
		if c.SchemaVersion == g.build && c.State != storage.CheckpointActivated && !g.Declared(c.CheckpointKey) {
			pending = append(pending, fmt.Sprintf("%s (partition %q, %s)", c.Name, c.Partition, c.State))
		}
	}
	if len(pending) == 0 {
		return nil
	}
	more := ""
	if len(pending) > 5 {
		more = fmt.Sprintf(" and %d more", len(pending)-5)
		pending = pending[:5]
	}
	return refuse("readiness", fmt.Sprintf("checkpoints of schema version %d are being backfilled by another process: %s%s",
		g.build, strings.Join(pending, ", "), more), RefusalDetails{Reason: ReasonCheckpointPending, SchemaVersion: m.Version, BuildVersion: g.build})
}

// trusted reports whether the watched view is current: the watcher is
// caught up and the connection is up. A disconnect seen here ends the
// view at once; the watcher restarts it after the reconnect (it checks
// the reconnect count every WatchCheck, off the request path: reading it
// takes the connection's lock).
func (g *Gate) trusted() bool {
	if !g.live.Load() {
		return false
	}
	if !g.cfg.Conn.IsConnected() {
		g.live.Store(false)
		g.viewGen.Add(1)
		return false
	}
	return true
}

// WatchLive reports whether the gate admits from the watched view (true)
// or from SQL alone (false).
func (g *Gate) WatchLive() bool { return g.cfg.Conn != nil && g.trusted() }
