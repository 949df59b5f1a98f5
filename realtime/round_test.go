package realtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
)

// gatedAuth is the JWT authenticator whose scope resolution, for one
// actor, can be held: a socket round of that actor then stays in flight
// until the test releases it.
type gatedAuth struct {
	inner httpapi.Authenticator
	actor string

	mu      sync.Mutex
	hold    chan struct{} // non-nil: resolutions block until it is closed
	blocked chan struct{} // signalled when a resolution blocks
}

func newGatedAuth(t testing.TB, actor string) *gatedAuth {
	v, err := auth.NewVerifier(auth.Config{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	return &gatedAuth{inner: httpapi.BearerAuth(v), actor: actor, blocked: make(chan struct{}, 16)}
}

func (g *gatedAuth) Authenticate(r *http.Request) (engine.Identity, error) {
	id, err := g.inner.Authenticate(r)
	if err != nil || id.ActorID != g.actor {
		return id, err
	}
	inner := id.Scopes
	id.Scopes = engine.ResolverFunc(func(ctx context.Context, p, a string) (engine.Allowed, error) {
		g.mu.Lock()
		hold := g.hold
		g.mu.Unlock()
		if hold != nil {
			g.blocked <- struct{}{}
			<-hold
		}
		return inner.ResolveScopes(ctx, p, a)
	})
	return id, nil
}

// waitBlocked waits until a resolution blocks.
func (g *gatedAuth) waitBlocked(t testing.TB) {
	t.Helper()
	select {
	case <-g.blocked:
	case <-time.After(wait):
		t.Fatal("no scope resolution blocked")
	}
}

// holdNext makes resolutions block; the returned func releases them.
func (g *gatedAuth) holdNext() (release func()) {
	ch := make(chan struct{})
	g.mu.Lock()
	g.hold = ch
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.hold = nil
		g.mu.Unlock()
		close(ch)
	}
}

func withAuth(a httpapi.Authenticator) func(*node.Config) {
	return func(c *node.Config) { c.API.Auth = a }
}

func TestSocketRoundEqualsHTTPRound(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		n := startNode(t, b.on(t))
		a := newPusher(t, n.URL(), "alice", "p1")
		for i := range 5 {
			a.push([2]string{"r" + string(rune('a'+i)), "p1"})
		}
		tok := token(t, "bob", "p1")
		c := mustDial(t, n.URL(), tok, "bob-1")
		c.subscribe("tasks", "p1")
		c.sync()

		// The same pull from the start, over both bindings: same bytes,
		// whatever the chunking of the request.
		c.mu.Lock()
		ep := c.rep.epoch
		c.mu.Unlock()
		req := encode(t, 2, &ssp2.ReqHeader{ClientID: "bob-1", SchemaVersion: 1, LogEpoch: &ep}, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
			&ssp2.Subscription{ID: "tasks", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: 0})
		status, overHTTP := postSync(t, n.URL(), tok, req)
		if status != http.StatusOK {
			t.Fatalf("HTTP round: %d %s", status, overHTTP)
		}
		for _, chunk := range []int{1, 7, len(req)} {
			if got := c.round(req, chunk); !bytes.Equal(got, overHTTP) {
				t.Fatalf("socket round (chunks of %d) differs from HTTP:\n got %x\nwant %x", chunk, got, overHTTP)
			}
		}

		// A request-level failure: the JSON error of HTTP becomes
		// RESP_HEADER, ERROR, END with the same code.
		bad := encode(t, 2, &ssp2.ReqHeader{ClientID: "bob-1", SchemaVersion: 1, LogEpoch: &ep}, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
			&ssp2.Subscription{ID: "x", Table: "nope", Scopes: map[string][]string{"project_id": {"p1"}}})
		status, body := postSync(t, n.URL(), tok, bad)
		var jsonErr struct{ Code string }
		if err := json.Unmarshal(body, &jsonErr); err != nil || status != http.StatusBadRequest {
			t.Fatalf("HTTP: %d %s", status, body)
		}
		m := decode(t, c.round(bad, 5))
		if len(m.Frames) != 2 || framesOf[*ssp2.ErrorFrame](m)[0].Code != jsonErr.Code || m.Frames[0].(*ssp2.RespHeader).LogEpoch != ep {
			t.Fatalf("socket failure %+v, want RESP_HEADER + ERROR %s", m.Frames, jsonErr.Code)
		}
		// Another client id fails the round with sync.invalid_client_id.
		other := encode(t, 2, &ssp2.ReqHeader{ClientID: "bob-2", SchemaVersion: 1, LogEpoch: &ep}, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows})
		m = decode(t, c.round(other, 64))
		if e := framesOf[*ssp2.ErrorFrame](m); len(e) != 1 || e[0].Code != string(ssp2.CodeInvalidClientID) {
			t.Fatalf("mismatched client id: %+v", m.Frames)
		}
		// The connection survived all of it.
		seq := a.push([2]string{"ra", "p1"})
		if got := deltaSeq(t, c.applyDelta(0)); got != seq {
			t.Fatalf("delta after the failed rounds carries %d, want %d", got, seq)
		}
	})
}

