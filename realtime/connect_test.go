package realtime_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
)

// refusal dials and expects an HTTP refusal with status and code.
func refusal(t *testing.T, base, tok, clientID string, status int, code ssp2.Code) {
	t.Helper()
	_, resp, err := dial(t, base, tok, url.QueryEscape(clientID))
	if err == nil {
		t.Fatalf("dial as %q succeeded, want %d %s", clientID, status, code)
	}
	if resp == nil {
		t.Fatalf("dial as %q: %v, no HTTP response", clientID, err)
	}
	b, _ := io.ReadAll(resp.Body)
	var body struct {
		Code, Category, RecommendedAction string
	}
	if resp.StatusCode != status || json.Unmarshal(b, &body) != nil || body.Code != string(code) || body.Category == "" {
		t.Fatalf("dial as %q: %d %s, want %d %s", clientID, resp.StatusCode, b, status, code)
	}
}

func TestConnectRefusals(t *testing.T) {
	n := startNode(t, func(c *node.Config) { c.Realtime.Hub.MaxConnectionsPerClient = 1; c.Realtime.Hub.MaxConnections = 2 })
	bob := token(t, "bob", "p1")
	refusal(t, n.URL(), "", "c1", http.StatusUnauthorized, ssp2.CodeAuthRequired)
	refusal(t, n.URL(), "not-a-token", "c1", http.StatusUnauthorized, ssp2.CodeAuthRequired)
	refusal(t, n.URL(), bob, "", http.StatusBadRequest, ssp2.CodeInvalidRequest)
	refusal(t, n.URL(), bob, `["remote-command","x"]`, http.StatusBadRequest, ssp2.CodeInvalidClientID)

	c := mustDial(t, n.URL(), bob, "bob-1")
	c.subscribe("tasks", "p1")
	c.sync() // binds bob-1 to bob
	refusal(t, n.URL(), token(t, "mallory", "p1"), "bob-1", http.StatusBadRequest, ssp2.CodeInvalidClientID)
	refusal(t, n.URL(), bob, "bob-1", http.StatusTooManyRequests, ssp2.CodeWebsocketLimit)
	mustDial(t, n.URL(), bob, "bob-2").hello()
	refusal(t, n.URL(), bob, "bob-3", http.StatusTooManyRequests, ssp2.CodeWebsocketLimit)
	if got := n.Realtime.Metrics().Refused.Load(); got != 7 {
		t.Fatalf("%d refusals counted, want 7", got)
	}
	// A closed socket frees its place.
	c.close()
	poll.Until(t, wait, "the closed socket to be released", func() bool { return n.Realtime.Metrics().Open() == 1 })
	mustDial(t, n.URL(), bob, "bob-3").hello()
}

func TestInBandRefusalsInTestMode(t *testing.T) {
	n := startNode(t, func(c *node.Config) { c.Realtime.Hub.InBandRefusals = true })
	for name, tc := range map[string]struct {
		tok, client string
		code        ssp2.Code
	}{
		"no token":        {"", "c1", ssp2.CodeAuthRequired},
		"reserved prefix": {token(t, "bob", "p1"), url.QueryEscape(`["remote-command",1]`), ssp2.CodeInvalidClientID},
	} {
		t.Run(name, func(t *testing.T) {
			c := mustDial(t, n.URL(), tc.tok, tc.client)
			e := event[*ssp2.UnknownControl](c, 0)
			var m struct {
				Event string
				Data  struct{ Code, Category, Message, RecommendedAction string }
			}
			if err := json.Unmarshal(e.Raw, &m); err != nil || m.Event != "error" || m.Data.Code != string(tc.code) || m.Data.Message == "" || m.Data.Category == "" {
				t.Fatalf("first message %s, want an error event with %s", e.Raw, tc.code)
			}
			if got := c.closeStatus(); got != websocket.StatusPolicyViolation {
				t.Fatalf("closed with %v, want 1008", got)
			}
		})
	}
}

