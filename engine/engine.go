// Package engine is the transport-free SSP2 sync core: an identity and
// request bytes in, a streamed response out.
//
// One request runs the pipeline of SPEC.md §1.5–§1.7, §2.1, §3, §4 and §6
// in this order: decode; touch the partition registry; wire-version rules;
// the schema floor; log-epoch acquisition and reset; client-id checks; the
// operation cap; request-level validation of the pull half; scope
// resolution (once); then the streamed response — header, push results in
// commit order, one section per subscription in request order — and
// finally the client record.
//
// A failure found before the response starts is returned to the transport
// as an *ssp2.Error with nothing written, so HTTP can answer it as JSON
// with its status. Once the response has started, failures are written
// in-band as ERROR then END.
package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// SegmentStore builds bootstrap pages once and serves their bytes; it is
// implemented by *segments.Store.
type SegmentStore interface {
	// GetOrBuild returns the live publication for key, building it with
	// build when there is none; built reports which.
	GetOrBuild(ctx context.Context, key storage.SegmentKey, nowMs int64, build BuildFunc) (pub storage.SegmentPublication, built bool, err error)
	// Bytes returns a segment's bytes, verified against its address.
	Bytes(ctx context.Context, segmentID string) ([]byte, error)
	// Grants returns the segment's publications in one partition and log
	// epoch that are live at nowMs: sync.not_found when there are none at
	// all, sync.segment_expired when none is live (SPEC.md §5.5).
	Grants(ctx context.Context, segmentID, partition, logEpoch string, nowMs int64) ([]storage.SegmentPublication, error)
}

// BuildFunc writes one bootstrap page's SSG2 segment to w and reports its
// row count and the continuation cursor ("" on the table's last page).
// It is an unnamed function type, so the segment store's own declaration
// of it (segments.BuildFunc) is the same type.
type BuildFunc = func(ctx context.Context, w io.Writer) (rowCount int64, nextRowCursor string, err error)

// Config configures an Engine.
type Config struct {
	Schema *schema.Schema
	Store  storage.Store
	// Segments stores bootstrap pages for reuse and download. Without it
	// every page is built per request and delivered inline.
	Segments SegmentStore
	// Clock is the server clock (default clock.System).
	Clock clock.Clock
	// OnCommit is called after a push commit is durable, outside any
	// transaction (the relay's wake-up).
	OnCommit func(partition string)
	// Gate is the serve gate (gate.go; GateOf adapts a *gate.Gate); nil
	// serves every partition.
	Gate   ServeGate
	Logger *slog.Logger

	// MaxOperations caps the operations of one request (0: the default,
	// 500).
	MaxOperations int
	// InlineSegmentMaxBytes: pages smaller than this are sent inline when
	// the client accepts both lanes; nil means the default (256 KiB), 0
	// never inlines when a reference is accepted.
	InlineSegmentMaxBytes *int

	// Validators are per-table write validators (SPEC.md §6.7).
	Validators map[string]RowValidator
	// CommitValidator runs once per new commit over the candidate state
	// (SPEC.md §6.8).
	CommitValidator CommitValidator
	// Mergers merge crdt columns by crdtType (SPEC.md §5.10). A crdt value
	// pushed for a type without a merger fails with sync.crdt_merge_failed.
	Mergers map[string]CrdtMerger
}

// CrdtMerger merges an incoming CRDT update into the stored state (nil
// when the row or column has none). It must be commutative, associative
// and idempotent.
type CrdtMerger func(stored, incoming []byte) ([]byte, error)

// Identity is an authenticated request's actor and partition, with the
// resolver of its allowed scopes.
type Identity struct {
	Partition string
	ActorID   string
	Scopes    Resolver
}

// Engine serves SSP2 requests. It is safe for concurrent use.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	metrics Metrics
	// inlineMax is Config.InlineSegmentMaxBytes.
	inlineMax int64
	// validators is the installed validator set (validators.go): read once
	// per commit, replaced whole by SetValidators.
	validators atomic.Pointer[validatorSet]
}

