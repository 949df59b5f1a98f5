package testctl

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/rules"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/segments"
	"github.com/syncnode/syncnode/signedurl"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// instance is one isolated server: a real node (store, serve gate,
// relay, segment store, engine, protocol handler) in its own bus
// namespace on the shared NATS server, with a virtual clock and a test
// authenticator.
type instance struct {
	id        string
	dir       string
	partition string
	schema    *schema.Schema
	names     bus.Names
	clock     *clock.Manual
	node      *node.Node
	nodeCfg   node.Config // to start the node again after a restore
	cfg       Config
	inflight  sync.WaitGroup

	mu       sync.RWMutex
	grants   map[string]engine.Allowed
	failing  bool
	outage   bool
	rows     map[string]engine.RowValidator
	commit   engine.CommitValidator
	closeErr error
	closed   bool
	backups  []string // captured backup files; the id is the index
	presign  bool     // blobs served by signed URL (blob-presign)
}

// namespace is the bus namespace of instance id: i-<id>.
func namespace(id string) (bus.Names, error) { return bus.NewNames("i-" + id) }

// openInstance starts an instance's node, stopping what it started on
// failure.
func openInstance(ctx context.Context, cfg Config, id string, req createRequest) (in *instance, err error) {
	sc, err := schema.Parse(req.Schema)
	if err != nil {
		return nil, badRequest{err}
	}
	var lim limits
	if req.Limits != nil {
		lim = *req.Limits
	}
	var ttl time.Duration // the default
	if lim.SegmentTTLMs != nil {
		if *lim.SegmentTTLMs < 1000 {
			return nil, badf("limits.segmentTtlMs %d is below 1000", *lim.SegmentTTLMs)
		}
		ttl = time.Duration(*lim.SegmentTTLMs) * time.Millisecond
	}
	if lim.MaxOperationsPerRequest != nil && *lim.MaxOperationsPerRequest < 0 || lim.InlineSegmentMaxBytes != nil && *lim.InlineSegmentMaxBytes < 0 ||
		lim.MaxDeltaBytes < 0 || lim.MaxPresenceBytes < 0 || lim.MaxCascadeOperations < 0 {
		return nil, badf("limits must not be negative")
	}
	signed, err := signedURLs(req.SignedURLs)
	if err != nil {
		return nil, err
	}
	var lc node.LeasesConfig
	if present(req.Leases) {
		var lo struct {
			TTLMs *int64 `json:"ttlMs"`
		}
		if err := json.Unmarshal(req.Leases, &lo); err != nil {
			return nil, badf("leases: %v", err)
		}
		if lo.TTLMs == nil || *lo.TTLMs < 1000 {
			return nil, badf("leases.ttlMs must be at least 1000")
		}
		// A key per instance: its records live and die with it.
		lc = node.LeasesConfig{TTL: time.Duration(*lo.TTLMs) * time.Millisecond, Key: make([]byte, 32)}
		_, _ = rand.Read(lc.Key)
	}
	names, err := namespace(id)
	if err != nil {
		return nil, err
	}
	in = &instance{
		id: id, dir: filepath.Join(cfg.Dir, id), partition: req.Partition, schema: sc, names: names, cfg: cfg,
		clock: clock.NewManual(time.UnixMilli(*req.NowMs)), grants: map[string]engine.Allowed{},
	}
	defer func() {
		if err != nil {
			_ = in.close(context.WithoutCancel(ctx))
		}
	}()
	// The serving node's realtime settings, refusing in band (the
	// test-control convention), with the instance's limits.
	rt := cfg.Realtime
	rt.Hub.InBandRefusals = true
	if lim.MaxDeltaBytes > 0 {
		rt.Hub.MaxDeltaBytes = lim.MaxDeltaBytes
		rt.Hub.SendQueueBytes = max(rt.Hub.SendQueueBytes, lim.MaxDeltaBytes)
	}
	if lim.MaxPresenceBytes > 0 {
		rt.Hub.MaxPresenceBytes = lim.MaxPresenceBytes
	}
	rc := cfg.Reactions
	rc.Planner = nil
	in.nodeCfg = node.Config{
		Name: "testctl-" + id, DataDir: in.dir, Schema: sc, Names: names, Clock: in.clock,
		Logger: cfg.Logger.With("instance", id),
		Bus:    cfg.Bus,
		// NORMAL: an instance lives for one scenario; a power loss may
		// take its last commits, which no test can observe.
		Store: node.StoreConfig{SQLite: sqlitestore.Config{Path: filepath.Join(in.dir, "sync.db"), Synchronous: sqlitestore.SynchronousNormal}},
		API:   httpapi.Config{Auth: httpapi.AuthenticatorFunc(in.authenticate), MaxRequestBytes: cfg.MaxRequestBytes},
		Engine: engine.Config{
			MaxOperations: lim.MaxOperationsPerRequest, InlineSegmentMaxBytes: lim.InlineSegmentMaxBytes,
			CascadeLimit: lim.MaxCascadeOperations,
			// Blobs stream through the node until blob-presign turns
			// presigning on.
			BlobPresign: new(false),
		},
		// The owner of the virtual clock prunes (POST prune), not a
		// background loop on the wall clock.
		Segments:   segments.Config{TTL: ttl, MaintenanceInterval: -1},
		Realtime:   rt,
		Reactions:  rc,
		SignedURLs: signed,
		Leases:     lc,
		// The admin API and host hooks answer on production subjects,
		// which an instance's namespace does not own.
		Admin: node.AdminConfig{Disabled: true},
	}
	n, err := node.New(in.nodeCfg)
	if err != nil {
		return nil, badRequest{err}
	}
	if err := n.Start(ctx); err != nil {
		if errors.Is(err, node.ErrSchemaInstall) {
			return nil, badRequest{err}
		}
		return nil, fmt.Errorf("start instance: %w", err)
	}
	in.node = n
	return in, nil
}

