package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/lifecycle"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Errors of the replica. They stop one partition's replication (logged,
// reported by Status) and leave what was applied in place.
var (
	// ErrEpochChanged: the edge's log epoch changed under a page being
	// applied (the edge restored a backup, or its log was wiped). The
	// next poll rebuilds the replica under the new epoch (rebuild.go).
	ErrEpochChanged = errors.New("edge log epoch changed under the replica")
	// ErrDiverged: the edge's log does not continue the replica's (a gap,
	// a row version that differs): the replica is not the edge's prefix.
	ErrDiverged = errors.New("replica diverged from the edge's log")
	// ErrPruned: the edge pruned commits a snapshot rebuild still needed
	// (snapshot.go) while it was read; the next poll starts over.
	ErrPruned = errors.New("edge pruned commits the replica has not applied")
)

// Hub is the hub side: for each edge the homes name it keeps a read
// replica of the edge's partitions in the hub's SQL, applied in commit
// order with the edge's log epoch and commit seqs; it sources the edge's
// commit events into EDGE_<edge>_COMMITS; and, as the engine's Router,
// it serves those partitions read-only and forwards their writes to the
// edge. It is safe for concurrent use.
type Hub struct {
	cfg     Config
	homes   Homes
	log     *slog.Logger
	links   map[string]*link
	metrics Metrics

	ctx    context.Context
	cancel context.CancelFunc
	tasks  lifecycle.Tasks // the replication loops and their source set-ups
	life   lifecycle.Once
}

// link is the hub's view of one edge.
type link struct {
	edge string
	wake chan struct{}

	mu      sync.Mutex
	up      bool
	since   time.Time // of the last up/down change
	lastErr error
	sourced bool
	// sourcing is set while sourceAsync sets the source up.
	sourcing bool
	consume  jetstream.ConsumeContext
	// page is the commits asked per request: halved after a request
	// timed out (an edge too slow to answer a full page in time), doubled
	// back after each answer up to Config.PageCommits. Loop only.
	page int
	// holder is set while this node holds the edge's replication lease;
	// leased is the lease (its Lost channel) the loop last replicated
	// under (loop only): a new one reloads every replica's position from
	// SQL, which another holder may have moved.
	holder   bool
	leased   <-chan struct{}
	parts    map[string]*replicaState
	progress chan struct{} // closed and replaced whenever a replica advances
	// notes are the holder's last word on each replica, kept while this
	// node follows (follower.go); noted is closed and replaced on each.
	notes    map[string]replicaNote
	noted    chan struct{}
	notesSub *nats.Subscription
}

// replicaState is one partition's replica.
type replicaState struct {
	loaded   bool
	epoch    string // "" until adopted
	applied  int64
	edgeMax  int64
	err      error
	buf      []ssp2.Value
	lastSync time.Time
	// rebuilding is set while the replica is dropped and re-paged under
	// a new epoch of the edge's (rebuild.go): it is not served meanwhile.
	rebuilding bool
	rebuildTo  int64 // the edge's max seq when the rebuild started
	// homePending are the checkpoints the edge last reported migrating
	// the partition (homegate.go): the replica is refused meanwhile.
	homePending []string
}

// NewHub validates cfg and returns the hub side; Start starts it.
func NewHub(cfg Config) (*Hub, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Name != "" {
		return nil, errors.New("edge: a Hub has no Config.Name (that makes the node an edge)")
	}
	homes, _ := ParseHomes(cfg.Homes)
	h := &Hub{cfg: cfg, homes: homes, log: cfg.Logger, links: map[string]*link{}}
	for _, e := range homes.Edges() {
		h.links[e] = &link{edge: e, wake: make(chan struct{}, 1), parts: map[string]*replicaState{}, progress: make(chan struct{}),
			notes: map[string]replicaNote{}, noted: make(chan struct{})}
	}
	return h, nil
}

