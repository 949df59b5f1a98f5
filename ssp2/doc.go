// Package ssp2 is the SSP2 codec: the binary sync protocol of the Syncular
// project, wire versions 1 and 2 (SPEC.md, release 0.15.48) and 3 (SPEC.md
// of the wire v3 releases).
//
// It is pure: no I/O beyond the io.Reader or io.Writer a streaming type is
// given, and it imports nothing of syncnode's own. Every decode failure is
// an *Error carrying its SSP2 code (sync.invalid_request, or
// sync.empty_commit for a commit without operations) and the byte offset of
// the fault; no input makes a decoder panic. Encoders refuse, with
// sync.internal_error, anything a decoder would reject, so what this
// package writes it also reads.
//
// # Messages
//
// DecodeMessage checks a whole message: envelope, framing, every frame's
// layout, strict primitives (little-endian fixed width; i64 within
// ±(2^53−1); bool and presence bytes 0 or 1; valid UTF-8; map keys unique
// and ascending by UTF-16 code units; json fields any RFC 8259 value, kept
// verbatim), enums, the presence ties and the request or response grammar.
// Frames are the pointer types *ReqHeader, *PushCommit, *PullHeader,
// *Subscription, *RespHeader, *Lease, *PushResult, *PushResultDetails,
// *SubStart, *Commit, *SegmentRef, *SegmentInline, *SubEnd, *ErrorFrame and
// *Unknown; absent opt() fields are nil. Unknown frame types are kept in
// place and re-encoded byte for byte. DecodeRequest sorts a request's
// frames for a server; (*Message).AppendEncode writes a message back.
//
// # Wire versions
//
// DecodeMessage accepts every version the codec speaks (1–3).
// DecodeRequest accepts 1 and 2 only, so a server without version 3 push
// semantics never sees a sparse payload; a server that has them passes its
// accepted WireWindow (DefaultWireWindow is [2, 3]) to DecodeRequestWindow,
// which refuses any other version before reading a frame. Versions 2 and 3 share every frame layout but one: a v3
// conflict record ends with conflictColumns (OpResult.ConflictColumns, a
// ColumnBitmap). What changes between them is the content of push
// payloads, which the envelope carries as opaque bytes: full rows below
// version 3, sparse rows from version 3 on (SparsePayloads).
//
// ResponseEncoder streams a response frame by frame, one Write per frame,
// enforcing the grammar as it goes; MessageReader decodes one frame at a
// time from an io.Reader. Both share the grammar machine with
// DecodeMessage.
//
// # Rows and segments
//
// A RowCodec, compiled from a column list, encodes and decodes full rows
// (§2.4) without allocating: decoded bytes alias the input. A SparseCodec
// does the same for sparse rows, the v3 push payload: a presence bitmap, a
// null bitmap over the present columns, the present values.
// DecodeSparseRow checks the sparse rules in the spec's order and reports a
// *SparseRowError (unwrapping to sync.invalid_request) naming the
// SparseViolation, which a server turns into the commit-level rejection of
// the enclosing commit. Every other surface (COMMIT rows, segments, the
// conflict serverRow) stays full-row. SegmentWriter
// and SegmentReader stream SSG2 rows segments (§5.2) one block at a time;
// ValidateSegment checks one in memory.
//
// # Realtime, rendering, scopes
//
// ParseControlMessage and MarshalControl handle the realtime JSON control
// messages (§8). RenderMessage, RenderSegment and RenderSparseRow produce
// the canonical debug rendering of §11 the golden vectors pin. CanonicalScopes,
// ScopeDigest and ParseScopesHeader implement the scope digest (§3.5,
// §11.2), escaping strings as JavaScript's JSON.stringify does.
//
// # Readings of the spec
//
// Where SPEC.md leaves room, the codec follows the reference codec of the
// same release:
//   - REQ_HEADER.logEpoch when present, RESP_HEADER.logEpoch (v2),
//     LEASE.leaseId and PUSH_RESULT_DETAILS.clientCommitId must be
//     non-empty, as their field tables say.
//   - PUSH_RESULT_DETAILS must follow a rejected PUSH_RESULT with the same
//     clientCommitId, and each entry must name one of its error records;
//     detailsJson is checked against the bounded shape of §6.3.1 and
//     renders parsed under "details".
//   - Unknown frames do not count for ordering (§1.2 rule 2): a LEASE
//     after RESP_HEADER and an unknown frame is still in place, and so is
//     a PUSH_RESULT_DETAILS after its PUSH_RESULT and an unknown frame.
//   - A blob_ref value must be the one serialization of its BlobRef:
//     canonical key order, no whitespace, byteLength a plain decimal,
//     strings escaped exactly as JSON.stringify escapes them.
package ssp2