func TestBehindAtConnectIsWokenUntilItCatchesUp(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		n := startNode(t, b.on(t))
		a := newPusher(t, n.URL(), "alice", "p1")
		tok := token(t, "bob", "p1")
		c := mustDial(t, n.URL(), tok, "bob-1")
		c.subscribe("tasks", "p1")
		a.push([2]string{"r1", "p1"})
		c.sync()
		c.close()

		// Commits while bob is away: at the next connect he is behind.
		a.push([2]string{"r2", "p1"})
		latest := a.push([2]string{"r3", "p1"})
		c2 := mustDial(t, n.URL(), tok, "bob-1")
		c2.rep = c.rep
		h := c2.hello()
		if !h.RequiresSync || h.Cursor != 1 || h.LatestCursor != latest {
			t.Fatalf("hello of a client behind: %+v, want cursor 1, latest %d", h, latest)
		}
		during := a.push([2]string{"r4", "p1"})
		if w := event[*ssp2.Wake](c2, 0); w.Reason != ssp2.WakeCatchupRequired || w.Cursor != during {
			t.Fatalf("wake of a client behind: %+v", w)
		}
		c2.sync() // catches up and acks
		after := a.push([2]string{"r5", "p1"})
		if got := deltaSeq(t, c2.applyDelta(0)); got != after {
			t.Fatalf("first delta after catching up carries %d, want %d", got, after)
		}
		assertMatchesServer(t, n.Store, c2, "p1")
	})
}

func TestOversizeDeltaBecomesAWake(t *testing.T) {
	n := startNode(t, func(c *node.Config) { c.Realtime.Hub.MaxDeltaBytes = 1 << 10; c.Realtime.Hub.SendQueueBytes = 1 << 20 })
	a := newPusher(t, n.URL(), "alice", "p1")
	c := mustDial(t, n.URL(), token(t, "bob", "p1"), "bob-1")
	c.subscribe("tasks", "p1")
	c.sync()
	big := a.push([2]string{"r1", "p1"}, [2]string{"r2", "p1"}, [2]string{"r3", "p1"}, [2]string{"r4", "p1"},
		[2]string{"r5", "p1"}, [2]string{"r6", "p1"}, [2]string{"r7", "p1"}, [2]string{"r8", "p1"},
		[2]string{"r9", "p1"}, [2]string{"ra", "p1"}, [2]string{"rb", "p1"}, [2]string{"rc", "p1"},
		[2]string{"rd", "p1"}, [2]string{"re", "p1"}, [2]string{"rf", "p1"}, [2]string{"rg", "p1"},
		[2]string{"rh-with-a-much-longer-row-id-to-pass-the-kilobyte-rh-with-a-much-longer-row-id-to-pass-the-kilobyte", "p1"},
		[2]string{"ri-with-a-much-longer-row-id-to-pass-the-kilobyte-ri-with-a-much-longer-row-id-to-pass-the-kilobyte", "p1"},
		[2]string{"rj-with-a-much-longer-row-id-to-pass-the-kilobyte-rj-with-a-much-longer-row-id-to-pass-the-kilobyte", "p1"},
		[2]string{"rk-with-a-much-longer-row-id-to-pass-the-kilobyte-rk-with-a-much-longer-row-id-to-pass-the-kilobyte", "p1"})
	if w := event[*ssp2.Wake](c, 0); w.Reason != ssp2.WakeDeltaTooLarge || w.Cursor != big {
		t.Fatalf("wake for a delta over 1 KiB: %+v", w)
	}
	if c.numDeltas() != 0 {
		t.Fatal("the oversize delta was sent")
	}
	// Suppressed until the catch-up: the next small commit is a wake too.
	small := a.push([2]string{"r1", "p1"})
	if w := event[*ssp2.Wake](c, 1); w.Reason != ssp2.WakeCatchupRequired || w.Cursor != small {
		t.Fatalf("wake after the oversize delta: %+v", w)
	}
	c.sync()
	last := a.push([2]string{"r2", "p1"})
	if got := deltaSeq(t, c.applyDelta(0)); got != last {
		t.Fatalf("delta after catching up carries %d, want %d", got, last)
	}
	assertMatchesServer(t, n.Store, c, "p1")
	if m := n.Realtime.Metrics(); m.WakesTooLarge.Load() != 1 || m.WakesCatchup.Load() != 1 {
		t.Fatalf("wake metrics: too large %d, catchup %d", m.WakesTooLarge.Load(), m.WakesCatchup.Load())
	}
}