// Metrics are monotonically increasing counters of an Engine's work.
type Metrics struct {
	Requests         atomic.Int64
	RequestErrors    atomic.Int64
	PushApplied      atomic.Int64
	PushCached       atomic.Int64
	PushRejected     atomic.Int64
	PushConflicted   atomic.Int64
	Commits          atomic.Int64
	PullSections     atomic.Int64
	Bootstraps       atomic.Int64
	SegmentsBuilt    atomic.Int64
	SegmentsReused   atomic.Int64
	SegmentsInline   atomic.Int64
	SegmentRefs      atomic.Int64
	RowsBootstrapped atomic.Int64
}

// Defaults.
const (
	DefaultMaxOperations         = 500
	DefaultInlineSegmentMaxBytes = 256 << 10
)

// WithDefaults returns c with unset fields defaulted.
func (c Config) WithDefaults() Config {
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxOperations == 0 {
		c.MaxOperations = DefaultMaxOperations
	}
	if c.InlineSegmentMaxBytes == nil {
		c.InlineSegmentMaxBytes = new(DefaultInlineSegmentMaxBytes)
	}
	return c
}

// Validate reports every invalid setting (call after WithDefaults). New
// also requires the wiring: Schema and Store.
func (c Config) Validate() error {
	var errs []error
	if c.MaxOperations < 1 {
		errs = append(errs, fmt.Errorf("engine config: MaxOperations %d must be positive", c.MaxOperations))
	}
	if p := c.InlineSegmentMaxBytes; p != nil && *p < 0 {
		errs = append(errs, fmt.Errorf("engine config: InlineSegmentMaxBytes %d must not be negative", *p))
	}
	return errors.Join(errs...)
}

// New validates cfg and returns an Engine.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Schema == nil {
		return nil, errors.New("engine: Config.Schema is required")
	}
	if cfg.Store == nil {
		return nil, errors.New("engine: Config.Store is required")
	}
	vs, err := newValidatorSet(cfg.Schema, cfg.Validators, cfg.CommitValidator)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	for _, t := range cfg.Schema.Tables {
		for _, c := range t.Columns {
			if c.Type == ssp2.TypeCrdt && cfg.Mergers[c.CrdtType] == nil {
				cfg.Logger.Warn("no merger for crdt column; pushes that write it will be rejected",
					"table", t.Name, "column", c.Name, "crdtType", c.CrdtType)
			}
		}
	}
	e := &Engine{cfg: cfg, log: cfg.Logger, inlineMax: int64(*cfg.InlineSegmentMaxBytes)}
	e.validators.Store(vs)
	return e, nil
}

// nowMs is the server clock in Unix milliseconds.
func (e *Engine) nowMs() int64 { return e.cfg.Clock.Now().UnixMilli() }

// Metrics returns the engine's counters.
func (e *Engine) Metrics() *Metrics { return &e.metrics }

// Schema returns the schema the engine serves.
func (e *Engine) Schema() *schema.Schema { return e.cfg.Schema }

// reservedClientIDPrefix starts the client ids of server-side remote
// commands; ordinary clients may not use it (SPEC.md §1.5).
const reservedClientIDPrefix = `["remote-command",`

// request is the state of one request.
type request struct {
	id      Identity
	req     *ssp2.Request
	part    storage.Partition
	client  storage.Client
	hasPrev bool
	scopes  resolvedScopes
	ticket  Ticket // the serve gate's admission, checked in every transaction
	enc     *ssp2.ResponseEncoder
	w       io.Writer
	now     int64
	// results of commits already processed in this request, by id, for a
	// clientCommitId repeated within one request (SPEC.md §6.3).
	done map[string]storage.PushRecord
}

// Sync handles one SSP2 request. A request-level failure detected before
// the response starts is returned as an *ssp2.Error and nothing is written
// to w. Once the response has started every failure is written in-band
// (ERROR, END) and logged; Sync then returns nil.
func (e *Engine) Sync(ctx context.Context, id Identity, body []byte, w io.Writer) error {
	e.metrics.Requests.Add(1)
	err := e.sync(ctx, id, body, w)
	if err != nil {
		e.metrics.RequestErrors.Add(1)
	}
	return err
}

