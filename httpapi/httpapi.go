// Package httpapi serves the SSP2 HTTP binding (SPEC.md §1.1): POST /sync,
// GET /segments/{id} and /blobs/{id} (PUT, GET, POST …/upload-grant), plus
// /healthz, /readyz and Prometheus /metrics.
//
// Errors found before a response starts are JSON with the SSP2 error shape
// and the status of their code; after it starts they travel in-band as
// ERROR then END (the engine writes those). Request bodies may be gzip;
// responses are zstd, gzip or identity by Accept-Encoding.
package httpapi

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/ids"
	"github.com/syncnode/syncnode/signedurl"
	"github.com/syncnode/syncnode/ssp2"
)

// ContentType is the media type of SSP2 bodies.
const ContentType = "application/vnd.syncular.sync.v2"

// Authenticator maps a request to its identity: partition, actor and the
// resolver of its allowed scopes. A failure is answered 401
// sync.auth_required.
type Authenticator interface {
	Authenticate(r *http.Request) (engine.Identity, error)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(r *http.Request) (engine.Identity, error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(r *http.Request) (engine.Identity, error) { return f(r) }

// SegmentSource reads a segment's bytes, verified against its address
// (implemented by *segments.Store).
type SegmentSource interface {
	// Bytes returns a whole segment; for small and hot segments.
	Bytes(ctx context.Context, segmentID string) ([]byte, error)
	// Open streams a segment; for large ones.
	Open(ctx context.Context, segmentID string) (io.ReadCloser, error)
}

// Config configures the handler.
type Config struct {
	Engine *engine.Engine
	// Auth authenticates requests. Required.
	Auth     Authenticator
	Segments SegmentSource // nil: no segment downloads
	// Blobs serves /blobs/{id} (SPEC.md §5.9); nil answers blob.not_found.
	Blobs BlobSource
	// MaxRequestBytes bounds a /sync body, after decompression (default
	// DefaultMaxRequestBytes).
	MaxRequestBytes int64
	// Ready reports whether the node may serve; /readyz answers its error.
	Ready func(ctx context.Context) error
	// ReadyDetail, when set, adds its fields to a ready /readyz answer
	// (the edge links of a hub, say): state an operator reads that does
	// not make the node unready.
	ReadyDetail func() map[string]any

	Logger   *slog.Logger
	Registry *prometheus.Registry
	// SegmentCacheBytes bounds the cache of compressed segment bodies
	// (default DefaultSegmentCacheBytes).
	SegmentCacheBytes int64
	// StreamSegmentsAbove: segments larger than this are streamed from the
	// store and compressed on the fly instead of cached (default
	// DefaultStreamSegmentsAbove).
	StreamSegmentsAbove int64
	// Realtime serves GET /realtime (the WebSocket channel, package
	// realtime); nil leaves the route unanswered (404).
	Realtime http.Handler
	// Operations serves POST /operations and GET /operations/realtime
	// (the remote operations, package operations); nil leaves them
	// unanswered (404).
	Operations http.Handler
	// WriteTimeout bounds every chunk of a response: the write deadline is
	// extended before each, so a reader that accepts nothing for this long
	// is cut instead of holding the response in memory. Zero leaves write
	// deadlines to the server.
	WriteTimeout time.Duration
	// MaxInflightBodyBytes bounds the request bodies (after decompression)
	// that in-flight requests hold together (default
	// DefaultMaxInflightBodyBytes); past it a request is answered 503
	// sync.rate_limited with Retry-After. It must be at least
	// MaxRequestBytes.
	MaxInflightBodyBytes int64
}

// Defaults.
const (
	DefaultMaxRequestBytes     = 32 << 20
	DefaultSegmentCacheBytes   = 64 << 20
	DefaultStreamSegmentsAbove = 16 << 20
)

// WithDefaults returns c with unset fields defaulted.
func (c Config) WithDefaults() Config {
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.SegmentCacheBytes == 0 {
		c.SegmentCacheBytes = DefaultSegmentCacheBytes
	}
	if c.StreamSegmentsAbove == 0 {
		c.StreamSegmentsAbove = DefaultStreamSegmentsAbove
	}
	if c.MaxInflightBodyBytes == 0 {
		c.MaxInflightBodyBytes = DefaultMaxInflightBodyBytes
	}
	return c
}

// Validate reports every invalid setting (call after WithDefaults). New
// also requires the wiring: Engine and Auth.
func (c Config) Validate() error {
	var errs []error
	if c.MaxRequestBytes < 1 {
		errs = append(errs, fmt.Errorf("http config: MaxRequestBytes %d must be positive", c.MaxRequestBytes))
	}
	if c.SegmentCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("http config: SegmentCacheBytes %d must not be negative", c.SegmentCacheBytes))
	}
	if c.StreamSegmentsAbove < 0 {
		errs = append(errs, fmt.Errorf("http config: StreamSegmentsAbove %d must not be negative", c.StreamSegmentsAbove))
	}
	if c.WriteTimeout < 0 {
		errs = append(errs, fmt.Errorf("http config: WriteTimeout %v must not be negative", c.WriteTimeout))
	}
	if c.MaxInflightBodyBytes < c.MaxRequestBytes {
		errs = append(errs, fmt.Errorf("http config: MaxInflightBodyBytes %d is below MaxRequestBytes %d", c.MaxInflightBodyBytes, c.MaxRequestBytes))
	}
	return errors.Join(errs...)
}

