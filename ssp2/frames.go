package ssp2

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The names the errors of the map fields give their parts.
var (
	subscriptionScopesNames = newMapNames("SUBSCRIPTION.scopes")
	effectiveScopesNames    = newMapNames("SUB_START.effectiveScopes")
	changeScopesNames       = newMapNames("change.scopes")
)

// FrameType is a frame's type byte (SPEC.md §1.2 registry).
type FrameType uint8

// Registered frame types, the same for wire versions 1, 2 and 3. Every other value
// (0x05–0x0F, 0x17, 0x18, 0x1A, 0x1C–0x1E, 0x20 and up) has no layout and is
// an unknown frame: skipped and preserved in place.
const (
	FrameEnd               FrameType = 0x00
	FrameReqHeader         FrameType = 0x01
	FramePushCommit        FrameType = 0x02
	FramePullHeader        FrameType = 0x03
	FrameSubscription      FrameType = 0x04
	FrameRespHeader        FrameType = 0x10
	FramePushResult        FrameType = 0x11
	FrameSubStart          FrameType = 0x12
	FrameCommit            FrameType = 0x13
	FrameSegmentRef        FrameType = 0x14
	FrameSegmentInline     FrameType = 0x15
	FrameSubEnd            FrameType = 0x16
	FrameLease             FrameType = 0x19
	FramePushResultDetails FrameType = 0x1B
	FrameError             FrameType = 0x1F
)

var frameNames = map[FrameType]string{
	FrameEnd:               "END",
	FrameReqHeader:         "REQ_HEADER",
	FramePushCommit:        "PUSH_COMMIT",
	FramePullHeader:        "PULL_HEADER",
	FrameSubscription:      "SUBSCRIPTION",
	FrameRespHeader:        "RESP_HEADER",
	FramePushResult:        "PUSH_RESULT",
	FrameSubStart:          "SUB_START",
	FrameCommit:            "COMMIT",
	FrameSegmentRef:        "SEGMENT_REF",
	FrameSegmentInline:     "SEGMENT_INLINE",
	FrameSubEnd:            "SUB_END",
	FrameLease:             "LEASE",
	FramePushResultDetails: "PUSH_RESULT_DETAILS",
	FrameError:             "ERROR",
}

// String returns the spec name, or UNKNOWN(0xNN) for an unregistered type.
func (t FrameType) String() string {
	if n, ok := frameNames[t]; ok {
		return n
	}
	return fmt.Sprintf("UNKNOWN(0x%02x)", uint8(t))
}

// Registered reports whether t has a layout for either message kind (END
// included). Only unregistered types may travel as Unknown frames.
func (t FrameType) Registered() bool {
	_, ok := frameNames[t]
	return ok
}

// kind returns the message kind a registered type belongs to, 0 for END and
// unregistered types.
func (t FrameType) kind() MsgKind {
	switch t {
	case FrameReqHeader, FramePushCommit, FramePullHeader, FrameSubscription:
		return KindRequest
	case FrameRespHeader, FramePushResult, FrameSubStart, FrameCommit, FrameSegmentRef,
		FrameSegmentInline, FrameSubEnd, FrameLease, FramePushResultDetails, FrameError:
		return KindResponse
	}
	return 0
}

// Frame is one decoded or to-be-encoded frame. The concrete types are the
// pointer types below (*ReqHeader, *Commit, …, *Unknown); the interface is
// closed.
type Frame interface {
	FrameType() FrameType
	// appendPayload encodes the payload for wireVersion, refusing values
	// a decoder would reject.
	appendPayload(w *writer, wireVersion uint16)
}

// Op is a push operation's or change's op byte.
type Op uint8

// Operation kinds.
const (
	OpUpsert Op = 1
	OpDelete Op = 2
)

var opNames = [...]string{OpUpsert: "upsert", OpDelete: "delete"}

func (o Op) String() string { return enumString("Op", opNames[:], o) }

func readOp(r *reader, what string) Op {
	at := r.pos()
	o := Op(r.u8(what))
	if r.err == nil && o != OpUpsert && o != OpDelete {
		r.failAt(at, "%s byte %d is not 1 (upsert) or 2 (delete)", what, o)
	}
	return o
}

func checkOp(w *writer, what string, o Op) {
	if o != OpUpsert && o != OpDelete {
		w.fail("%s %d is not upsert or delete", what, o)
	}
}

// ReqHeader is REQ_HEADER (0x01, §1.5). LogEpoch exists from wire version 2
// on; nil is absent (epoch acquisition).
type ReqHeader struct {
	ClientID      string
	SchemaVersion int32
	LogEpoch      *string
}

func (*ReqHeader) FrameType() FrameType { return FrameReqHeader }

