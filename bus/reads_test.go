package bus

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/embedded/embeddedtest"
)

// TestRequestServing: a responder on another connection sends reads to
// the request's read subject before replying; each is answered on the
// calling goroutine, in order, and the reply ends the call. The read
// subject is unsubscribed afterwards (a late read finds no responder),
// and a request no one answers is nats.ErrNoResponders.
func TestRequestServing(t *testing.T) {
	srv := embeddedtest.Start(t)
	nc := srv.Conn()
	peer, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	var readSubject atomic.Value
	sub, err := peer.Subscribe("ask", func(m *nats.Msg) {
		rs := string(m.Data)
		readSubject.Store(rs)
		sum := 0
		for i := range 3 {
			r, err := peer.Request(rs, []byte(strconv.Itoa(i)), 5*time.Second)
			if err != nil {
				_ = m.Respond([]byte("read failed: " + err.Error()))
				return
			}
			n, _ := strconv.Atoi(string(r.Data))
			sum += n
		}
		_ = m.Respond([]byte(strconv.Itoa(sum)))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := peer.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs := prod.OperationRead(ReadToken())
	var served []string
	reply, err := RequestServing(ctx, nc, "ask", rs, []byte(rs), func(data []byte) []byte {
		served = append(served, string(data)) // no lock: serve runs on this goroutine
		n, _ := strconv.Atoi(string(data))
		return []byte(strconv.Itoa(n * 10))
	})
	if err != nil || string(reply.Data) != "30" || len(served) != 3 || served[0] != "0" || served[2] != "2" {
		t.Fatalf("reply %v %v, served %v", reply, err, served)
	}
	// The UNSUB is on the wire once the server answered a PING after it.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Request(readSubject.Load().(string), []byte("1"), 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a read after the call: %v", err)
	}
	_ = sub.Unsubscribe()
	if err := peer.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := RequestServing(ctx, nc, "ask", prod.OperationRead(ReadToken()), nil, func([]byte) []byte { return nil }); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("no responder: %v", err)
	}
	if a, b := ReadToken(), ReadToken(); a == b || len(a) != 32 {
		t.Fatalf("read tokens %q %q", a, b)
	}
}