// Handler is the HTTP surface of a node.
type Handler struct {
	cfg    Config
	log    *slog.Logger
	mux    *http.ServeMux
	m      *metrics
	cache  *bodyCache
	budget *bodyBudget
}

// New returns the handler.
func New(cfg Config) (*Handler, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Engine == nil || cfg.Auth == nil {
		return nil, errors.New("httpapi: Engine and Auth are required")
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	h := &Handler{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), cache: newBodyCache(cfg.SegmentCacheBytes),
		budget: newBodyBudget(cfg.MaxInflightBodyBytes)}
	m, err := newMetrics(cfg.Registry, cfg.Engine.Metrics(), h.budget)
	if err != nil {
		return nil, err
	}
	h.m = m
	h.mux.Handle("POST /sync", h.instrument("sync", http.HandlerFunc(h.serveSync)))
	h.mux.Handle("GET /segments/{id}", h.instrument("segment", http.HandlerFunc(h.serveSegment)))
	h.routeBlobs()
	if cfg.Realtime != nil {
		// Not instrumented: a socket's lifetime is no request latency.
		h.mux.Handle("GET /realtime", cfg.Realtime)
	}
	if cfg.Operations != nil {
		h.mux.Handle("POST /operations", h.instrument("operations", cfg.Operations))
		h.mux.Handle("GET /operations/realtime", cfg.Operations)
	}
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	h.mux.HandleFunc("GET /readyz", h.serveReady)
	h.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	h.mux.HandleFunc("/", h.serveNoRoute)
	return h, nil
}

// routeMethods are the methods serveNoRoute tries for a 405.
var routeMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete}

