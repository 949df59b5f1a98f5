package httpapi

import (
	"net/http"

	"github.com/syncnode/syncnode/ssp2"
)

// statuses is the HTTP status of a JSON error with each catalog code
// (ssp2.Codes), sent when the failure happens before a response has
// started (SPEC.md §10.1). After that the failure travels in-band as an
// ERROR frame and has no status of its own.
var statuses = map[ssp2.Code]int{
	ssp2.CodeAuthRequired:            http.StatusUnauthorized,
	ssp2.CodeAuthLeaseRequired:       http.StatusUnauthorized,
	ssp2.CodeAuthLeaseRevoked:        http.StatusUnauthorized,
	ssp2.CodeForbidden:               http.StatusForbidden,
	ssp2.CodeInvalidRequest:          http.StatusBadRequest,
	ssp2.CodeInvalidClientID:         http.StatusBadRequest,
	ssp2.CodeInvalidSubscription:     http.StatusBadRequest,
	ssp2.CodeEmptyCommit:             http.StatusBadRequest,
	ssp2.CodeUnknownTable:            http.StatusBadRequest,
	ssp2.CodeRowMissing:              http.StatusNotFound,
	ssp2.CodeRowDeleted:              http.StatusNotFound,
	ssp2.CodeReferenceViolation:      http.StatusBadRequest,
	ssp2.CodeVersionConflict:         http.StatusConflict,
	ssp2.CodeConstraintViolation:     http.StatusBadRequest,
	ssp2.CodeMissingScopes:           http.StatusInternalServerError,
	ssp2.CodeCrdtMergeFailed:         http.StatusInternalServerError,
	ssp2.CodeIdempotencyCacheMiss:    http.StatusInternalServerError,
	ssp2.CodeInternalError:           http.StatusInternalServerError,
	ssp2.CodeSchemaNotReady:          http.StatusServiceUnavailable,
	ssp2.CodeTooManyOperations:       http.StatusBadRequest,
	ssp2.CodeNotFound:                http.StatusNotFound,
	ssp2.CodeSegmentExpired:          http.StatusNotFound,
	ssp2.CodeCursorExpired:           http.StatusBadRequest,
	ssp2.CodeScopeRevoked:            http.StatusForbidden,
	ssp2.CodeRateLimited:             http.StatusTooManyRequests,
	ssp2.CodeSchemaMismatch:          http.StatusBadRequest,
	ssp2.CodeClientSchemaUnsupported: http.StatusBadRequest,
	ssp2.CodeClientWireUnsupported:   http.StatusBadRequest,
	ssp2.CodeWebsocketLimit:          http.StatusTooManyRequests,
	ssp2.CodeBlobNotFound:            http.StatusNotFound,
	ssp2.CodeBlobForbidden:           http.StatusForbidden,
	ssp2.CodeBlobHashMismatch:        http.StatusBadRequest,
	ssp2.CodeBlobTooLarge:            http.StatusRequestEntityTooLarge,

	ssp2.CodeStorageStoredLayoutMismatch:   http.StatusServiceUnavailable,
	ssp2.CodeStoragePhysicalLayoutMismatch: http.StatusServiceUnavailable,
	ssp2.CodeStorageSchemaVersionNewer:     http.StatusServiceUnavailable,
	ssp2.CodeStorageWriterFenceRejected:    http.StatusServiceUnavailable,
	ssp2.CodeStorageCheckpointIncomplete:   http.StatusServiceUnavailable,
	ssp2.CodeStorageCheckpointFenceMissing: http.StatusInternalServerError,
	ssp2.CodeStorageCheckpointNotDeclared:  http.StatusInternalServerError,
	ssp2.CodeStorageCheckpointSuperseded:   http.StatusConflict,
	ssp2.CodeStorageInvalidCheckpoint:      http.StatusBadRequest,
	ssp2.CodeStorageScanRequiresScope:      http.StatusInternalServerError,
	ssp2.CodeStorageInvalidLimit:           http.StatusInternalServerError,
	ssp2.CodeStorageInvalidPruneCursor:     http.StatusInternalServerError,
	ssp2.CodeStoragePruneEpochMismatch:     http.StatusConflict,
	ssp2.CodeStoragePartitionUnregistered:  http.StatusNotFound,
	ssp2.CodeStorageContentCollision:       http.StatusInternalServerError,
	ssp2.CodeStorageInvalidReaction:        http.StatusBadRequest,
}

// Status returns the HTTP status of a JSON error with code c; a code
// outside the catalog (a host validator's own, or none) is a 500.
func Status(c ssp2.Code) int {
	if s, ok := statuses[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}
