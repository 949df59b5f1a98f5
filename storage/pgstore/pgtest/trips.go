package pgtest

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// Trips counts the round trips to a PostgreSQL server through a local TCP
// proxy: a round trip begins each time a connection sends after the
// server last answered it (or sends first). pgx sends each flight of
// messages (a statement, or a pipeline of them) and then waits for the
// answer, so the count is what a caller waits for, however the bytes of
// one flight are split.
type Trips struct{ n atomic.Int64 }

// N returns the round trips counted so far.
func (t *Trips) N() int64 { return t.n.Load() }

// Proxy starts a counting proxy to the server of rawURL for the life of
// tb and returns the URL that reaches the server through it.
func Proxy(tb testing.TB, rawURL string) (string, *Trips) {
	tb.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		tb.Fatal(err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	t := &Trips{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	tb.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, client, server)
			mu.Unlock()
			// answered: the server sent since the client last did.
			var answered atomic.Bool
			answered.Store(true)
			wg.Go(func() {
				pipe(server, client, func() {
					if answered.Swap(false) {
						t.n.Add(1)
					}
				})
				_ = server.Close()
			})
			wg.Go(func() {
				pipe(client, server, func() { answered.Store(true) })
				_ = client.Close()
			})
		}
	})
	u.Host = ln.Addr().String()
	return u.String(), t
}

// pipe copies src to dst, calling seen before forwarding each read.
func pipe(dst, src net.Conn, seen func()) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			seen()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF or a closed connection: the other side closes too
			return
		}
	}
}
