package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/relay"
	"github.com/syncnode/syncnode/segments"
	"github.com/syncnode/syncnode/storage"
)

// API is the admin API. *Admin implements it over the node's components
// and *Client over NATS, so `syncnode checkpoints` runs the same
// operations against a running node or, offline, against the store.
type API interface {
	NodeInfo(ctx context.Context) (NodeInfo, error)
	Partitions(ctx context.Context, req PartitionsRequest) (PartitionsResponse, error)
	PartitionInfo(ctx context.Context, req PartitionRequest) (PartitionInfo, error)
	Clients(ctx context.Context, req ClientsRequest) (ClientsResponse, error)
	Prune(ctx context.Context, req PruneRequest) (PruneResponse, error)
	Checkpoints(ctx context.Context, req CheckpointsRequest) (CheckpointsResponse, error)
	CheckpointDeclare(ctx context.Context, req DeclareRequest) (Checkpoint, error)
	CheckpointActivate(ctx context.Context, req ActivateRequest) (ActivateResponse, error)
	Gate(ctx context.Context, req PartitionRequest) (GateInfo, error)
	RotateEpoch(ctx context.Context, req PartitionRequest) (RotateEpochResponse, error)
	Republish(ctx context.Context) (RepublishResponse, error)
	SegmentStats(ctx context.Context) (SegmentStats, error)
	SegmentPrune(ctx context.Context, req SegmentPruneRequest) (SegmentPruneResponse, error)
	LeaseRevoke(ctx context.Context, req LeaseRequest) (LeaseResponse, error)
	LeaseClear(ctx context.Context, req LeaseRequest) (LeaseResponse, error)
}

// Store is what the admin API reads and changes in SQL (storage.Store).
type Store interface {
	SchemaMarker(ctx context.Context) (storage.SchemaMarker, bool, error)
	Partitions(ctx context.Context) ([]storage.Partition, error)
	PartitionGet(ctx context.Context, partition string) (storage.Partition, error)
	ClientList(ctx context.Context, p storage.ClientListParams) ([]storage.Client, error)
	Checkpoints(ctx context.Context, partitions ...string) ([]storage.Checkpoint, error)
	GateRead(ctx context.Context, partition string, running int32) (storage.GateState, error)
	WriterFence(ctx context.Context, partition string) (int32, bool, error)
	Prune(ctx context.Context, p storage.PruneParams) (storage.PruneResult, error)
}

// Gate is the serve gate's transitions (*gate.Gate): every checkpoint
// change goes through it, so tokens and control events follow SQL.
type Gate interface {
	RunningVersion() int32
	Key(partition, name string) storage.CheckpointKey
	DeclareExternal(ctx context.Context, partition, name string) (storage.Checkpoint, error)
	Activate(ctx context.Context, p storage.CheckpointActivateParams) (storage.ActivateOutcome, error)
	RotateEpoch(ctx context.Context, partition string) (storage.Partition, error)
	Reconcile(ctx context.Context) error
	Verify(ctx context.Context, partition string) error
	WatchLive() bool
}

// Segments is the segment store (*segments.Store).
type Segments interface {
	Stats(ctx context.Context) (segments.Stats, error)
	Prune(ctx context.Context, nowMs int64) (segments.PruneResult, error)
	GC(ctx context.Context, nowMs int64) (segments.GCResult, error)
}

// Relay is the commit relay (*relay.Relay).
type Relay interface {
	Stats() relay.Stats
}

// Limits of list pages and of the relay-lag scan.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
	// MaxLagPartitions bounds the partitions node.info reads the stream
	// for (one JetStream request each).
	MaxLagPartitions = 1000
)

// Config configures the admin API. Store and Gate are required; a nil
// Segments, Relay or JetStream makes the operations that need them answer
// admin.unavailable (an offline command has no relay).
type Config struct {
	// Conn is the connection the service answers on (Start); nil for an
	// offline *Admin that is only called directly.
	Conn *nats.Conn

	Node    string
	Version string
	// Storage is "sqlite" or "postgres".
	Storage string
	// Hooks names the host hooks the node asks (node.info).
	Hooks []string
	// Started is when the node started (default: New's time).
	Started time.Time

	Store    Store
	Gate     Gate
	Segments Segments
	Relay    Relay
	// JetStream reads SYNC_COMMITS for the relay lag.
	JetStream jetstream.JetStream
	// Leases is the node's auth lease authority; nil (leases off) makes
	// leases.* answer admin.unavailable.
	Leases Leases
	// Names is the bus namespace of the commit stream read (the zero
	// Names is production). The admin service itself always answers on
	// the production admin subjects: it is per deployment.
	Names bus.Names
	// Ready is the node's readiness (/readyz); nil: ready.
	Ready func(ctx context.Context) error

	// Extensions add endpoints (the reactions endpoints).
	Extensions []Extension
	// Timeout bounds one request's work (default 30 s).
	Timeout time.Duration
	Clock   clock.Clock // default clock.System
	Logger  *slog.Logger
}