// Start starts one replication loop per edge. The edges need not be
// reachable: a loop polls its edge every PingInterval until it answers.
func (h *Hub) Start(ctx context.Context) error {
	return h.life.Start(func() error {
		if h.cfg.Conn == nil || h.cfg.JetStream == nil || h.cfg.Store == nil || h.cfg.Schema == nil {
			return errors.New("edge: Hub needs Conn, JetStream, Store and Schema")
		}
		for _, l := range h.links {
			if err := h.subscribeNotes(l); err != nil {
				h.unsubscribeNotes()
				return err
			}
		}
		h.ctx, h.cancel = context.WithCancel(context.WithoutCancel(ctx))
		for _, l := range h.links {
			h.tasks.Go(func() { h.run(l) })
		}
		return nil
	})
}

// Stop ends the loops and waits for them, within ctx.
func (h *Hub) Stop(ctx context.Context) error {
	return h.life.Stop(func() error {
		h.cancel()
		h.unsubscribeNotes()
		for _, l := range h.links {
			l.mu.Lock()
			if l.consume != nil {
				l.consume.Stop()
			}
			l.mu.Unlock()
		}
		if err := h.tasks.Wait(ctx); err != nil {
			return fmt.Errorf("edge hub: stop: %w", err)
		}
		return nil
	})
}

func (h *Hub) unsubscribeNotes() {
	for _, l := range h.links {
		if l.notesSub != nil {
			_ = l.notesSub.Unsubscribe()
		}
	}
}

// Metrics returns the hub's counters.
func (h *Hub) Metrics() *Metrics { return &h.metrics }

func (l *link) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (h *Hub) run(l *link) {
	t := time.NewTimer(0)
	defer t.Stop()
	lease := h.newLease(l)
	defer lease.release()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-l.wake:
		case <-t.C:
		case <-lease.changed():
		}
		h.poll(l, lease.holding())
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(h.cfg.PingInterval)
	}
}

// poll asks the edge for its partitions and, when this node holds the
// edge's replication lease, brings every replica up to the edge's max
// seq. Without the lease it only keeps the link state.
func (h *Hub) poll(l *link, lease <-chan struct{}) {
	var st statusReply
	if err := h.request(bus.EdgeStatusSubject(l.edge), struct{}{}, &st); err != nil {
		l.setUp(false, err, &h.metrics)
		return
	}
	if st.Error != nil {
		l.setUp(false, st.Error.err(), &h.metrics)
		return
	}
	l.setUp(true, nil, &h.metrics)
	if lease == nil {
		for _, p := range st.Partitions {
			if h.homes.Of(p.ID) == l.edge {
				h.notePending(h.ctx, l, p.ID, p.Pending, p.MaxCommitSeq, -1)
			}
		}
		return
	}
	if lease != l.leased {
		l.leased, l.page = lease, 0
		l.mu.Lock()
		for _, s := range l.parts {
			s.loaded = false
		}
		l.mu.Unlock()
	}
	h.sourceAsync(l)
	for _, p := range st.Partitions {
		if h.homes.Of(p.ID) != l.edge {
			continue
		}
		if err := h.catchUp(l, p, lease); err != nil {
			if h.ctx.Err() == nil {
				h.log.Warn("edge: replica not caught up", "edge", l.edge, "partition", p.ID, "err", err)
			}
		}
	}
}

// request sends one JSON request to the edge and decodes the reply.
func (h *Hub) request(subject string, req, reply any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(h.ctx, h.cfg.RequestTimeout)
	defer cancel()
	m, err := h.cfg.Conn.RequestWithContext(ctx, subject, b)
	if err != nil {
		return err
	}
	return json.Unmarshal(m.Data, reply)
}

func (l *link) setUp(up bool, err error, m *Metrics) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastErr = err
	if l.up == up && !l.since.IsZero() {
		return
	}
	l.up, l.since = up, time.Now()
	if up {
		m.LinkUps.Add(1)
	} else {
		m.LinkDowns.Add(1)
	}
}

