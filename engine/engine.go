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
// A commit's operations are staged in the semantics of the request's wire
// version — full rows and per-row conflicts below 3, sparse rows and
// per-column conflicts at 3, over one stored state (v3push.go) — then its
// declared references are enforced (references.go) and its whole-commit
// validator runs.
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
	"iter"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/internal/ids"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/signedurl"
	"github.com/syncnode/syncnode/sqliteimage"
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
	// Find returns the live publication for key at nowMs, if any: a read
	// of the key cache or SQL, never a build.
	Find(ctx context.Context, key storage.SegmentKey, nowMs int64) (storage.SegmentPublication, bool, error)
	// Get returns a segment with its publications in every partition;
	// an unknown id is sync.not_found.
	Get(ctx context.Context, segmentID string) (storage.Segment, error)
}

// ImageWriterFunc writes a SQLite-image segment (SPEC.md §5.3) of layout
// l and metadata m (RowCount filled in) from rows to w, returning the
// rows written: sqlitestore.WriteImage, bound to a temporary directory.
type ImageWriterFunc func(ctx context.Context, w io.Writer, l sqliteimage.Layout, m sqliteimage.Meta, rows iter.Seq2[sqliteimage.Row, error]) (int64, error)

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
	// OnAppend, when set, is handed every commit a push appended, with
	// the log epoch it was appended under and the number of durable
	// reactions it enqueued, once it is durable; it then replaces
	// OnCommit for pushes (other commits still call OnCommit). The relay
	// publishes c without reading it back from SQL. It must not block or
	// modify c.
	OnAppend func(partition, logEpoch string, c storage.Commit, reactions int)
	// Gate is the serve gate (gate.go; GateOf adapts a *gate.Gate); nil
	// serves every partition.
	Gate   ServeGate
	Logger *slog.Logger

	// MaxOperations caps the operations of one request: nil means the
	// default (500), 0 refuses every push (a read-only node).
	MaxOperations *int
	// MaxSubscriptions caps the subscriptions of one request (default
	// 500): with the clamped page count per bootstrap it bounds the work
	// of one pull.
	MaxSubscriptions int
	// InlineSegmentMaxBytes: pages smaller than this are sent inline when
	// the client accepts both lanes; nil means the default (256 KiB), 0
	// never inlines when a reference is accepted.
	InlineSegmentMaxBytes *int
	// ImageWriter builds SQLite-image segments (image.go); nil turns the
	// image lane off. It needs Segments: images travel by reference only.
	ImageWriter ImageWriterFunc
	// SignedURLs mints the url of SEGMENT_REF descriptors for clients that
	// accept signed URLs (accept bit 3) and verifies it on download
	// (signed.go); nil mints none.
	SignedURLs *signedurl.Signer
	// SignedURLBase is the absolute base a signed URL's
	// "segments/{id}?st=…" is appended to (a CDN in front of the node);
	// empty takes the request's own mount (Identity.MountURL).
	SignedURLBase string
	// BlobPresign serves blobs by signed URL (SPEC.md §5.9.3, §5.9.5):
	// upload grants carry a presigned PUT, and an authorized GET
	// /blobs/{id} answers {url, urlExpiresAtMs} instead of the bytes. nil
	// means on when SignedURLs is set; true needs SignedURLs.
	// SetBlobPresign switches it at run time.
	BlobPresign *bool

	// Validators are per-table write validators (SPEC.md §6.7).
	Validators map[string]RowValidator
	// CommitValidator runs once per new commit over the candidate state
	// (SPEC.md §6.8).
	CommitValidator CommitValidator
	// Mergers merge crdt columns by crdtType (SPEC.md §5.10). A crdt value
	// pushed for a type without a merger fails with sync.crdt_merge_failed.
	Mergers map[string]CrdtMerger

	// ReactionPlanner plans durable reactions for every new commit
	// (SPEC.md §6.9, reactions.go); they are written in the push
	// transaction.
	ReactionPlanner ReactionPlanner
	// OnReactions is called after a commit that enqueued reactions is
	// durable, outside any transaction, with what was enqueued.
	OnReactions func(partition string, p storage.ReactionEnqueueParams)
	// OnSilentReactions, when set, is called after OnReactions for a
	// durable commit that enqueued reactions but changed no row (its
	// operations deleted absent rows, or a command changed nothing). Commit
	// events are per table, so the relay publishes none for it and nothing
	// on the bus wakes a reaction runner: the node wakes its own runner
	// here (runners on other nodes find the reactions at their sweep).
	OnSilentReactions func(partition string)
	// WireWindow is the range of wire versions served (default
	// DefaultWireWindow, 1 through 3); a request of another version is
	// refused as sync.invalid_request before anything is read (SPEC.md
	// §9). Version 3 pushes are sparse (v3push.go); every version reads
	// and writes one stored state, so clients of different versions
	// converge.
	WireWindow ssp2.WireWindow
	// Leases issues auth leases on every resolved round and authorizes
	// requests by them during a resolver outage (SPEC.md §7.3); nil turns
	// the feature off (no LEASE frame, an outage fails closed).
	Leases LeaseAuthority
	// Router, when set, serves the partitions homed on other nodes from a
	// read replica and forwards their writes (route.go).
	Router Router
	// CascadeLimit caps the operations reference enforcement may append
	// to one commit (SPEC.md §6.11; default 1,000). A commit needing more
	// is refused whole with sync.reference_violation, reason
	// cascade_limit.
	CascadeLimit int
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
	// MountURL is the absolute URL of the mount the request came in on
	// ("https://host/sync-prefix/"), the base of the signed URLs minted
	// for it when Config.SignedURLBase is empty.
	MountURL string
}

