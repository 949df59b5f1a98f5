package reactions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/storage"
)

// WorkRequest is the body of a worker request on syncreact.work.<type>.
type WorkRequest struct {
	Partition      string          `json:"partition"`
	IdempotencyKey string          `json:"idempotencyKey"`
	Type           string          `json:"type"`
	Version        int32           `json:"version"`
	Payload        json.RawMessage `json:"payload"`
	// Attempt is 1 on the first delivery; MaxAttempts is where it
	// dead-letters.
	Attempt              int32  `json:"attempt"`
	MaxAttempts          int32  `json:"maxAttempts"`
	SourceClientID       string `json:"sourceClientId"`
	SourceClientCommitID string `json:"sourceClientCommitId"`
	SourceCommitSeq      int64  `json:"sourceCommitSeq"`
	CreatedAtMs          int64  `json:"createdAtMs"`
	// DeadlineMs is when the lease ends (Unix ms): reply before it.
	DeadlineMs int64 `json:"deadlineMs"`
}

// WorkReply is a worker's answer. An empty body means completed.
type WorkReply struct {
	// Status is "completed" or "failed".
	Status string `json:"status"`
	// Code is the failure's code-like name (failed only).
	Code string `json:"code,omitempty"`
	// Permanent dead-letters the reaction now.
	Permanent bool `json:"permanent,omitempty"`
	// RetryAfterMs or RetryAtMs (Unix ms), at most one, replace the
	// backoff of a retryable failure.
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
	RetryAtMs    int64 `json:"retryAtMs,omitempty"`
	// Details is a JSON object of at most 8 KiB.
	Details json.RawMessage `json:"details,omitempty"`
}

// Reply statuses.
const (
	StatusCompleted = "completed"
	StatusFailed    = "failed"
)

func workRequest(r storage.Reaction) ([]byte, error) {
	return json.Marshal(WorkRequest{
		Partition: r.Partition, IdempotencyKey: r.IdempotencyKey, Type: r.Type, Version: r.Version, Payload: r.Payload,
		Attempt: r.Attempts, MaxAttempts: r.MaxAttempts, SourceClientID: r.SourceClientID,
		SourceClientCommitID: r.SourceClientCommitID, SourceCommitSeq: r.SourceCommitSeq,
		CreatedAtMs: r.CreatedAtMs, DeadlineMs: r.LeaseExpiresAtMs,
	})
}

func workMsg(names bus.Names, r storage.Reaction) (*nats.Msg, error) {
	subject, err := names.ReactionWorkSubject(r.Type)
	if err != nil {
		return nil, err
	}
	body, err := workRequest(r)
	if err != nil {
		return nil, fmt.Errorf("encode work request: %w", err)
	}
	h := nats.Header{}
	h[bus.HeaderIdempotencyKey] = []string{r.IdempotencyKey}
	h[bus.HeaderReactionAttempt] = []string{strconv.Itoa(int(r.Attempts))}
	h[bus.HeaderReactionDeadline] = []string{strconv.FormatInt(r.LeaseExpiresAtMs, 10)}
	return &nats.Msg{Subject: subject, Header: h, Data: body}, nil
}

// parseReply reads a worker's reply: completed (ok=true) or the failure
// to record. A reply that is not a WorkReply is a retryable
// CodeBadReply failure.
func parseReply(data []byte, at time.Time) (completed bool, o outcome) {
	fail := func(code string) (bool, outcome) {
		return false, outcome{failure: storage.ReactionFailure{Code: code, AtMs: at.UnixMilli()}}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return true, outcome{}
	}
	var rep WorkReply
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil || dec.More() {
		return fail(CodeBadReply)
	}
	switch rep.Status {
	case StatusCompleted:
		if rep.Code != "" || rep.Permanent || rep.RetryAfterMs != 0 || rep.RetryAtMs != 0 || rep.Details != nil {
			return fail(CodeBadReply)
		}
		return true, outcome{}
	case StatusFailed:
	default:
		return fail(CodeBadReply)
	}
	if rep.RetryAfterMs < 0 || rep.RetryAtMs < 0 || rep.RetryAfterMs > 0 && rep.RetryAtMs > 0 {
		return fail(CodeBadReply)
	}
	o = outcome{
		failure:    storage.ReactionFailure{Code: rep.Code, AtMs: at.UnixMilli(), Details: rep.Details},
		permanent:  rep.Permanent,
		retryAfter: time.Duration(rep.RetryAfterMs) * time.Millisecond,
	}
	if rep.RetryAtMs > 0 {
		o.retryAt = time.UnixMilli(rep.RetryAtMs)
	}
	if o.failure.Validate() != nil {
		o.failure = storage.ReactionFailure{Code: CodeInvalidFailure, AtMs: at.UnixMilli()}
	}
	return false, o
}