// SourceStreamConfig is the hub's stream of an edge's commit events:
// no subjects of its own, a durable source on the edge's commit stream
// (see SourceConsumerConfig), the edge's subjects stored under
// edge.<edge>.
func SourceStreamConfig(names bus.Names, edge string, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        names.EdgeStream(edge),
		Description: "commit events of edge " + edge + ", sourced from its domain",
		Sources: []*jetstream.StreamSource{{
			Name:     names.CommitStream(),
			Domain:   edge,
			Consumer: &jetstream.StreamConsumerSource{Name: bus.EdgeSourceConsumer, DeliverSubject: names.EdgeDeliverSubject(edge)},
			SubjectTransforms: []jetstream.SubjectTransformConfig{{
				Source: names.AllCommits(), Destination: bus.EdgeStoredPrefix(edge) + names.AllCommits(),
			}},
		}},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Replicas:    max(replicas, 1),
		Duplicates:  10 * time.Minute,
		AllowDirect: true,
	}
}

// sourceAsync sets the edge's source stream up in the background, once
// at a time, unless it is. The replica does not need it (it pages the
// edge over core NATS), and the hub's JetStream may be unavailable for
// seconds — a meta leader election after a hub node died — which must
// not hold a new lease holder's catch-up up by a request timeout per
// poll.
func (h *Hub) sourceAsync(l *link) {
	l.mu.Lock()
	if l.sourced || l.sourcing {
		l.mu.Unlock()
		return
	}
	l.sourcing = true
	l.mu.Unlock()
	done := func() {
		l.mu.Lock()
		l.sourcing = false
		l.mu.Unlock()
	}
	started := h.tasks.Go(func() {
		err := h.ensureSource(l)
		done()
		if err != nil && h.ctx.Err() == nil {
			h.log.Warn("edge: source stream not set up; retrying on the next poll", "edge", l.edge, "err", err)
		}
	})
	if !started { // stopping
		done()
	}
}

