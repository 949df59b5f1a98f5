// Package ssp2 is the SSP2 codec: the binary sync protocol of the Syncular
// project, wire versions 1 and 2 (SPEC.md, release 0.15.48).
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
// ResponseEncoder streams a response frame by frame, one Write per frame,
// enforcing the grammar as it goes; MessageReader decodes one frame at a
// time from an io.Reader. Both share the grammar machine with
// DecodeMessage.
//
// # Rows and segments
//
// A RowCodec, compiled from a column list, encodes and decodes full rows
// (§2.4) without allocating: decoded bytes alias the input. SegmentWriter
// and SegmentReader stream SSG2 rows segments (§5.2) one block at a time;
// ValidateSegment checks one in memory.
//
// # Realtime, rendering, scopes
//
// ParseControlMessage and MarshalControl handle the realtime JSON control
// messages (§8). RenderMessage and RenderSegment produce the canonical
// debug rendering of §11 the golden vectors pin. CanonicalScopes,
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
