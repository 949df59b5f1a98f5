package operations

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"sync"

	"github.com/coder/websocket"

	"github.com/syncnode/syncnode/engine"
)

// MediaType is the content type of the HTTP binding (REMOTE.md §5).
const MediaType = "application/vnd.syncular.operations.v1+json"

// DefaultMaxBodyBytes bounds one request or watch message.
const DefaultMaxBodyBytes = 1 << 20

// HandlerConfig configures the HTTP binding.
type HandlerConfig struct {
	Service *Service
	// Auth authenticates a request or upgrade (the node's
	// httpapi.Authenticator).
	Auth func(r *http.Request) (engine.Identity, error)
	// Hub runs the watches of GET /operations/realtime; nil serves no
	// watches.
	Hub *Hub
	// MaxBodyBytes bounds a request (default 1 MiB).
	MaxBodyBytes int64
	// OriginPatterns are the browser origins a watch may come from; none
	// accepts every origin.
	OriginPatterns []string
	Logger         *slog.Logger
}

// Handler serves POST /operations and GET /operations/realtime.
type Handler struct {
	cfg HandlerConfig
	log *slog.Logger
	mux *http.ServeMux
}

// NewHandler returns the HTTP binding.
func NewHandler(cfg HandlerConfig) (*Handler, error) {
	if cfg.Service == nil || cfg.Auth == nil {
		return nil, errors.New("operations handler: Service and Auth are required")
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, errors.New("operations handler: MaxBodyBytes must not be negative")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST /operations", h.serveOperation)
	if cfg.Hub != nil {
		h.mux.HandleFunc("GET /operations/realtime", h.serveWatch)
	}
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// authFailed answers a failed host authentication with the normal JSON
// error before any operation decoding.
func authFailed(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = io.WriteString(w, `{"code":"sync.auth_required","message":"authentication required"}`+"\n")
}

func (h *Handler) serveOperation(w http.ResponseWriter, r *http.Request) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != MediaType {
		http.Error(w, "operations take "+MediaType, http.StatusUnsupportedMediaType)
		return
	}
	id, err := h.cfg.Auth(r)
	if err != nil {
		authFailed(w)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	var resp Object
	if err != nil {
		resp = ErrorObject(errorf(CodeInvalidRequest, "the request body could not be read within %d bytes", h.cfg.MaxBodyBytes))
	} else if req, err := DecodeRequest(body); err != nil {
		resp = ErrorObject(toError(err))
	} else {
		resp = h.cfg.Service.Do(r.Context(), id, req)
	}
	b, err := Encode(resp)
	if err != nil {
		h.log.Error("encode operation response", "err", err)
		b, _ = Encode(ErrorObject(errorf(CodeExecutionFailed, "the response could not be encoded")))
	}
	w.Header().Set("Content-Type", MediaType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(httpStatus(resp))
	_, _ = w.Write(b)
}

// httpStatus is the status of a response: 200 for a success, the
// error's class otherwise.
func httpStatus(resp Object) int {
	if k, _ := resp.Get("kind"); k != "error" {
		return http.StatusOK
	}
	code, _ := resp.Get("code")
	switch code {
	case CodeUnknown:
		return http.StatusNotFound
	case CodeForbidden, "sync.forbidden":
		return http.StatusForbidden
	case CodeResultTooLarge:
		return http.StatusUnprocessableEntity
	case CodeStorageUnsupported:
		return http.StatusNotImplemented
	case CodeQueryFailed, CodeExecutionFailed, "sync.internal_error":
		return http.StatusInternalServerError
	}
	if r, _ := resp.Get("retryable"); r == true {
		return http.StatusServiceUnavailable
	}
	return http.StatusBadRequest
}

func (h *Handler) serveWatch(w http.ResponseWriter, r *http.Request) {
	id, err := h.cfg.Auth(r)
	if err != nil {
		authFailed(w)
		return
	}
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		OriginPatterns: h.cfg.OriginPatterns, InsecureSkipVerify: len(h.cfg.OriginPatterns) == 0,
	})
	if err != nil {
		h.log.Debug("operations watch: upgrade", "err", err)
		return
	}
	conn.SetReadLimit(h.cfg.MaxBodyBytes)
	h.cfg.Hub.serve(r.Context(), conn, id)
}

// socketWriter serializes a watch session's writes.
type socketWriter struct {
	mu   sync.Mutex
	conn *websocket.Conn
}

func (s *socketWriter) send(ctx context.Context, o Object) error {
	b, err := Encode(o)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn.Write(ctx, websocket.MessageText, b)
}
