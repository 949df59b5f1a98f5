// Package loadfix is the load-suite fixture of `syncnode serve
// --load-fixture`: the fixed identity and schema Syncular's load suite
// expects, and its /__load control routes. Like package testctl it is
// never mounted on a normal node, and serve refuses it unless the listener
// is on a loopback address.
//
// Every request to the node's own routes acts as actor "load-actor" in
// partition "load" holding {"project_id": ["*"]}, against schema version 1
// with one table, tasks (id string primary key, project_id, title, done,
// priority, updated_at_ms, all non-null; scope project:{project_id}).
//
//	GET  /__load/metrics → {"rssBytes","peakRssBytes","cpuSeconds","requests","requestErrors",
//	                        "requestDurationMs":{"p50","p95","p99"},"segmentsBuilt","segmentsReused",
//	                        "pushApplied","pushConflicted","pushRejected","realtimeDeltas",
//	                        "realtimeWakes","realtimeOpened","realtimeClosed","realtimeRounds",
//	                        "realtimeAcks","pruneRuns","pruneRemovedCommits"}
//	POST /__load/prune   → {"removedCommits": n}
//	POST /__load/reset {"seedRows": n} → {}
//
// Metrics count from the last reset. requests, requestErrors (status 400
// and above) and the duration percentiles cover POST /sync and GET
// /segments/{id}; the push and segment counters come from the engine, the
// realtime ones from the node's realtime hub; RSS is this process's
// (VmRSS and VmHWM of /proc/self/status). cpuSeconds is the process's
// user + system CPU time since it started, not zeroed by reset: a load
// generator reads it before and after a run and divides the difference by
// its rounds. Reading them takes no lock and no I/O beyond that file, so
// the endpoint answers in well under a millisecond under load.
//
// prune runs the commit-log pruning of SPEC.md §4.6 on the wall clock
// with activeWindowMs 0, ageForceMs 1000 and minRetainedCommits 50.
// reset wipes the partition (rows, commits, client records, push results,
// segment publications; the partition gets a new log epoch), zeroes the
// metrics, and seeds n rows straight into storage — ids row-0000000,
// row-0000001, …, project "storm", server version 1, no commits — with one
// bulk insert (storage.Admin.RowSeed).
package loadfix

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/internal/rusage"
	"github.com/syncnode/syncnode/realtime"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// The fixed identity.
const (
	Partition = "load"
	ActorID   = "load-actor"
	// Project is the project of seeded rows.
	Project = "storm"
)

// SchemaJSON is the fixture schema's IR.
const SchemaJSON = `{"version": 1, "tables": [{"name": "tasks", "primaryKey": "id",
 "columns": [
  {"name": "id", "type": "string", "nullable": false},
  {"name": "project_id", "type": "string", "nullable": false},
  {"name": "title", "type": "string", "nullable": false},
  {"name": "done", "type": "boolean", "nullable": false},
  {"name": "priority", "type": "integer", "nullable": false},
  {"name": "updated_at_ms", "type": "integer", "nullable": false}],
 "scopes": [{"pattern": "project:{project_id}", "column": "project_id"}]}]}`

// Schema returns the compiled fixture schema.
func Schema() *schema.Schema {
	s, err := schema.Parse([]byte(SchemaJSON))
	if err != nil {
		panic(fmt.Sprintf("loadfix: fixture schema: %v", err))
	}
	return s
}

// Auth authenticates every request as the fixed identity.
func Auth() httpapi.Authenticator {
	id := engine.Identity{Partition: Partition, ActorID: ActorID, Scopes: engine.StaticScopes{"project_id": {engine.Wildcard}}}
	return httpapi.AuthenticatorFunc(func(*http.Request) (engine.Identity, error) { return id, nil })
}

// Store is what the fixture needs of the node's store.
type Store interface {
	PartitionTouch(ctx context.Context, partition string, nowMs int64) (storage.Partition, error)
	PartitionGet(ctx context.Context, partition string) (storage.Partition, error)
	Prune(ctx context.Context, p storage.PruneParams) (storage.PruneResult, error)
	RowSeed(ctx context.Context, p storage.SeedParams) error
	PartitionWipe(ctx context.Context, partition string) error
}

// Config configures a Fixture.
type Config struct {
	Store  Store
	Engine *engine.Engine
	// Realtime is the node's realtime hub's counters (nil: they stay 0).
	Realtime *realtime.Metrics
	// Clock is the clock of pruning and seeding (default clock.System).
	Clock  clock.Clock
	Logger *slog.Logger
}

// Prune retention of /__load/prune.
const (
	PruneActiveWindowMs     = 0
	PruneAgeForceMs         = 1000
	PruneMinRetainedCommits = 50
)

// Fixture serves /__load and measures the protocol routes.
type Fixture struct {
	cfg    Config
	log    *slog.Logger
	table  *schema.Table
	schema *schema.Schema

	requests, requestErrors atomic.Int64
	pruneRuns, pruneRemoved atomic.Int64
	durations               histogram
	base                    atomic.Pointer[engineCounts] // engine counters at the last reset
	resetting               atomic.Bool
}