// DefaultTimeout bounds one admin request.
const DefaultTimeout = 30 * time.Second

// WithDefaults returns c with unset fields defaulted.
func (c Config) WithDefaults() Config {
	c.Clock = clock.Or(c.Clock)
	if c.Started.IsZero() {
		c.Started = c.Clock.Now()
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Version == "" {
		c.Version = "0.0.0"
	}
	return c
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("admin config: Store is required"))
	}
	if c.Gate == nil {
		errs = append(errs, errors.New("admin config: Gate is required"))
	}
	if c.Timeout < 0 {
		errs = append(errs, errors.New("admin config: Timeout must not be negative"))
	}
	return errors.Join(errs...)
}

// Admin runs the admin operations over a node's components and, once
// started, answers them as the micro service "syncnode".
type Admin struct {
	cfg Config
	log *slog.Logger

	streamMu sync.Mutex
	stream   jetstream.Stream

	mu      sync.Mutex
	svc     micro.Service
	stopped bool
	// base bounds every request's work: Stop cancels it, so no handler
	// outlives the service.
	base   context.Context
	cancel context.CancelFunc
}

var _ API = (*Admin)(nil)

// New validates cfg and returns an Admin; Start serves it on cfg.Conn.
func New(cfg Config) (*Admin, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base, cancel := context.WithCancel(context.Background())
	return &Admin{cfg: cfg, log: cfg.Logger, base: base, cancel: cancel}, nil
}

func unavailable(what string) *Error {
	return errorf(CodeUnavailable, "%s is not running on this node", what)
}

func needPartition(p string) error {
	if p == "" {
		return invalid("partition is required")
	}
	return nil
}

func pageLimit(n int) (int, error) {
	switch {
	case n == 0:
		return DefaultLimit, nil
	case n < 0 || n > MaxLimit:
		return 0, invalid("limit %d outside 1..%d", n, MaxLimit)
	}
	return n, nil
}

// NodeInfo implements API.
func (a *Admin) NodeInfo(ctx context.Context) (NodeInfo, error) {
	now := a.cfg.Clock.Now()
	info := NodeInfo{
		Node: a.cfg.Node, Version: a.cfg.Version, SchemaVersion: a.cfg.Gate.RunningVersion(), Storage: a.cfg.Storage,
		StartedAt: a.cfg.Started.UTC(), UptimeMs: now.Sub(a.cfg.Started).Milliseconds(), Ready: true,
		Hooks: slices.Clone(a.cfg.Hooks),
	}
	if info.Hooks == nil {
		info.Hooks = []string{}
	}
	m, ok, err := a.cfg.Store.SchemaMarker(ctx)
	if err != nil {
		return NodeInfo{}, toError("read schema marker", err)
	}
	if ok {
		info.StoredSchemaVersion = m.Version
	}
	if a.cfg.Ready != nil {
		if err := a.cfg.Ready(ctx); err != nil {
			info.Ready, info.NotReady = false, err.Error()
		}
	}
	if a.cfg.Relay != nil {
		st := a.cfg.Relay.Stats()
		info.Relay = RelayInfo{Events: st.Events, Batches: st.Batches, Conflicts: st.Conflicts, Failures: st.Failures}
	}
	parts, err := a.cfg.Store.Partitions(ctx)
	if err != nil {
		return NodeInfo{}, toError("list partitions", err)
	}
	if len(parts) > MaxLagPartitions {
		parts, info.Relay.Partial = parts[:MaxLagPartitions], true
	}
	for _, p := range parts {
		r := a.relayLag(ctx, p)
		if r.Error != "" {
			info.Relay.LagError = r.Error
			break
		}
		info.Relay.PartitionsChecked++
		if r.Lag > 0 {
			info.Relay.Lag += r.Lag
			info.Relay.PartitionsBehind++
		}
	}
	return info, nil
}