func decodeReqHeader(r *reader, v uint16) *ReqHeader {
	f := &ReqHeader{}
	at := r.pos()
	f.ClientID = r.str("REQ_HEADER.clientId")
	if r.err == nil && f.ClientID == "" {
		r.failAt(at, "REQ_HEADER.clientId is empty")
	}
	at = r.pos()
	f.SchemaVersion = r.i32("REQ_HEADER.schemaVersion")
	if r.err == nil && f.SchemaVersion < 1 {
		r.failAt(at, "REQ_HEADER.schemaVersion %d is below 1", f.SchemaVersion)
	}
	if v >= 2 && r.present("REQ_HEADER.logEpoch") {
		at = r.pos()
		e := r.str("REQ_HEADER.logEpoch")
		if r.err == nil && e == "" {
			r.failAt(at, "REQ_HEADER.logEpoch is present but empty")
		}
		f.LogEpoch = &e
	}
	return f
}

func (f *ReqHeader) appendPayload(w *writer, v uint16) {
	if f.ClientID == "" {
		w.fail("REQ_HEADER.clientId is empty")
	}
	if f.SchemaVersion < 1 {
		w.fail("REQ_HEADER.schemaVersion %d is below 1", f.SchemaVersion)
	}
	w.str("REQ_HEADER.clientId", f.ClientID)
	w.i32(f.SchemaVersion)
	if v < 2 {
		if f.LogEpoch != nil {
			w.fail("REQ_HEADER.logEpoch needs wire version 2")
		}
		return
	}
	w.present(f.LogEpoch != nil)
	if f.LogEpoch != nil {
		if *f.LogEpoch == "" {
			w.fail("REQ_HEADER.logEpoch is present but empty")
		}
		w.str("REQ_HEADER.logEpoch", *f.LogEpoch)
	}
}

// Operation is one push operation record (§6.1). Payload is present (non-nil)
// iff Op is upsert; BaseVersion nil means last-write-wins and may accompany a
// delete (kept, ignored by the server). The envelope carries Payload as
// opaque bytes: a full row below wire version 3, a sparse row from version 3
// on (SparsePayloads), decoded against the schema by the server.
type Operation struct {
	Table       string
	RowID       string
	Op          Op
	BaseVersion *int64
	Payload     []byte
}

// PushCommit is PUSH_COMMIT (0x02, §6.1).
type PushCommit struct {
	ClientCommitID string
	Operations     []Operation
}

func (*PushCommit) FrameType() FrameType { return FramePushCommit }

func decodePushCommit(r *reader) *PushCommit {
	f := &PushCommit{}
	at := r.pos()
	f.ClientCommitID = r.str("PUSH_COMMIT.clientCommitId")
	if r.err == nil && f.ClientCommitID == "" {
		r.failAt(at, "PUSH_COMMIT.clientCommitId is empty")
	}
	at = r.pos()
	// Minimum operation: two empty strs, op, two presence bytes.
	n := r.count("PUSH_COMMIT operation count", 11)
	if r.err == nil && n == 0 {
		r.err = decodeError(r.op, at, "PUSH_COMMIT carries no operations")
		r.err.Code = CodeEmptyCommit
		return f
	}
	f.Operations = make([]Operation, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		var o Operation
		o.Table = r.str("operation.table")
		o.RowID = r.str("operation.rowId")
		opAt := r.pos()
		o.Op = readOp(r, "operation.op")
		if r.present("operation.baseVersion") {
			b := r.i64("operation.baseVersion")
			o.BaseVersion = &b
		}
		if r.present("operation.payload") {
			o.Payload = r.bytes("operation.payload")
		}
		if r.err == nil && (o.Payload != nil) != (o.Op == OpUpsert) {
			r.failAt(opAt, "operation %d: payload must be present iff op is upsert (op=%s)", i, o.Op)
		}
		f.Operations = append(f.Operations, o)
	}
	return f
}

func (f *PushCommit) appendPayload(w *writer, _ uint16) {
	if f.ClientCommitID == "" {
		w.fail("PUSH_COMMIT.clientCommitId is empty")
	}
	if len(f.Operations) == 0 {
		w.fail("PUSH_COMMIT carries no operations")
	}
	w.str("PUSH_COMMIT.clientCommitId", f.ClientCommitID)
	w.count("PUSH_COMMIT operations", len(f.Operations))
	for i := range f.Operations {
		o := &f.Operations[i]
		checkOp(w, "operation.op", o.Op)
		if (o.Payload != nil) != (o.Op == OpUpsert) {
			w.fail("operation %d: payload must be present iff op is upsert", i)
		}
		w.str("operation.table", o.Table)
		w.str("operation.rowId", o.RowID)
		w.u8(uint8(o.Op))
		w.present(o.BaseVersion != nil)
		if o.BaseVersion != nil {
			w.i64("operation.baseVersion", *o.BaseVersion)
		}
		w.present(o.Payload != nil)
		if o.Payload != nil {
			w.bytes("operation.payload", o.Payload)
		}
	}
}

// Accept bits of PULL_HEADER.accept (§4.2). Bits 4–7 must be zero.
const (
	AcceptInlineRows   uint8 = 1 << 0
	AcceptExternalRows uint8 = 1 << 1
	AcceptSQLite       uint8 = 1 << 2
	AcceptSignedURLs   uint8 = 1 << 3
	acceptReserved     uint8 = 0xF0
)

