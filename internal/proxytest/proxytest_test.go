package proxytest

import (
	"bufio"
	"io"
	"net"
	"testing"
)

// echo serves one-line echoes, each reply prefixed with name, until the
// test ends.
func echo(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, name+l); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line over c and returns the reply, or the error.
func roundTrip(c net.Conn) (string, error) {
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCutRestoreRetarget(t *testing.T) {
	p := Start(t, echo(t, "a:"))
	c := dial(t, p)
	if got, err := roundTrip(c); err != nil || got != "a:ping\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}

	p.Cut()
	if got, err := roundTrip(c); err == nil {
		t.Fatalf("a connection open at the cut still answers: %q", got)
	}
	// A connection accepted while cut is closed at once.
	if got, err := roundTrip(dial(t, p)); err == nil {
		t.Fatalf("a connection made while cut answers: %q", got)
	}

	p.Retarget(echo(t, "b:"))
	p.Restore()
	if got, err := roundTrip(dial(t, p)); err != nil || got != "b:ping\n" {
		t.Fatalf("after restore and retarget: %q, %v", got, err)
	}
}
