package realtime

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/ssp2"
)

// ServeHTTP is GET /realtime?clientId=…: it authenticates, attaches the
// client (reserved prefix and actor binding refused), applies the
// connection caps, upgrades, and runs the session until it ends.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, err := h.cfg.Auth.Authenticate(r)
	if err != nil {
		h.log.Debug("realtime: authentication failed", "err", err)
		h.refuse(w, r, ssp2.Errorf(ssp2.CodeAuthRequired, "authentication required"))
		return
	}
	id.MountURL = httpapi.MountURL(r, "realtime")
	clientID := r.URL.Query().Get("clientId")
	att, err := h.cfg.Engine.Attach(r.Context(), id, clientID)
	if err != nil {
		if ssp2.CodeOf(err) == ssp2.CodeInternalError {
			h.log.Error("realtime: attach", "partition", id.Partition, "err", err)
		}
		h.refuse(w, r, err)
		return
	}
	release, err := h.admit(clientKey{id.Partition, clientID})
	if err != nil {
		h.refuse(w, r, err)
		return
	}
	defer release()
	conn, err := websocket.Accept(w, r, h.acceptOptions())
	if err != nil {
		h.log.Debug("realtime: upgrade", "err", err)
		return
	}
	conn.SetReadLimit(h.cfg.MaxRequestBytes + 1)
	s := newSession(h, conn, id, clientID)
	if !h.conns.Enter() {
		_ = conn.Close(statusGoingAway, "server shutting down")
		return
	}
	defer h.conns.Done()
	if err := h.register(s, att); err != nil {
		_ = conn.Close(statusGoingAway, "server shutting down")
		return
	}
	h.metrics.Opened.Add(1)
	defer func() {
		s.close(websocket.StatusNormalClosure, "")
		h.presence.dropAll(s)
		h.unregister(s)
		h.metrics.Closed.Add(1)
		<-s.ctx.Done() // the close handshake is over
	}()
	go s.writeLoop()
	h.presence.burst(s)
	s.readLoop()
}

func (h *Hub) acceptOptions() *websocket.AcceptOptions {
	return &websocket.AcceptOptions{
		OriginPatterns:     h.cfg.OriginPatterns,
		InsecureSkipVerify: len(h.cfg.OriginPatterns) == 0,
	}
}

// refuse answers a refused connect: HTTP with the SSP2 JSON error, or, in
// test mode, in band after the upgrade (an error event, then 1008).
func (h *Hub) refuse(w http.ResponseWriter, r *http.Request, err error) {
	h.metrics.Refused.Add(1)
	if !h.cfg.InBandRefusals {
		httpapi.WriteError(w, err)
		return
	}
	conn, aerr := websocket.Accept(w, r, h.acceptOptions())
	if aerr != nil {
		return
	}
	b, _ := json.Marshal(errorEvent{Event: "error", Data: httpapi.ErrorJSON(err)})
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if conn.Write(ctx, websocket.MessageText, b) == nil {
		_ = conn.Close(statusViolation, string(ssp2.CodeOf(err)))
		return
	}
	_ = conn.CloseNow()
}

// errorEvent is a refused connect's in-band answer in test mode: the
// SPEC.md §10.1 error shape as the data of an "error" event.
type errorEvent struct {
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}
