package testctl

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/syncnode/syncnode/ssp2"
)

// dial opens an instance's realtime socket; query is appended to the URL.
func (c *control) dial(id, query string) *websocket.Conn {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(c.url, "http")+"/i/"+id+"/realtime?"+query, nil)
	if err != nil {
		c.t.Fatalf("dial: %v", err)
	}
	ws.SetReadLimit(64 << 20)
	c.t.Cleanup(func() { _ = ws.CloseNow() })
	return ws
}

// next reads the socket's next message, with a deadline.
func next(t *testing.T, ws *websocket.Conn) (websocket.MessageType, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	typ, b, err := ws.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return typ, b
}

// nextControl reads control messages until one of type T, skipping
// heartbeats.
func nextControl[T ssp2.ControlMessage](t *testing.T, ws *websocket.Conn) T {
	t.Helper()
	for {
		typ, b := next(t, ws)
		if typ != websocket.MessageText {
			t.Fatalf("binary message %x while waiting for a control message", b[:min(len(b), 16)])
		}
		m, err := ssp2.ParseControlMessage(b)
		if err != nil {
			t.Fatalf("control message %s: %v", b, err)
		}
		if x, ok := m.(T); ok {
			return x
		}
	}
}

// An instance serves /i/{id}/realtime like a node does, fed by its own
// namespace's commit stream: test actor by ?actor=, refusals in band,
// and the instance's maxDeltaBytes and maxPresenceBytes.
func TestInstanceRealtime(t *testing.T) {
	c := newControl(t)
	id := c.instanceWith(map[string]any{"maxDeltaBytes": 2048, "maxPresenceBytes": 32})
	other := c.instance() // its commits must never reach id's sockets
	if c.inst(id).node.Realtime == nil || c.inst(id).node.Reactions == nil {
		t.Fatal("an instance runs no realtime hub or reaction runner")
	}

	// Without an actor the upgrade completes, the error comes in band and
	// the socket closes with 1008 (policy violation).
	refused := c.dial(id, "clientId=c1")
	typ, b := next(t, refused)
	var ev struct {
		Event string `json:"event"`
		Data  struct {
			Code string `json:"code"`
		} `json:"data"`
	}
	if typ != websocket.MessageText || json.Unmarshal(b, &ev) != nil || ev.Event != "error" || ev.Data.Code != string(ssp2.CodeAuthRequired) {
		t.Fatalf("refused connect sent %s", b)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, _, err := refused.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("refused connect closed with %v, want 1008", err)
	}

	// c1 pulls p1 over HTTP, which registers it; its socket then gets
	// deltas of commits made through /sync.
	ep := c.epoch(id)
	if st, body := c.sync(id, &ep, pullFrames()...); !served(t, st, body) {
		t.Fatalf("pull: %d %s", st, body)
	}
	ws := c.dial(id, "actor=u1&clientId=c1")
	if h := nextControl[*ssp2.Hello](t, ws); h.ActorID != "u1" || h.ClientID != "c1" {
		t.Fatalf("hello %+v", h)
	}
	epOther := c.epoch(other)
	push := func(in string, ep *string, key string, rowIDs ...string) {
		t.Helper()
		ops := make([]ssp2.Operation, len(rowIDs))
		for i, r := range rowIDs {
			ops[i] = ssp2.Operation{Table: "tasks", RowID: r, Op: ssp2.OpUpsert, Payload: taskRow(t, c, in, r)}
		}
		if st, body := c.syncAs(in, "c2", ep, &ssp2.PushCommit{ClientCommitID: key, Operations: ops}); !served(t, st, body) {
			t.Fatalf("push: %d %s", st, body)
		}
	}
	push(other, &epOther, "elsewhere", "t0")
	push(id, &ep, "small", "t1")
	typ, b = next(t, ws)
	for typ == websocket.MessageText { // heartbeats, presence: not what this waits for
		typ, b = next(t, ws)
	}
	m, err := ssp2.DecodeMessage(b[1:])
	if b[0] != 0x00 || err != nil {
		t.Fatalf("delta %x: %v", b[:min(len(b), 16)], err)
	}
	var rows []string
	for _, f := range m.Frames {
		if cm, ok := f.(*ssp2.Commit); ok {
			for _, ch := range cm.Changes {
				rows = append(rows, ch.RowID)
			}
		}
	}
	if fmt.Sprint(rows) != "[t1]" {
		t.Fatalf("delta carries rows %v, want [t1] (none of the other instance)", rows)
	}

	// A commit past maxDeltaBytes becomes a delta-too-large wake-up.
	long := func(c byte) string { return strings.Repeat(string(c), 1000) }
	push(id, &ep, "large", long('a'), long('b'), long('c'))
	if w := nextControl[*ssp2.Wake](t, ws); w.Reason != ssp2.WakeDeltaTooLarge {
		t.Fatalf("wake %+v, want delta-too-large", w)
	}

	// A presence document past maxPresenceBytes is refused; a small one
	// is not.
	send := func(doc string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		msg := fmt.Sprintf(`{"event":"presence","data":{"scopeKey":"project:p1","doc":%s}}`, doc)
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"cursor":"` + strings.Repeat("x", 40) + `"}`)
	if e := nextControl[*ssp2.PresenceError](t, ws); e.Code != ssp2.PresenceTooLarge {
		t.Fatalf("presence error %+v, want too_large", e)
	}

	// DELETE closes the instance's sockets (going away) instead of
	// waiting on them; the client reads on, as a client does.
	ended := make(chan error, 1)
	go func() {
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				ended <- err
				return
			}
		}
	}()
	if st, body := c.do("DELETE", "/__test/i/"+id, nil, ""); st != http.StatusOK {
		t.Fatalf("delete: %d %s", st, body)
	}
	if err := <-ended; websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("socket ended with %v, want 1001", err)
	}
}
