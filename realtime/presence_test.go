package realtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
)

// registered dials a client holding projects and registers it on them
// with a socket round.
func registered(t *testing.T, n *node.Node, actor, clientID string, projects ...string) *wsClient {
	t.Helper()
	c := mustDial(t, n.URL(), token(t, actor, projects...), clientID)
	c.subscribe("tasks", projects...)
	c.sync()
	return c
}

// fanout waits for the i-th presence fan-out a client received.
func fanout(c *wsClient, i int) *ssp2.PresenceFanout { return event[*ssp2.PresenceFanout](c, i) }

func wantFanout(t *testing.T, f *ssp2.PresenceFanout, key string, kind ssp2.PresenceKind, actor, client, doc string) {
	t.Helper()
	if f.ScopeKey != key || f.Kind != kind || f.ActorID != actor || f.ClientID != client || f.Timestamp <= 0 {
		t.Fatalf("presence %+v, want %s %s by %s/%s", f, kind, key, actor, client)
	}
	if doc == "" {
		if f.Doc != nil {
			t.Fatalf("leave with doc %s", f.Doc)
		}
		return
	}
	var got, want any
	if json.Unmarshal(f.Doc, &got) != nil || json.Unmarshal([]byte(doc), &want) != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("presence doc %s, want %s", f.Doc, doc)
	}
}

// presenceLifecycle runs the §8.6.5 scenarios with publishers on node pn
// and receivers on node rn (the same node or another one).
func presenceLifecycle(t *testing.T, pn, rn *node.Node) {
	a := registered(t, pn, "alice", "alice-1", "p1")
	b := registered(t, rn, "bob", "bob-1", "p1")
	d := registered(t, rn, "dave", "dave-1", "p2")
	d2 := registered(t, pn, "dora", "dora-1", "p2")

	a.publish("project:p1", `{"cursor":1}`)
	wantFanout(t, fanout(b, 0), "project:p1", ssp2.PresenceJoin, "alice", "alice-1", `{"cursor":1}`)
	a.publish("project:p1", `{"cursor":2}`)
	wantFanout(t, fanout(b, 1), "project:p1", ssp2.PresenceUpdate, "alice", "alice-1", `{"cursor":2}`)
	a.publish("project:p1", `null`)
	wantFanout(t, fanout(b, 2), "project:p1", ssp2.PresenceLeave, "alice", "alice-1", "")
	a.publish("project:p1", `{"cursor":3}`)
	wantFanout(t, fanout(b, 3), "project:p1", ssp2.PresenceJoin, "alice", "alice-1", `{"cursor":3}`)

	// A late joiner gets the join burst of who is present.
	c := registered(t, rn, "carol", "carol-1", "p1")
	wantFanout(t, fanout(c, 0), "project:p1", ssp2.PresenceJoin, "alice", "alice-1", `{"cursor":3}`)

	// Publisher-only errors: a key not held, a document over the cap.
	b.publish("project:p2", `{}`)
	if e := event[*ssp2.PresenceError](b, 0); e.Code != ssp2.PresenceForbidden || e.ScopeKey != "project:p2" {
		t.Fatalf("publish on an unheld key: %+v", e)
	}
	b.publish("project:p1", `{"big":"`+strings.Repeat("x", 17<<10)+`"}`)
	if e := event[*ssp2.PresenceError](b, 1); e.Code != ssp2.PresenceTooLarge {
		t.Fatalf("oversize publish: %+v", e)
	}

	// A publish survives a sync round on the same socket.
	a.sync()
	a.publish("project:p1", `{"cursor":4}`)
	wantFanout(t, fanout(b, 4), "project:p1", ssp2.PresenceUpdate, "alice", "alice-1", `{"cursor":4}`)

	// Disconnecting leaves.
	a.close()
	wantFanout(t, fanout(b, 5), "project:p1", ssp2.PresenceLeave, "alice", "alice-1", "")
	wantFanout(t, fanout(c, 1), "project:p1", ssp2.PresenceUpdate, "alice", "alice-1", `{"cursor":4}`)
	wantFanout(t, fanout(c, 2), "project:p1", ssp2.PresenceLeave, "alice", "alice-1", "")

	// Scope isolation: dave (p2) saw none of it. dora's publish on p2,
	// made after everything above by the publishers' node, reaches dave —
	// so anything leaking would have reached him first.
	d2.publish("project:p2", `{"here":true}`)
	wantFanout(t, fanout(d, 0), "project:p2", ssp2.PresenceJoin, "dora", "dora-1", `{"here":true}`)
	if got := count[*ssp2.PresenceFanout](d); got != 1 {
		t.Fatalf("dave received %d presence events, want only dora's", got)
	}
	if got := count[*ssp2.PresenceFanout](b); got != 6 {
		t.Fatalf("bob received %d presence events, want 6 (nothing from p2)", got)
	}
	if count[*ssp2.PresenceFanout](d2) != 0 || count[*ssp2.PresenceError](a) != 0 {
		t.Fatal("a publisher received its own fan-out or an error")
	}
}

func TestPresenceOneNode(t *testing.T) {
	n := startNode(t)
	presenceLifecycle(t, n, n)
}

func TestPresenceAcrossNodes(t *testing.T) {
	d := startDeployment(t, 2)
	presenceLifecycle(t, d.nodes[0], d.nodes[1])
}

