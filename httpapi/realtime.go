package httpapi

import (
	"encoding/json"
	"net/http"
)

// WriteError answers err as the SSP2 JSON error with its code's HTTP
// status, as every route of this handler does: for bindings served beside
// it (the realtime upgrade refuses a connect this way).
func WriteError(w http.ResponseWriter, err error) { writeError(w, err) }

// ErrorJSON is the JSON error body WriteError sends (SPEC.md §10.1): code,
// category, retryable, recommendedAction, message, details; an internal
// error's cause is never included.
func ErrorJSON(err error) json.RawMessage {
	b, _ := errorJSON(err)
	return b
}
