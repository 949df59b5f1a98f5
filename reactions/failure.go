package reactions

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/syncnode/syncnode/storage"
)

// Failure codes the runner records itself. Handler and worker codes are
// their own (code-like names: dot-separated [A-Za-z0-9_-] tokens).
const (
	// CodeHandlerFailed: a Go handler returned an error that is not a
	// *Failure.
	CodeHandlerFailed = "reaction.handler_failed"
	// CodeHandlerPanicked: a Go handler panicked.
	CodeHandlerPanicked = "reaction.handler_panicked"
	// CodeInvalidFailure: a handler or worker reported a failure with an
	// invalid code or details.
	CodeInvalidFailure = "reaction.invalid_failure"
	// CodeNoWorker: no worker listens on the type's subject.
	CodeNoWorker = "reaction.no_worker"
	// CodeWorkerTimeout: no worker replied before the lease ended.
	CodeWorkerTimeout = "reaction.worker_timeout"
	// CodeBadReply: a worker's reply is not a WorkReply.
	CodeBadReply = "reaction.bad_reply"
	// CodeDispatchFailed: the request could not be sent.
	CodeDispatchFailed = "reaction.dispatch_failed"
	// CodeLeaseExpired: the final attempt's lease expired without an
	// outcome (recorded by the store's claim).
	CodeLeaseExpired = storage.ReactionCodeLeaseExpired
)

// Codes lists the runner's failure codes.
var Codes = []string{CodeHandlerFailed, CodeHandlerPanicked, CodeInvalidFailure, CodeNoWorker, CodeWorkerTimeout, CodeBadReply, CodeDispatchFailed, CodeLeaseExpired}

// Failure is a handler's deliberate failure: a stable code, optional
// details, and whether to retry. Return one from a Handler (Retry,
// Permanent); any other error fails the attempt with CodeHandlerFailed.
type Failure struct {
	// Code is code-like: dot-separated [A-Za-z0-9_-] tokens starting with
	// a letter, at most 128 bytes ("smtp.unavailable").
	Code string
	// Details is encoded as a JSON object of at most 8 KiB, or nil.
	Details any
	// Permanent dead-letters the reaction now.
	Permanent bool
	// RetryAfter overrides the backoff of a retryable failure (0: the
	// backoff).
	RetryAfter time.Duration
}

func (f *Failure) Error() string {
	if f.Permanent {
		return "reaction failed permanently: " + f.Code
	}
	return "reaction failed: " + f.Code
}

// Retry fails the attempt with code; the reaction is retried after
// `after`, or after its backoff when after is 0.
func Retry(code string, after time.Duration, details any) error {
	return &Failure{Code: code, Details: details, RetryAfter: after}
}

// Permanent fails the reaction for good: it is dead-lettered now (an
// unsupported version, a request the other side refuses).
func Permanent(code string, details any) error {
	return &Failure{Code: code, Details: details, Permanent: true}
}

// Backoff is the delay before retrying after attempt n (1-based):
// min(max, initial · 2^(n−1)).
func Backoff(initial, max time.Duration, attempt int32) time.Duration {
	d := initial
	for i := int32(1); i < attempt && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// outcome is a failed attempt as the store records it.
type outcome struct {
	failure    storage.ReactionFailure
	permanent  bool
	retryAfter time.Duration // 0: backoff
	retryAt    time.Time     // set by a worker's retryAtMs
}

// failureOf turns a handler's error into what is recorded. Raw error
// text is never persisted.
func failureOf(err error, at time.Time) outcome {
	var f *Failure
	if !errors.As(err, &f) {
		code := CodeHandlerFailed
		if errors.As(err, new(panicError)) {
			code = CodeHandlerPanicked
		}
		return outcome{failure: storage.ReactionFailure{Code: code, AtMs: at.UnixMilli()}}
	}
	o := outcome{permanent: f.Permanent, retryAfter: max(f.RetryAfter, 0)}
	o.failure = storage.ReactionFailure{Code: f.Code, AtMs: at.UnixMilli()}
	if f.Details != nil {
		b, err := json.Marshal(f.Details)
		if err != nil {
			return outcome{failure: storage.ReactionFailure{Code: CodeInvalidFailure, AtMs: at.UnixMilli()}, permanent: f.Permanent}
		}
		o.failure.Details = b
	}
	if o.failure.Validate() != nil {
		return outcome{failure: storage.ReactionFailure{Code: CodeInvalidFailure, AtMs: at.UnixMilli()}, permanent: f.Permanent}
	}
	return o
}

// panicError is a handler panic.
type panicError struct{ v any }

func (p panicError) Error() string { return fmt.Sprintf("reaction handler panicked: %v", p.v) }