func TestPresenceOfALostNodeLeaves(t *testing.T) {
	d := startDeployment(t, 2)
	a := registered(t, d.nodes[0], "alice", "alice-1", "p1")
	b := registered(t, d.nodes[1], "bob", "bob-1", "p1")
	a.publish("project:p1", `{"x":1}`)
	wantFanout(t, fanout(b, 0), "project:p1", ssp2.PresenceJoin, "alice", "alice-1", `{"x":1}`)
	// Node a falls off the bus: after three silent alive intervals node b
	// drops its documents.
	d.proxies[0].Cut()
	wantFanout(t, fanout(b, 1), "project:p1", ssp2.PresenceLeave, "alice", "alice-1", "")
	// Back: it re-announces, and b sees alice again.
	d.proxies[0].Restore()
	wantFanout(t, fanout(b, 2), "project:p1", ssp2.PresenceJoin, "alice", "alice-1", `{"x":1}`)
}

func TestRegistrationChangeMovesPresence(t *testing.T) {
	n := startNode(t)
	a := registered(t, n, "alice", "alice-1", "p1", "p2")
	b := registered(t, n, "bob", "bob-1", "p1", "p2")
	a.publish("project:p2", `{"on":"p2"}`)
	wantFanout(t, fanout(b, 0), "project:p2", ssp2.PresenceJoin, "alice", "alice-1", `{"on":"p2"}`)
	// Alice's next round subscribes to p1 only: her p2 document leaves.
	a.mu.Lock()
	a.rep.subs[0].Scopes["project_id"] = []string{"p1"}
	a.mu.Unlock()
	a.sync()
	wantFanout(t, fanout(b, 1), "project:p2", ssp2.PresenceLeave, "alice", "alice-1", "")
	a.publish("project:p2", `{}`)
	if e := event[*ssp2.PresenceError](a, 0); e.Code != ssp2.PresenceForbidden {
		t.Fatalf("publish after losing the key: %+v", e)
	}
	// Bob widens nothing; carol joins p2 after bob published: she gets
	// bob's join when her round registers her.
	b.publish("project:p2", `{"bob":1}`)
	c := mustDial(t, n.URL(), token(t, "carol", "p1", "p2"), "carol-1")
	c.subscribe("tasks", "p1")
	c.sync()
	if count[*ssp2.PresenceFanout](c) != 0 {
		t.Fatal("carol got p2 presence without holding p2")
	}
	c.mu.Lock()
	c.rep.subs[0].Scopes["project_id"] = []string{"p1", "p2"}
	c.mu.Unlock()
	c.sync()
	wantFanout(t, fanout(c, 0), "project:p2", ssp2.PresenceJoin, "bob", "bob-1", `{"bob":1}`)
}

// grantAuth is the JWT authenticator whose scope grants the test can
// change while sockets are open.
type grantAuth struct {
	inner  httpapi.Authenticator
	mu     sync.Mutex
	grants map[string]engine.Allowed
}

func (g *grantAuth) Authenticate(r *http.Request) (engine.Identity, error) {
	id, err := g.inner.Authenticate(r)
	if err != nil {
		return id, err
	}
	id.Scopes = engine.ResolverFunc(func(_ context.Context, _, actor string) (engine.Allowed, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.grants[actor], nil
	})
	return id, nil
}

func TestRefreshScopesFailsClosed(t *testing.T) {
	g := &grantAuth{inner: newGatedAuth(t, "").inner, grants: map[string]engine.Allowed{
		"bob": {"project_id": {"p1", "p2"}}, "alice": {"project_id": {"p1", "p2"}}}}
	n := startNode(t, withAuth(g))
	a := newPusher(t, n.URL(), "alice", "p1", "p2")
	bob := registered(t, n, "bob", "bob-1", "p1", "p2")
	alice := registered(t, n, "alice", "alice-1", "p1", "p2")
	bob.publish("project:p2", `{"b":1}`)
	wantFanout(t, fanout(alice, 0), "project:p2", ssp2.PresenceJoin, "bob", "bob-1", `{"b":1}`)

	// The host takes p2 from bob and refreshes: his p2 presence leaves,
	// his p2 commits stop, p1 goes on.
	g.mu.Lock()
	g.grants["bob"] = engine.Allowed{"project_id": {"p1"}}
	g.mu.Unlock()
	n.Realtime.RefreshScopes(t.Context(), partition, "bob")
	wantFanout(t, fanout(alice, 1), "project:p2", ssp2.PresenceLeave, "bob", "bob-1", "")
	a.push([2]string{"secret", "p2"})
	s := a.push([2]string{"open", "p1"})
	if got := deltaSeq(t, bob.applyDelta(0)); got != s || bob.numDeltas() != 1 {
		t.Fatalf("bob's first delta after losing p2 carries %d (of %d deltas), want only %d", got, bob.numDeltas(), s)
	}
	// Without any grant, nothing stays registered.
	g.mu.Lock()
	delete(g.grants, "bob")
	g.mu.Unlock()
	n.Realtime.RefreshScopes(t.Context(), partition, "")
	a.push([2]string{"open", "p1"})
	s = a.push([2]string{"open2", "p1"})
	if got := deltaSeq(t, alice.applyDelta(3)); got != s {
		t.Fatalf("alice's delta carries %d, want %d", got, s)
	}
	if bob.numDeltas() != 1 {
		t.Fatalf("bob got %d deltas without a grant", bob.numDeltas())
	}
}
