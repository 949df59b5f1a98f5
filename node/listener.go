package node

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// limitListener caps the open connections of a listener. Past the cap a
// new connection is answered 503 with Retry-After and closed at once, so
// a flood of connections costs an accept and a write, never a goroutine
// reading a request.
type limitListener struct {
	net.Listener
	max  int64
	open atomic.Int64
}

// refusal is the whole answer to a connection past the cap.
const refusal = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &countedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		go refuse(c)
	}
}

func refuse(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write([]byte(refusal))
	_ = c.Close()
}

// countedConn frees its slot when closed, once.
type countedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