// engineCounts is a snapshot of the engine and realtime counters the
// metrics report.
type engineCounts struct {
	segmentsBuilt, segmentsReused, pushApplied, pushConflicted, pushRejected int64
	realtimeDeltas, realtimeWakes, realtimeOpened, realtimeClosed            int64
	realtimeRounds, realtimeAcks                                             int64
}

func (f *Fixture) engineCounts() *engineCounts {
	m := f.cfg.Engine.Metrics()
	// An image (SPEC.md §5.3) is a stored bootstrap segment like a rows
	// page: built once per key, reused by every client with that key.
	c := &engineCounts{
		segmentsBuilt:  m.SegmentsBuilt.Load() + m.ImagesBuilt.Load(),
		segmentsReused: m.SegmentsReused.Load() + m.ImagesReused.Load(),
		pushApplied:    m.PushApplied.Load(), pushConflicted: m.PushConflicted.Load(), pushRejected: m.PushRejected.Load(),
	}
	if r := f.cfg.Realtime; r != nil {
		c.realtimeDeltas, c.realtimeWakes = r.Deltas.Load(), r.Wakes()
		c.realtimeOpened, c.realtimeClosed = r.Opened.Load(), r.Closed.Load()
		c.realtimeRounds, c.realtimeAcks = r.Rounds.Load(), r.Acks.Load()
	}
	return c
}

// New returns a Fixture. The engine must serve Schema().
func New(cfg Config) (*Fixture, error) {
	if cfg.Store == nil || cfg.Engine == nil {
		return nil, errors.New("loadfix: Store and Engine are required")
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	t, ok := cfg.Engine.Schema().Table("tasks")
	if !ok || cfg.Engine.Schema().Version != 1 {
		return nil, errors.New("loadfix: the engine does not serve the fixture schema")
	}
	f := &Fixture{cfg: cfg, log: cfg.Logger, table: t, schema: cfg.Engine.Schema()}
	f.base.Store(f.engineCounts())
	return f, nil
}

// Wrap returns h with the /__load routes in front of it and the protocol
// routes measured.
func (f *Fixture) Wrap(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /__load/metrics", f.serveMetrics)
	mux.HandleFunc("POST /__load/prune", f.servePrune)
	mux.HandleFunc("POST /__load/reset", f.serveReset)
	mux.HandleFunc("/__load/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, errors.New("unknown load-fixture route"))
	})
	measured := f.measure(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/__load/"):
			mux.ServeHTTP(w, r)
		case r.URL.Path == "/sync" || strings.HasPrefix(r.URL.Path, "/segments/"):
			measured.ServeHTTP(w, r)
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// measure counts and times requests.
func (f *Fixture) measure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		f.durations.observe(time.Since(start))
		f.requests.Add(1)
		if sw.status >= 400 {
			f.requestErrors.Add(1)
		}
	})
}

// Metrics is the body of GET /__load/metrics.
type Metrics struct {
	RSSBytes            int64       `json:"rssBytes"`
	PeakRSSBytes        int64       `json:"peakRssBytes"`
	CPUSeconds          float64     `json:"cpuSeconds"`
	Requests            int64       `json:"requests"`
	RequestErrors       int64       `json:"requestErrors"`
	RequestDurationMs   Percentiles `json:"requestDurationMs"`
	SegmentsBuilt       int64       `json:"segmentsBuilt"`
	SegmentsReused      int64       `json:"segmentsReused"`
	PushApplied         int64       `json:"pushApplied"`
	PushConflicted      int64       `json:"pushConflicted"`
	PushRejected        int64       `json:"pushRejected"`
	RealtimeDeltas      int64       `json:"realtimeDeltas"`
	RealtimeWakes       int64       `json:"realtimeWakes"`
	RealtimeOpened      int64       `json:"realtimeOpened"`
	RealtimeClosed      int64       `json:"realtimeClosed"`
	RealtimeRounds      int64       `json:"realtimeRounds"`
	RealtimeAcks        int64       `json:"realtimeAcks"`
	PruneRuns           int64       `json:"pruneRuns"`
	PruneRemovedCommits int64       `json:"pruneRemovedCommits"`
}

// Percentiles of request durations, in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

// Snapshot returns the metrics since the last reset.
func (f *Fixture) Snapshot() Metrics {
	rss, peak := readRSS()
	now, base := f.engineCounts(), f.base.Load()
	p := f.durations.percentiles(0.50, 0.95, 0.99)
	return Metrics{
		RSSBytes: rss, PeakRSSBytes: peak, CPUSeconds: rusage.Self().CPU.Seconds(),
		Requests: f.requests.Load(), RequestErrors: f.requestErrors.Load(),
		RequestDurationMs: Percentiles{P50: p[0], P95: p[1], P99: p[2]},
		SegmentsBuilt:     now.segmentsBuilt - base.segmentsBuilt, SegmentsReused: now.segmentsReused - base.segmentsReused,
		PushApplied: now.pushApplied - base.pushApplied, PushConflicted: now.pushConflicted - base.pushConflicted,
		PushRejected:   now.pushRejected - base.pushRejected,
		RealtimeDeltas: now.realtimeDeltas - base.realtimeDeltas, RealtimeWakes: now.realtimeWakes - base.realtimeWakes,
		RealtimeOpened: now.realtimeOpened - base.realtimeOpened, RealtimeClosed: now.realtimeClosed - base.realtimeClosed,
		RealtimeRounds: now.realtimeRounds - base.realtimeRounds, RealtimeAcks: now.realtimeAcks - base.realtimeAcks,
		PruneRuns: f.pruneRuns.Load(), PruneRemovedCommits: f.pruneRemoved.Load(),
	}
}

