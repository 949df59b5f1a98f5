package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/syncnode/syncnode/bus"
)

// Errors of a hook request. Each is wrapped with the hook and subject;
// match with errors.Is.
var (
	// ErrTimeout: the hook did not answer within its deadline.
	ErrTimeout = errors.New("hook timed out")
	// ErrNoResponders: nothing subscribes to the hook subject.
	ErrNoResponders = errors.New("no hook process answers")
	// ErrInvalidReply: the answer is not the hook's JSON shape.
	ErrInvalidReply = errors.New("invalid hook reply")
)

// ErrorReply is what a hook answers to refuse or fail a request:
// {"error": {"code": "...", "message": "..."}}. A reply carrying the
// micro error headers (Nats-Service-Error-Code, Nats-Service-Error), as
// micro's Request.Error writes them, is one too.
type ErrorReply struct {
	Error *ReplyError `json:"error,omitempty"`
}

// ReplyError is a hook's own error; *Error wraps it on the node side.
type ReplyError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// Error is an error a hook answered.
type Error struct {
	Hook    string
	Code    string
	Message string
}

func (e *Error) Error() string {
	s := "hook " + e.Hook + " answered " + e.Code
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// caller sends one hook's requests: JSON in and out, a deadline, metrics.
type caller struct {
	nc      *nats.Conn
	hook    string
	timeout time.Duration
	m       *Metrics
}

// reply is a hook's answer: it embeds ErrorReply and checks its own
// shape.
type reply interface {
	replyError() *ReplyError
	// check reports what is missing or wrong in a non-error answer.
	check() error
}

// call requests subject with req as JSON and decodes the answer into
// resp: an error answer is returned as *Error, a malformed one as
// ErrInvalidReply. The request is bounded by the hook's timeout and ctx.
func (c *caller) call(ctx context.Context, subject string, req any, resp reply) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("hook %s: encode request: %w", c.hook, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	msg, err := c.nc.RequestWithContext(ctx, subject, body)
	reason, err := c.classify(subject, msg, err, resp)
	c.m.observe(c.hook, time.Since(start), reason)
	return err
}

// callServing is call for a request whose hook reads through
// readSubject meanwhile (bus.RequestServing): each read is answered with
// serve's value as JSON, on the calling goroutine.
func (c *caller) callServing(ctx context.Context, subject, readSubject string, req any, resp reply, serve func(data []byte) any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("hook %s: encode request: %w", c.hook, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	msg, err := bus.RequestServing(ctx, c.nc, subject, readSubject, body, func(data []byte) []byte {
		b, err := json.Marshal(serve(data))
		if err != nil {
			b, _ = json.Marshal(ErrorReply{Error: &ReplyError{Code: "operation.execution_failed", Message: "the read's answer could not be encoded"}})
		}
		return b
	})
	reason, err := c.classify(subject, msg, err, resp)
	c.m.observe(c.hook, time.Since(start), reason)
	return err
}

func (c *caller) classify(subject string, msg *nats.Msg, err error, resp reply) (string, error) {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return ReasonTimeout, fmt.Errorf("hook %s on %s: %w after %v", c.hook, subject, ErrTimeout, c.timeout)
	case errors.Is(err, nats.ErrNoResponders):
		return ReasonNoResponders, fmt.Errorf("hook %s on %s: %w", c.hook, subject, ErrNoResponders)
	case err != nil:
		return ReasonTransport, fmt.Errorf("hook %s on %s: %w", c.hook, subject, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return ReasonErrorReply, &Error{Hook: c.hook, Code: code, Message: msg.Header.Get(micro.ErrorHeader)}
	}
	if err := json.Unmarshal(msg.Data, resp); err != nil {
		return ReasonInvalidReply, fmt.Errorf("hook %s on %s: %w: %w", c.hook, subject, ErrInvalidReply, err)
	}
	if e := resp.replyError(); e != nil {
		if e.Code == "" {
			e.Code = "error"
		}
		return ReasonErrorReply, &Error{Hook: c.hook, Code: e.Code, Message: e.Message}
	}
	if err := resp.check(); err != nil {
		return ReasonInvalidReply, fmt.Errorf("hook %s on %s: %w: %w", c.hook, subject, ErrInvalidReply, err)
	}
	return "", nil
}

func (r *ErrorReply) replyError() *ReplyError { return r.Error }