// PullHeader is PULL_HEADER (0x03, §4.2). Limits are passed through
// unclamped; clamping is the server's job.
type PullHeader struct {
	LimitCommits      int32
	LimitSnapshotRows int32
	MaxSnapshotPages  int32
	Accept            uint8
}

func (*PullHeader) FrameType() FrameType { return FramePullHeader }

func decodePullHeader(r *reader) *PullHeader {
	f := &PullHeader{}
	f.LimitCommits = r.i32("PULL_HEADER.limitCommits")
	f.LimitSnapshotRows = r.i32("PULL_HEADER.limitSnapshotRows")
	f.MaxSnapshotPages = r.i32("PULL_HEADER.maxSnapshotPages")
	at := r.pos()
	f.Accept = r.u8("PULL_HEADER.accept")
	if r.err == nil && f.Accept&acceptReserved != 0 {
		r.failAt(at, "PULL_HEADER.accept 0x%02x sets reserved bits 4–7", f.Accept)
	}
	return f
}

func (f *PullHeader) appendPayload(w *writer, _ uint16) {
	if f.Accept&acceptReserved != 0 {
		w.fail("PULL_HEADER.accept 0x%02x sets reserved bits 4–7", f.Accept)
	}
	w.i32(f.LimitCommits)
	w.i32(f.LimitSnapshotRows)
	w.i32(f.MaxSnapshotPages)
	w.u8(f.Accept)
}

// Subscription is SUBSCRIPTION (0x04, §4.3). Scopes are encoded in UTF-16
// key order; value lists keep their order. Params and BootstrapState are
// raw JSON, nil when absent, re-emitted verbatim.
type Subscription struct {
	ID             string
	Table          string
	Scopes         map[string][]string
	Params         json.RawMessage
	Cursor         int64
	BootstrapState json.RawMessage
}

func (*Subscription) FrameType() FrameType { return FrameSubscription }

func decodeSubscription(r *reader) *Subscription {
	f := &Subscription{}
	f.ID = r.str("SUBSCRIPTION.id")
	f.Table = r.str("SUBSCRIPTION.table")
	f.Scopes = r.stringListMap(subscriptionScopesNames)
	if r.present("SUBSCRIPTION.params") {
		f.Params = r.jsonText("SUBSCRIPTION.params")
	}
	f.Cursor = r.i64("SUBSCRIPTION.cursor")
	if r.present("SUBSCRIPTION.bootstrapState") {
		f.BootstrapState = r.jsonText("SUBSCRIPTION.bootstrapState")
	}
	return f
}

func (f *Subscription) appendPayload(w *writer, _ uint16) {
	w.str("SUBSCRIPTION.id", f.ID)
	w.str("SUBSCRIPTION.table", f.Table)
	w.stringListMap(subscriptionScopesNames, f.Scopes)
	w.present(f.Params != nil)
	if f.Params != nil {
		w.jsonText("SUBSCRIPTION.params", f.Params)
	}
	w.i64("SUBSCRIPTION.cursor", f.Cursor)
	w.present(f.BootstrapState != nil)
	if f.BootstrapState != nil {
		w.jsonText("SUBSCRIPTION.bootstrapState", f.BootstrapState)
	}
}

// RespHeader is RESP_HEADER (0x10, §1.6). LogEpoch and ResetRequired exist
// from wire version 2 on, where LogEpoch is required and non-empty; in
// version 1 they must be left zero.
type RespHeader struct {
	RequiredSchemaVersion *int32
	LatestSchemaVersion   *int32
	LogEpoch              string
	ResetRequired         bool
}

func (*RespHeader) FrameType() FrameType { return FrameRespHeader }

func decodeRespHeader(r *reader, v uint16) *RespHeader {
	f := &RespHeader{}
	if r.present("RESP_HEADER.requiredSchemaVersion") {
		x := r.i32("RESP_HEADER.requiredSchemaVersion")
		f.RequiredSchemaVersion = &x
	}
	if r.present("RESP_HEADER.latestSchemaVersion") {
		x := r.i32("RESP_HEADER.latestSchemaVersion")
		f.LatestSchemaVersion = &x
	}
	if v >= 2 {
		at := r.pos()
		f.LogEpoch = r.str("RESP_HEADER.logEpoch")
		if r.err == nil && f.LogEpoch == "" {
			r.failAt(at, "RESP_HEADER.logEpoch is empty")
		}
		f.ResetRequired = r.bool("RESP_HEADER.resetRequired")
	}
	return f
}

func (f *RespHeader) appendPayload(w *writer, v uint16) {
	w.present(f.RequiredSchemaVersion != nil)
	if f.RequiredSchemaVersion != nil {
		w.i32(*f.RequiredSchemaVersion)
	}
	w.present(f.LatestSchemaVersion != nil)
	if f.LatestSchemaVersion != nil {
		w.i32(*f.LatestSchemaVersion)
	}
	if v < 2 {
		if f.LogEpoch != "" || f.ResetRequired {
			w.fail("RESP_HEADER.logEpoch/resetRequired need wire version 2")
		}
		return
	}
	if f.LogEpoch == "" {
		w.fail("RESP_HEADER.logEpoch is empty")
	}
	w.str("RESP_HEADER.logEpoch", f.LogEpoch)
	w.bool(f.ResetRequired)
}