// serveNoRoute answers a path no route serves with 404 sync.not_found,
// and a route asked with another method with 405 and Allow, both in the
// SSP2 JSON error shape (SPEC.md §10.1) rather than the mux's plain text.
func (h *Handler) serveNoRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range routeMethods {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := h.mux.Handler(probe); pattern != "/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeErrorStatus(w, http.StatusMethodNotAllowed, ssp2.Errorf(ssp2.CodeInvalidRequest, "%s is not served for %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	writeError(w, ssp2.Errorf(ssp2.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
}

// ServeHTTP dispatches to the routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) serveReady(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Ready != nil {
		if err := h.cfg.Ready(r.Context()); err != nil {
			h.log.Warn("not ready", "err", err)
			writeError(w, ssp2.Wrap(ssp2.CodeSchemaNotReady, "readiness", err).WithDetails(map[string]string{"reason": err.Error()}))
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if h.cfg.ReadyDetail == nil {
		_, _ = io.WriteString(w, `{"ready":true}`+"\n")
		return
	}
	body := h.cfg.ReadyDetail()
	body["ready"] = true
	_ = json.NewEncoder(w).Encode(body)
}

// serveSync is POST /sync.
func (h *Handler) serveSync(w http.ResponseWriter, r *http.Request) {
	if !isSyncContentType(r.Header.Get("Content-Type")) {
		writeErrorStatus(w, http.StatusUnsupportedMediaType, ssp2.Errorf(ssp2.CodeInvalidRequest, "content type must be %s", ContentType))
		return
	}
	id, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	id.MountURL = MountURL(r, "sync")
	l := &lease{b: h.budget}
	defer l.release()
	body, status, err := readBody(r, h.cfg.MaxRequestBytes, l)
	if err != nil {
		writeErrorStatus(w, status, err)
		return
	}
	sw := getSyncWriter(w, h.cfg.WriteTimeout, negotiate(r.Header.Get("Accept-Encoding")))
	out := &sw.sw
	err = h.cfg.Engine.Sync(r.Context(), id, body, out)
	if err != nil {
		if out.started {
			// Cannot happen: the engine writes in-band once it started.
			h.log.Error("sync failed after the response started", "err", err)
			return
		}
		if r.Context().Err() != nil {
			h.log.Debug("client went away before the response", "partition", id.Partition, "err", err)
			return
		}
		if ssp2.CodeOf(err) == ssp2.CodeInternalError || ssp2.CodeOf(err) == "" {
			h.log.Error("sync request failed", "partition", id.Partition, "err", err)
		}
		out.w.extend() // the request may have taken long
		writeError(w, err)
		return
	}
	if err := out.Close(); err != nil {
		h.log.Debug("finish response", "err", err)
	}
	// Sync returned and the response is finished: nothing refers to the
	// writer any more. (An early return above leaves it to the collector.)
	putSyncWriter(sw)
}

// isSyncContentType reports whether a Content-Type header is the SSP2
// media type (parameters allowed); the exact value every client sends is
// recognized without parsing it.
func isSyncContentType(v string) bool {
	if strings.EqualFold(v, ContentType) {
		return true
	}
	mt, _, err := mime.ParseMediaType(v)
	return err == nil && strings.EqualFold(mt, ContentType)
}

// authenticate runs the authenticator and answers its failure: 401
// sync.auth_required, or 400 sync.invalid_request naming the problem for
// a genuine credential that names an id the node cannot use (ids).
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) (engine.Identity, bool) {
	id, err := h.cfg.Auth.Authenticate(r)
	switch {
	case err == nil:
		return id, true
	case errors.Is(err, ids.ErrInvalid):
		h.log.Warn("credential names an unusable id", "err", err)
		writeError(w, ssp2.Errorf(ssp2.CodeInvalidRequest, "%v", err))
	default:
		h.log.Debug("authentication failed", "err", err)
		writeError(w, ssp2.Errorf(ssp2.CodeAuthRequired, "authentication required"))
	}
	return engine.Identity{}, false
}

// errBusy refuses a request whose body the in-flight budget cannot hold.
var errBusy = ssp2.Errorf(ssp2.CodeRateLimited, "the server holds too many request bodies; retry shortly")

// readBody reads a request body, gunzipping it when it says so, within
// limit bytes after decompression, into a buffer whose every byte of
// capacity is taken from l first.
func readBody(r *http.Request, limit int64, l *lease) ([]byte, int, error) {
	if r.ContentLength > limit {
		return nil, http.StatusRequestEntityTooLarge, ssp2.Errorf(ssp2.CodeInvalidRequest, "request body exceeds %d bytes", limit)
	}
	var src io.Reader = http.MaxBytesReader(nil, r.Body, limit)
	size := int64(32 << 10) // a first guess when the length is not known
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		if r.ContentLength > 0 {
			size = r.ContentLength
		}
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(src)
		if err != nil {
			return nil, http.StatusBadRequest, ssp2.Errorf(ssp2.CodeInvalidRequest, "request body is not valid gzip")
		}
		defer zr.Close()
		src = zr
	default:
		return nil, http.StatusUnsupportedMediaType, ssp2.Errorf(ssp2.CodeInvalidRequest, "unsupported Content-Encoding %q", enc)
	}
	size = min(size, limit)
	if !l.grow(size) {
		return nil, http.StatusServiceUnavailable, errBusy
	}
	body := make([]byte, 0, size)
	for {
		if len(body) == cap(body) {
			// Full: the next byte decides between done, too large and
			// a bigger buffer (so an exact Content-Length never grows).
			var one [1]byte
			n, err := io.ReadFull(src, one[:])
			switch {
			case n == 0 && errors.Is(err, io.EOF):
				return body, 0, nil
			case n == 0:
				status, err := bodyError(err, limit)
				return nil, status, err
			case int64(len(body)) == limit:
				return nil, http.StatusRequestEntityTooLarge, ssp2.Errorf(ssp2.CodeInvalidRequest, "request body exceeds %d bytes", limit)
			}
			grown := min(2*int64(cap(body)), limit)
			if !l.grow(grown - int64(cap(body))) {
				return nil, http.StatusServiceUnavailable, errBusy
			}
			body = append(append(make([]byte, 0, grown), body...), one[0])
			continue
		}
		n, err := src.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if err == io.EOF {
			return body, 0, nil
		}
		if err != nil {
			status, err := bodyError(err, limit)
			return nil, status, err
		}
	}
}

