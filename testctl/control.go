package testctl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
)

// Capabilities are the optional features of the conformance driver seam
// this build implements.
var Capabilities = []string{"validators", "commit-validators", "realtime", "blobs", "signed-urls", "blob-presign", "leases", "backup-restore", "idempotency-fault"}

// ActorHeader carries the acting actor of a protocol request.
const ActorHeader = "X-Syncular-Test-Actor"

// Config configures a Control.
type Config struct {
	// Bus is the running NATS every instance's node shares, each in its
	// own bus namespace (i-<id>).
	Bus *embedded.Server
	// Dir holds one directory per instance with its SQLite file. It
	// belongs to the Control: Start empties it.
	Dir string
	// MaxRequestBytes bounds a /sync body (default: httpapi's).
	MaxRequestBytes int64
	// Realtime and Reactions are the serving node's settings, which every
	// instance takes: its realtime hub (with in-band refusals, and the
	// instance's maxDeltaBytes and maxPresenceBytes) and its reaction
	// runner. An instance plans no reactions: the driver seam has no way
	// to declare them.
	Realtime  node.RealtimeConfig
	Reactions node.ReactionsConfig
	Logger    *slog.Logger
}

// Control serves the control API and the instances' protocol routes.
type Control struct {
	cfg       Config
	log       *slog.Logger
	mux       *http.ServeMux
	mu        sync.Mutex
	instances map[string]*instance
	closed    bool
}

// New returns a Control with no instances; Start readies it.
func New(cfg Config) (*Control, error) {
	if cfg.Bus == nil {
		return nil, errors.New("testctl: Bus is required")
	}
	if cfg.Dir == "" {
		return nil, errors.New("testctl: Dir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Control{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), instances: map[string]*instance{}}
	c.mux.HandleFunc("GET /__test/capabilities", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, Capabilities) })
	c.mux.HandleFunc("POST /__test/instances", c.serveCreate)
	c.mux.HandleFunc("DELETE /__test/i/{id}", c.serveDelete)
	c.handle("POST /__test/i/{id}/allowed-scopes", (*instance).serveAllowedScopes)
	c.handle("GET /__test/i/{id}/rows/{table}", (*instance).serveRows)
	c.handle("GET /__test/i/{id}/max-commit-seq", (*instance).serveMaxCommitSeq)
	c.handle("GET /__test/i/{id}/horizon-seq", (*instance).serveHorizonSeq)
	c.handle("GET /__test/i/{id}/clock", (*instance).serveClock)
	c.handle("POST /__test/i/{id}/clock/advance", (*instance).serveClockAdvance)
	c.handle("POST /__test/i/{id}/prune", (*instance).servePrune)
	c.handle("POST /__test/i/{id}/resolver", (*instance).serveResolver)
	c.handle("POST /__test/i/{id}/leases/revoke", (*instance).serveLeaseRevoke)
	c.handle("POST /__test/i/{id}/backup/capture", (*instance).serveBackupCapture)
	c.handle("POST /__test/i/{id}/backup/restore", (*instance).serveBackupRestore)
	c.handle("POST /__test/i/{id}/faults/idempotency-lookup", func(in *instance, w http.ResponseWriter, _ *http.Request) {
		in.node.Engine.FailNextIdempotencyLookup()
		writeJSON(w, struct{}{})
	})
	c.handle("POST /__test/i/{id}/validators", (*instance).serveValidators)
	c.handle("POST /__test/i/{id}/commit-validator", (*instance).serveCommitValidator)
	c.handle("POST /__test/i/{id}/signed-url-ttl", (*instance).serveSignedURLTTL)
	c.handle("POST /__test/i/{id}/blob-presign", (*instance).serveBlobPresign)
	c.mux.HandleFunc("/__test/", func(w http.ResponseWriter, _ *http.Request) {
		writeControlError(w, http.StatusNotFound, errors.New("unknown test-control route"))
	})
	c.mux.HandleFunc("/i/{id}/", c.serveProtocol)
	return c, nil
}

// ServeHTTP serves /__test/… and /i/{id}/….
func (c *Control) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.mux.ServeHTTP(w, r) }

// Owns reports whether path belongs to this surface.
func Owns(path string) bool {
	return strings.HasPrefix(path, "/__test/") || strings.HasPrefix(path, "/i/")
}

// handle routes a control call to its instance.
func (c *Control) handle(pattern string, fn func(*instance, http.ResponseWriter, *http.Request)) {
	c.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		in, release := c.acquire(r.PathValue("id"))
		if in == nil {
			writeControlError(w, http.StatusNotFound, fmt.Errorf("unknown instance %q", r.PathValue("id")))
			return
		}
		defer release()
		fn(in, w, r)
	})
}

// acquire returns a live instance and marks a request in flight on it;
// release must be called when the request is done. DELETE waits for
// every request in flight before closing the instance.
func (c *Control) acquire(id string) (*instance, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := c.instances[id]
	if in == nil {
		return nil, nil
	}
	in.inflight.Add(1)
	return in, in.inflight.Done
}

// serveProtocol serves /i/{id}/… with the instance's production handler.
func (c *Control) serveProtocol(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	in, release := c.acquire(id)
	if in == nil {
		writeProtocolError(w, ssp2.Errorf(ssp2.CodeNotFound, "unknown test instance %q", id))
		return
	}
	defer release()
	http.StripPrefix("/i/"+id, in.handler()).ServeHTTP(w, r)
}

// createRequest is POST /__test/instances.
type createRequest struct {
	Schema     json.RawMessage `json:"schema"`
	Partition  string          `json:"partition"`
	NowMs      *int64          `json:"nowMs"`
	Limits     *limits         `json:"limits"`
	SignedURLs json.RawMessage `json:"signedUrls"`
	Leases     json.RawMessage `json:"leases"`
}