// Lease is LEASE (0x19, §7.3.2): at most one, right after RESP_HEADER.
type Lease struct {
	LeaseID     string
	ExpiresAtMs int64
}

func (*Lease) FrameType() FrameType { return FrameLease }

func decodeLease(r *reader) *Lease {
	f := &Lease{}
	at := r.pos()
	f.LeaseID = r.str("LEASE.leaseId")
	if r.err == nil && f.LeaseID == "" {
		r.failAt(at, "LEASE.leaseId is empty")
	}
	f.ExpiresAtMs = r.i64("LEASE.expiresAtMs")
	return f
}

func (f *Lease) appendPayload(w *writer, _ uint16) {
	if f.LeaseID == "" {
		w.fail("LEASE.leaseId is empty")
	}
	w.str("LEASE.leaseId", f.LeaseID)
	w.i64("LEASE.expiresAtMs", f.ExpiresAtMs)
}

// PushStatus is PUSH_RESULT.status.
type PushStatus uint8

// Commit outcomes (§6.3).
const (
	PushApplied  PushStatus = 1
	PushCached   PushStatus = 2
	PushRejected PushStatus = 3
)

var pushStatusNames = [...]string{PushApplied: "applied", PushCached: "cached", PushRejected: "rejected"}

func (s PushStatus) String() string { return enumString("PushStatus", pushStatusNames[:], s) }

// OpStatus is a result record's status.
type OpStatus uint8

// Operation outcomes (§6.3).
const (
	OpApplied  OpStatus = 1
	OpConflict OpStatus = 2
	OpError    OpStatus = 3
)

var opStatusNames = [...]string{OpApplied: "applied", OpConflict: "conflict", OpError: "error"}

func (s OpStatus) String() string { return enumString("OpStatus", opStatusNames[:], s) }

// OpResult is one result record, a tagged union on Status: applied carries
// nothing else; conflict carries Code, Message, ServerVersion, ServerRow
// (always a full row) and, from wire version 3 on, ConflictColumns; error
// carries Code, Message, Retryable. Fields outside the status's arm must be
// zero on encode and are zero after decode.
//
// ConflictColumns is a ColumnBitmap over the table's columns (§6.3): the
// present columns whose version moved past the operation's baseVersion. The
// envelope carries it as opaque bytes; its width is the schema's business.
// From wire version 3 on a conflict must carry it (non-nil); below, it must
// be nil.
type OpResult struct {
	OpIndex         int32
	Status          OpStatus
	Code            string
	Message         string
	ServerVersion   int64
	ServerRow       []byte
	ConflictColumns []byte
	Retryable       bool
}

// PushResult is PUSH_RESULT (0x11, §6.3). CommitSeq is present iff Status is
// applied or cached.
type PushResult struct {
	ClientCommitID string
	Status         PushStatus
	CommitSeq      *int64
	Results        []OpResult
}

func (*PushResult) FrameType() FrameType { return FramePushResult }

func decodePushResult(r *reader, v uint16) *PushResult {
	f := &PushResult{}
	f.ClientCommitID = r.str("PUSH_RESULT.clientCommitId")
	at := r.pos()
	f.Status = PushStatus(r.u8("PUSH_RESULT.status"))
	if r.err == nil && (f.Status < PushApplied || f.Status > PushRejected) {
		r.failAt(at, "PUSH_RESULT.status byte %d is not 1, 2 or 3", f.Status)
	}
	if r.present("PUSH_RESULT.commitSeq") {
		x := r.i64("PUSH_RESULT.commitSeq")
		f.CommitSeq = &x
	}
	if r.err == nil && (f.CommitSeq != nil) != (f.Status != PushRejected) {
		r.failAt(at, "PUSH_RESULT.commitSeq must be present iff status is applied or cached (status=%s)", f.Status)
	}
	n := r.count("PUSH_RESULT result count", 5)
	f.Results = make([]OpResult, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		var o OpResult
		o.OpIndex = r.i32("result.opIndex")
		at := r.pos()
		o.Status = OpStatus(r.u8("result.status"))
		switch {
		case r.err != nil:
		case o.Status == OpApplied:
		case o.Status == OpConflict:
			o.Code = r.str("conflict.code")
			o.Message = r.str("conflict.message")
			o.ServerVersion = r.i64("conflict.serverVersion")
			o.ServerRow = r.bytes("conflict.serverRow")
			if v >= 3 {
				o.ConflictColumns = r.bytes("conflict.conflictColumns")
			}
		case o.Status == OpError:
			o.Code = r.str("error.code")
			o.Message = r.str("error.message")
			o.Retryable = r.bool("error.retryable")
		default:
			r.failAt(at, "result.status byte %d is not 1, 2 or 3", o.Status)
		}
		f.Results = append(f.Results, o)
	}
	return f
}

