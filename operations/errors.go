package operations

import (
	"errors"
	"fmt"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// The operation error codes of REMOTE.md §7.
const (
	CodeUnknown            = "operation.unknown"
	CodeForbidden          = "operation.forbidden"
	CodeInvalidRequest     = "operation.invalid_request"
	CodeResultTooLarge     = "operation.result_too_large"
	CodeStorageUnsupported = "operation.storage_unsupported"
	CodeQueryFailed        = "operation.query_failed"
	CodeExecutionFailed    = "operation.execution_failed"
)

// Error is an operation-level failure: an encoded response of kind
// "error".
type Error struct {
	Code      string
	Message   string
	Retryable bool
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorOf is the operation error a failure is answered with (an
// *Error's own code, a query's operation.query_failed, …): what a binding
// of another package sends for an error of this one.
func ErrorOf(err error) *Error { return toError(err) }

// toError maps any failure of an operation to its response error. The
// causes of internal failures are logged by the caller, never sent.
func toError(err error) *Error {
	var oe *Error
	if errors.As(err, &oe) {
		return oe
	}
	var qe *storage.QueryError
	if errors.As(err, &qe) {
		msg := "the registered query failed"
		if qe.Column != "" {
			msg = qe.Error()
		}
		return &Error{Code: CodeQueryFailed, Message: msg}
	}
	if errors.Is(err, engine.ErrCandidateQueryUnsupported) {
		return &Error{Code: CodeStorageUnsupported, Message: "the store runs no registered queries inside a transaction"}
	}
	var ce *engine.CommandError
	if errors.As(err, &ce) {
		return &Error{Code: CodeExecutionFailed, Message: "the command failed"}
	}
	if errors.Is(err, engine.ErrEmptyCommand) {
		return &Error{Code: CodeInvalidRequest, Message: err.Error()}
	}
	var se *ssp2.Error
	if errors.As(err, &se) && se.Code != ssp2.CodeInternalError {
		info, _ := se.Code.Info()
		return &Error{Code: string(se.Code), Message: se.Message, Retryable: info.Retryable}
	}
	return &Error{Code: CodeExecutionFailed, Message: "the operation failed"}
}