// commitStream binds SYNC_COMMITS once.
func (a *Admin) commitStream(ctx context.Context) (jetstream.Stream, error) {
	if a.cfg.JetStream == nil {
		return nil, unavailable("the commit relay")
	}
	a.streamMu.Lock()
	defer a.streamMu.Unlock()
	if a.stream != nil {
		return a.stream, nil
	}
	s, err := a.cfg.JetStream.Stream(ctx, a.cfg.Names.CommitStream())
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", a.cfg.Names.CommitStream(), err)
	}
	a.stream = s
	return s, nil
}

// relayLag reads the partition's last event in SYNC_COMMITS: the commits
// of the current epoch above it are not published yet. A stream holding
// another epoch (or nothing) lags by the whole retained log.
func (a *Admin) relayLag(ctx context.Context, p storage.Partition) PartitionRelay {
	retained := p.MaxCommitSeq - p.HorizonSeq
	bp, err := bus.NewPartition(p.ID)
	if err != nil {
		return PartitionRelay{Lag: retained, Error: err.Error()}
	}
	s, err := a.commitStream(ctx)
	if err != nil {
		return PartitionRelay{Lag: retained, Error: err.Error()}
	}
	msg, err := s.GetLastMsgForSubject(ctx, a.cfg.Names.PartitionCommits(bp))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return PartitionRelay{Lag: retained}
	}
	if err != nil {
		return PartitionRelay{Lag: retained, Error: fmt.Sprintf("read %s: %v", a.cfg.Names.CommitStream(), err)}
	}
	out := PartitionRelay{StreamSeq: msg.Sequence, Lag: retained}
	m, err := a.cfg.Names.ParseMeta(msg.Subject, msg.Header)
	if err == nil && m.LogEpoch == bus.EscapeEpoch(p.LogEpoch) {
		out.PublishedSeq = m.CommitSeq
		out.Lag = max(0, p.MaxCommitSeq-m.CommitSeq)
	}
	return out
}

// Partitions implements API.
func (a *Admin) Partitions(ctx context.Context, req PartitionsRequest) (PartitionsResponse, error) {
	limit, err := pageLimit(req.Limit)
	if err != nil {
		return PartitionsResponse{}, err
	}
	parts, err := a.cfg.Store.Partitions(ctx)
	if err != nil {
		return PartitionsResponse{}, toError("list partitions", err)
	}
	// Partitions come in id order (bytewise); "" is a valid id.
	out := PartitionsResponse{Partitions: []Partition{}}
	for _, p := range parts {
		if req.After != nil && p.ID <= *req.After {
			continue
		}
		if len(out.Partitions) == limit {
			next := out.Partitions[limit-1].Partition
			out.Next = &next
			break
		}
		out.Partitions = append(out.Partitions, partitionOf(p))
	}
	return out, nil
}

// PartitionInfo implements API.
func (a *Admin) PartitionInfo(ctx context.Context, req PartitionRequest) (PartitionInfo, error) {
	if err := needPartition(req.Partition); err != nil {
		return PartitionInfo{}, err
	}
	p, err := a.cfg.Store.PartitionGet(ctx, req.Partition)
	if err != nil {
		return PartitionInfo{}, toError("read partition", err)
	}
	g, err := a.Gate(ctx, req)
	if err != nil {
		return PartitionInfo{}, err
	}
	info := PartitionInfo{Partition: partitionOf(p), Gate: g, Relay: a.relayLag(ctx, p)}
	if bp, err := bus.NewPartition(p.ID); err == nil {
		info.Token = bp.Token()
	}
	return info, nil
}

// Clients implements API.
func (a *Admin) Clients(ctx context.Context, req ClientsRequest) (ClientsResponse, error) {
	if err := needPartition(req.Partition); err != nil {
		return ClientsResponse{}, err
	}
	limit, err := pageLimit(req.Limit)
	if err != nil {
		return ClientsResponse{}, err
	}
	p, err := a.cfg.Store.PartitionGet(ctx, req.Partition)
	if err != nil {
		return ClientsResponse{}, toError("read partition", err)
	}
	cs, err := a.cfg.Store.ClientList(ctx, storage.ClientListParams{Partition: req.Partition, AfterClientID: req.After, Limit: limit})
	if err != nil {
		return ClientsResponse{}, toError("list clients", err)
	}
	out := ClientsResponse{Clients: make([]ClientRecord, len(cs))}
	for i, c := range cs {
		out.Clients[i] = ClientRecord{ClientID: c.ClientID, ActorID: c.ActorID, WireVersion: c.WireVersion, Cursor: c.Cursor,
			Behind: max(0, p.MaxCommitSeq-c.Cursor), UpdatedAtMs: c.UpdatedAtMs, Subscriptions: c.Subscriptions}
	}
	if len(cs) == limit {
		out.Next = cs[limit-1].ClientID
	}
	return out, nil
}

