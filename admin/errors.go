package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/syncnode/syncnode/ssp2"
)

// Code is an admin API error code, the "code" of the JSON error body.
type Code string

// The admin API's error codes. Each has the HTTP-like status that travels
// in the Nats-Service-Error-Code header (what `nats micro stats` counts
// and `nats req` prints).
const (
	// CodeInvalidRequest: the request body is not valid JSON for the
	// endpoint, or a field is missing or out of range.
	CodeInvalidRequest Code = "admin.invalid_request"
	// CodeNotFound: the partition (or checkpoint) does not exist.
	CodeNotFound Code = "admin.not_found"
	// CodeConflict: the operation cannot apply to the current state (a
	// checkpoint that is stale or unverifiable, a superseded owner, an
	// epoch that moved).
	CodeConflict Code = "admin.conflict"
	// CodeUnavailable: the node cannot do this now or at all (a component
	// that is not running, as in an offline command; a timeout).
	CodeUnavailable Code = "admin.unavailable"
	// CodeInternal: anything else; the message says what failed.
	CodeInternal Code = "admin.internal"
)

// codeStatus is the status of each code; Codes lists them.
var codeStatus = map[Code]int{
	CodeInvalidRequest: 400,
	CodeNotFound:       404,
	CodeConflict:       409,
	CodeUnavailable:    503,
	CodeInternal:       500,
}

// Codes returns every admin error code.
func Codes() []Code {
	return []Code{CodeInvalidRequest, CodeNotFound, CodeConflict, CodeUnavailable, CodeInternal}
}

// Status is the HTTP-like status of c (500 for an unknown code).
func (c Code) Status() int {
	if s, ok := codeStatus[c]; ok {
		return s
	}
	return 500
}

// Error is a failed admin operation: what the service answers and what
// Client returns. errors.Is(err, &Error{Code: c}) matches by code.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// SyncCode is the syncnode code behind the failure (a storage or
	// serve-gate code such as sync.storage.partition_unregistered), when
	// there is one.
	SyncCode ssp2.Code `json:"syncCode,omitempty"`
	// Details is an optional JSON object (a checkpoint's activation
	// outcome, a serve-gate refusal).
	Details json.RawMessage `json:"details,omitempty"`
	err     error
}

func (e *Error) Error() string {
	s := string(e.Code) + ": " + e.Message
	if e.err != nil {
		s += ": " + e.err.Error()
	}
	return s
}

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.err }

// Is matches another *Error by code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// errorBody is the JSON body of an error reply: {"error": {...}}.
type errorBody struct {
	Error *Error `json:"error"`
}

func errorf(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) *Error { return errorf(CodeInvalidRequest, format, args...) }

// syncCodes maps the syncnode codes an admin operation can meet to admin
// codes; any other code is CodeInternal.
var syncCodes = map[ssp2.Code]Code{
	ssp2.CodeStoragePartitionUnregistered:  CodeNotFound,
	ssp2.CodeStorageCheckpointNotDeclared:  CodeNotFound,
	ssp2.CodeStorageInvalidCheckpoint:      CodeInvalidRequest,
	ssp2.CodeStorageInvalidLimit:           CodeInvalidRequest,
	ssp2.CodeStorageInvalidPruneCursor:     CodeInvalidRequest,
	ssp2.CodeStorageCheckpointSuperseded:   CodeConflict,
	ssp2.CodeStoragePruneEpochMismatch:     CodeConflict,
	ssp2.CodeStorageCheckpointIncomplete:   CodeConflict,
	ssp2.CodeStorageCheckpointFenceMissing: CodeConflict,
	ssp2.CodeStorageWriterFenceRejected:    CodeConflict,
	ssp2.CodeSchemaNotReady:                CodeUnavailable,
}

// toError turns an operation's failure into an *Error: an *Error stays as
// it is, a syncnode code is mapped (and kept as SyncCode), a timeout is
// CodeUnavailable, anything else CodeInternal. op prefixes the message.
func toError(op string, err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	out := &Error{Code: CodeInternal, Message: op + ": " + err.Error(), err: err}
	var se *ssp2.Error
	if errors.As(err, &se) {
		out.SyncCode = se.Code
		if c, ok := syncCodes[se.Code]; ok {
			out.Code = c
		}
		if len(se.Details) > 0 {
			out.Details = se.Details
		}
	}
	if out.Code == CodeInternal && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		out.Code = CodeUnavailable
	}
	return out
}

// statusHeader is the Nats-Service-Error-Code value of c.
func statusHeader(c Code) string { return strconv.Itoa(c.Status()) }