func (f *Fixture) serveMetrics(w http.ResponseWriter, _ *http.Request) { writeJSON(w, f.Snapshot()) }

// Prune runs one pruning pass of the load partition and returns the
// number of commits it removed.
func (f *Fixture) Prune(ctx context.Context) (int64, error) {
	p, err := f.cfg.Store.PartitionGet(ctx, Partition)
	if ssp2.CodeOf(err) == ssp2.CodeStoragePartitionUnregistered {
		f.pruneRuns.Add(1)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("prune: %w", err)
	}
	res, err := f.cfg.Store.Prune(ctx, storage.PruneParams{
		Partition: Partition, LogEpoch: p.LogEpoch, ThroughSeq: p.MaxCommitSeq, NowMs: f.cfg.Clock.Now().UnixMilli(), Literal: true,
		ActiveWindowMs: PruneActiveWindowMs, AgeForceMs: PruneAgeForceMs, MinRetainedCommits: PruneMinRetainedCommits,
	})
	if err != nil {
		return 0, fmt.Errorf("prune: %w", err)
	}
	f.pruneRuns.Add(1)
	f.pruneRemoved.Add(res.RemovedCommits)
	return res.RemovedCommits, nil
}

func (f *Fixture) servePrune(w http.ResponseWriter, r *http.Request) {
	n, err := f.Prune(r.Context())
	if err != nil {
		f.log.Error("load prune", "err", err)
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, map[string]int64{"removedCommits": n})
}

// MaxSeedRows bounds /__load/reset's seedRows.
const MaxSeedRows = 10_000_000

// Reset wipes the load partition, zeroes the metrics and seeds n rows.
func (f *Fixture) Reset(ctx context.Context, n int) error {
	if n < 0 || n > MaxSeedRows {
		return fmt.Errorf("reset: seedRows %d outside 0..%d", n, MaxSeedRows)
	}
	if !f.resetting.CompareAndSwap(false, true) {
		return errors.New("reset: another reset is running")
	}
	defer f.resetting.Store(false)
	if err := f.cfg.Store.PartitionWipe(ctx, Partition); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	now := f.cfg.Clock.Now().UnixMilli()
	if _, err := f.cfg.Store.PartitionTouch(ctx, Partition, now); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	vals := make([]ssp2.Value, len(f.table.Columns))
	var payload []byte
	var id, title []byte
	scopes := map[string]string{"project_id": Project}
	err := f.cfg.Store.RowSeed(ctx, storage.SeedParams{Partition: Partition, Table: f.table.Name, Count: n, Row: func(i int, w *storage.RowWrite) error {
		id = fmt.Appendf(id[:0], "row-%07d", i)
		title = fmt.Appendf(title[:0], "Seeded task %d", i)
		vals[0] = ssp2.Value{Bytes: id}
		vals[1] = ssp2.Value{Bytes: []byte(Project)}
		vals[2] = ssp2.Value{Bytes: title}
		vals[3] = ssp2.Value{Bool: i%3 == 0}
		vals[4] = ssp2.Value{Int: int64(i % 5)}
		vals[5] = ssp2.Value{Int: seedEpochMs + int64(i)}
		var err error
		if payload, err = f.table.Codec.AppendRow(payload[:0], vals); err != nil {
			return err
		}
		*w = storage.RowWrite{RowID: string(id), Values: vals, Scopes: scopes, Payload: payload}
		return nil
	}})
	if err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	f.zero()
	return nil
}

// seedEpochMs is the updated_at_ms of seeded row 0 (2026-01-01T00:00:00Z).
const seedEpochMs = 1_767_225_600_000

func (f *Fixture) zero() {
	f.requests.Store(0)
	f.requestErrors.Store(0)
	f.pruneRuns.Store(0)
	f.pruneRemoved.Store(0)
	f.durations.reset()
	f.base.Store(f.engineCounts())
}

func (f *Fixture) serveReset(w http.ResponseWriter, r *http.Request) {
	var req struct {
		SeedRows int `json:"seedRows"`
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err == nil && strings.TrimSpace(string(b)) != "" {
		err = json.Unmarshal(b, &req)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("body: %w", err))
		return
	}
	start := time.Now()
	if err := f.Reset(r.Context(), req.SeedRows); err != nil {
		f.log.Error("load reset", "err", err)
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	f.log.Info("load partition reset", "seedRows", req.SeedRows, "took", time.Since(start))
	writeJSON(w, struct{}{})
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, err error) {
	b, _ := json.Marshal(map[string]string{"error": err.Error()})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// statusWriter records the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