// EventBody is the JSON body of a lifecycle event.
type EventBody struct {
	Partition            string `json:"partition"`
	IdempotencyKey       string `json:"idempotencyKey"`
	Type                 string `json:"type"`
	Version              int32  `json:"version"`
	Attempt              int32  `json:"attempt"`
	MaxAttempts          int32  `json:"maxAttempts"`
	SourceClientID       string `json:"sourceClientId"`
	SourceClientCommitID string `json:"sourceClientCommitId"`
	SourceCommitSeq      int64  `json:"sourceCommitSeq"`
	// Code is the failure code (failed, dead_lettered).
	Code string `json:"code,omitempty"`
	// RetryAtMs is when a failed reaction is retried.
	RetryAtMs int64 `json:"retryAtMs,omitempty"`
	// AtMs is when it happened.
	AtMs int64 `json:"atMs"`
}

// publisher publishes lifecycle events; failures are logged, never
// returned: events are fire and forget.
type publisher struct {
	nc    *nats.Conn
	names bus.Names
	node  string
	log   *slog.Logger
}

func (p publisher) publish(event string, r storage.Reaction, code string, retryAt int64, at time.Time) {
	m, err := eventMsg(p.names, p.node, event, r, code, retryAt, at)
	if err == nil {
		err = p.nc.PublishMsg(m)
	}
	if err != nil {
		p.log.Debug("reaction event not published", "event", event, "err", err)
	}
}

// eventMsg is the lifecycle event of r.
func eventMsg(names bus.Names, node, event string, r storage.Reaction, code string, retryAt int64, at time.Time) (*nats.Msg, error) {
	part, err := bus.NewPartition(r.Partition)
	if err != nil {
		return nil, err
	}
	return bus.NewReactionEventMsg(names, node, bus.ReactionEvent{Event: event, Partition: part, Type: r.Type, Time: at,
		Data: EventBody{
			Partition: r.Partition, IdempotencyKey: r.IdempotencyKey, Type: r.Type, Version: r.Version,
			Attempt: r.Attempts, MaxAttempts: r.MaxAttempts, SourceClientID: r.SourceClientID,
			SourceClientCommitID: r.SourceClientCommitID, SourceCommitSeq: r.SourceCommitSeq,
			Code: code, RetryAtMs: retryAt, AtMs: at.UnixMilli(),
		}})
}

// PublishEnqueued publishes the enqueued events of one durable commit's
// reactions on nc, in namespace names (wire it to
// engine.Config.OnReactions). node names the ce-source.
func PublishEnqueued(nc *nats.Conn, names bus.Names, node string, logger *slog.Logger, partition string, p storage.ReactionEnqueueParams) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	pub := publisher{nc: nc, names: names, node: node, log: logger}
	at := time.UnixMilli(p.CreatedAtMs)
	for _, n := range p.Reactions {
		pub.publish(bus.ReactionEnqueued, storage.Reaction{
			ReactionKey: storage.ReactionKey{Partition: partition, IdempotencyKey: n.IdempotencyKey},
			Type:        n.Type, Version: n.Version, MaxAttempts: n.MaxAttempts,
			SourceClientID: p.SourceClientID, SourceClientCommitID: p.SourceClientCommitID, SourceCommitSeq: p.SourceCommitSeq,
		}, "", 0, at)
	}
}

// PublishRequeued publishes the requeued event of an operator's retry in
// namespace names and flushes it; runners subscribed to requeued events
// claim in its partition.
func PublishRequeued(nc *nats.Conn, names bus.Names, node string, r storage.Reaction, at time.Time) error {
	m, err := eventMsg(names, node, bus.ReactionRequeued, r, "", 0, at)
	if err == nil {
		err = nc.PublishMsg(m)
	}
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		return fmt.Errorf("publish requeued: %w", err)
	}
	return nil
}