func (f *PushResult) appendPayload(w *writer, v uint16) {
	if f.Status < PushApplied || f.Status > PushRejected {
		w.fail("PUSH_RESULT.status %d is not applied, cached or rejected", f.Status)
	}
	if (f.CommitSeq != nil) != (f.Status != PushRejected) {
		w.fail("PUSH_RESULT.commitSeq must be present iff status is applied or cached")
	}
	w.str("PUSH_RESULT.clientCommitId", f.ClientCommitID)
	w.u8(uint8(f.Status))
	w.present(f.CommitSeq != nil)
	if f.CommitSeq != nil {
		w.i64("PUSH_RESULT.commitSeq", *f.CommitSeq)
	}
	w.count("PUSH_RESULT results", len(f.Results))
	for i := range f.Results {
		o := &f.Results[i]
		w.i32(o.OpIndex)
		w.u8(uint8(o.Status))
		switch o.Status {
		case OpApplied:
			if o.Code != "" || o.Message != "" || o.ServerVersion != 0 || o.ServerRow != nil || o.ConflictColumns != nil || o.Retryable {
				w.fail("result %d: applied carries no code, message, server row, conflict columns or retryable", i)
			}
		case OpConflict:
			if o.Retryable {
				w.fail("result %d: conflict carries no retryable flag", i)
			}
			w.str("conflict.code", o.Code)
			w.str("conflict.message", o.Message)
			w.i64("conflict.serverVersion", o.ServerVersion)
			w.bytes("conflict.serverRow", o.ServerRow)
			if v >= 3 {
				if o.ConflictColumns == nil {
					w.fail("result %d: a wire version 3 conflict carries conflictColumns", i)
				}
				w.bytes("conflict.conflictColumns", o.ConflictColumns)
			} else if o.ConflictColumns != nil {
				w.fail("result %d: conflictColumns needs wire version 3", i)
			}
		case OpError:
			if o.ServerVersion != 0 || o.ServerRow != nil || o.ConflictColumns != nil {
				w.fail("result %d: error carries no server version, row or conflict columns", i)
			}
			w.str("error.code", o.Code)
			w.str("error.message", o.Message)
			w.bool(o.Retryable)
		default:
			w.fail("result %d: status %d is not applied, conflict or error", i, o.Status)
		}
	}
}

// DetailsEntry is one PUSH_RESULT_DETAILS entry. DetailsJSON is the raw
// detailsJson text (§6.3.1 bounded shape), re-emitted verbatim.
type DetailsEntry struct {
	OpIndex     int32
	DetailsJSON json.RawMessage
}

// PushResultDetails is PUSH_RESULT_DETAILS (0x1B, §6.3.1), the optional
// companion right after a rejected PUSH_RESULT.
type PushResultDetails struct {
	ClientCommitID string
	Entries        []DetailsEntry
}

func (*PushResultDetails) FrameType() FrameType { return FramePushResultDetails }

func decodePushResultDetails(r *reader) *PushResultDetails {
	f := &PushResultDetails{}
	at := r.pos()
	f.ClientCommitID = r.str("PUSH_RESULT_DETAILS.clientCommitId")
	if r.err == nil && f.ClientCommitID == "" {
		r.failAt(at, "PUSH_RESULT_DETAILS.clientCommitId is empty")
	}
	at = r.pos()
	n := r.count("PUSH_RESULT_DETAILS entry count", 8)
	if r.err == nil && n == 0 {
		r.failAt(at, "PUSH_RESULT_DETAILS carries no entries")
	}
	f.Entries = make([]DetailsEntry, 0, n)
	seen := make(map[int32]struct{}, n)
	for i := 0; i < n && r.err == nil; i++ {
		var e DetailsEntry
		at := r.pos()
		e.OpIndex = r.i32("details.opIndex")
		if r.err == nil && e.OpIndex < 0 {
			r.failAt(at, "details.opIndex %d is negative", e.OpIndex)
		}
		if _, dup := seen[e.OpIndex]; dup && r.err == nil {
			r.failAt(at, "details.opIndex %d repeats", e.OpIndex)
		}
		seen[e.OpIndex] = struct{}{}
		at = r.pos() + 4
		e.DetailsJSON = r.strBytes("details.detailsJson")
		if r.err == nil {
			if err := validateRejectionDetails(e.DetailsJSON); err != nil {
				r.failAt(at, "details.detailsJson: %s", err)
			}
		}
		f.Entries = append(f.Entries, e)
	}
	return f
}

func (f *PushResultDetails) appendPayload(w *writer, _ uint16) {
	if f.ClientCommitID == "" {
		w.fail("PUSH_RESULT_DETAILS.clientCommitId is empty")
	}
	if len(f.Entries) == 0 {
		w.fail("PUSH_RESULT_DETAILS carries no entries")
	}
	w.str("PUSH_RESULT_DETAILS.clientCommitId", f.ClientCommitID)
	w.count("PUSH_RESULT_DETAILS entries", len(f.Entries))
	seen := make(map[int32]struct{}, len(f.Entries))
	for _, e := range f.Entries {
		if e.OpIndex < 0 {
			w.fail("details.opIndex %d is negative", e.OpIndex)
		}
		if _, dup := seen[e.OpIndex]; dup {
			w.fail("details.opIndex %d repeats", e.OpIndex)
		}
		seen[e.OpIndex] = struct{}{}
		if err := validateRejectionDetails(e.DetailsJSON); err != nil {
			w.fail("details.detailsJson: %s", err)
		}
		w.i32(e.OpIndex)
		w.strBytes("details.detailsJson", e.DetailsJSON)
	}
}