// Engine serves SSP2 requests. It is safe for concurrent use.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	metrics Metrics
	// inlineMax is Config.InlineSegmentMaxBytes.
	inlineMax int64
	// inline caches the checked inline frames of stored segments.
	inline inlineFrames
	// validators is the installed validator set (validators.go): read once
	// per commit, replaced whole by SetValidators.
	validators atomic.Pointer[validatorSet]
	// failLookup fails the next optimistic idempotency lookup
	// (FailNextIdempotencyLookup).
	failLookup atomic.Bool
	// blobPresign is Config.BlobPresign, switched by SetBlobPresign.
	blobPresign atomic.Bool
	// subs memoizes the decoded subscription lists of client records.
	subs subsMemo
}

// Metrics are monotonically increasing counters of an Engine's work.
type Metrics struct {
	Requests      atomic.Int64
	RequestErrors atomic.Int64
	// ClientsGone counts requests whose client went away (a broken
	// connection, a cancelled context) before the response ended: not
	// errors of the server.
	ClientsGone    atomic.Int64
	PushApplied    atomic.Int64
	PushCached     atomic.Int64
	PushRejected   atomic.Int64
	PushConflicted atomic.Int64
	Commits        atomic.Int64
	PullSections   atomic.Int64
	// StartsCached counts requests whose partition row and client record
	// the store served from its cache (storage.RequestStart.Cached).
	StartsCached     atomic.Int64
	Bootstraps       atomic.Int64
	SegmentsBuilt    atomic.Int64
	SegmentsReused   atomic.Int64
	SegmentsInline   atomic.Int64
	SegmentRefs      atomic.Int64
	RowsBootstrapped atomic.Int64
	// SegmentFallbacks counts bootstrap pages built in memory and sent
	// inline because the segment store failed (its Object Store or KV
	// without a stream leader right after a cluster member died).
	SegmentFallbacks atomic.Int64
	// ImagesBuilt and ImagesReused count SQLite-image segments, ImageRefs
	// the image descriptors sent, SignedURLs the urls minted and
	// SignedRefusals the signed downloads refused.
	ImagesBuilt  atomic.Int64
	ImagesReused atomic.Int64
	// ImageBuildNanos sums the time image builds took (rows read and the
	// database written; the store's upload excluded).
	ImageBuildNanos atomic.Int64
	ImageRefs       atomic.Int64
	SignedURLs      atomic.Int64
	SignedRefusals  atomic.Int64
	// SignedBlobURLs counts presigned blob downloads and upload grants
	// minted, SignedBlobRefusals the blob requests by signed URL refused.
	SignedBlobURLs     atomic.Int64
	SignedBlobRefusals atomic.Int64
}

// Defaults.
const (
	DefaultMaxOperations         = 500
	DefaultMaxSubscriptions      = 500
	DefaultInlineSegmentMaxBytes = 256 << 10
	DefaultCascadeLimit          = 1000
)

// DefaultWireWindow serves wire versions 1, 2 and 3. Version 1 stays by
// default: it is version 2 without the log epoch, over the same stored
// state, and clients that speak it still exist; a deployment that wants
// them gone sets Min to 2.
var DefaultWireWindow = ssp2.WireWindow{Min: 1, Max: 3}