// ensureSource creates the source stream and the consumer whose
// deliveries wake the replica as soon as an edge commit is sourced.
func (h *Hub) ensureSource(l *link) error {
	ctx, cancel := context.WithTimeout(h.ctx, h.cfg.RequestTimeout)
	defer cancel()
	name := h.cfg.Names.EdgeStream(l.edge)
	if _, err := h.cfg.JetStream.CreateOrUpdateStream(ctx, SourceStreamConfig(h.cfg.Names, l.edge, h.cfg.Replicas)); err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	cons, err := h.cfg.JetStream.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverNewPolicy, HeadersOnly: true,
	})
	if err != nil {
		return fmt.Errorf("wake consumer on %s: %w", name, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		h.metrics.Sourced.Add(1)
		l.poke()
	})
	if err != nil {
		return fmt.Errorf("wake consumer on %s: %w", name, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if h.ctx.Err() != nil {
		// Stop already stopped the links' consumers.
		cc.Stop()
		return h.ctx.Err()
	}
	l.sourced, l.consume = true, cc
	return nil
}

// state returns the partition's replica state, read from SQL the first
// time: the replica's position is the partition's max seq, so a restart
// resumes where the last applied transaction left it.
func (h *Hub) state(l *link, partition string) (*replicaState, error) {
	l.mu.Lock()
	s := l.parts[partition]
	if s == nil {
		s = &replicaState{}
		l.parts[partition] = s
	}
	l.mu.Unlock()
	if s.loaded {
		return s, nil
	}
	p, err := h.cfg.Store.PartitionGet(h.ctx, partition)
	switch {
	case err == nil:
	case ssp2.CodeOf(err) == ssp2.CodeStoragePartitionUnregistered:
		p = storage.Partition{}
	default:
		return nil, err
	}
	l.mu.Lock()
	s.epoch, s.applied, s.loaded = p.LogEpoch, p.MaxCommitSeq, true
	l.mu.Unlock()
	return s, nil
}

// catchUp applies the edge's commits of one partition past the replica's
// position, page by page. Only the link's loop calls it.
func (h *Hub) catchUp(l *link, p partitionStatus, lease <-chan struct{}) error {
	s, err := h.state(l, p.ID)
	if err != nil {
		return err
	}
	l.mu.Lock()
	s.edgeMax = max(s.edgeMax, p.MaxCommitSeq)
	l.mu.Unlock()
	if s.epoch != "" && s.epoch != p.LogEpoch {
		if err := h.rebuild(l, s, p, lease); err != nil {
			return err
		}
	}
	// The followers hear of every move of the replica: its position and
	// the refusal that holds there (follower.go).
	defer h.announce(l, p.ID)
	h.notePending(h.ctx, l, p.ID, p.Pending, p.MaxCommitSeq, s.applied)
	h.announce(l, p.ID)
	for s.applied < p.MaxCommitSeq {
		select {
		case <-lease:
			return errLeaseLost
		default:
		}
		if l.page == 0 {
			l.page = h.cfg.PageCommits
		}
		var page commitsReply
		if err := h.request(bus.EdgeCommitsSubject(l.edge), commitsRequest{Partition: p.ID, AfterSeq: s.applied, Limit: l.page}, &page); err != nil {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
				l.page = max(l.page/2, 1)
			}
			return err
		}
		if page.Error != nil {
			// The edge's own deadline (a page too slow to read).
			l.page = max(l.page/2, 1)
			return page.Error.err()
		}
		l.page = min(l.page*2, h.cfg.PageCommits)
		if page.LogEpoch != p.LogEpoch || s.epoch != "" && s.epoch != page.LogEpoch {
			// Rotated since the status: the next poll rebuilds.
			return fmt.Errorf("%w: replica %s, edge %s", ErrEpochChanged, s.epoch, page.LogEpoch)
		}
		if page.HorizonSeq > s.applied {
			// The edge pruned commits the replica never applied.
			if err := h.snapshot(l, s, p, lease); err != nil {
				return err
			}
			h.announce(l, p.ID)
			continue
		}
		if len(page.Commits) == 0 {
			break
		}
		// A migration the page reports refuses the replica before its
		// batches are applied; its end clears only at the edge's max.
		if len(page.Pending) > 0 {
			h.notePending(h.ctx, l, p.ID, page.Pending, page.MaxCommitSeq, s.applied)
		}
		if err := h.apply(l, s, p.ID, page); err != nil {
			return err
		}
		h.notePending(h.ctx, l, p.ID, page.Pending, page.MaxCommitSeq, s.applied)
		h.announce(l, p.ID)
		p.MaxCommitSeq = max(p.MaxCommitSeq, page.MaxCommitSeq)
		l.mu.Lock()
		s.edgeMax = max(s.edgeMax, page.MaxCommitSeq)
		l.mu.Unlock()
	}
	return nil
}

// reload has the replica's position read from SQL again before its next
// use: another hub node moved it.
func (l *link) reload(s *replicaState) {
	l.mu.Lock()
	s.loaded = false
	l.mu.Unlock()
}

func (l *link) fail(s *replicaState, err error) error {
	l.mu.Lock()
	s.err = err
	l.mu.Unlock()
	return err
}

