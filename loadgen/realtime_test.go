package loadgen

import (
	"bytes"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

// These tests drive the realtime connection's message handling directly
// (no socket): the round framing and delta rules of SPEC.md §8.7 and the
// control events of §8.1–§8.3. The socket itself is exercised once the
// node serves /realtime.

func newTestConn() *rtConn {
	return &rtConn{clientID: "c1", hello: make(chan *ssp2.Hello, 1), closed: make(chan struct{}), done: make(chan []byte, 1)}
}

func control(t *testing.T, m ssp2.ControlMessage) []byte {
	t.Helper()
	b, err := ssp2.MarshalControl(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRealtimeRoundFraming(t *testing.T) {
	resp := testResponse(t)
	c := newTestConn()
	if err := c.binary(append([]byte{tagRound}, resp...)); err == nil || !strings.Contains(err.Error(), "no round in flight") {
		t.Fatalf("chunk without a round: %v", err)
	}

	// A delta before the response's first chunk is legal (§8.7: it may
	// cross the request); the response then arrives in three chunks.
	c.inRound = true
	if err := c.binary(append([]byte{tagDelta}, resp...)); err != nil || c.deltas.Load() != 1 {
		t.Fatalf("delta before the response: %v, %d deltas", err, c.deltas.Load())
	}
	for i, part := range [][]byte{resp[:3], resp[3:20], resp[20:]} {
		if err := c.binary(append([]byte{tagRound}, part...)); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
	}
	select {
	case got := <-c.done:
		if !bytes.Equal(got, resp) || c.inRound {
			t.Fatalf("round response %d bytes, in round %v", len(got), c.inRound)
		}
	default:
		t.Fatal("the round did not complete at END")
	}

	// A delta inside a response stream is a violation.
	c.inRound, c.resp, c.scanned, c.chunked = true, nil, 0, false
	if err := c.binary(append([]byte{tagRound}, resp[:20]...)); err != nil {
		t.Fatal(err)
	}
	if err := c.binary(append([]byte{tagDelta}, resp...)); err == nil || !strings.Contains(err.Error(), "middle of a round") {
		t.Fatalf("delta mid-response: %v", err)
	}

	// Bytes after END in the last chunk are a violation.
	c = newTestConn()
	c.inRound = true
	if err := c.binary(append(append([]byte{tagRound}, resp...), 0)); err == nil || !strings.Contains(err.Error(), "after the response's END") {
		t.Fatalf("trailing bytes: %v", err)
	}

	// An unknown tag is ignored; an empty message and a bad delta are not.
	c = newTestConn()
	if err := c.binary([]byte{0x7f, 1, 2}); err != nil {
		t.Fatalf("unknown tag: %v", err)
	}
	if err := c.binary(nil); err == nil {
		t.Fatal("empty binary message: no error")
	}
	if err := c.binary(append([]byte{tagDelta}, resp[:len(resp)-1]...)); err == nil {
		t.Fatal("truncated delta: no error")
	}
}

// TestDeltaApplication: a kept delta section moves a live subscription's
// cursor forward and counts in its ack floor; a duplicate, or one for a
// subscription still bootstrapping, changes nothing.
func TestDeltaApplication(t *testing.T) {
	conn := newTestConn()
	conn.keepDeltas = true
	delta := append([]byte{tagDelta}, testResponse(t)...) // section "s", nextCursor 7
	if err := conn.binary(delta); err != nil {
		t.Fatal(err)
	}
	c := newVClient("c1", "e1")
	c.subscribe("s", "p")
	c.subscribe("boot", "q")
	take := func() (applied []int64) {
		conn.takeDeltas(func(id string, next int64) {
			if c.applyDelta(id, next) {
				applied = append(applied, next)
			}
		})
		return applied
	}
	if got := take(); len(got) != 0 || c.subs[0].frame.Cursor != -1 {
		t.Fatalf("applied %v to a subscription that never synced (cursor %d)", got, c.subs[0].frame.Cursor)
	}
	if _, ok := c.cursorFloor(); ok {
		t.Fatal("a floor with no live subscription")
	}
	c.subs[0].synced, c.subs[0].frame.Cursor = true, 5
	c.subs[1].synced, c.subs[1].frame.Cursor, c.subs[1].frame.BootstrapState = true, 3, []byte(`"t"`)
	if err := conn.binary(delta); err != nil {
		t.Fatal(err)
	}
	if got := take(); len(got) != 1 || got[0] != 7 || c.subs[0].frame.Cursor != 7 {
		t.Fatalf("applied %v, cursor %d; want 7", got, c.subs[0].frame.Cursor)
	}
	if f, ok := c.cursorFloor(); !ok || f != 7 {
		t.Fatalf("floor %d %v, want 7 (the bootstrapping subscription does not count)", f, ok)
	}
	if err := conn.binary(delta); err != nil {
		t.Fatal(err)
	}
	if got := take(); len(got) != 0 || c.subs[0].frame.Cursor != 7 {
		t.Fatalf("a duplicate applied: %v, cursor %d", got, c.subs[0].frame.Cursor)
	}
	if conn.deltas.Load() != 3 {
		t.Fatalf("%d deltas counted, want 3", conn.deltas.Load())
	}
}

func TestRealtimeControl(t *testing.T) {
	c := newTestConn()
	seen := false
	hello := control(t, &ssp2.Hello{ProtocolVersion: 1, SessionID: "s", ActorID: "a", ClientID: "c1", Cursor: -1, LatestCursor: 3, RequiresSync: true, Timestamp: 1})
	if err := c.control(hello, &seen); err != nil {
		t.Fatal(err)
	}
	if h := <-c.hello; h.ClientID != "c1" || h.LatestCursor != 3 {
		t.Fatalf("hello = %+v", h)
	}
	if err := c.control(hello, &seen); err == nil {
		t.Fatal("a second hello: no error")
	}
	wake := control(t, &ssp2.Wake{Cursor: 4, Reason: ssp2.WakeCatchupRequired, Timestamp: 2})
	if err := c.control(wake, &seen); err != nil || c.wakes.Load() != 1 {
		t.Fatalf("wake: %v, %d wakes", err, c.wakes.Load())
	}
	for _, ok := range []string{`{"event":"heartbeat","data":{"timestamp":5}}`, `{"event":"something-new","data":{}}`} {
		if err := c.control([]byte(ok), &seen); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	if err := c.control([]byte(`{"event":"sync","data":{"cursor":1,"requiresPull":true,"reason":"bored","timestamp":1}}`), &seen); err == nil {
		t.Fatal("a wake with an unknown reason: no error")
	}
}

func TestRealtimeURL(t *testing.T) {
	for base, want := range map[string]string{
		"http://127.0.0.1:8080":      "ws://127.0.0.1:8080/realtime?clientId=c1",
		"https://sync.example/mount": "wss://sync.example/mount/realtime?clientId=c1",
	} {
		tg, err := newHTTPTarget(base, nil, 0, 1, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := tg.realtimeURL("c1"); got != want {
			t.Errorf("%s: %s, want %s", base, got, want)
		}
	}
}
