// Package proxytest is a TCP proxy a test can cut: it stands for the
// network between two parts of a deployment (a node and its NATS server,
// an edge and its hub), so a test can take that network down and bring it
// back without stopping either part.
package proxytest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards every connection accepted on its own address to its
// target. Cut closes every connection and refuses new ones until Restore.
type Proxy struct {
	ln net.Listener

	mu     sync.Mutex
	target string
	up     bool
	conns  []net.Conn
}

// Start listens on a random local port and forwards to target (host:port)
// until tb's cleanup.
func Start(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, up: true}
	go p.accept()
	tb.Cleanup(func() {
		ln.Close()
		p.Cut()
	})
	return p
}

// Addr is the proxy's own address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if !p.up {
			p.mu.Unlock()
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(u, c); u.Close() }()
		go func() { _, _ = io.Copy(c, u); c.Close() }()
	}
}

// Cut drops every connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = false
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Restore accepts connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.up = true
	p.mu.Unlock()
}

// Retarget forwards new connections to target (a restarted server's
// listener); open ones keep theirs.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}