// apply writes one page of the edge's log into the replica in one
// transaction holding the partition's write lock: commits the replica
// has are skipped (a page may overlap a restart), the next one must be
// the replica's max seq + 1, and every row version and commit seq must
// come out as the edge's.
func (h *Hub) apply(l *link, s *replicaState, partition string, page commitsReply) error {
	ctx := h.ctx
	if s.epoch == "" {
		p, err := h.cfg.Store.PartitionAdopt(ctx, partition, page.LogEpoch, time.Now().UnixMilli())
		if err != nil {
			return err
		}
		if p.LogEpoch != page.LogEpoch {
			// The hub served the partition as its own before it was
			// homed at the edge.
			return l.fail(s, fmt.Errorf("%w: the hub's own log of the partition has epoch %s", ErrEpochChanged, p.LogEpoch))
		}
		l.mu.Lock()
		s.epoch, s.applied = p.LogEpoch, p.MaxCommitSeq
		l.mu.Unlock()
	}
	ids, err := h.commitBlobs(s, page.Commits)
	if err == nil {
		err = h.fetchBlobs(l, partition, ids)
	}
	if err != nil {
		return err
	}
	var applied, count int64
	err = h.cfg.Store.WriteTx(ctx, partition, func(tx storage.Tx) error {
		locked := tx.Locked()
		if locked.LogEpoch != s.epoch || locked.MaxCommitSeq < s.applied {
			// Another hub node rebuilt the replica since this one read
			// its position (this one lost the lease before it noticed).
			return fmt.Errorf("%w: the replica is at %s@%d, this node last saw %s@%d", errFenced, locked.LogEpoch, locked.MaxCommitSeq, s.epoch, s.applied)
		}
		if locked.LogEpoch != page.LogEpoch {
			return fmt.Errorf("%w: replica %s, edge %s", ErrEpochChanged, locked.LogEpoch, page.LogEpoch)
		}
		next := locked.MaxCommitSeq
		for _, c := range page.Commits {
			if c.Seq <= next {
				continue
			}
			if c.Seq != next+1 {
				return fmt.Errorf("%w: commit %d after %d", ErrDiverged, c.Seq, next)
			}
			changes := c.changes()
			for i := range changes {
				if err := h.applyChange(ctx, tx, s, &changes[i]); err != nil {
					return fmt.Errorf("commit %d: %w", c.Seq, err)
				}
			}
			seq, err := tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: c.CreatedAtMs, ActorID: c.ActorID, ClientID: c.ClientID,
				ClientCommitID: c.ClientCommitID, SchemaVersion: c.SchemaVersion, Changes: changes})
			if err != nil {
				return fmt.Errorf("commit %d: %w", c.Seq, err)
			}
			if seq != c.Seq {
				return fmt.Errorf("%w: commit %d appended as %d", ErrDiverged, c.Seq, seq)
			}
			next = seq
			count++
		}
		applied = next
		return nil
	})
	if err != nil {
		if errors.Is(err, errFenced) {
			l.reload(s)
			return err
		}
		if errors.Is(err, ErrDiverged) || errors.Is(err, ErrEpochChanged) {
			return l.fail(s, err)
		}
		return err
	}
	h.metrics.Applied.Add(count)
	l.mu.Lock()
	s.applied, s.err, s.lastSync = applied, nil, time.Now()
	if s.applied >= s.rebuildTo {
		s.rebuilding = false
	}
	close(l.progress)
	l.progress = make(chan struct{})
	l.mu.Unlock()
	if count > 0 && h.cfg.OnApply != nil {
		h.cfg.OnApply(partition)
	}
	return nil
}

func (h *Hub) applyChange(ctx context.Context, tx storage.Tx, s *replicaState, ch *storage.Change) error {
	t, ok := h.cfg.Schema.Table(ch.Table)
	if !ok {
		return ssp2.Errorf(ssp2.CodeUnknownTable, "the edge's table %q is not in the hub's schema", ch.Table)
	}
	if ch.Op == storage.OpDelete {
		_, err := tx.RowDelete(ctx, t.Name, ch.RowID)
		return err
	}
	vals, err := t.Codec.DecodeRow(ch.Row, s.buf[:0])
	if err != nil {
		return fmt.Errorf("row %q: %w", ch.RowID, err)
	}
	s.buf = vals
	v, err := tx.RowUpsert(ctx, t.Name, storage.RowWrite{RowID: ch.RowID, Values: vals, Scopes: ch.Scopes, Payload: ch.Row})
	if err != nil {
		return err
	}
	if v != ch.RowVersion {
		return fmt.Errorf("%w: row %q of %s at version %d, the edge's is %d", ErrDiverged, ch.RowID, t.Name, v, ch.RowVersion)
	}
	return nil
}