// bodyError classifies a failed body read.
func bodyError(err error, limit int64) (int, error) {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, ssp2.Errorf(ssp2.CodeInvalidRequest, "request body exceeds %d bytes", limit)
	case errors.Is(err, gzip.ErrChecksum), errors.Is(err, gzip.ErrHeader), errors.Is(err, io.ErrUnexpectedEOF):
		return http.StatusBadRequest, ssp2.Errorf(ssp2.CodeInvalidRequest, "request body is not valid gzip")
	}
	return http.StatusBadRequest, ssp2.Errorf(ssp2.CodeInvalidRequest, "read request body: %v", err)
}

// serveSegment is GET /segments/{id}: re-authorized on every call.
func (h *Handler) serveSegment(w http.ResponseWriter, r *http.Request) {
	segmentID := r.PathValue("id")
	if r.URL.Query().Has(signedurl.Param) {
		h.serveSignedSegment(w, r, segmentID)
		return
	}
	id, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	requested, err := ssp2.ParseScopesHeader(r.Header.Get("X-Syncular-Scopes"))
	if err != nil {
		writeError(w, ssp2.Errorf(ssp2.CodeInvalidRequest, "X-Syncular-Scopes must be a JSON object of scope lists"))
		return
	}
	pub, err := h.cfg.Engine.AuthorizeSegment(r.Context(), id, segmentID, requested)
	if err != nil {
		if ssp2.CodeOf(err) == ssp2.CodeInternalError {
			h.log.Error("segment authorization failed", "segment", segmentID, "err", err)
		}
		writeError(w, err)
		return
	}
	hdr := w.Header()
	hdr.Set("ETag", `"`+segmentID+`"`)
	hdr.Set("Cache-Control", "private, max-age=0")
	hdr.Set("Vary", "Authorization, X-Syncular-Scopes, Accept-Encoding")
	if etagMatch(r.Header.Get("If-None-Match"), segmentID) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	enc := negotiate(r.Header.Get("Accept-Encoding"))
	if h.cfg.Segments == nil {
		writeError(w, ssp2.Errorf(ssp2.CodeNotFound, "unknown segment"))
		return
	}
	dw := newDeadlineWriter(w, h.cfg.WriteTimeout)
	if pub.ByteLength > h.cfg.StreamSegmentsAbove {
		h.streamSegment(dw, r, segmentID, enc)
		return
	}
	body, err := h.cache.get(r.Context(), segmentID, enc, func(ctx context.Context) ([]byte, error) {
		return h.cfg.Segments.Bytes(ctx, segmentID)
	})
	if err != nil {
		h.log.Error("read segment", "segment", segmentID, "err", err)
		writeError(w, ssp2.Errorf(ssp2.CodeInternalError, "internal error"))
		return
	}
	hdr.Set("Content-Type", "application/octet-stream")
	if enc != encIdentity {
		hdr.Set("Content-Encoding", enc.String())
	}
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = dw.Write(body)
}