// SubStatus is SUB_START.status.
type SubStatus uint8

// Subscription outcomes (§4.4).
const (
	SubActive  SubStatus = 1
	SubRevoked SubStatus = 2
	SubReset   SubStatus = 3
)

var subStatusNames = [...]string{SubActive: "active", SubRevoked: "revoked", SubReset: "reset"}

func (s SubStatus) String() string { return enumString("SubStatus", subStatusNames[:], s) }

// SubStart is SUB_START (0x12, §4.4), opening a subscription section.
type SubStart struct {
	ID              string
	Status          SubStatus
	ReasonCode      string
	EffectiveScopes map[string][]string
	Bootstrap       bool
}

func (*SubStart) FrameType() FrameType { return FrameSubStart }

func decodeSubStart(r *reader) *SubStart {
	f := &SubStart{}
	f.ID = r.str("SUB_START.id")
	at := r.pos()
	f.Status = SubStatus(r.u8("SUB_START.status"))
	if r.err == nil && (f.Status < SubActive || f.Status > SubReset) {
		r.failAt(at, "SUB_START.status byte %d is not 1, 2 or 3", f.Status)
	}
	f.ReasonCode = r.str("SUB_START.reasonCode")
	f.EffectiveScopes = r.stringListMap(effectiveScopesNames)
	f.Bootstrap = r.bool("SUB_START.bootstrap")
	return f
}

func (f *SubStart) appendPayload(w *writer, _ uint16) {
	if f.Status < SubActive || f.Status > SubReset {
		w.fail("SUB_START.status %d is not active, revoked or reset", f.Status)
	}
	w.str("SUB_START.id", f.ID)
	w.u8(uint8(f.Status))
	w.str("SUB_START.reasonCode", f.ReasonCode)
	w.stringListMap(effectiveScopesNames, f.EffectiveScopes)
	w.bool(f.Bootstrap)
}

// Change is one change record of a COMMIT (§4.5). RowVersion and Row are
// present iff Op is upsert; Row holds the row codec bytes.
type Change struct {
	TableIndex uint16
	RowID      string
	Op         Op
	RowVersion *int64
	Scopes     map[string]string
	Row        []byte
}

// Commit is COMMIT (0x13, §4.5) with its frame-local table dictionary.
type Commit struct {
	CommitSeq   int64
	CreatedAtMs int64
	ActorID     string
	Tables      []string
	Changes     []Change
}

func (*Commit) FrameType() FrameType { return FrameCommit }

func decodeCommit(r *reader) *Commit {
	f := &Commit{}
	f.CommitSeq = r.i64("COMMIT.commitSeq")
	f.CreatedAtMs = r.i64("COMMIT.createdAtMs")
	f.ActorID = r.str("COMMIT.actorId")
	nt := r.count("COMMIT table count", 4)
	f.Tables = make([]string, 0, nt)
	for i := 0; i < nt && r.err == nil; i++ {
		f.Tables = append(f.Tables, r.str("COMMIT.tables"))
	}
	// Minimum change: tableIndex, empty rowId, op, presence, map count, presence.
	nc := r.count("COMMIT change count", 13)
	f.Changes = make([]Change, 0, nc)
	for i := 0; i < nc && r.err == nil; i++ {
		var c Change
		at := r.pos()
		c.TableIndex = r.u16("change.tableIndex")
		if r.err == nil && int(c.TableIndex) >= len(f.Tables) {
			r.failAt(at, "change.tableIndex %d out of range (%d tables)", c.TableIndex, len(f.Tables))
		}
		c.RowID = r.str("change.rowId")
		opAt := r.pos()
		c.Op = readOp(r, "change.op")
		if r.present("change.rowVersion") {
			x := r.i64("change.rowVersion")
			c.RowVersion = &x
		}
		c.Scopes = r.stringMap(changeScopesNames)
		if r.present("change.row") {
			c.Row = r.bytes("change.row")
		}
		upsert := c.Op == OpUpsert
		if r.err == nil && ((c.RowVersion != nil) != upsert || (c.Row != nil) != upsert) {
			r.failAt(opAt, "change %d: rowVersion and row must be present iff op is upsert (op=%s)", i, c.Op)
		}
		f.Changes = append(f.Changes, c)
	}
	return f
}