// Remote implements engine.Router: a partition homed at an edge this hub
// replicates.
func (h *Hub) Remote(partition string) bool {
	_, ok := h.links[h.homes.Of(partition)]
	return ok
}

// notReady is the refusal of an edge partition the hub cannot serve or
// write now: sync.schema_not_ready (retryable, HTTP 503), the serve
// gate's code, with the reason in its details.
func notReady(edge, reason, msg string) error {
	return ssp2.Errorf(ssp2.CodeSchemaNotReady, "%s", msg).WithDetails(map[string]string{"reason": reason, "home": edge})
}

// Ready implements engine.Router: the replica must hold the edge's epoch
// and be free of replication errors. A hub node without the edge's
// lease serves it only where the holder vouched for it (follower.go).
func (h *Hub) Ready(ctx context.Context, partition string) error {
	l := h.links[h.homes.Of(partition)]
	if err := l.homePending(partition); err != nil {
		return err
	}
	l.mu.Lock()
	holder := l.holder
	s := l.parts[partition]
	var epoch, reason, msg string
	if s != nil {
		epoch = s.epoch
		reason, msg = l.refusalLocked(s)
	}
	l.mu.Unlock()
	if !holder {
		return h.followerReady(ctx, l, partition)
	}
	if reason != "" {
		return notReady(l.edge, reason, msg)
	}
	if epoch != "" {
		return nil
	}
	// Not seen by the loop yet (a restart): the replica may exist in SQL.
	if p, err := h.cfg.Store.PartitionGet(ctx, partition); err == nil {
		if isPlaceholder(p.LogEpoch) {
			return notReady(l.edge, "replica_rebuilding", "the hub is rebuilding its replica of this partition from the edge's rows; retry")
		}
		return nil
	}
	return notReady(l.edge, "replica_not_ready", "the hub holds no replica of this partition yet; retry")
}

// refusalLocked is the reason (and message) the holder refuses a
// replica for, "" while it may be served. The caller holds l.mu.
func (l *link) refusalLocked(s *replicaState) (reason, msg string) {
	switch {
	case len(s.homePending) > 0:
		return "home_checkpoint_pending", "a schema migration of this partition is in progress at its home, edge " + l.edge + "; retry"
	case s.err != nil:
		return "replica_failed", "the hub's replica of this partition stopped: " + s.err.Error()
	case s.rebuilding:
		return "replica_rebuilding", "the hub is rebuilding its replica of this partition under the edge's new log epoch; retry"
	case isPlaceholder(s.epoch):
		return "replica_rebuilding", "the hub is rebuilding its replica of this partition from the edge's rows; retry"
	}
	return "", ""
}

// Forward implements engine.Router: the request's commits go to the
// edge over the leaf link, and the round waits (at most ForwardWait) for
// the replica to apply them, so its pull sees them.
func (h *Hub) Forward(ctx context.Context, id engine.Identity, req *ssp2.Request) (map[string]storage.PushRecord, error) {
	l := h.links[h.homes.Of(id.Partition)]
	body, err := engine.PushOnly(req)
	if err != nil {
		return nil, ssp2.Wrap(ssp2.CodeInternalError, "forward push", err)
	}
	var reply pushReply
	if err := h.ask(ctx, "forward push", bus.EdgePushSubject(l.edge), id, func(scopes map[string][]string) any {
		return pushRequest{Partition: id.Partition, ActorID: id.ActorID, Scopes: scopes, Body: body}
	}, &reply); err != nil {
		return nil, err
	}
	h.metrics.Forwarded.Add(1)
	recs := make(map[string]storage.PushRecord, len(reply.Records))
	var top int64
	for k, w := range reply.Records {
		recs[k] = w.toRecord(req.Header.ClientID, k)
		top = max(top, w.CommitSeq)
	}
	l.poke()
	h.waitApplied(ctx, l, id.Partition, top)
	return recs, nil
}