// signedURLs reads the signedUrls create option: absent, null or false
// is off; true or {"ttlSeconds": n} (0..900, absent: the default) turns
// signed URLs on under a key of the instance's own.
func signedURLs(raw json.RawMessage) (node.SignedURLsConfig, error) {
	if !present(raw) || strings.TrimSpace(string(raw)) == "false" {
		return node.SignedURLsConfig{}, nil
	}
	var opt struct {
		TTLSeconds *int64 `json:"ttlSeconds"`
	}
	if strings.TrimSpace(string(raw)) != "true" {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&opt); err != nil {
			return node.SignedURLsConfig{}, badf("signedUrls must be true, false or {\"ttlSeconds\": n}: %v", err)
		}
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	c := node.SignedURLsConfig{Key: key}
	if opt.TTLSeconds != nil {
		if *opt.TTLSeconds < 1 || *opt.TTLSeconds > int64(signedurl.MaxTTL/time.Second) {
			return node.SignedURLsConfig{}, badf("signedUrls.ttlSeconds %d is outside 1..%d", *opt.TTLSeconds, int64(signedurl.MaxTTL/time.Second))
		}
		c.TTL = time.Duration(*opt.TTLSeconds) * time.Second
	}
	return c, nil
}

// serveSignedURLTTL sets the lifetime of the signed URLs minted from now
// on; 0 mints URLs that expire at issuance.
func (in *instance) serveSignedURLTTL(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TTLSeconds *int64 `json:"ttlSeconds"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	if in.node.SignedURLs == nil {
		writeControlError(w, http.StatusBadRequest, errors.New("the instance was created without signedUrls"))
		return
	}
	if req.TTLSeconds == nil || *req.TTLSeconds < 0 || *req.TTLSeconds > int64(signedurl.MaxTTL/time.Second) {
		writeControlError(w, http.StatusBadRequest, fmt.Errorf("ttlSeconds must be an integer in 0..%d", int64(signedurl.MaxTTL/time.Second)))
		return
	}
	_ = in.node.SignedURLs.SetTTL(time.Duration(*req.TTLSeconds) * time.Second)
	writeJSON(w, struct{}{})
}

// serveBlobPresign switches presigned blobs (SPEC.md §5.9.3, §5.9.5):
// upload grants then carry a presigned PUT and authorized downloads
// answer {url, urlExpiresAtMs}, under the instance's signed-URL key.
func (in *instance) serveBlobPresign(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Enabled *bool `json:"enabled"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	if req.Enabled == nil {
		writeControlError(w, http.StatusBadRequest, errors.New("enabled (true or false) is required"))
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if *req.Enabled && in.node.SignedURLs == nil {
		writeControlError(w, http.StatusBadRequest, errors.New("the instance was created without signedUrls, which presigned blobs need"))
		return
	}
	if err := in.node.Engine.SetBlobPresign(*req.Enabled); err != nil {
		writeControlError(w, http.StatusBadRequest, err)
		return
	}
	in.presign = *req.Enabled
	writeJSON(w, struct{}{})
}

// handler is the instance's protocol handler (a restore replaces the
// node).
func (in *instance) handler() http.Handler {
	in.mu.RLock()
	defer in.mu.RUnlock()
	return in.node.Handler
}

func (in *instance) serveBackupCapture(w http.ResponseWriter, r *http.Request) {
	in.mu.Lock()
	defer in.mu.Unlock()
	id := strconv.Itoa(len(in.backups) + 1)
	out := filepath.Join(in.dir, "backup-"+id+".db")
	if _, err := sqlitestore.Backup(r.Context(), in.nodeCfg.Store.SQLite.Path, out); err != nil {
		writeControlError(w, http.StatusInternalServerError, err)
		return
	}
	in.backups = append(in.backups, out)
	writeJSON(w, map[string]string{"backupId": id})
}

// serveBackupRestore stops the instance's node, puts the backup back,
// starts the node again and rotates the partition's log epoch, so clients
// ahead of the backup re-bootstrap (SPEC.md §2.1). Validators stay
// installed.
func (in *instance) serveBackupRestore(w http.ResponseWriter, r *http.Request) {
	var req struct {
		BackupID string `json:"backupId"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	i, err := strconv.Atoi(req.BackupID)
	if err != nil || i < 1 || i > len(in.backups) {
		writeControlError(w, http.StatusNotFound, fmt.Errorf("unknown backup %q", req.BackupID))
		return
	}
	ctx := context.WithoutCancel(r.Context())
	if err := in.node.Stop(ctx); err != nil {
		writeControlError(w, http.StatusInternalServerError, fmt.Errorf("stop: %w", err))
		return
	}
	fail := func(err error) {
		in.cfg.Logger.Error("restore test instance", "id", in.id, "err", err)
		writeControlError(w, http.StatusInternalServerError, err)
	}
	if err := sqlitestore.Restore(ctx, in.backups[i-1], in.nodeCfg.Store.SQLite.Path); err != nil {
		fail(err)
		return
	}
	n, err := node.New(in.nodeCfg)
	if err == nil {
		err = n.Start(ctx)
	}
	if err != nil {
		fail(err)
		return
	}
	in.node = n
	if err := n.Engine.SetValidators(in.rows, in.commit); err != nil {
		fail(err)
		return
	}
	if err := n.Engine.SetBlobPresign(in.presign); err != nil {
		fail(err)
		return
	}
	epoch := ""
	p, err := n.Gate.RotateEpoch(ctx, in.partition)
	switch {
	case err == nil:
		epoch = p.LogEpoch
	case ssp2.CodeOf(err) == ssp2.CodeStoragePartitionUnregistered: // captured before the first request
	default:
		fail(err)
		return
	}
	writeJSON(w, map[string]string{"logEpoch": epoch})
}

func (in *instance) nowMs() int64 { return in.clock.Now().UnixMilli() }

// close closes the instance's realtime sockets (requests in flight that
// last), waits for the other requests in flight, then frees everything:
// the node, its streams and buckets, its directory. It is idempotent.
func (in *instance) close(ctx context.Context) error {
	if in.node != nil && in.node.Realtime != nil {
		if err := in.node.Realtime.Stop(ctx); err != nil {
			in.cfg.Logger.Warn("close test instance: realtime", "id", in.id, "err", err)
		}
	}
	in.inflight.Wait()
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return in.closeErr
	}
	in.closed = true
	var errs []error
	if in.node != nil {
		errs = append(errs, in.node.Stop(ctx))
	}
	if err := bus.DeleteNamespace(ctx, in.cfg.Bus.JetStream(), in.names); err != nil {
		errs = append(errs, fmt.Errorf("delete instance namespace: %w", err))
	}
	errs = append(errs, os.RemoveAll(in.dir))
	in.closeErr = errors.Join(errs...)
	return in.closeErr
}

// errNoActor is a protocol request without the test actor.
var errNoActor = errors.New("no " + ActorHeader + " header or actor query parameter")

// authenticate is the test-mode authenticator: the actor from the header
// (or ?actor= on a WebSocket upgrade), the instance's fixed partition,
// and the instance's live grants as the resolver.
func (in *instance) authenticate(r *http.Request) (engine.Identity, error) {
	actor := r.Header.Get(ActorHeader)
	if actor == "" {
		actor = r.URL.Query().Get("actor")
	}
	if actor == "" {
		return engine.Identity{}, errNoActor
	}
	return engine.Identity{Partition: in.partition, ActorID: actor, Scopes: engine.ResolverFunc(in.resolve)}, nil
}

var (
	errResolverFailing = errors.New("injected: scope resolver failure")
	errResolverOutage  = fmt.Errorf("injected: %w", engine.ErrResolverOutage)
)

// resolve is the instance's scope resolver: an actor without a grant
// holds {}.
func (in *instance) resolve(_ context.Context, _, actor string) (engine.Allowed, error) {
	in.mu.RLock()
	defer in.mu.RUnlock()
	switch {
	case in.failing:
		return nil, errResolverFailing
	case in.outage:
		return nil, errResolverOutage
	}
	if a, ok := in.grants[actor]; ok {
		return a, nil
	}
	return engine.Allowed{}, nil
}

func (in *instance) serveAllowedScopes(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ActorID string              `json:"actorId"`
		Allowed map[string][]string `json:"allowed"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	if req.ActorID == "" {
		writeControlError(w, http.StatusBadRequest, errors.New("actorId is required"))
		return
	}
	// The grant is replaced whole and never mutated, so the resolver may
	// hand it out without copying.
	grant := engine.Allowed{}
	for k, v := range req.Allowed {
		grant[k] = append([]string(nil), v...)
	}
	in.mu.Lock()
	in.grants[req.ActorID] = grant
	in.mu.Unlock()
	writeJSON(w, struct{}{})
}

// rowState is one row of GET rows/{table}.
type rowState struct {
	RowID   string            `json:"rowId"`
	Version int64             `json:"version"`
	Values  map[string]any    `json:"values"`
	Scopes  map[string]string `json:"scopes"`
}

// rowsPage is how many rows one RowList call reads.
const rowsPage = 1000

func (in *instance) serveRows(w http.ResponseWriter, r *http.Request) {
	t, ok := in.schema.Table(r.PathValue("table"))
	if !ok {
		writeControlError(w, http.StatusNotFound, fmt.Errorf("unknown table %q", r.PathValue("table")))
		return
	}
	out := []rowState{}
	after := ""
	var vals []ssp2.Value
	for {
		rows, err := in.node.Store.RowList(r.Context(), storage.RowListParams{Partition: in.partition, Table: t.Name, AfterRowID: after, Limit: rowsPage})
		if err != nil {
			writeControlError(w, http.StatusInternalServerError, err)
			return
		}
		for _, row := range rows {
			if vals, err = t.Codec.DecodeRow(row.Payload, vals[:0]); err != nil {
				writeControlError(w, http.StatusInternalServerError, fmt.Errorf("row %s: %w", row.RowID, err))
				return
			}
			scopes := row.Scopes
			if scopes == nil {
				scopes = map[string]string{}
			}
			out = append(out, rowState{RowID: row.RowID, Version: row.ServerVersion, Values: driverValues(t, vals), Scopes: scopes})
		}
		if len(rows) < rowsPage {
			break
		}
		after = rows[len(rows)-1].RowID
	}
	writeJSON(w, out)
}

// driverValues renders a decoded row as the conformance driver seam
// does: bytes as {"$bytes": hex}, json as its raw text, the rest as their
// natural JSON value.
func driverValues(t *schema.Table, vals []ssp2.Value) map[string]any {
	m := make(map[string]any, len(vals))
	for i, c := range t.Columns {
		v := vals[i]
		if v.Null {
			m[c.Name] = nil
			continue
		}
		switch c.Type {
		case ssp2.TypeInteger:
			m[c.Name] = v.Int
		case ssp2.TypeFloat:
			if math.IsNaN(v.Float) || math.IsInf(v.Float, 0) {
				m[c.Name] = nil // as JSON.stringify renders them
			} else {
				m[c.Name] = v.Float
			}
		case ssp2.TypeBoolean:
			m[c.Name] = v.Bool
		case ssp2.TypeBytes, ssp2.TypeCrdt:
			m[c.Name] = map[string]string{"$bytes": hex.EncodeToString(v.Bytes)}
		default: // string, json, blob_ref: text
			m[c.Name] = string(v.Bytes)
		}
	}
	return m
}

// partitionState reads the partition; an unregistered one is empty.
func (in *instance) partitionState(ctx context.Context) (storage.Partition, bool, error) {
	p, err := in.node.Store.PartitionGet(ctx, in.partition)
	if ssp2.CodeOf(err) == ssp2.CodeStoragePartitionUnregistered {
		return storage.Partition{}, false, nil
	}
	return p, err == nil, err
}

func (in *instance) serveMaxCommitSeq(w http.ResponseWriter, r *http.Request) {
	p, _, err := in.partitionState(r.Context())
	if err != nil {
		writeControlError(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, map[string]int64{"value": p.MaxCommitSeq})
}

func (in *instance) serveHorizonSeq(w http.ResponseWriter, r *http.Request) {
	p, _, err := in.partitionState(r.Context())
	if err != nil {
		writeControlError(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, map[string]int64{"value": p.HorizonSeq})
}

func (in *instance) serveClock(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, map[string]int64{"nowMs": in.nowMs()})
}

// maxAdvanceMs bounds one clock advance: the longest time.Duration,
// about 292 years.
const maxAdvanceMs = math.MaxInt64 / int64(time.Millisecond)

func (in *instance) serveClockAdvance(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Ms *int64 `json:"ms"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	if req.Ms == nil || *req.Ms < 0 || *req.Ms > maxAdvanceMs {
		writeControlError(w, http.StatusBadRequest, fmt.Errorf("ms must be an integer in 0..%d", maxAdvanceMs))
		return
	}
	writeJSON(w, map[string]int64{"nowMs": in.clock.Advance(time.Duration(*req.Ms) * time.Millisecond).UnixMilli()})
}

func (in *instance) servePrune(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Retention *struct {
			ActiveWindowMs     *int64 `json:"activeWindowMs"`
			AgeForceMs         *int64 `json:"ageForceMs"`
			MinRetainedCommits *int64 `json:"minRetainedCommits"`
		} `json:"retention"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	p, ok, err := in.partitionState(r.Context())
	if err != nil {
		writeControlError(w, http.StatusInternalServerError, err)
		return
	}
	if !ok { // nothing was ever written
		writeJSON(w, map[string]int64{"horizonSeq": 0})
		return
	}
	// Fields left out take the protocol defaults; the given ones are
	// literal, zero included (a host stating its whole policy).
	pp := storage.PruneParams{
		Partition: in.partition, LogEpoch: p.LogEpoch, ThroughSeq: p.MaxCommitSeq, NowMs: in.nowMs(), Literal: true,
		ActiveWindowMs: storage.DefaultActiveWindowMs, AgeForceMs: storage.DefaultAgeForceMs, MinRetainedCommits: storage.DefaultMinRetainedCommits,
	}
	if rt := req.Retention; rt != nil {
		if rt.ActiveWindowMs != nil {
			pp.ActiveWindowMs = *rt.ActiveWindowMs
		}
		if rt.AgeForceMs != nil {
			pp.AgeForceMs = *rt.AgeForceMs
		}
		if rt.MinRetainedCommits != nil {
			pp.MinRetainedCommits = *rt.MinRetainedCommits
		}
	}
	res, err := in.node.Store.Prune(r.Context(), pp)
	if err != nil {
		status := http.StatusInternalServerError
		if ssp2.CodeOf(err) == ssp2.CodeStorageInvalidLimit {
			status = http.StatusBadRequest
		}
		writeControlError(w, status, err)
		return
	}
	writeJSON(w, map[string]int64{"horizonSeq": res.HorizonSeq})
}

func (in *instance) serveLeaseRevoke(w http.ResponseWriter, r *http.Request) {
	var req struct {
		LeaseID string `json:"leaseId"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	if in.node.Leases == nil {
		writeControlError(w, http.StatusBadRequest, errors.New("this instance was created without leases"))
		return
	}
	if req.LeaseID == "" {
		writeControlError(w, http.StatusBadRequest, errors.New("leaseId is required"))
		return
	}
	ok, err := in.node.Leases.Revoke(r.Context(), in.partition, req.LeaseID)
	if err != nil {
		writeControlError(w, http.StatusInternalServerError, err)
		return
	}
	if !ok {
		writeControlError(w, http.StatusNotFound, fmt.Errorf("unknown lease %q", req.LeaseID))
		return
	}
	writeJSON(w, struct{}{})
}

func (in *instance) serveResolver(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Failing *bool `json:"failing"`
		Outage  *bool `json:"outage"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	in.mu.Lock()
	if req.Failing != nil {
		in.failing = *req.Failing
	}
	if req.Outage != nil {
		in.outage = *req.Outage
	}
	in.mu.Unlock()
	writeJSON(w, struct{}{})
}

// kindUnexpectedError is the catalog's validator that fails with a plain
// error (not a rejection): the commit is refused with the fixed
// sync.constraint_violation, never the error's text.
const kindUnexpectedError = "unexpectedError"

func (in *instance) serveValidators(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Specs []struct {
			Table string          `json:"table"`
			Rule  json.RawMessage `json:"rule"`
		} `json:"specs"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	compiled := map[string]engine.RowValidator{}
	for i, spec := range req.Specs {
		var head struct {
			Kind    string `json:"kind"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(spec.Rule, &head); err != nil {
			writeControlError(w, http.StatusBadRequest, fmt.Errorf("specs[%d].rule: %w", i, err))
			return
		}
		var v engine.RowValidator
		if head.Kind == kindUnexpectedError {
			if _, ok := in.schema.Table(spec.Table); !ok {
				writeControlError(w, http.StatusBadRequest, fmt.Errorf("specs[%d]: unknown table %q", i, spec.Table))
				return
			}
			msg := head.Message
			v = func(context.Context, engine.RowValidation) error { return errors.New(msg) }
		} else {
			var rule rules.RowRule
			if err := rules.Decode(spec.Rule, &rule); err != nil {
				writeControlError(w, http.StatusBadRequest, fmt.Errorf("specs[%d].rule: %w", i, err))
				return
			}
			vs, err := rules.CompileRows(in.schema, []rules.TableRule{{Table: spec.Table, Rule: rule}})
			if err != nil {
				writeControlError(w, http.StatusBadRequest, fmt.Errorf("specs[%d]: %w", i, err))
				return
			}
			v = vs[spec.Table]
		}
		// One rule per table: a later spec for the same table replaces
		// the earlier one, as the reference driver's registry does.
		compiled[spec.Table] = v
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := in.node.Engine.SetValidators(compiled, in.commit); err != nil {
		writeControlError(w, http.StatusBadRequest, err)
		return
	}
	in.rows = compiled
	writeJSON(w, struct{}{})
}

func (in *instance) serveCommitValidator(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Spec json.RawMessage `json:"spec"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	var commit engine.CommitValidator
	if present(req.Spec) {
		var rule rules.CommitRule
		if err := rules.Decode(req.Spec, &rule); err != nil {
			writeControlError(w, http.StatusBadRequest, fmt.Errorf("spec: %w", err))
			return
		}
		var err error
		if commit, err = rules.CompileCommit(in.schema, []rules.CommitRule{rule}); err != nil {
			writeControlError(w, http.StatusBadRequest, fmt.Errorf("spec: %w", err))
			return
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := in.node.Engine.SetValidators(in.rows, commit); err != nil {
		writeControlError(w, http.StatusBadRequest, err)
		return
	}
	in.commit = commit
	writeJSON(w, struct{}{})
}
