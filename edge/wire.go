package edge

import (
	"encoding/json"
	"errors"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// The JSON bodies of the edge service (bus.EdgeStatusSubject, …). Rows
// travel in the SSP2 row codec (base64 in JSON), exactly as the edge
// stores them.

// statusReply answers syncnode.edge.<edge>.status.
type statusReply struct {
	Edge       string            `json:"edge"`
	Partitions []partitionStatus `json:"partitions"`
	Error      *wireError        `json:"error,omitempty"`
}

// partitionStatus is one of the edge's home partitions.
type partitionStatus struct {
	ID           string `json:"id"`
	LogEpoch     string `json:"logEpoch"`
	MaxCommitSeq int64  `json:"maxCommitSeq"`
	HorizonSeq   int64  `json:"horizonSeq"`
	// Pending are the partition's unactivated checkpoints at the edge's
	// running schema version (homegate.go).
	Pending []string `json:"pending,omitempty"`
}

// commitsRequest asks syncnode.edge.<edge>.commits for a page of a
// partition's log after AfterSeq.
type commitsRequest struct {
	Partition string `json:"partition"`
	AfterSeq  int64  `json:"afterSeq"`
	Limit     int    `json:"limit"`
}

// commitsReply is the page, read in one snapshot with the partition row.
type commitsReply struct {
	LogEpoch     string       `json:"logEpoch"`
	MaxCommitSeq int64        `json:"maxCommitSeq"`
	HorizonSeq   int64        `json:"horizonSeq"`
	Commits      []wireCommit `json:"commits"`
	// Pending is as in partitionStatus, read after the commits.
	Pending []string   `json:"pending,omitempty"`
	Error   *wireError `json:"error,omitempty"`
}

type wireCommit struct {
	Seq            int64        `json:"seq"`
	CreatedAtMs    int64        `json:"createdAtMs"`
	ActorID        string       `json:"actorId"`
	ClientID       string       `json:"clientId"`
	ClientCommitID string       `json:"clientCommitId"`
	SchemaVersion  int32        `json:"schemaVersion"`
	Changes        []wireChange `json:"changes"`
}

type wireChange struct {
	Table      string            `json:"table"`
	RowID      string            `json:"rowId"`
	Op         storage.Op        `json:"op"`
	RowVersion int64             `json:"rowVersion,omitempty"`
	Scopes     map[string]string `json:"scopes"`
	Row        []byte            `json:"row,omitempty"`
}

func toWire(c storage.Commit) wireCommit {
	w := wireCommit{Seq: c.CommitSeq, CreatedAtMs: c.CreatedAtMs, ActorID: c.ActorID, ClientID: c.ClientID,
		ClientCommitID: c.ClientCommitID, SchemaVersion: c.SchemaVersion, Changes: make([]wireChange, len(c.Changes))}
	for i, ch := range c.Changes {
		w.Changes[i] = wireChange{Table: ch.Table, RowID: ch.RowID, Op: ch.Op, RowVersion: ch.RowVersion, Scopes: ch.Scopes, Row: ch.Row}
	}
	return w
}

func (w wireCommit) changes() []storage.Change {
	out := make([]storage.Change, len(w.Changes))
	for i, ch := range w.Changes {
		out[i] = storage.Change{Table: ch.Table, RowID: ch.RowID, Op: ch.Op, RowVersion: ch.RowVersion, Scopes: ch.Scopes, Row: ch.Row}
	}
	return out
}

// pushRequest asks syncnode.edge.<edge>.push to apply a forwarded
// request's commits: Body is the request without its pull half, run for
// the caller the hub authenticated, with the scopes the hub resolved.
type pushRequest struct {
	Partition string              `json:"partition"`
	ActorID   string              `json:"actorId"`
	Scopes    map[string][]string `json:"scopes"`
	Body      []byte              `json:"body"`
}

// pushReply carries the result the edge stored for each commit, by
// clientCommitId.
type pushReply struct {
	Records map[string]wireRecord `json:"records"`
	Error   *wireError            `json:"error,omitempty"`
}

type wireRecord struct {
	ActorID     string             `json:"actorId,omitempty"`
	Status      storage.PushStatus `json:"status"`
	CommitSeq   int64              `json:"commitSeq,omitempty"`
	Result      []byte             `json:"result"`
	CreatedAtMs int64              `json:"createdAtMs"`
}

// wireError is an SSP2 error crossing the link; any other failure
// crosses as sync.internal_error.
type wireError struct {
	Code    ssp2.Code       `json:"code"`
	Message string          `json:"message"`
	Details json.RawMessage `json:"details,omitempty"`
}

func errorToWire(err error) *wireError {
	var se *ssp2.Error
	if errors.As(err, &se) {
		return &wireError{Code: se.Code, Message: se.Message, Details: se.Details}
	}
	return &wireError{Code: ssp2.CodeInternalError, Message: "internal error at the edge"}
}

func (w *wireError) err() error {
	return &ssp2.Error{Code: w.Code, Op: "edge", Message: w.Message, Details: w.Details}
}

// rowsRequest asks syncnode.edge.<edge>.rows for a page of one table's
// rows of a partition after AfterRowID.
type rowsRequest struct {
	Partition  string `json:"partition"`
	Table      string `json:"table"`
	AfterRowID string `json:"afterRowId"`
	Limit      int    `json:"limit"`
}

// rowsReply is the page, with the partition row read before it: every
// row is at least as new as MaxCommitSeq.
type rowsReply struct {
	LogEpoch     string     `json:"logEpoch"`
	MaxCommitSeq int64      `json:"maxCommitSeq"`
	HorizonSeq   int64      `json:"horizonSeq"`
	Rows         []wireRow  `json:"rows"`
	Error        *wireError `json:"error,omitempty"`
}

type wireRow struct {
	RowID          string            `json:"rowId"`
	Version        int64             `json:"version"`
	Scopes         map[string]string `json:"scopes"`
	Row            []byte            `json:"row"`
	ColumnVersions []byte            `json:"columnVersions,omitempty"`
}

// blobRequest asks syncnode.edge.<edge>.blob for a partition's row of
// a blob.
type blobRequest struct {
	Partition string `json:"partition"`
	BlobID    string `json:"blobId"`
}

// blobReply is the edge's row: Object names the object in the edge's
// blob bucket. Found is false when the partition does not hold the blob.
type blobReply struct {
	Found      bool       `json:"found"`
	ByteLength int64      `json:"byteLength"`
	MediaType  string     `json:"mediaType,omitempty"`
	Object     string     `json:"object"`
	Error      *wireError `json:"error,omitempty"`
}

// commandRequest asks syncnode.edge.<edge>.command to run a remote
// command (package operations) the hub forwards: Call is the encoded
// command request, run for the caller the hub authenticated, with the
// scopes the hub resolved.
type commandRequest struct {
	Partition string              `json:"partition"`
	ActorID   string              `json:"actorId"`
	Scopes    map[string][]string `json:"scopes"`
	Call      []byte              `json:"call"`
}

// commandReply carries the edge's reply to the command (Reply, opaque
// here), or a failure to run it at all.
type commandReply struct {
	Reply []byte     `json:"reply,omitempty"`
	Error *wireError `json:"error,omitempty"`
}