func (e *Engine) sync(ctx context.Context, id Identity, body []byte, w io.Writer) error {
	req, err := ssp2.DecodeRequest(body)
	if err != nil {
		return err
	}
	r := &request{id: id, req: req, w: w, now: e.nowMs()}
	if err := e.prepare(ctx, r); err != nil {
		return err
	}
	if r.enc == nil { // answered by a header-only response
		return nil
	}
	if err := e.stream(ctx, r); err != nil {
		e.abort(r, err)
	}
	return nil
}

// prepare runs every check that can fail the request before the response
// starts, in the order of SSP2-NOTES §4.0. A header-only answer (schema
// floor, epoch reset) is written here.
func (e *Engine) prepare(ctx context.Context, r *request) error {
	req, hdr := r.req, r.req.Header
	part, err := e.cfg.Store.PartitionTouch(ctx, r.id.Partition, r.now)
	if err != nil {
		return internal("touch partition", err)
	}
	r.part = part
	if r.ticket, err = e.admit(ctx, part); err != nil {
		return err
	}

	if req.WireVersion == 1 && part.EpochRequired {
		return ssp2.Errorf(ssp2.CodeClientWireUnsupported, "this partition's log was rotated: wire version 1 clients must upgrade")
	}
	if req.WireVersion >= 2 && hdr.LogEpoch == nil && len(req.Commits) > 0 {
		return ssp2.Errorf(ssp2.CodeInvalidRequest, "a request without logEpoch acquires the epoch and must not carry pushes")
	}
	epochReset := req.WireVersion >= 2 && (hdr.LogEpoch == nil || *hdr.LogEpoch != part.LogEpoch)

	if hdr.SchemaVersion != e.cfg.Schema.Version {
		v := e.cfg.Schema.Version
		return e.headerOnly(r, &ssp2.RespHeader{RequiredSchemaVersion: &v, LatestSchemaVersion: &v, LogEpoch: part.LogEpoch, ResetRequired: epochReset})
	}
	if epochReset {
		return e.headerOnly(r, &ssp2.RespHeader{LogEpoch: part.LogEpoch, ResetRequired: true})
	}

	if strings.HasPrefix(hdr.ClientID, reservedClientIDPrefix) {
		return ssp2.Errorf(ssp2.CodeInvalidClientID, "client ids starting with %s are reserved for server commands", reservedClientIDPrefix)
	}
	client, ok, err := e.cfg.Store.ClientGet(ctx, r.id.Partition, hdr.ClientID)
	if err != nil {
		return internal("read client record", err)
	}
	if ok && client.ActorID != r.id.ActorID {
		return ssp2.Errorf(ssp2.CodeInvalidClientID, "client id is bound to another actor")
	}
	r.client, r.hasPrev = client, ok

	ops := 0
	for _, c := range req.Commits {
		ops += len(c.Operations)
	}
	if ops > e.cfg.MaxOperations {
		return ssp2.Errorf(ssp2.CodeTooManyOperations, "%d operations exceed the cap of %d per request", ops, e.cfg.MaxOperations)
	}

	if err := e.validatePull(req); err != nil {
		return err
	}

	rs, err := resolve(ctx, r.id.Scopes, e.cfg.Schema, r.id.Partition, r.id.ActorID)
	if err != nil {
		if ssp2.CodeOf(err) == "" {
			return internal("resolve scopes", err)
		}
		return err
	}
	if rs.err != nil {
		e.log.Warn("scope resolution failed; failing closed", "partition", r.id.Partition, "actor", r.id.ActorID, "err", rs.err)
	}
	r.scopes = rs
	r.enc = ssp2.NewResponseEncoder(r.w, req.WireVersion)
	return nil
}