// limits are an instance's limits (0 or absent: the default).
type limits struct {
	MaxOperationsPerRequest *int   `json:"maxOperationsPerRequest"` // absent: the default; 0: every push refused
	InlineSegmentMaxBytes   *int   `json:"inlineSegmentMaxBytes"`   // absent: the default; 0: never inline
	SegmentTTLMs            *int64 `json:"segmentTtlMs"`
	MaxDeltaBytes           int    `json:"maxDeltaBytes"`
	MaxPresenceBytes        int    `json:"maxPresenceBytes"`
	MaxCascadeOperations    int    `json:"maxCascadeOperationsPerCommit"`
}

func present(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

func (c *Control) serveCreate(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if !readJSON(w, r, &req) {
		return
	}
	switch {
	case !present(req.Schema):
		writeControlError(w, http.StatusBadRequest, errors.New("schema is required"))
		return
	case req.Partition == "":
		writeControlError(w, http.StatusBadRequest, errors.New("partition is required"))
		return
	case req.NowMs == nil:
		writeControlError(w, http.StatusBadRequest, errors.New("nowMs is required"))
		return
	}
	id := newID()
	in, err := openInstance(r.Context(), c.cfg, id, req)
	if err != nil {
		var be badRequest
		if errors.As(err, &be) {
			writeControlError(w, http.StatusBadRequest, err)
			return
		}
		c.log.Error("create test instance", "err", err)
		writeControlError(w, http.StatusInternalServerError, err)
		return
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = in.close(context.WithoutCancel(r.Context()))
		writeControlError(w, http.StatusServiceUnavailable, errors.New("shutting down"))
		return
	}
	c.instances[id] = in
	c.mu.Unlock()
	c.log.Info("test instance created", "id", id, "partition", req.Partition, "schemaVersion", in.schema.Version)
	writeJSON(w, map[string]string{"id": id})
}

func (c *Control) serveDelete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c.mu.Lock()
	in := c.instances[id]
	delete(c.instances, id)
	c.mu.Unlock()
	if in == nil {
		writeControlError(w, http.StatusNotFound, fmt.Errorf("unknown instance %q", id))
		return
	}
	if err := in.close(context.WithoutCancel(r.Context())); err != nil {
		c.log.Error("close test instance", "id", id, "err", err)
		writeControlError(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, struct{}{})
}

// Start clears what a previous process left behind — instance
// directories in Dir and instance namespaces on the bus: instances do not
// survive a restart.
func (c *Control) Start(ctx context.Context) error {
	if err := os.RemoveAll(c.cfg.Dir); err != nil {
		return fmt.Errorf("testctl: %w", err)
	}
	if err := os.MkdirAll(c.cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("testctl: %w", err)
	}
	js := c.cfg.Bus.JetStream()
	left := map[string]bool{}
	names := js.StreamNames(ctx)
	for s := range names.Name() {
		// i-<id>_SYNC_COMMITS, KV_i-<id>_sync_gate, OBJ_i-<id>_sync_segments, …
		s = strings.TrimPrefix(strings.TrimPrefix(s, "KV_"), "OBJ_")
		if prefix, _, ok := strings.Cut(s, "_"); ok && strings.HasPrefix(prefix, "i-") {
			left[strings.TrimPrefix(prefix, "i-")] = true
		}
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("testctl: list streams: %w", err)
	}
	for id := range left {
		ns, err := namespace(id)
		if err != nil {
			continue // not one of ours
		}
		if err := bus.DeleteNamespace(ctx, js, ns); err != nil {
			return fmt.Errorf("testctl: %w", err)
		}
	}
	return nil
}

// Stop closes every instance; later creations are refused. It is
// idempotent.
func (c *Control) Stop(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	all := c.instances
	c.instances = map[string]*instance{}
	c.mu.Unlock()
	var errs []error
	for _, in := range all {
		errs = append(errs, in.close(ctx))
	}
	return errors.Join(errs...)
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// badRequest marks an error caused by the request's content.
type badRequest struct{ error }

func (b badRequest) Unwrap() error { return b.error }

func badf(format string, args ...any) error { return badRequest{fmt.Errorf(format, args...)} }

// maxControlBody bounds a control request body (schemas are small).
const maxControlBody = 8 << 20

// readJSON decodes the request body into v; an empty body leaves v as
// is. It answers 400 itself and returns false on failure.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxControlBody))
	if err != nil {
		writeControlError(w, http.StatusBadRequest, fmt.Errorf("read body: %w", err))
		return false
	}
	if strings.TrimSpace(string(b)) == "" {
		return true
	}
	if err := json.Unmarshal(b, v); err != nil {
		writeControlError(w, http.StatusBadRequest, fmt.Errorf("body: %w", err))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeControlError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

func writeControlError(w http.ResponseWriter, status int, err error) {
	b, _ := json.Marshal(map[string]string{"error": err.Error()})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeProtocolError answers a protocol route with the SSP2 JSON error
// shape (SPEC.md §10.1), as the production handler does.
func writeProtocolError(w http.ResponseWriter, err error) {
	f := ssp2.NewErrorFrame(err)
	status := httpapi.Status(ssp2.Code(f.Code))
	b, _ := json.Marshal(struct {
		Code              string          `json:"code"`
		Category          string          `json:"category"`
		Retryable         bool            `json:"retryable"`
		RecommendedAction string          `json:"recommendedAction"`
		Message           string          `json:"message"`
		Details           json.RawMessage `json:"details,omitempty"`
	}{f.Code, f.Category, f.Retryable, f.RecommendedAction, f.Message, f.Details})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