// serveSignedSegment is GET /segments/{id}?st=…: the token is the whole
// grant (SPEC.md §5.4), so no host authentication is read. The bytes are
// served as stored, uncompressed (§5.8: the signed path's compression is
// the CDN's concern), with the segment's immutable ETag.
func (h *Handler) serveSignedSegment(w http.ResponseWriter, r *http.Request, segmentID string) {
	pub, err := h.cfg.Engine.AuthorizeSignedSegment(r.Context(), segmentID, r.URL.Query().Get(signedurl.Param))
	if err != nil {
		if ssp2.CodeOf(err) == ssp2.CodeInternalError {
			h.log.Error("signed segment authorization failed", "segment", segmentID, "err", err)
		}
		writeError(w, err)
		return
	}
	hdr := w.Header()
	hdr.Set("ETag", `"`+segmentID+`"`)
	hdr.Set("Cache-Control", "private, max-age=0")
	if etagMatch(r.Header.Get("If-None-Match"), segmentID) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if h.cfg.Segments == nil {
		writeError(w, ssp2.Errorf(ssp2.CodeNotFound, "unknown segment"))
		return
	}
	dw := newDeadlineWriter(w, h.cfg.WriteTimeout)
	if pub.ByteLength > h.cfg.StreamSegmentsAbove {
		h.streamSegment(dw, r, segmentID, encIdentity)
		return
	}
	body, err := h.cfg.Segments.Bytes(r.Context(), segmentID)
	if err != nil {
		h.log.Error("read segment", "segment", segmentID, "err", err)
		writeError(w, ssp2.Errorf(ssp2.CodeInternalError, "internal error"))
		return
	}
	hdr.Set("Content-Type", "application/octet-stream")
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = dw.Write(body)
}

// MountURL is the absolute URL of the mount a request came in on: its
// scheme (https behind TLS or X-Forwarded-Proto), host, and the path it
// was sent to (before any prefix was stripped) less the route's last
// element, e.g. "http://h/i/abc/" for POST /i/abc/sync.
func MountURL(r *http.Request, route string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if p := r.Header.Get("X-Forwarded-Proto"); p == "https" || p == "http" {
		scheme = p
	}
	path := r.URL.EscapedPath()
	switch {
	case plainPath(r.RequestURI):
		path = r.RequestURI // what parsing it would give back, without the parse
	case r.RequestURI != "":
		if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
			path = u.EscapedPath()
		}
	}
	path = strings.TrimSuffix(path, route)
	if !strings.HasSuffix(path, "/") {
		path += "/"
	}
	return scheme + "://" + r.Host + path
}