func TestCommitDuringRoundWakesThenDeltasResume(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		g := newGatedAuth(t, "bob")
		n := startNode(t, b.on(t), withAuth(g))
		a := newPusher(t, n.URL(), "alice", "p1")
		c := mustDial(t, n.URL(), token(t, "bob", "p1"), "bob-1")
		c.subscribe("tasks", "p1")
		c.sync()
		first := a.push([2]string{"r1", "p1"})
		c.applyDelta(0)

		release := g.holdNext()
		req := c.pullRequest()
		if err := c.sendBinary(append([]byte{0x01}, req...)); err != nil {
			t.Fatal(err)
		}
		g.waitBlocked(t) // the round is in flight
		during := a.push([2]string{"r2", "p1"})
		if w := event[*ssp2.Wake](c, 0); w.Reason != ssp2.WakeCatchupRequired || w.Cursor != during {
			t.Fatalf("wake during the round: %+v, want catchup-required at %d", w, during)
		}
		release()
		// The client takes the round's response and acks its floor, which
		// covers the commit: deltas resume.
		resp := decode(t, c.round(nil, 1))
		c.mu.Lock()
		c.rep.apply(t, resp, false)
		c.mu.Unlock()
		if c.floor() != during {
			t.Fatalf("the round's pull reached %d, want %d", c.floor(), during)
		}
		c.ack(c.floor())
		after := a.push([2]string{"r3", "p1"})
		if got := deltaSeq(t, c.applyDelta(1)); got != after {
			t.Fatalf("delta after the round carries %d, want %d", got, after)
		}
		if c.numDeltas() != 2 || first >= during {
			t.Fatalf("%d deltas; no delta may be sent for the commit made during the round", c.numDeltas())
		}
		assertMatchesServer(t, n.Store, c, "p1")
	})
}

func TestRoundProtocolViolationsClose(t *testing.T) {
	g := newGatedAuth(t, "bob")
	n := startNode(t, withAuth(g))
	tok := token(t, "bob", "p1")
	ep := acquireEpoch(t, n.URL(), tok)
	var req []byte // the current case's client's request
	// Each case sends something; then returns what to do once the
	// server closed the connection.
	nothing := func() {}
	cases := map[string]func(t *testing.T, c *wsClient) func(){
		"unknown tag":  func(t *testing.T, c *wsClient) func() { _ = c.sendBinary([]byte{0x02, 1, 2}); return nothing },
		"empty binary": func(t *testing.T, c *wsClient) func() { _ = c.sendBinary(nil); return nothing },
		"bad header": func(t *testing.T, c *wsClient) func() {
			_ = c.sendBinary(append([]byte{0x01}, append([]byte("SSP3"), req[4:]...)...))
			return nothing
		},
		"response kind": func(t *testing.T, c *wsClient) func() {
			b := append([]byte{0x01}, req...)
			b[7] = byte(ssp2.KindResponse)
			_ = c.sendBinary(b)
			return nothing
		},
		"bytes past END": func(t *testing.T, c *wsClient) func() {
			_ = c.sendBinary(append(append([]byte{0x01}, req...), 0))
			return nothing
		},
		"malformed ack": func(t *testing.T, c *wsClient) func() { c.sendText(`{"type":"ack","cursor":1.5}`); return nothing },
		"malformed presence": func(t *testing.T, c *wsClient) func() {
			c.sendText(`{"event":"presence","data":{"scopeKey":"","doc":null}}`)
			return nothing
		},
		"not JSON": func(t *testing.T, c *wsClient) func() { c.sendText(`{"type":`); return nothing },
		"chunk during a response": func(t *testing.T, c *wsClient) func() {
			release := g.holdNext()
			_ = c.sendBinary(append([]byte{0x01}, req...))
			g.waitBlocked(t) // the round is in flight until release
			_ = c.sendBinary(append([]byte{0x01}, req[:3]...))
			return release
		},
	}
	i := 0
	for name, send := range cases {
		i++
		t.Run(name, func(t *testing.T) {
			id := fmt.Sprintf("bob-%d", i)
			req = encode(t, 2, &ssp2.ReqHeader{ClientID: id, SchemaVersion: 1, LogEpoch: &ep}, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows})
			c := mustDial(t, n.URL(), tok, id)
			c.hello()
			after := send(t, c)
			got := c.closeStatus()
			after()
			if got != websocket.StatusPolicyViolation {
				t.Fatalf("closed with %v, want 1008", got)
			}
		})
	}
	t.Run("unknown events are ignored", func(t *testing.T) {
		req = encode(t, 2, &ssp2.ReqHeader{ClientID: "bob-0", SchemaVersion: 1, LogEpoch: &ep}, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows})
		c := mustDial(t, n.URL(), tok, "bob-0")
		c.hello()
		c.sendText(`{"type":"future","x":1}`)
		c.sendText(`{"event":"future","data":7}`)
		m := decode(t, c.round(req, 4))
		if _, ok := m.Frames[0].(*ssp2.RespHeader); !ok {
			t.Fatalf("round after unknown events: %+v", m.Frames)
		}
	})
}
