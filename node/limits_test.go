package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/ssp2"
)

// closedWithin reports whether the server closes c (EOF, reset, or a
// response followed by EOF) before d passes: bounded by a read deadline,
// so a server that never closes fails the test instead of hanging it.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) bool {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, c)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// A request body trickling in is cut at the read timeout.
func TestSlowBodyIsCut(t *testing.T) {
	n := startNode(t, taskSchema, func(_ *testing.T, c *Config) { c.HTTP.ReadTimeout = 300 * time.Millisecond })
	tok := token(t, "alice", "acme", map[string][]string{"project_id": {"p1"}})
	c, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /sync HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: 1000\r\n\r\nSSP2", tok, httpapi.ContentType)
	if !closedWithin(t, c, 10*time.Second) {
		t.Fatal("a body that stopped after 4 of 1000 bytes held the connection for 10 s")
	}
}

// An idle keep-alive connection is closed at the idle timeout.
func TestIdleConnectionIsClosed(t *testing.T) {
	n := startNode(t, taskSchema, func(_ *testing.T, c *Config) { c.HTTP.IdleTimeout = 300 * time.Millisecond })
	c, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	if !closedWithin(t, c, 10*time.Second) {
		t.Fatal("an idle keep-alive connection stayed open for 10 s")
	}
}

// A client that requests a large response and stops reading is cut at
// the write timeout instead of holding the response in memory.
func TestStalledReaderIsCut(t *testing.T) {
	n := startNode(t, taskSchema, func(_ *testing.T, c *Config) { c.HTTP.WriteTimeout = 300 * time.Millisecond })
	tok := token(t, "alice", "acme", map[string][]string{"project_id": {"p1"}})
	ep := acquireEpoch(t, n, tok)
	seedBig(t, n, tok, ep, 300)
	c, _ := rawSync(t, n, tok, bootstrapRequest(t, ep, ssp2.AcceptInlineRows))
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	poll.Until(t, 20*time.Second, "the stalled response to be cut", func() bool {
		return metric(t, n, "syncnode_sync_clients_gone_total") >= 1
	})
}

// Past the in-flight body budget a request is refused 503 with
// Retry-After, and served again once the budget is free.
func TestInflightBodyBudget(t *testing.T) {
	n := startNode(t, vectorSchema, func(_ *testing.T, c *Config) { c.API.MaxRequestBytes, c.API.MaxInflightBodyBytes = 64<<10, 64<<10 })
	tok := token(t, "alice", "acme", map[string][]string{"project": {"*"}})
	req := pullMinimal(t)

	// A 60 KB body, sent but for its last bytes.
	c, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := append(bytes.Clone(req), make([]byte, 60<<10-len(req))...)
	fmt.Fprintf(c, "POST /sync HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", tok, httpapi.ContentType, len(big))
	if _, err := c.Write(big[:len(big)-10]); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the first body to hold the budget", func() bool {
		return metric(t, n, "syncnode_http_inflight_body_bytes") >= 60<<10
	})
	r := post(t, n.URL()+"/sync", tok, httpapi.ContentType, append(bytes.Clone(req), make([]byte, 10<<10)...), nil)
	jsonError(t, r, http.StatusServiceUnavailable, ssp2.CodeRateLimited)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	if _, err := c.Write(big[len(big)-10:]); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("the first request (trailing garbage) = %v, %v; want 400", resp, err)
	}
	poll.Until(t, 10*time.Second, "the budget to be released", func() bool {
		return metric(t, n, "syncnode_http_inflight_body_bytes") == 0
	})
	if r := post(t, n.URL()+"/sync", tok, httpapi.ContentType, req, nil); r.status != http.StatusOK {
		t.Fatalf("after the budget freed: %d %s", r.status, r.body)
	}
}

// Past max connections a new connection is answered 503 and closed;
// once one closes, new connections are served again.
func TestMaxConnections(t *testing.T) {
	n := startNode(t, taskSchema, func(_ *testing.T, c *Config) { c.HTTP.MaxConnections, c.Realtime.Hub.MaxConnections = 2, 1 })
	healthz := func(c net.Conn) (*http.Response, error) {
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		return http.ReadResponse(bufio.NewReader(c), nil)
	}
	var open []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", n.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if resp, err := healthz(c); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: %v %v", len(open), resp, err)
		}
		open = append(open, c)
	}
	c, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := healthz(c)
	c.Close()
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a third connection = %v, %v; want 503 with Retry-After", resp, err)
	}
	open[0].Close()
	poll.Until(t, 10*time.Second, "a connection slot to free", func() bool {
		c, err := net.Dial("tcp", n.Addr())
		if err != nil {
			return false
		}
		defer c.Close()
		resp, err := healthz(c)
		return err == nil && resp.StatusCode == http.StatusOK
	})
}

// A realtime socket outlives the HTTP server's read and write timeouts,
// which bound one request: the server keeps writing heartbeats and reading
// acks well past both.
func TestRealtimeSocketOutlivesHTTPTimeouts(t *testing.T) {
	const timeout = 200 * time.Millisecond
	n := startNode(t, taskSchema, func(_ *testing.T, c *Config) {
		c.HTTP.ReadTimeout, c.HTTP.WriteTimeout, c.HTTP.IdleTimeout = timeout, timeout, timeout
		c.Realtime.Hub.HeartbeatInterval = timeout / 4
	})
	tok := token(t, "alice", "acme", map[string][]string{"project_id": {"p1"}})
	ctx := t.Context()
	ws, _, err := websocket.Dial(ctx, "ws://"+n.Addr()+"/realtime?clientId=c1",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	start, heartbeats := time.Now(), 0
	for time.Since(start) < 5*timeout {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, b, err := ws.Read(rctx)
		cancel()
		if err != nil {
			t.Fatalf("socket ended after %v: %v", time.Since(start), err)
		}
		if bytes.Contains(b, []byte(`"heartbeat"`)) {
			heartbeats++
		}
		if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"ack","cursor":0}`)); err != nil {
			t.Fatalf("ack after %v: %v", time.Since(start), err)
		}
	}
	if heartbeats < 2 {
		t.Fatalf("%d heartbeats in %v", heartbeats, time.Since(start))
	}
}
