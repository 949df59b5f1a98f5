package bus

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// CloudEvents attributes of commit events (binary content mode: every
// attribute is a ce-* header, the body is the data).
const (
	SpecVersion      = "1.0"
	EventTypeCommit  = "dev.syncnode.commit.v1"
	ContentTypeJSON  = "application/json"
	SourcePrefix     = "syncnode://"
	timeLayoutMillis = "2006-01-02T15:04:05.000Z07:00"
)

// Headers. CloudEvents extension names are lowercase alphanumeric only.
const (
	HeaderSpecVersion = "ce-specversion"
	HeaderID          = "ce-id"
	HeaderType        = "ce-type"
	HeaderSource      = "ce-source"
	HeaderTime        = "ce-time"
	HeaderSubject     = "ce-subject"
	HeaderContentType = "content-type"
	// HeaderPartition carries the partition token (the subject token).
	HeaderPartition = "ce-partition"
	// HeaderLogEpoch carries the escaped log epoch.
	HeaderLogEpoch = "ce-logepoch"
	// HeaderCommitSeq carries the commit sequence in decimal.
	HeaderCommitSeq = "ce-commitseq"
	// HeaderTable carries the table name.
	HeaderTable = "ce-table"
	// HeaderReactions carries the number of durable reactions the commit
	// enqueued, in decimal, when the publisher knows it (the relay does
	// for commits its own process handed it; a commit read back from the
	// log carries none). Absent means unknown: a reaction runner claims
	// on an event without it, and skips its claim on "0".
	HeaderReactions = "ce-reactions"
	// HeaderSyncPartition carries the full escaped partition id when the
	// subject token is hashed (ids whose escaped form exceeds MaxTokenLen).
	HeaderSyncPartition = "Sync-Partition"
)

// Source is the ce-source of events published by node: syncnode://<node>.
func Source(node string) string { return SourcePrefix + node }

// ErrInvalidNode is returned for a node name that cannot appear in a
// ce-source.
var ErrInvalidNode = errors.New("invalid node name")

// CheckNode reports whether node is a valid node name: [A-Za-z0-9._-]+.
func CheckNode(node string) error {
	if node == "" {
		return fmt.Errorf("%w: empty", ErrInvalidNode)
	}
	for i := 0; i < len(node); i++ {
		if c := node[i]; !keep(c) && c != '.' {
			return fmt.Errorf("%w: %q must match [A-Za-z0-9._-]+", ErrInvalidNode, node)
		}
	}
	return nil
}

// EventID is the ce-id and Nats-Msg-Id of one commit event:
// <partition token>:<logEpoch>:<commitSeq>:<table>, the epoch escaped like
// a partition id so that ':' cannot appear inside a field.
func EventID(p Partition, logEpoch string, commitSeq int64, table string) string {
	return eventID(p.token, EscapeEpoch(logEpoch), commitSeq, table)
}

func eventID(token, epoch string, seq int64, table string) string {
	var b strings.Builder
	b.Grow(len(token) + len(epoch) + len(table) + 24)
	b.WriteString(token)
	b.WriteByte(':')
	b.WriteString(epoch)
	b.WriteByte(':')
	b.WriteString(strconv.FormatInt(seq, 10))
	b.WriteByte(':')
	b.WriteString(table)
	return b.String()
}

// EscapeEpoch is a log epoch as it appears in ce-logepoch and event ids:
// escaped like a partition id. Epochs are short random strings; only
// unusual bytes change.
func EscapeEpoch(epoch string) string { return escape(epoch) }

// Meta is what a commit event's headers and subject say about it.
type Meta struct {
	ID        string
	Partition Partition
	// LogEpoch is the escaped epoch (ce-logepoch); equal to the raw epoch
	// for ordinary epochs.
	LogEpoch  string
	CommitSeq int64
	Table     string
	Time      time.Time
	Source    string
	// Reactions is ce-reactions: how many durable reactions the commit
	// enqueued, or -1 when the event does not say.
	Reactions int
}

