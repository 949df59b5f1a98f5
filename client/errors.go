package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/syncnode/syncnode/ssp2"
)

// Error is an SSP2 error the server answered: a JSON error body sent
// before a response started (Status is its HTTP status), or an in-band
// ERROR frame (Status is 200). errors.Is matches it against an *Error or an
// *ssp2.Error carrying the same code:
//
//	errors.Is(err, &client.Error{Code: ssp2.CodeForbidden})
type Error struct {
	Code              ssp2.Code
	Status            int
	Category          string
	Retryable         bool
	RecommendedAction string
	Message           string
	Details           json.RawMessage
	// Op names the request that failed ("sync", "download segment").
	Op string
}

func (e *Error) Error() string {
	s := e.Op
	if s != "" {
		s += ": "
	}
	s += string(e.Code)
	if e.Code == "" {
		s += "HTTP " + http.StatusText(e.Status)
	}
	if e.Status != 0 && e.Status != http.StatusOK {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Message != "" && e.Message != string(e.Code) {
		s += ": " + e.Message
	}
	return s
}

// Is matches an *Error or *ssp2.Error with the same code.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case *Error:
		return t.Code == e.Code
	case *ssp2.Error:
		return t.Code == e.Code
	}
	return false
}

// errorBody is the SSP2 JSON error shape (SPEC.md §10.1).
type errorBody struct {
	Code              ssp2.Code       `json:"code"`
	Category          string          `json:"category"`
	Retryable         bool            `json:"retryable"`
	RecommendedAction string          `json:"recommendedAction"`
	Message           string          `json:"message"`
	Details           json.RawMessage `json:"details"`
}

// httpError builds the *Error of a non-200 answer from its body. A body
// that is not the SSP2 shape (a proxy's error page) keeps the status and
// takes its code from the status where one is unambiguous.
func httpError(op string, status int, body []byte) *Error {
	e := &Error{Op: op, Status: status}
	var b errorBody
	if json.Unmarshal(body, &b) == nil && b.Code != "" {
		e.Code, e.Category, e.Retryable = b.Code, b.Category, b.Retryable
		e.RecommendedAction, e.Message, e.Details = b.RecommendedAction, b.Message, b.Details
		return e
	}
	if status == http.StatusUnauthorized {
		e.Code = ssp2.CodeAuthRequired
	}
	if info, ok := e.Code.Info(); ok {
		e.Category, e.Retryable, e.RecommendedAction = info.Category, info.Retryable, info.Action
	}
	const maxText = 200
	if len(body) > maxText {
		body = body[:maxText]
	}
	e.Message = string(body)
	return e
}

// frameError builds the *Error of an in-band ERROR frame.
func frameError(f *ssp2.ErrorFrame) *Error {
	return &Error{
		Op: "sync", Status: http.StatusOK, Code: ssp2.Code(f.Code), Category: f.Category,
		Retryable: f.Retryable, RecommendedAction: f.RecommendedAction, Message: f.Message,
		Details: append(json.RawMessage(nil), f.Details...),
	}
}

// SchemaUnsupportedError is returned when the server no longer serves the
// client's schema version (RESP_HEADER.requiredSchemaVersion, SPEC.md
// §1.6). The client stops: every later Sync returns the same error until
// it is rebuilt with a schema the server serves. It matches
// sync.client_schema_unsupported under errors.Is.
type SchemaUnsupportedError struct {
	ClientVersion   int32
	RequiredVersion int32
	LatestVersion   int32 // 0 when the server did not say
}

func (e *SchemaUnsupportedError) Error() string {
	return fmt.Sprintf("sync: schema version %d is not served: the server requires %d (latest %d)",
		e.ClientVersion, e.RequiredVersion, e.LatestVersion)
}

// Is matches sync.client_schema_unsupported.
func (e *SchemaUnsupportedError) Is(target error) bool {
	return (&Error{Code: ssp2.CodeClientSchemaUnsupported}).Is(target)
}

// SubscriptionError reports a subscription section that failed inside an
// otherwise successful response: a segment that could not be downloaded or
// verified, a column table that does not match the schema, rows that do
// not decode. The subscription's cursor and resume token were not
// advanced (SPEC.md §1.4 rule 5), so the next round retries it; the other
// subscriptions of the response were applied.
type SubscriptionError struct {
	ID  string
	Err error
}

func (e *SubscriptionError) Error() string { return "subscription " + e.ID + ": " + e.Err.Error() }

func (e *SubscriptionError) Unwrap() error { return e.Err }

// Rejection is a commit the server rejected, or one the client dropped
// because it provably writes into a revoked scope (SPEC.md §3.3). It
// carries the terminating operation's result and the commit as queued, so
// the application can rebase it under a new clientCommitId.
type Rejection struct {
	ClientCommitID string
	OpIndex        int32
	Code           ssp2.Code
	Message        string
	Retryable      bool
	// Conflict is set for a version conflict (sync.version_conflict).
	Conflict *Conflict
	// Details is the PUSH_RESULT_DETAILS entry for OpIndex, if any.
	Details json.RawMessage
	// Dropped is true for a local drop (revoked scope): the commit never
	// reached a terminal server result.
	Dropped bool
	Commit  PendingCommit
}

// Conflict is a version conflict record: the row as the server holds it.
type Conflict struct {
	ServerVersion int64
	// ServerRow is the authoritative row, decoded by column name (see
	// Row.Values for the value types); nil when it did not decode.
	ServerRow map[string]any
	// Columns names the written columns that moved past the operation's
	// baseVersion (wire version 3's conflictColumns, SPEC.md §6.3), in
	// declaration order; nil at wire version 2, whose conflicts are per
	// row.
	Columns []string
}

func (r *Rejection) Error() string {
	s := fmt.Sprintf("commit %s rejected at operation %d: %s", r.ClientCommitID, r.OpIndex, r.Code)
	if r.Dropped {
		s = fmt.Sprintf("commit %s dropped: %s", r.ClientCommitID, r.Code)
	}
	if r.Message != "" && r.Message != string(r.Code) {
		s += ": " + r.Message
	}
	if r.Conflict != nil {
		s += fmt.Sprintf(" (server version %d", r.Conflict.ServerVersion)
		if r.Conflict.Columns != nil {
			s += fmt.Sprintf("; columns %s", strings.Join(r.Conflict.Columns, ", "))
		}
		s += ")"
	}
	return s
}

// Is matches an *Error or *ssp2.Error with the same code.
func (r *Rejection) Is(target error) bool { return (&Error{Code: r.Code}).Is(target) }

// ValueError reports a row value that cannot be encoded for its column.
type ValueError struct {
	Table  string
	Column string
	Type   ssp2.ColumnType
	Value  any
	Reason string
}

func (e *ValueError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("table %s: %s", e.Table, e.Reason)
	}
	return fmt.Sprintf("table %s: column %s (%s): %s", e.Table, e.Column, e.Type, e.Reason)
}

// ErrSubscriptionMismatch is returned by Subscribe when the id is already
// registered for a different table or scope map: a subscription's intent
// is immutable (SPEC.md §4.1, client.subscription_intent_mismatch).
var ErrSubscriptionMismatch = errors.New("client.subscription_intent_mismatch: subscription id already registered with another table or scopes")
