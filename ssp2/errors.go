package ssp2

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Code is a stable machine identifier from the SSP2 error catalog (SPEC.md
// §10.2), or one of syncnode's storage-host codes (sync.storage.*), which
// surface through readiness and never as a client-visible wire code.
type Code string

// Wire codes (SPEC.md §10.2). Reserved names without a producer
// (sync.integrity_rejected, sync.websocket_not_configured, …) are
// deliberately absent. sync.client_wire_unsupported left the v3 catalog but
// stays here: syncnode still serves wire version 1.
//
// Push operation errors of wire version 3 (§6.2, §6.11):
//   - sync.row_missing: an upsert with baseVersion > 0 on an absent row, or
//     a partial (sparse) upsert on an absent row without a tombstone;
//   - sync.row_deleted: an unversioned upsert on a row deleted inside the
//     tombstone horizon (the delete wins);
//   - sync.reference_violation: a declared reference failed (missing
//     parent, RESTRICT delete with children, cascade cap), with reason and
//     references in PUSH_RESULT_DETAILS.
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
	CodeRowDeleted              Code = "sync.row_deleted"
	CodeVersionConflict         Code = "sync.version_conflict"
	CodeConstraintViolation     Code = "sync.constraint_violation"
	CodeReferenceViolation      Code = "sync.reference_violation"
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

// CodeInfo is the fixed metadata of a catalog code, pinned by SPEC.md
// §10.2. The HTTP status a code is sent with is the HTTP binding's
// (httpapi.Status).
type CodeInfo struct {
	Category  string
	Retryable bool
	Action    string
}

var catalog = map[Code]CodeInfo{
	CodeAuthRequired:            {CategoryAuthRequired, true, "refreshAuth"},
	CodeAuthLeaseRequired:       {CategoryAuthRequired, true, "refreshAuth"},
	CodeAuthLeaseRevoked:        {CategoryAuthRequired, true, "refreshAuth"},
	CodeForbidden:               {CategoryForbidden, false, "checkPermissions"},
	CodeInvalidRequest:          {CategoryInvalidRequest, false, "fixRequest"},
	CodeInvalidClientID:         {CategoryInvalidRequest, false, "resetClientId"},
	CodeInvalidSubscription:     {CategoryInvalidRequest, false, "fixRequest"},
	CodeEmptyCommit:             {CategoryInvalidRequest, false, "fixRequest"},
	CodeUnknownTable:            {CategorySchemaMismatch, false, "regenerateClient"},
	CodeRowMissing:              {CategoryNotFound, false, "forceResync"},
	CodeRowDeleted:              {CategoryNotFound, false, "fixRequest"},
	CodeVersionConflict:         {CategoryConflict, false, "resolveConflict"},
	CodeConstraintViolation:     {CategoryInvalidRequest, false, "fixRequest"},
	CodeReferenceViolation:      {CategoryInvalidRequest, false, "fixRequest"},
	CodeMissingScopes:           {CategoryInternal, false, "inspectServer"},
	CodeCrdtMergeFailed:         {CategoryInternal, false, "inspectServer"},
	CodeIdempotencyCacheMiss:    {CategoryInternal, true, "retryLater"},
	CodeInternalError:           {CategoryInternal, true, "retryLater"},
	CodeSchemaNotReady:          {CategoryInternal, true, "retryLater"},
	CodeTooManyOperations:       {CategoryInvalidRequest, false, "splitBatch"},
	CodeNotFound:                {CategoryNotFound, false, "forceResync"},
	CodeSegmentExpired:          {CategoryNotFound, true, "retryLater"},
	CodeCursorExpired:           {CategoryResetRequired, false, "rebootstrap"},
	CodeScopeRevoked:            {CategoryScopeRevoked, false, "checkPermissions"},
	CodeRateLimited:             {CategoryRateLimited, true, "retryLater"},
	CodeSchemaMismatch:          {CategorySchemaMismatch, false, "regenerateClient"},
	CodeClientSchemaUnsupported: {CategorySchemaMismatch, false, "upgradeClient"},
	CodeClientWireUnsupported:   {CategorySchemaMismatch, false, "upgradeClient"},
	CodeWebsocketLimit:          {CategoryRateLimited, true, "retryLater"},
	CodeBlobNotFound:            {CategoryNotFound, false, "fixRequest"},
	CodeBlobForbidden:           {CategoryForbidden, false, "checkPermissions"},
	CodeBlobHashMismatch:        {CategoryInvalidRequest, false, "fixRequest"},
	CodeBlobTooLarge:            {CategoryInvalidRequest, false, "fixRequest"},

	CodeStorageStoredLayoutMismatch:   {CategoryInternal, false, "inspectServer"},
	CodeStoragePhysicalLayoutMismatch: {CategoryInternal, false, "inspectServer"},
	CodeStorageSchemaVersionNewer:     {CategoryInternal, false, "inspectServer"},
	CodeStorageWriterFenceRejected:    {CategoryInternal, false, "inspectServer"},
	CodeStorageCheckpointIncomplete:   {CategoryInternal, true, "retryLater"},
	CodeStorageCheckpointFenceMissing: {CategoryInternal, false, "inspectServer"},
	CodeStorageCheckpointNotDeclared:  {CategoryInternal, false, "inspectServer"},
	CodeStorageCheckpointSuperseded:   {CategoryInternal, false, "inspectServer"},
	CodeStorageInvalidCheckpoint:      {CategoryInternal, false, "inspectServer"},
	CodeStorageScanRequiresScope:      {CategoryInternal, false, "inspectServer"},
	CodeStorageInvalidLimit:           {CategoryInternal, false, "inspectServer"},
	CodeStorageInvalidPruneCursor:     {CategoryInternal, false, "inspectServer"},
	CodeStoragePruneEpochMismatch:     {CategoryInternal, false, "inspectServer"},
	CodeStoragePartitionUnregistered:  {CategoryInternal, false, "inspectServer"},
	CodeStorageContentCollision:       {CategoryInternal, false, "inspectServer"},
	CodeStorageInvalidReaction:        {CategoryInternal, false, "inspectServer"},
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
