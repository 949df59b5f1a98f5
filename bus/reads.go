package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// Read subjects let a process the node asks under a transaction — a
// NATS command handler, the validate hook — read through that
// transaction while the node waits for its answer: the request names a
// subject of its own, valid for that one request, and each request the
// process sends there is answered by the node from inside the
// transaction (package operations for commands, hooks for the validate
// hook). The process cannot read the store any other way without racing
// the transaction: it would see another snapshot, and on SQLite wait on
// the writer the node is holding for it.
//
//	commands   syncops.read.<token>      (namespaced like every ops subject)
//	validate   syncnode.hookread.<token> (the hooks' global family)
//
// <token> is 128 random bits, so only a process that was sent the
// request can address its reads.
const (
	opsReadPrefix  = "syncops.read."
	hookReadPrefix = "syncnode.hookread."
)

// OperationRead is the read subject of one NATS command call.
func (n Names) OperationRead(token string) string { return n.subject(opsReadPrefix + token) }

// OperationReads matches every command call's read subject (for NATS
// permissions).
func (n Names) OperationReads() string { return n.subject(opsReadPrefix + ">") }

// HookReadSubject is the read subject of one validate hook request.
func HookReadSubject(token string) string { return hookReadPrefix + token }

// HookReads matches every hook read subject (for NATS permissions).
func HookReads() string { return hookReadPrefix + ">" }

// ReadToken returns a fresh random read subject token.
func ReadToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// RequestServing publishes body to subject as a request and waits,
// within ctx, for its reply. Meanwhile each request that arrives on
// readSubject is answered, on the calling goroutine, with serve(its
// data): the goroutine that holds a transaction runs the reads in it, one
// at a time, never concurrently with itself. The subscriptions end when
// RequestServing returns, so a late read goes unanswered. No responder
// on subject is nats.ErrNoResponders; ctx's end is its error.
func RequestServing(ctx context.Context, nc *nats.Conn, subject, readSubject string, body []byte, serve func(data []byte) []byte) (*nats.Msg, error) {
	// The responder waits for each read's answer, so a few messages in
	// flight is the most it can send; the buffer only absorbs a reply
	// racing a read.
	ch := make(chan *nats.Msg, 16)
	reads, err := nc.ChanSubscribe(readSubject, ch)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", readSubject, err)
	}
	defer func() { _ = reads.Unsubscribe() }()
	inbox := nc.NewInbox()
	replies, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", inbox, err)
	}
	defer func() { _ = replies.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, body); err != nil {
		return nil, fmt.Errorf("request %s: %w", subject, err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case m := <-ch:
			if m.Subject == inbox {
				// The server's no-responders status (a header-only 503).
				if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
					return nil, nats.ErrNoResponders
				}
				return m, nil
			}
			if m.Reply == "" {
				continue
			}
			if err := m.Respond(serve(m.Data)); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				return nil, fmt.Errorf("answer a read on %s: %w", readSubject, err)
			}
		}
	}
}