// WithDefaults returns c with unset fields defaulted.
func (c Config) WithDefaults() Config {
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxOperations == nil {
		c.MaxOperations = new(DefaultMaxOperations)
	}
	if c.MaxSubscriptions == 0 {
		c.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if c.InlineSegmentMaxBytes == nil {
		c.InlineSegmentMaxBytes = new(DefaultInlineSegmentMaxBytes)
	}
	if c.WireWindow == (ssp2.WireWindow{}) {
		c.WireWindow = DefaultWireWindow
	}
	if c.CascadeLimit == 0 {
		c.CascadeLimit = DefaultCascadeLimit
	}
	return c
}

// Validate reports every invalid setting (call after WithDefaults). New
// also requires the wiring: Schema and Store.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("engine config: "+format, args...)) }
	if p := c.MaxOperations; p != nil && *p < 0 {
		bad("MaxOperations %d must not be negative", *p)
	}
	if c.MaxSubscriptions < 1 {
		bad("MaxSubscriptions %d must be positive", c.MaxSubscriptions)
	}
	if p := c.InlineSegmentMaxBytes; p != nil && *p < 0 {
		bad("InlineSegmentMaxBytes %d must not be negative", *p)
	}
	if err := c.WireWindow.Validate(); err != nil {
		bad("WireWindow: %w", err)
	}
	if c.CascadeLimit < 1 {
		bad("CascadeLimit %d must be positive", c.CascadeLimit)
	}
	if c.SignedURLBase != "" && !strings.HasSuffix(c.SignedURLBase, "/") {
		bad("SignedURLBase %q must end with /", c.SignedURLBase)
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
	if cfg.BlobPresign != nil && *cfg.BlobPresign && cfg.SignedURLs == nil {
		return nil, errors.New("engine: Config.BlobPresign needs SignedURLs")
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
	e.blobPresign.Store(cfg.SignedURLs != nil && (cfg.BlobPresign == nil || *cfg.BlobPresign))
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
	id     Identity
	req    *ssp2.Request
	part   storage.Partition
	client storage.Client // the record as the request found (or created) it
	// registered is the record's subscription list by id, and served the
	// effective scopes each subscription of this pull is recorded with.
	registered *subsRecord
	served     map[string]map[string][]string
	scopes     resolvedScopes
	ticket     Ticket      // the serve gate's admission, checked in every transaction
	lease      *ssp2.Lease // the LEASE frame to send, if any
	enc        *ssp2.ResponseEncoder
	w          *clientWriter
	cw         clientWriter // what w points to: one allocation with the request
	now        int64
	// results of commits already processed in this request, by id, for a
	// clientCommitId repeated within one request (SPEC.md §6.3).
	done map[string]storage.PushRecord
	// remote is set for a partition homed on another node (route.go);
	// forwarded holds the results its home stored for this request.
	remote    bool
	forwarded map[string]storage.PushRecord
	// looked: the stored results of the request's commits (those whose
	// ids lookupIDs passes) were read at the start, and pushes holds the
	// ones found (storage.RequestStarter).
	looked bool
	pushes map[string]storage.PushRecord
}

// Sync handles one SSP2 request. A request-level failure detected before
// the response starts is returned as an *ssp2.Error and nothing is written
// to w. Once the response has started every failure is written in-band
// (ERROR, END) and logged; Sync then returns nil.
func (e *Engine) Sync(ctx context.Context, id Identity, body []byte, w io.Writer) error {
	return e.SyncChecked(ctx, id, body, w, nil)
}

// SyncChecked is Sync with check, when set, run on the decoded request
// before anything else: its error fails the request before the response
// starts, as a decode error does. The realtime channel checks a socket
// round's clientId with it, and notes whether the round pulls, without
// decoding the request a second time.
func (e *Engine) SyncChecked(ctx context.Context, id Identity, body []byte, w io.Writer, check func(*ssp2.Request) error) error {
	e.metrics.Requests.Add(1)
	err := e.sync(ctx, id, body, w, check)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		e.metrics.ClientsGone.Add(1)
	default:
		e.metrics.RequestErrors.Add(1)
	}
	return err
}

func (e *Engine) sync(ctx context.Context, id Identity, body []byte, w io.Writer, check func(*ssp2.Request) error) error {
	req, err := ssp2.DecodeRequestWindow(body, e.cfg.WireWindow)
	if err != nil {
		return err
	}
	if check != nil {
		if err := check(req); err != nil {
			return err
		}
	}
	r := &request{id: id, req: req, cw: clientWriter{w: w}, now: e.nowMs()}
	r.w = &r.cw
	if e.cfg.Router != nil && e.cfg.Router.Remote(id.Partition) {
		if err := e.route(ctx, r); err != nil {
			return err
		}
	}
	if err := e.prepare(ctx, r); err != nil {
		return err
	}
	if r.enc == nil { // answered by a header-only response
		return nil
	}
	if err := e.stream(ctx, r); err != nil {
		e.abort(ctx, r, err)
	}
	return nil
}

// clientWriter is the response writer as the engine sees it: it remembers
// whether a write failed, which means the client is gone.
type clientWriter struct {
	w    io.Writer
	lost error
}

func (c *clientWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil && c.lost == nil {
		c.lost = err
	}
	return n, err
}

// Flush passes a flush on to a writer that buffers.
func (c *clientWriter) Flush() error {
	switch f := c.w.(type) {
	case interface{ Flush() error }:
		if err := f.Flush(); err != nil && c.lost == nil {
			c.lost = err
		}
		return c.lost
	case interface{ Flush() }:
		f.Flush()
	}
	return nil
}

// prepare runs every check that can fail the request before the response
// starts, in the order of SSP2-NOTES §4.0. A header-only answer (schema
// floor, epoch reset) is written here.
func (e *Engine) prepare(ctx context.Context, r *request) error {
	req, hdr := r.req, r.req.Header
	if err := checkIdentity(r.id); err != nil {
		return err
	}
	part, client, hasClient, cached, err := e.start(ctx, r, false)
	if err == nil && cached && e.refusesStart(r, part, client) {
		// What a cache served is current (storage.RequestStart), but a
		// refusal or a reset is answered only on what the database says.
		part, client, hasClient, _, err = e.start(ctx, r, true)
	}
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

	if err := checkClientID(hdr.ClientID); err != nil {
		return err
	}
	if !hasClient {
		// Every request binds its client id, a push-only one included:
		// an unbound id is anyone's to take (SPEC.md §1.5).
		client, err = e.cfg.Store.ClientBind(ctx, storage.Client{
			Partition: r.id.Partition, ClientID: hdr.ClientID, ActorID: r.id.ActorID,
			WireVersion: req.WireVersion, Cursor: -1, UpdatedAtMs: r.now,
		})
		if err != nil {
			return internal("bind client id", err)
		}
	}
	if client.ActorID != r.id.ActorID {
		return ssp2.Errorf(ssp2.CodeInvalidClientID, "client id is bound to another actor")
	}
	r.client = client

	ops := 0
	for _, c := range req.Commits {
		ops += len(c.Operations)
	}
	if ops > *e.cfg.MaxOperations {
		return ssp2.Errorf(ssp2.CodeTooManyOperations, "%d operations exceed the cap of %d per request", ops, *e.cfg.MaxOperations)
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
	rs, leased, err := e.withLease(ctx, rs, r.id, hdr.ClientID)
	if err != nil {
		return err
	}
	switch {
	case rs.err != nil:
		e.log.Warn("scope resolution failed; failing closed", "partition", r.id.Partition, "actor", r.id.ActorID, "err", rs.err)
	case !leased && e.cfg.Leases != nil:
		// A resolved round issues or slides the lease; a leased one
		// cannot re-resolve, so its window ticks down.
		l, ok, err := e.cfg.Leases.Refresh(ctx, r.id.Partition, hdr.ClientID, r.id.ActorID, rs.allowed, r.now)
		if err != nil {
			return internal("refresh lease", err)
		}
		if ok {
			r.lease = &l
		}
	}
	r.scopes = rs
	r.enc = ssp2.NewResponseEncoder(r.w, req.WireVersion)
	return nil
}

// start reads (or has the store's cache answer) the partition row and
// the client record, in one read when the client id can reach SQL; a bad
// id is refused in prepare, in its turn. cached reports a start the
// store served from its cache (storage.RequestStart.Cached).
func (e *Engine) start(ctx context.Context, r *request, fresh bool) (part storage.Partition, client storage.Client, hasClient, cached bool, err error) {
	hdr := r.req.Header
	if checkClientID(hdr.ClientID) != nil {
		part, err = e.cfg.Store.PartitionTouch(ctx, r.id.Partition, r.now)
		return part, client, false, false, err
	}
	rs, ok := e.cfg.Store.(storage.RequestStarter)
	if !ok {
		part, client, hasClient, err = e.cfg.Store.PartitionTouchClient(ctx, r.id.Partition, hdr.ClientID, r.now)
		return part, client, hasClient, false, err
	}
	// With the stored results of the request's commits: the optimistic
	// idempotency lookups in the same read (push.go), unless the store
	// answered from its cache. Then every commit goes to its write
	// transaction, whose locked lookup finds a stored result, but for
	// a remote partition's: a miss there means its home has no result
	// (homeMiss), so those are looked up one by one.
	st, err := rs.RequestStart(ctx, storage.RequestStartParams{
		Partition: r.id.Partition, ClientID: hdr.ClientID, CommitIDs: lookupIDs(r.req.Commits), NowMs: r.now, Fresh: fresh,
	})
	r.looked, r.pushes = !st.Cached || !r.remote, st.Pushes
	if st.Cached && err == nil {
		e.metrics.StartsCached.Add(1)
	}
	return st.Partition, st.Client, st.HasClient, st.Cached, err
}

// refusesStart reports whether prepare would refuse the request or answer
// it with a header only (a reset) on this partition row and client
// record.
func (e *Engine) refusesStart(r *request, part storage.Partition, client storage.Client) bool {
	req, hdr := r.req, r.req.Header
	return req.WireVersion == 1 && part.EpochRequired ||
		req.WireVersion >= 2 && (hdr.LogEpoch == nil || *hdr.LogEpoch != part.LogEpoch) ||
		hdr.SchemaVersion != e.cfg.Schema.Version ||
		client.ActorID != r.id.ActorID
}

// checkClientID refuses a request's client id that is reserved or that
// the stores cannot hold (SPEC.md §1.5, package ids).
func checkClientID(id string) error {
	if strings.HasPrefix(id, reservedClientIDPrefix) {
		return ssp2.Errorf(ssp2.CodeInvalidClientID, "client ids starting with %s are reserved for server commands", reservedClientIDPrefix)
	}
	if err := ids.Check("the client id", id); err != nil {
		return ssp2.Errorf(ssp2.CodeInvalidClientID, "%v", err)
	}
	return nil
}

// checkIdentity refuses an identity the stores cannot hold or the bus
// cannot carry (package ids), whatever authenticated it: its commits
// would be acknowledged and then never published, or fail in SQL.
func checkIdentity(id Identity) error {
	for _, c := range []struct{ what, v string }{{"the partition id", id.Partition}, {"the actor id", id.ActorID}} {
		if err := ids.Check(c.what, c.v); err != nil {
			return ssp2.Errorf(ssp2.CodeInvalidRequest, "%v", err)
		}
	}
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
	if n := len(req.Subscriptions); n > e.cfg.MaxSubscriptions {
		return ssp2.Errorf(ssp2.CodeInvalidSubscription, "%d subscriptions exceed the cap of %d per request", n, e.cfg.MaxSubscriptions)
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
		for k, vals := range s.Scopes {
			for _, v := range vals {
				if !ids.Storable(v) {
					// Like '*' (SPEC.md §3.2 rule 2): a value that can never
					// be stored would silently match nothing.
					return ssp2.Errorf(ssp2.CodeInvalidSubscription, "requested scope %q has a value containing U+0000", k)
				}
			}
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
	if r.lease != nil {
		if err := r.enc.WriteFrame(r.lease); err != nil {
			return err
		}
	}
	if len(r.req.Commits) > 0 {
		r.done = make(map[string]storage.PushRecord, len(r.req.Commits))
		committed := false
		for _, c := range r.req.Commits {
			applied, err := e.push(ctx, r, c)
			if err != nil {
				if committed {
					e.notifyPushed(r.id.Partition)
				}
				return err
			}
			committed = committed || applied
		}
		if committed {
			e.notifyPushed(r.id.Partition)
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

// notifyPushed is notify for the commits of a push, which OnAppend, when
// set, has taken already.
func (e *Engine) notifyPushed(partition string) {
	if e.cfg.OnAppend == nil {
		e.notify(partition)
	}
}

func (e *Engine) notify(partition string) {
	if e.cfg.OnCommit != nil {
		e.cfg.OnCommit(partition)
	}
}

// abort ends a started response with ERROR then END (SPEC.md §1.6). A
// client that went away gets nothing, and is no server error.
func (e *Engine) abort(ctx context.Context, r *request, err error) {
	if lost := r.w.lost; lost != nil || ctx.Err() != nil {
		e.metrics.ClientsGone.Add(1)
		e.log.Debug("client went away mid-response", "partition", r.id.Partition, "actor", r.id.ActorID, "err", err, "write", lost)
		return
	}
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