func TestHeartbeat(t *testing.T) {
	n := startNode(t, func(c *node.Config) { c.Realtime.Hub.HeartbeatInterval = 5 * time.Millisecond })
	c := mustDial(t, n.URL(), token(t, "bob", "p1"), "bob-1")
	c.hello()
	h1 := event[*ssp2.Heartbeat](c, 0)
	h2 := event[*ssp2.Heartbeat](c, 1)
	if h1.Timestamp <= 0 || h2.Timestamp < h1.Timestamp {
		t.Fatalf("heartbeats %+v %+v", h1, h2)
	}
}

func TestShutdownClosesWithGoingAway(t *testing.T) {
	n := startNode(t)
	c := mustDial(t, n.URL(), token(t, "bob", "p1"), "bob-1")
	c.hello()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := n.Realtime.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.closeStatus(); got != websocket.StatusGoingAway {
		t.Fatalf("closed with %v, want 1001", got)
	}
	if m := n.Realtime.Metrics(); m.Opened.Load() != 1 || m.Closed.Load() != 1 {
		t.Fatalf("opened %d closed %d", m.Opened.Load(), m.Closed.Load())
	}
	refusal(t, n.URL(), token(t, "bob", "p1"), "bob-2", http.StatusTooManyRequests, ssp2.CodeWebsocketLimit)
}

func TestSlowReaderIsDropped(t *testing.T) {
	n := startNode(t, func(c *node.Config) {
		c.Realtime.Hub.SendQueueMessages, c.Realtime.Hub.SendQueueBytes, c.Realtime.Hub.MaxDeltaBytes = 4, 64<<10, 64<<10
		c.Realtime.Hub.WriteTimeout = 200 * time.Millisecond
	})
	tok := token(t, "bob", "p1")
	registered(t, n, "bob", "slow-1", "p1").close()
	// The slow client connects (registered by its last round) and never
	// reads.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	slow, _, err := websocket.Dial(ctx, "ws"+n.URL()[4:]+"/realtime?clientId=slow-1", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}, HTTPClient: httpClient})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.CloseNow()
	fast := registered(t, n, "carol", "fast-1", "p2") // sees no presence on p1

	pub := registered(t, n, "alice", "pub-1", "p1")
	doc := `{"pad":"` + strings.Repeat("x", 15<<10) + `"}`
	m := n.Realtime.Metrics()
	for i := 0; m.Dropped.Load() == 0; i++ {
		if i > 20000 {
			t.Fatal("the slow reader was never dropped")
		}
		pub.publish("project:p1", doc)
	}
	poll.Until(t, wait, "the slow socket to close", func() bool { return m.Open() == 2 })
	// The others are unaffected.
	a := newPusher(t, n.URL(), "alice", "p2")
	s := a.push([2]string{"r1", "p2"})
	if got := deltaSeq(t, fast.applyDelta(0)); got != s {
		t.Fatalf("fast client's delta carries %d, want %d", got, s)
	}
}

func TestMissedEventIsNeverASilentGap(t *testing.T) {
	// The resync wakes a session whose commit the log has held for a whole
	// interval without its bus event. The interval must outlast the bus's
	// delivery of the first commit (so that one arrives as a delta) even on
	// a loaded machine; at 20 ms it did not, 1 run in 6.
	n := startNode(t, func(c *node.Config) { c.Realtime.Hub.ResyncInterval = 250 * time.Millisecond })
	a := newPusher(t, n.URL(), "alice", "p1")
	c := registered(t, n, "bob", "bob-1", "p1")
	s := a.push([2]string{"r1", "p1"})
	if got := deltaSeq(t, c.applyDelta(0)); got != s {
		t.Fatalf("delta carries %d, want %d", got, s)
	}
	// Without the relay a commit reaches SQL and never the bus: the
	// periodic check wakes the session all the same.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := n.Relay.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	s = a.push([2]string{"r2", "p1"})
	c.wakeAtLeast(ssp2.WakeCatchupRequired, s)
	c.sync()
	assertMatchesServer(t, n.Store, c, "p1")
}