// validatePull performs the request-level validation of the pull half
// (SPEC.md §1.7, §3.2 rule 2, §4.1–§4.3).
func (e *Engine) validatePull(req *ssp2.Request) error {
	if req.Pull == nil {
		return nil
	}
	if req.Pull.Accept&(ssp2.AcceptInlineRows|ssp2.AcceptExternalRows) == 0 {
		return ssp2.Errorf(ssp2.CodeInvalidRequest, "PULL_HEADER.accept must allow inline or external rows segments")
	}
	seen := make(map[string]bool, len(req.Subscriptions))
	for _, s := range req.Subscriptions {
		if seen[s.ID] {
			return ssp2.Errorf(ssp2.CodeInvalidSubscription, "duplicate subscription id %q", s.ID)
		}
		seen[s.ID] = true
		t, ok := e.cfg.Schema.Table(s.Table)
		if !ok {
			return ssp2.Errorf(ssp2.CodeUnknownTable, "subscription %q names unknown table %q", s.ID, s.Table)
		}
		if err := validateRequested(t, s.Scopes); err != nil {
			return err
		}
	}
	return nil
}

// headerOnly answers with a lone RESP_HEADER (schema floor, epoch reset).
func (e *Engine) headerOnly(r *request, h *ssp2.RespHeader) error {
	if r.req.WireVersion < 2 {
		h.LogEpoch, h.ResetRequired = "", false
	}
	enc := ssp2.NewResponseEncoder(r.w, r.req.WireVersion)
	if err := enc.WriteFrame(h); err != nil {
		return internal("write header", err)
	}
	if err := enc.End(); err != nil {
		e.log.Debug("write response", "err", err)
	}
	return nil
}

// stream writes the response body after every request-level check passed.
func (e *Engine) stream(ctx context.Context, r *request) error {
	latest := e.cfg.Schema.Version
	h := &ssp2.RespHeader{LatestSchemaVersion: &latest}
	if r.req.WireVersion >= 2 {
		h.LogEpoch = r.part.LogEpoch
	}
	if err := r.enc.WriteFrame(h); err != nil {
		return err
	}
	if len(r.req.Commits) > 0 {
		r.done = make(map[string]storage.PushRecord, len(r.req.Commits))
		committed := false
		for _, c := range r.req.Commits {
			applied, err := e.push(ctx, r, c)
			if err != nil {
				if committed {
					e.notify(r.id.Partition)
				}
				return err
			}
			committed = committed || applied
		}
		if committed {
			e.notify(r.id.Partition)
		}
	}
	if r.req.Pull != nil {
		cursors, err := e.pull(ctx, r)
		if err != nil {
			return err
		}
		if err := e.saveClient(ctx, r, cursors); err != nil {
			return err
		}
	}
	return r.enc.End()
}

func (e *Engine) notify(partition string) {
	if e.cfg.OnCommit != nil {
		e.cfg.OnCommit(partition)
	}
}

// abort ends a started response with ERROR then END (SPEC.md §1.6).
func (e *Engine) abort(r *request, err error) {
	e.metrics.RequestErrors.Add(1)
	if ssp2.CodeOf(err) == "" || ssp2.CodeOf(err) == ssp2.CodeInternalError {
		e.log.Error("sync request failed mid-stream", "partition", r.id.Partition, "actor", r.id.ActorID, "err", err)
		err = ssp2.Errorf(ssp2.CodeInternalError, "internal error")
	}
	if werr := r.enc.WriteFrame(ssp2.NewErrorFrame(err)); werr != nil {
		e.log.Debug("write ERROR frame", "err", werr)
		return
	}
	if werr := r.enc.End(); werr != nil {
		e.log.Debug("write END", "err", werr)
	}
}

// internal wraps an unexpected failure; its cause is logged, never sent.
func internal(op string, err error) error {
	if notReady(err) {
		return err
	}
	if ce := ssp2.CodeOf(err); ce != "" && ce != ssp2.CodeInternalError {
		if info, ok := ce.Info(); ok && info.Category != ssp2.CategoryInternal {
			return err
		}
	}
	return ssp2.Wrap(ssp2.CodeInternalError, op, err)
}