// plainPath reports whether a request URI is a path that
// url.ParseRequestURI gives back unchanged as its EscapedPath: it starts
// with '/' and holds only bytes a path carries unescaped (no query, no
// escapes), as every request of an ordinary client does.
func plainPath(uri string) bool {
	if uri == "" || uri[0] != '/' {
		return false
	}
	for i := 0; i < len(uri); i++ {
		switch c := uri[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~$&+,/:;=@", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// streamSegment sends a large segment straight from the store, compressed
// on the fly, holding one chunk at a time. A read failure mid-way (a
// corrupted object) cuts the response; the client's content-address check
// rejects the partial body.
func (h *Handler) streamSegment(dw *deadlineWriter, r *http.Request, segmentID string, enc encoding) {
	rd, err := h.cfg.Segments.Open(r.Context(), segmentID)
	if err != nil {
		h.log.Error("open segment", "segment", segmentID, "err", err)
		writeError(dw.w, ssp2.Errorf(ssp2.CodeInternalError, "internal error"))
		return
	}
	defer rd.Close()
	dw.w.Header().Set("Content-Type", "application/octet-stream")
	out := newStreamWriter(dw, enc)
	out.contentType = "application/octet-stream"
	dst := &lossWriter{w: out}
	if _, err := io.Copy(dst, rd); err != nil {
		if dst.lost || r.Context().Err() != nil {
			h.log.Debug("client went away mid-download", "segment", segmentID, "err", err)
			panic(http.ErrAbortHandler)
		}
		h.log.Error("stream segment", "segment", segmentID, "err", err)
		// Abort the connection so the client sees a failed download, not
		// a short body with a clean end.
		panic(http.ErrAbortHandler)
	}
	if err := out.Close(); err != nil {
		h.log.Debug("finish segment response", "err", err)
	}
}

// lossWriter remembers whether a write failed: the client is gone.
type lossWriter struct {
	w    io.Writer
	lost bool
}

func (l *lossWriter) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	l.lost = l.lost || err != nil
	return n, err
}

// etagMatch reports whether an If-None-Match header names the segment.
func etagMatch(h, segmentID string) bool {
	if h == "" {
		return false
	}
	for _, t := range strings.Split(h, ",") {
		t = strings.TrimSpace(t)
		t = strings.TrimPrefix(t, "W/")
		if t == "*" || t == `"`+segmentID+`"` {
			return true
		}
	}
	return false
}

// errorBody is the SSP2 JSON error shape (SPEC.md §10.1).
type errorBody struct {
	Code              string          `json:"code"`
	Category          string          `json:"category"`
	Retryable         bool            `json:"retryable"`
	RecommendedAction string          `json:"recommendedAction"`
	Message           string          `json:"message"`
	Details           json.RawMessage `json:"details,omitempty"`
}

// errorJSON renders err as the JSON error body; an internal error's cause
// is never sent.
func errorJSON(err error) ([]byte, *ssp2.ErrorFrame) {
	f := ssp2.NewErrorFrame(err)
	if f.Code == string(ssp2.CodeInternalError) {
		f.Message = "internal error"
		f.Details = nil
	}
	b, _ := json.Marshal(errorBody{
		Code: f.Code, Category: f.Category, Retryable: f.Retryable,
		RecommendedAction: f.RecommendedAction, Message: f.Message, Details: f.Details,
	})
	return b, f
}

// writeError answers err as JSON with its code's status.
func writeError(w http.ResponseWriter, err error) {
	writeErrorStatus(w, Status(ssp2.CodeOf(err)), err)
}

// writeErrorStatus answers err as JSON with an explicit status. Internal
// errors never expose their cause.
func writeErrorStatus(w http.ResponseWriter, status int, err error) {
	b, f := errorJSON(err)
	hdr := w.Header()
	hdr.Del("Content-Encoding")
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	if info, ok := ssp2.Code(f.Code).Info(); ok && info.Retryable && status == http.StatusServiceUnavailable {
		hdr.Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// instrument counts and times a route.
func (h *Handler) instrument(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		h.m.observe(route, sw.status, time.Since(start))
	})
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

// BearerAuth authenticates requests with a JWT bearer token: the token's
// sub, partition and scopes claims become the identity, its scopes the
// allowed-scope grant.
func BearerAuth(v *auth.Verifier) Authenticator {
	return AuthenticatorFunc(func(r *http.Request) (engine.Identity, error) {
		p, err := v.VerifyHeader(r.Header.Get("Authorization"))
		if err != nil {
			return engine.Identity{}, err
		}
		return engine.Identity{Partition: p.Partition, ActorID: p.ActorID, Scopes: engine.StaticScopes(p.Scopes)}, nil
	})
}