// ErrNotCommitEvent is returned by ParseMeta for a message that is not a
// syncnode commit event.
var ErrNotCommitEvent = errors.New("not a syncnode commit event")

// ParseMeta reads the subject and headers of a commit event of this
// namespace.
func (n Names) ParseMeta(subject string, h nats.Header) (Meta, error) {
	token, table, ok := n.ParseCommitSubject(subject)
	if !ok {
		return Meta{}, fmt.Errorf("%w: subject %q", ErrNotCommitEvent, subject)
	}
	if h.Get(HeaderType) != EventTypeCommit {
		return Meta{}, fmt.Errorf("%w: ce-type %q", ErrNotCommitEvent, h.Get(HeaderType))
	}
	p, err := PartitionFromToken(token, h.Get(HeaderSyncPartition))
	if err != nil {
		return Meta{}, fmt.Errorf("parse event: %w", err)
	}
	seq, err := strconv.ParseInt(h.Get(HeaderCommitSeq), 10, 64)
	if err != nil || seq < 1 {
		return Meta{}, fmt.Errorf("%w: ce-commitseq %q", ErrNotCommitEvent, h.Get(HeaderCommitSeq))
	}
	m := Meta{
		ID:        h.Get(HeaderID),
		Partition: p,
		LogEpoch:  h.Get(HeaderLogEpoch),
		CommitSeq: seq,
		Table:     table,
		Source:    h.Get(HeaderSource),
		Reactions: -1,
	}
	if v := h.Get(HeaderReactions); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			m.Reactions = n
		}
	}
	if ts := h.Get(HeaderTime); ts != "" {
		m.Time, _ = time.Parse(time.RFC3339Nano, ts)
	}
	return m, nil
}

// CommitBody is the JSON body of a commit event: the changes of one commit
// to one table. Consumers need no syncnode code to read it; this type is
// for Go consumers' convenience.
type CommitBody struct {
	Partition      string `json:"partition"`
	LogEpoch       string `json:"logEpoch"`
	CommitSeq      int64  `json:"commitSeq"`
	CreatedAtMs    int64  `json:"createdAtMs"`
	ActorID        string `json:"actorId"`
	ClientID       string `json:"clientId"`
	ClientCommitID string `json:"clientCommitId"`
	SchemaVersion  int32  `json:"schemaVersion"`
	Table          string `json:"table"`
	// ChangeCount is the number of changes of this commit to this table,
	// also when Changes was left out.
	ChangeCount int          `json:"changeCount"`
	Changes     []ChangeBody `json:"changes"`
	// RowsOmitted is set when row contents were left out to fit the
	// server's maximum message size; pull the rows instead.
	RowsOmitted bool `json:"rowsOmitted,omitempty"`
	// ChangesOmitted is set when even the change list did not fit.
	ChangesOmitted bool `json:"changesOmitted,omitempty"`
}

// ChangeBody is one row change.
type ChangeBody struct {
	RowID string `json:"rowId"`
	// Op is "upsert" or "delete".
	Op string `json:"op"`
	// RowVersion is the row's server version after an upsert.
	RowVersion int64             `json:"rowVersion,omitempty"`
	Scopes     map[string]string `json:"scopes"`
	// Row is the full row after an upsert as {column: value}: integers as
	// numbers, bytes as base64 strings, json columns embedded as JSON.
	// Absent for deletes.
	Row json.RawMessage `json:"row,omitempty"`
	// RowPayload is the row in SSP2 row-codec encoding (base64), only when
	// it could not be decoded with the running schema.
	RowPayload []byte `json:"rowPayload,omitempty"`
}

// Op names.
const (
	OpUpsert = "upsert"
	OpDelete = "delete"
)

// DecodeBody parses a commit event body.
func DecodeBody(data []byte) (CommitBody, error) {
	var b CommitBody
	if err := json.Unmarshal(data, &b); err != nil {
		return CommitBody{}, fmt.Errorf("decode commit event: %w", err)
	}
	return b, nil
}