// waitApplied waits until the replica of partition reached seq, ctx
// ends or ForwardWait passes.
func (h *Hub) waitApplied(ctx context.Context, l *link, partition string, seq int64) {
	if seq == 0 {
		return
	}
	deadline := time.NewTimer(h.cfg.ForwardWait)
	defer deadline.Stop()
	// Another hub node holds the lease: its applies are seen in SQL
	// only, polled from every couple of ms up to every 20 ms.
	poll := 2 * time.Millisecond
	for {
		l.mu.Lock()
		s := l.parts[partition]
		done := s != nil && s.epoch != "" && s.applied >= seq
		ch, holder := l.progress, l.holder
		l.mu.Unlock()
		var tick <-chan time.Time
		if !done && !holder {
			p, err := h.cfg.Store.PartitionGet(ctx, partition)
			done = err == nil && p.MaxCommitSeq >= seq
			tick = time.After(poll)
			poll = min(2*poll, 20*time.Millisecond)
		}
		if done {
			return
		}
		select {
		case <-ch:
		case <-tick:
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// LinkStatus is one edge's link and replica state.
type LinkStatus struct {
	Edge string `json:"edge"`
	Up   bool   `json:"up"`
	// Since is when the link last went up or down.
	Since time.Time `json:"since"`
	// Error is the last status request's failure while down.
	Error string `json:"error,omitempty"`
	// Sourced reports the source stream set up.
	Sourced bool `json:"sourced"`
	// Replicating is set on the hub node that holds the edge's
	// replication lease (of the hub nodes on one database, one at a
	// time); the others keep the link state only, and their LagCommits
	// and Partitions are as of when they last held it.
	Replicating bool `json:"replicating"`
	// LagCommits is the edge's commits the replica has not applied, as of
	// the last status the edge answered.
	LagCommits int64           `json:"lagCommits"`
	Partitions []ReplicaStatus `json:"partitions"`
}

// ReplicaStatus is one partition's replica.
type ReplicaStatus struct {
	Partition  string `json:"partition"`
	LogEpoch   string `json:"logEpoch"`
	AppliedSeq int64  `json:"appliedSeq"`
	EdgeSeq    int64  `json:"edgeSeq"`
	// Rebuilding is set while the replica is rebuilt (a new edge epoch,
	// or a snapshot of the edge's rows) and not served.
	Rebuilding bool   `json:"rebuilding,omitempty"`
	Error      string `json:"error,omitempty"`
}

// Status reports every edge's link and replicas, edges sorted by name.
func (h *Hub) Status() []LinkStatus {
	out := make([]LinkStatus, 0, len(h.links))
	for _, l := range h.links {
		l.mu.Lock()
		ls := LinkStatus{Edge: l.edge, Up: l.up, Since: l.since, Sourced: l.sourced, Replicating: l.holder, Partitions: []ReplicaStatus{}}
		if l.lastErr != nil {
			ls.Error = l.lastErr.Error()
		}
		for id, s := range l.parts {
			rs := ReplicaStatus{Partition: id, LogEpoch: s.epoch, AppliedSeq: s.applied, EdgeSeq: s.edgeMax, Rebuilding: s.rebuilding}
			if s.err != nil {
				rs.Error = s.err.Error()
			}
			ls.LagCommits += max(s.edgeMax-s.applied, 0)
			ls.Partitions = append(ls.Partitions, rs)
		}
		l.mu.Unlock()
		slices.SortFunc(ls.Partitions, func(a, b ReplicaStatus) int { return strings.Compare(a.Partition, b.Partition) })
		out = append(out, ls)
	}
	slices.SortFunc(out, func(a, b LinkStatus) int { return strings.Compare(a.Edge, b.Edge) })
	return out
}