// Prune implements API.
func (a *Admin) Prune(ctx context.Context, req PruneRequest) (PruneResponse, error) {
	if err := needPartition(req.Partition); err != nil {
		return PruneResponse{}, err
	}
	if req.ThroughSeq < 0 || req.ActiveWindowMs < 0 || req.AgeForceMs < 0 || req.MinRetainedCommits < 0 {
		return PruneResponse{}, invalid("throughSeq, activeWindowMs, ageForceMs and minRetainedCommits must not be negative")
	}
	p, err := a.cfg.Store.PartitionGet(ctx, req.Partition)
	if err != nil {
		return PruneResponse{}, toError("read partition", err)
	}
	through := req.ThroughSeq
	if through == 0 {
		through = p.MaxCommitSeq
	}
	res, err := a.cfg.Store.Prune(ctx, storage.PruneParams{
		Partition: p.ID, LogEpoch: p.LogEpoch, ThroughSeq: through, NowMs: a.cfg.Clock.Now().UnixMilli(),
		ActiveWindowMs: req.ActiveWindowMs, AgeForceMs: req.AgeForceMs, MinRetainedCommits: req.MinRetainedCommits, Literal: req.Literal,
	})
	if err != nil {
		return PruneResponse{}, toError("prune", err)
	}
	return PruneResponse{Partition: p.ID, HorizonSeq: res.HorizonSeq, RemovedCommits: res.RemovedCommits}, nil
}

// Checkpoints implements API.
func (a *Admin) Checkpoints(ctx context.Context, req CheckpointsRequest) (CheckpointsResponse, error) {
	var parts []string
	if req.Partition != nil {
		parts = []string{*req.Partition}
	}
	cps, err := a.cfg.Store.Checkpoints(ctx, parts...)
	if err != nil {
		return CheckpointsResponse{}, toError("list checkpoints", err)
	}
	out := CheckpointsResponse{Checkpoints: make([]Checkpoint, len(cps))}
	for i, c := range cps {
		out.Checkpoints[i] = CheckpointOf(c)
	}
	return out, nil
}

// CheckpointDeclare implements API. The answering node does not join the
// declarers: every node refuses the partition until the checkpoint
// activates.
func (a *Admin) CheckpointDeclare(ctx context.Context, req DeclareRequest) (Checkpoint, error) {
	if err := needPartition(req.Partition); err != nil {
		return Checkpoint{}, err
	}
	if req.Name == "" {
		return Checkpoint{}, invalid("name is required")
	}
	cp, err := a.cfg.Gate.DeclareExternal(ctx, req.Partition, req.Name)
	if err != nil {
		return Checkpoint{}, toError("declare checkpoint", err)
	}
	return CheckpointOf(cp), nil
}

// CheckpointActivate implements API: owner epoch and watermark default to
// the stored row's (0 when there is none, which the store refuses as
// undeclared). A checkpoint that did not activate is an admin.conflict
// whose details are the ActivateResponse.
func (a *Admin) CheckpointActivate(ctx context.Context, req ActivateRequest) (ActivateResponse, error) {
	if err := needPartition(req.Partition); err != nil {
		return ActivateResponse{}, err
	}
	if req.Name == "" || len(req.Sources) == 0 {
		return ActivateResponse{}, invalid("name and sources are required")
	}
	key := a.cfg.Gate.Key(req.Partition, req.Name)
	cps, err := a.cfg.Store.Checkpoints(ctx, req.Partition)
	if err != nil {
		return ActivateResponse{}, toError("read checkpoint", err)
	}
	p := storage.CheckpointActivateParams{CheckpointKey: key, Sources: req.Sources}
	for _, c := range cps {
		if c.CheckpointKey == key {
			p.OwnerEpoch, p.Watermark = c.OwnerEpoch, c.Watermark
		}
	}
	if req.OwnerEpoch != nil {
		p.OwnerEpoch = *req.OwnerEpoch
	}
	if req.Watermark != nil {
		p.Watermark = *req.Watermark
	}
	out, err := a.cfg.Gate.Activate(ctx, p)
	if err != nil {
		return ActivateResponse{}, toError("activate checkpoint", err)
	}
	resp := ActivateResponse{Partition: req.Partition, Name: req.Name, Outcome: string(out), OwnerEpoch: p.OwnerEpoch, Watermark: p.Watermark}
	if out != storage.ActivateActivated {
		why := "a source table changed above the watermark: run the backfill again"
		if out == storage.ActivateUnverifiable {
			why = "pruning passed the watermark, so the window cannot be checked: run the backfill again"
		}
		e := errorf(CodeConflict, "checkpoint %s not activated: %s (%s)", key, out, why)
		e.Details = mustJSON(resp)
		return ActivateResponse{}, e
	}
	return resp, nil
}