func (f *Commit) appendPayload(w *writer, _ uint16) {
	w.i64("COMMIT.commitSeq", f.CommitSeq)
	w.i64("COMMIT.createdAtMs", f.CreatedAtMs)
	w.str("COMMIT.actorId", f.ActorID)
	w.count("COMMIT tables", len(f.Tables))
	for _, t := range f.Tables {
		w.str("COMMIT.tables", t)
	}
	w.count("COMMIT changes", len(f.Changes))
	for i := range f.Changes {
		c := &f.Changes[i]
		if int(c.TableIndex) >= len(f.Tables) {
			w.fail("change %d: tableIndex %d out of range (%d tables)", i, c.TableIndex, len(f.Tables))
		}
		checkOp(w, "change.op", c.Op)
		upsert := c.Op == OpUpsert
		if (c.RowVersion != nil) != upsert || (c.Row != nil) != upsert {
			w.fail("change %d: rowVersion and row must be present iff op is upsert", i)
		}
		w.u16(c.TableIndex)
		w.str("change.rowId", c.RowID)
		w.u8(uint8(c.Op))
		w.present(c.RowVersion != nil)
		if c.RowVersion != nil {
			w.i64("change.rowVersion", *c.RowVersion)
		}
		w.stringMap(changeScopesNames, c.Scopes)
		w.present(c.Row != nil)
		if c.Row != nil {
			w.bytes("change.row", c.Row)
		}
	}
}

// MediaType is SEGMENT_REF.mediaType.
type MediaType uint8

// Segment formats (§5).
const (
	MediaRows   MediaType = 1
	MediaSQLite MediaType = 2
)

var mediaTypeNames = [...]string{MediaRows: "rows", MediaSQLite: "sqlite"}

func (m MediaType) String() string { return enumString("MediaType", mediaTypeNames[:], m) }

// SegmentRef is SEGMENT_REF (0x14, §5.4). URLExpiresAtMs is present iff URL
// is.
type SegmentRef struct {
	SegmentID      string
	MediaType      MediaType
	Table          string
	ByteLength     int64
	RowCount       int64
	AsOfCommitSeq  int64
	ScopeDigest    string
	RowCursor      *string
	NextRowCursor  *string
	URL            *string
	URLExpiresAtMs *int64
}

func (*SegmentRef) FrameType() FrameType { return FrameSegmentRef }

func decodeSegmentRef(r *reader) *SegmentRef {
	f := &SegmentRef{}
	f.SegmentID = r.str("SEGMENT_REF.segmentId")
	at := r.pos()
	f.MediaType = MediaType(r.u8("SEGMENT_REF.mediaType"))
	if r.err == nil && f.MediaType != MediaRows && f.MediaType != MediaSQLite {
		r.failAt(at, "SEGMENT_REF.mediaType byte %d is not 1 (rows) or 2 (sqlite)", f.MediaType)
	}
	f.Table = r.str("SEGMENT_REF.table")
	f.ByteLength = r.i64("SEGMENT_REF.byteLength")
	f.RowCount = r.i64("SEGMENT_REF.rowCount")
	f.AsOfCommitSeq = r.i64("SEGMENT_REF.asOfCommitSeq")
	f.ScopeDigest = r.str("SEGMENT_REF.scopeDigest")
	f.RowCursor = optStr(r, "SEGMENT_REF.rowCursor")
	f.NextRowCursor = optStr(r, "SEGMENT_REF.nextRowCursor")
	urlAt := r.pos()
	f.URL = optStr(r, "SEGMENT_REF.url")
	if r.present("SEGMENT_REF.urlExpiresAtMs") {
		x := r.i64("SEGMENT_REF.urlExpiresAtMs")
		f.URLExpiresAtMs = &x
	}
	if r.err == nil && (f.URL != nil) != (f.URLExpiresAtMs != nil) {
		r.failAt(urlAt, "SEGMENT_REF.urlExpiresAtMs must be present iff url is")
	}
	return f
}

func optStr(r *reader, what string) *string {
	if !r.present(what) {
		return nil
	}
	s := r.str(what)
	return &s
}

func (f *SegmentRef) appendPayload(w *writer, _ uint16) {
	if f.MediaType != MediaRows && f.MediaType != MediaSQLite {
		w.fail("SEGMENT_REF.mediaType %d is not rows or sqlite", f.MediaType)
	}
	if (f.URL != nil) != (f.URLExpiresAtMs != nil) {
		w.fail("SEGMENT_REF.urlExpiresAtMs must be present iff url is")
	}
	w.str("SEGMENT_REF.segmentId", f.SegmentID)
	w.u8(uint8(f.MediaType))
	w.str("SEGMENT_REF.table", f.Table)
	w.i64("SEGMENT_REF.byteLength", f.ByteLength)
	w.i64("SEGMENT_REF.rowCount", f.RowCount)
	w.i64("SEGMENT_REF.asOfCommitSeq", f.AsOfCommitSeq)
	w.str("SEGMENT_REF.scopeDigest", f.ScopeDigest)
	for _, o := range [...]struct {
		what string
		v    *string
	}{{"SEGMENT_REF.rowCursor", f.RowCursor}, {"SEGMENT_REF.nextRowCursor", f.NextRowCursor}, {"SEGMENT_REF.url", f.URL}} {
		w.present(o.v != nil)
		if o.v != nil {
			w.str(o.what, *o.v)
		}
	}
	w.present(f.URLExpiresAtMs != nil)
	if f.URLExpiresAtMs != nil {
		w.i64("SEGMENT_REF.urlExpiresAtMs", *f.URLExpiresAtMs)
	}
}

