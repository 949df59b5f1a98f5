package ssp2

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Code is a stable machine identifier from the SSP2 error catalog (SPEC.md
// §10.2), or one of syncnode's storage-host codes (sync.storage.*), which
// surface through readiness and never as a client-visible wire code.
type Code string

// Wire codes (SPEC.md §10.2). Reserved names without a producer
// (sync.integrity_rejected, sync.websocket_not_configured, …) are
// deliberately absent.
const (
	CodeAuthRequired            Code = "sync.auth_required"
	CodeAuthLeaseRequired       Code = "sync.auth_lease_required"
	CodeAuthLeaseRevoked        Code = "sync.auth_lease_revoked"
	CodeForbidden               Code = "sync.forbidden"
	CodeInvalidRequest          Code = "sync.invalid_request"
	CodeInvalidClientID         Code = "sync.invalid_client_id"
	CodeInvalidSubscription     Code = "sync.invalid_subscription"
	CodeEmptyCommit             Code = "sync.empty_commit"
	CodeUnknownTable            Code = "sync.unknown_table"
	CodeRowMissing              Code = "sync.row_missing"
	CodeVersionConflict         Code = "sync.version_conflict"
	CodeConstraintViolation     Code = "sync.constraint_violation"
	CodeMissingScopes           Code = "sync.missing_scopes"
	CodeCrdtMergeFailed         Code = "sync.crdt_merge_failed"
	CodeIdempotencyCacheMiss    Code = "sync.idempotency_cache_miss"
	CodeInternalError           Code = "sync.internal_error"
	CodeSchemaNotReady          Code = "sync.schema_not_ready"
	CodeTooManyOperations       Code = "sync.too_many_operations"
	CodeNotFound                Code = "sync.not_found"
	CodeSegmentExpired          Code = "sync.segment_expired"
	CodeCursorExpired           Code = "sync.cursor_expired"
	CodeScopeRevoked            Code = "sync.scope_revoked"
	CodeRateLimited             Code = "sync.rate_limited"
	CodeSchemaMismatch          Code = "sync.schema_mismatch"
	CodeClientSchemaUnsupported Code = "sync.client_schema_unsupported"
	CodeClientWireUnsupported   Code = "sync.client_wire_unsupported"
	CodeWebsocketLimit          Code = "sync.websocket_connection_limit"
	CodeBlobNotFound            Code = "blob.not_found"
	CodeBlobForbidden           Code = "blob.forbidden"
	CodeBlobHashMismatch        Code = "blob.hash_mismatch"
	CodeBlobTooLarge            Code = "blob.too_large"
)

// Storage-host codes: returned by the Store and surfaced through readiness
// and logs. They are internal-category and never sent to a client as such.
const (
	CodeStorageStoredLayoutMismatch   Code = "sync.storage.stored_layout_mismatch"
	CodeStoragePhysicalLayoutMismatch Code = "sync.storage.physical_layout_mismatch"
	CodeStorageSchemaVersionNewer     Code = "sync.storage.schema_version_newer"
	CodeStorageWriterFenceRejected    Code = "sync.storage.writer_fence_rejected"
	CodeStorageCheckpointIncomplete   Code = "sync.storage.checkpoint_incomplete"
	CodeStorageCheckpointFenceMissing Code = "sync.storage.checkpoint_fence_missing"
	CodeStorageCheckpointNotDeclared  Code = "sync.storage.checkpoint_not_declared"
	CodeStorageCheckpointSuperseded   Code = "sync.storage.checkpoint_superseded"
	CodeStorageInvalidCheckpoint      Code = "sync.storage.invalid_checkpoint"
	CodeStorageScanRequiresScope      Code = "sync.storage.scan_requires_scope"
	CodeStorageInvalidLimit           Code = "sync.storage.invalid_limit"
	CodeStorageInvalidPruneCursor     Code = "sync.storage.invalid_prune_cursor"
	CodeStoragePruneEpochMismatch     Code = "sync.storage.prune_epoch_mismatch"
	CodeStoragePartitionUnregistered  Code = "sync.storage.partition_unregistered"
	CodeStorageContentCollision       Code = "sync.storage.content_collision"
	CodeStorageInvalidReaction        Code = "sync.storage.invalid_reaction"
)

// Category values (SPEC.md §10.2).
const (
	CategoryAuthRequired   = "auth-required"
	CategoryForbidden      = "forbidden"
	CategoryInvalidRequest = "invalid-request"
	CategorySchemaMismatch = "schema-mismatch"
	CategoryNotFound       = "not-found"
	CategoryConflict       = "conflict"
	CategoryInternal       = "internal"
	CategoryResetRequired  = "reset-required"
	CategoryScopeRevoked   = "scope-revoked"
	CategoryRateLimited    = "rate-limited"
)

// CodeInfo is the fixed metadata of a catalog code. Category, Retryable and
// Action are pinned by SPEC.md §10.2; HTTPStatus is the status a JSON error
// with this code is sent with before a response has started.
type CodeInfo struct {
	Category   string
	Retryable  bool
	Action     string
	HTTPStatus int
}

var catalog = map[Code]CodeInfo{
	CodeAuthRequired:            {CategoryAuthRequired, true, "refreshAuth", http.StatusUnauthorized},
	CodeAuthLeaseRequired:       {CategoryAuthRequired, true, "refreshAuth", http.StatusUnauthorized},
	CodeAuthLeaseRevoked:        {CategoryAuthRequired, true, "refreshAuth", http.StatusUnauthorized},
	CodeForbidden:               {CategoryForbidden, false, "checkPermissions", http.StatusForbidden},
	CodeInvalidRequest:          {CategoryInvalidRequest, false, "fixRequest", http.StatusBadRequest},
	CodeInvalidClientID:         {CategoryInvalidRequest, false, "resetClientId", http.StatusBadRequest},
	CodeInvalidSubscription:     {CategoryInvalidRequest, false, "fixRequest", http.StatusBadRequest},
	CodeEmptyCommit:             {CategoryInvalidRequest, false, "fixRequest", http.StatusBadRequest},
	CodeUnknownTable:            {CategorySchemaMismatch, false, "regenerateClient", http.StatusBadRequest},
	CodeRowMissing:              {CategoryNotFound, false, "forceResync", http.StatusNotFound},
	CodeVersionConflict:         {CategoryConflict, false, "resolveConflict", http.StatusConflict},
	CodeConstraintViolation:     {CategoryInvalidRequest, false, "fixRequest", http.StatusBadRequest},
	CodeMissingScopes:           {CategoryInternal, false, "inspectServer", http.StatusInternalServerError},
	CodeCrdtMergeFailed:         {CategoryInternal, false, "inspectServer", http.StatusInternalServerError},
	CodeIdempotencyCacheMiss:    {CategoryInternal, true, "retryLater", http.StatusInternalServerError},
	CodeInternalError:           {CategoryInternal, true, "retryLater", http.StatusInternalServerError},
	CodeSchemaNotReady:          {CategoryInternal, true, "retryLater", http.StatusServiceUnavailable},
	CodeTooManyOperations:       {CategoryInvalidRequest, false, "splitBatch", http.StatusBadRequest},
	CodeNotFound:                {CategoryNotFound, false, "forceResync", http.StatusNotFound},
	CodeSegmentExpired:          {CategoryNotFound, true, "retryLater", http.StatusNotFound},
	CodeCursorExpired:           {CategoryResetRequired, false, "rebootstrap", http.StatusBadRequest},
	CodeScopeRevoked:            {CategoryScopeRevoked, false, "checkPermissions", http.StatusForbidden},
	CodeRateLimited:             {CategoryRateLimited, true, "retryLater", http.StatusTooManyRequests},
	CodeSchemaMismatch:          {CategorySchemaMismatch, false, "regenerateClient", http.StatusBadRequest},
	CodeClientSchemaUnsupported: {CategorySchemaMismatch, false, "upgradeClient", http.StatusBadRequest},
	CodeClientWireUnsupported:   {CategorySchemaMismatch, false, "upgradeClient", http.StatusBadRequest},
	CodeWebsocketLimit:          {CategoryRateLimited, true, "retryLater", http.StatusTooManyRequests},
	CodeBlobNotFound:            {CategoryNotFound, false, "fixRequest", http.StatusNotFound},
	CodeBlobForbidden:           {CategoryForbidden, false, "checkPermissions", http.StatusForbidden},
	CodeBlobHashMismatch:        {CategoryInvalidRequest, false, "fixRequest", http.StatusBadRequest},
	CodeBlobTooLarge:            {CategoryInvalidRequest, false, "fixRequest", http.StatusRequestEntityTooLarge},

	CodeStorageStoredLayoutMismatch:   {CategoryInternal, false, "inspectServer", http.StatusServiceUnavailable},
	CodeStoragePhysicalLayoutMismatch: {CategoryInternal, false, "inspectServer", http.StatusServiceUnavailable},
	CodeStorageSchemaVersionNewer:     {CategoryInternal, false, "inspectServer", http.StatusServiceUnavailable},
	CodeStorageWriterFenceRejected:    {CategoryInternal, false, "inspectServer", http.StatusServiceUnavailable},
	CodeStorageCheckpointIncomplete:   {CategoryInternal, true, "retryLater", http.StatusServiceUnavailable},
	CodeStorageCheckpointFenceMissing: {CategoryInternal, false, "inspectServer", http.StatusInternalServerError},
	CodeStorageCheckpointNotDeclared:  {CategoryInternal, false, "inspectServer", http.StatusInternalServerError},
	CodeStorageCheckpointSuperseded:   {CategoryInternal, false, "inspectServer", http.StatusConflict},
	CodeStorageInvalidCheckpoint:      {CategoryInternal, false, "inspectServer", http.StatusBadRequest},
	CodeStorageScanRequiresScope:      {CategoryInternal, false, "inspectServer", http.StatusInternalServerError},
	CodeStorageInvalidLimit:           {CategoryInternal, false, "inspectServer", http.StatusInternalServerError},
	CodeStorageInvalidPruneCursor:     {CategoryInternal, false, "inspectServer", http.StatusInternalServerError},
	CodeStoragePruneEpochMismatch:     {CategoryInternal, false, "inspectServer", http.StatusConflict},
	CodeStoragePartitionUnregistered:  {CategoryInternal, false, "inspectServer", http.StatusNotFound},
	CodeStorageContentCollision:       {CategoryInternal, false, "inspectServer", http.StatusInternalServerError},
	CodeStorageInvalidReaction:        {CategoryInternal, false, "inspectServer", http.StatusBadRequest},
}

// Info returns the catalog metadata of c. Unknown codes (host validator
// codes, for one) report ok=false.
func (c Code) Info() (info CodeInfo, ok bool) {
	info, ok = catalog[c]
	return info, ok
}

// Codes returns every code in the catalog, for tests and documentation.
func Codes() []Code {
	out := make([]Code, 0, len(catalog))
	for c := range catalog {
		out = append(out, c)
	}
	return out
}

// Error is the one error type for failures with an SSP2 code. Message is
// human-readable and never parsed; Details is an optional JSON object.
// errors.Is(err, &Error{Code: c}) matches any *Error with code c.
type Error struct {
	Code    Code
	Op      string // short operation name, e.g. "decode request"
	Message string
	Details json.RawMessage
	err     error
}

// Errorf returns an *Error with code c and a formatted message.
func Errorf(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with code c that wraps cause; the cause's text is
// kept for logs through Error() and is never sent to clients.
func Wrap(c Code, op string, cause error) *Error {
	return &Error{Code: c, Op: op, Message: string(c), err: cause}
}

func (e *Error) Error() string {
	s := string(e.Code)
	if e.Op != "" {
		s = e.Op + ": " + s
	}
	if e.Message != "" && e.Message != string(e.Code) {
		s += ": " + e.Message
	}
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

// WithDetails returns a copy of e carrying details (a JSON object).
func (e *Error) WithDetails(details any) *Error {
	c := *e
	b, err := json.Marshal(details)
	if err == nil {
		c.Details = b
	}
	return &c
}

// CodeOf returns the code of the first *Error in err's chain, or "" when
// there is none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