// Gate implements API.
func (a *Admin) Gate(ctx context.Context, req PartitionRequest) (GateInfo, error) {
	if err := needPartition(req.Partition); err != nil {
		return GateInfo{}, err
	}
	running := a.cfg.Gate.RunningVersion()
	st, err := a.cfg.Store.GateRead(ctx, req.Partition, running)
	if err != nil {
		return GateInfo{}, toError("read gate", err)
	}
	g := GateInfo{
		SchemaVersion: st.SchemaVersion, SchemaRevision: st.SchemaRevision, RunningSchemaVersion: running,
		Registered: st.Registered, LogEpoch: st.LogEpoch, Revision: st.Revision, Pending: []PendingCheckpoint{},
		WatchLive: a.cfg.Gate.WatchLive(), Serving: true,
	}
	for _, p := range st.Pending {
		g.Pending = append(g.Pending, PendingCheckpoint{Name: p.Name, State: string(p.State)})
	}
	fence, ok, err := a.cfg.Store.WriterFence(ctx, req.Partition)
	if err != nil {
		return GateInfo{}, toError("read writer fence", err)
	}
	if ok {
		g.WriterFence = &fence
	}
	if err := a.cfg.Gate.Verify(ctx, req.Partition); err != nil {
		g.Serving, g.Refusal = false, toError("serve gate", err)
	}
	return g, nil
}

// RotateEpoch implements API.
func (a *Admin) RotateEpoch(ctx context.Context, req PartitionRequest) (RotateEpochResponse, error) {
	if err := needPartition(req.Partition); err != nil {
		return RotateEpochResponse{}, err
	}
	p, err := a.cfg.Gate.RotateEpoch(ctx, req.Partition)
	if err != nil {
		return RotateEpochResponse{}, toError("rotate epoch", err)
	}
	return RotateEpochResponse{Partition: p.ID, LogEpoch: p.LogEpoch}, nil
}

// Republish implements API.
func (a *Admin) Republish(ctx context.Context) (RepublishResponse, error) {
	if err := a.cfg.Gate.Reconcile(ctx); err != nil {
		return RepublishResponse{}, toError("republish serve-gate tokens", err)
	}
	return RepublishResponse{Republished: true}, nil
}

// SegmentStats implements API.
func (a *Admin) SegmentStats(ctx context.Context) (SegmentStats, error) {
	if a.cfg.Segments == nil {
		return SegmentStats{}, unavailable("the segment store")
	}
	s, err := a.cfg.Segments.Stats(ctx)
	if err != nil {
		return SegmentStats{}, toError("segment stats", err)
	}
	return SegmentStats{Objects: s.Objects, Bytes: s.Bytes, Publications: s.Publications, StoredBytes: s.StoredBytes,
		Builds: s.Builds, Reuses: s.Reuses, Puts: s.Puts, Uploads: s.Uploads, UploadsSkipped: s.UploadsSkipped,
		CacheHits: s.CacheHits, CacheMisses: s.CacheMisses, CachedBytes: s.CachedBytes}, nil
}

// SegmentPrune implements API.
func (a *Admin) SegmentPrune(ctx context.Context, req SegmentPruneRequest) (SegmentPruneResponse, error) {
	if a.cfg.Segments == nil {
		return SegmentPruneResponse{}, unavailable("the segment store")
	}
	now := a.cfg.Clock.Now().UnixMilli()
	res, err := a.cfg.Segments.Prune(ctx, now)
	if err != nil {
		return SegmentPruneResponse{}, toError("prune segments", err)
	}
	out := SegmentPruneResponse{Publications: res.Publications, Objects: res.Objects, Busy: res.Busy}
	if req.GC {
		gc, err := a.cfg.Segments.GC(ctx, now)
		if err != nil {
			return SegmentPruneResponse{}, toError("collect segments", err)
		}
		out.ChunkSubjects, out.Unindexed = gc.ChunkSubjects, gc.Objects
	}
	return out, nil
}