// SegmentInline is SEGMENT_INLINE (0x15, §5.7): the payload is one complete
// SSG2 rows segment, structurally validated on decode and encode.
type SegmentInline struct {
	Payload []byte
	// checked marks a frame made by CheckedSegmentInline: its payload was
	// validated then, so the encoder does not walk it again.
	checked bool
}

// CheckedSegmentInline validates payload as a rows segment and returns
// its SEGMENT_INLINE frame, which encodes without validating again. A
// server that inlines one stored segment into many responses keeps the
// frame, so the payload is walked once rather than once per response.
// The payload must not change afterwards.
func CheckedSegmentInline(payload []byte) (*SegmentInline, error) {
	if err := validateSegmentAt(payload, 0, opEncodeResponse); err != nil {
		return nil, err
	}
	return &SegmentInline{Payload: payload, checked: true}, nil
}

func (*SegmentInline) FrameType() FrameType { return FrameSegmentInline }

func decodeSegmentInline(r *reader) *SegmentInline {
	at := r.pos()
	p := r.take(r.remaining(), "SEGMENT_INLINE payload")
	if err := validateSegmentAt(p, at, r.op); err != nil {
		r.err = err
	}
	return &SegmentInline{Payload: p}
}

func (f *SegmentInline) appendPayload(w *writer, _ uint16) {
	if f.checked {
		w.b = append(w.b, f.Payload...)
		return
	}
	if err := validateSegmentAt(f.Payload, 0, w.op); err != nil {
		w.fail("SEGMENT_INLINE payload is not a valid rows segment: %s", err.Message)
	}
	w.b = append(w.b, f.Payload...)
}

// SubEnd is SUB_END (0x16, §4.4), closing a subscription section.
// BootstrapState is present iff the bootstrap is incomplete.
type SubEnd struct {
	NextCursor     int64
	BootstrapState json.RawMessage
}

func (*SubEnd) FrameType() FrameType { return FrameSubEnd }

func decodeSubEnd(r *reader) *SubEnd {
	f := &SubEnd{}
	f.NextCursor = r.i64("SUB_END.nextCursor")
	if r.present("SUB_END.bootstrapState") {
		f.BootstrapState = r.jsonText("SUB_END.bootstrapState")
	}
	return f
}

func (f *SubEnd) appendPayload(w *writer, _ uint16) {
	w.i64("SUB_END.nextCursor", f.NextCursor)
	w.present(f.BootstrapState != nil)
	if f.BootstrapState != nil {
		w.jsonText("SUB_END.bootstrapState", f.BootstrapState)
	}
}

// ErrorFrame is ERROR (0x1F, §1.6): an in-band failure; only END may follow.
type ErrorFrame struct {
	Code              string
	Message           string
	Category          string
	Retryable         bool
	RecommendedAction string
	Details           json.RawMessage
}

func (*ErrorFrame) FrameType() FrameType { return FrameError }

// NewErrorFrame builds the ERROR frame for err: its code's catalog category,
// retryability and action, the message, and the details object if any. An
// error without an SSP2 code becomes sync.internal_error, with a generic
// message so internal text never reaches a client.
func NewErrorFrame(err error) *ErrorFrame {
	code := CodeOf(err)
	info, ok := code.Info()
	if !ok {
		code = CodeInternalError
		info, _ = code.Info()
	}
	f := &ErrorFrame{
		Code:              string(code),
		Message:           string(code),
		Category:          info.Category,
		Retryable:         info.Retryable,
		RecommendedAction: info.Action,
	}
	var e *Error
	if errors.As(err, &e) && e.Code == code {
		if e.Message != "" {
			f.Message = e.Message
		}
		if len(e.Details) > 0 {
			f.Details = e.Details
		}
	}
	return f
}

func decodeErrorFrame(r *reader) *ErrorFrame {
	f := &ErrorFrame{}
	f.Code = r.str("ERROR.code")
	f.Message = r.str("ERROR.message")
	f.Category = r.str("ERROR.category")
	f.Retryable = r.bool("ERROR.retryable")
	f.RecommendedAction = r.str("ERROR.recommendedAction")
	if r.present("ERROR.details") {
		f.Details = r.jsonText("ERROR.details")
	}
	return f
}

func (f *ErrorFrame) appendPayload(w *writer, _ uint16) {
	w.str("ERROR.code", f.Code)
	w.str("ERROR.message", f.Message)
	w.str("ERROR.category", f.Category)
	w.bool(f.Retryable)
	w.str("ERROR.recommendedAction", f.RecommendedAction)
	w.present(f.Details != nil)
	if f.Details != nil {
		w.jsonText("ERROR.details", f.Details)
	}
}

// Unknown is a frame whose type has no layout in this wire version for
// either message kind. Decoders keep it in place so re-encoding reproduces
// the input; encoders emit it only under an unregistered type.
type Unknown struct {
	Type    FrameType
	Payload []byte
}

// FrameType returns the preserved type byte.
func (f *Unknown) FrameType() FrameType { return f.Type }

func (f *Unknown) appendPayload(w *writer, _ uint16) {
	if f.Type.Registered() {
		w.fail("unknown frame under registered type %s", f.Type)
	}
	w.b = append(w.b, f.Payload...)
}
