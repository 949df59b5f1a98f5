package admin

import (
	"encoding/json"
	"time"

	"github.com/syncnode/syncnode/storage"
)

// The JSON bodies of the admin endpoints. Every request is a JSON object
// (an empty body is the empty object); unknown fields are refused. Times
// are Unix milliseconds unless the field says otherwise.

// Empty is the request of endpoints that take no arguments.
type Empty struct{}

// NodeInfo answers node.info.
type NodeInfo struct {
	Node    string `json:"node"`
	Version string `json:"version"`
	// SchemaVersion is the running build's schema version;
	// StoredSchemaVersion the one installed in SQL (they differ during a
	// rolling migration).
	SchemaVersion       int32 `json:"schemaVersion"`
	StoredSchemaVersion int32 `json:"storedSchemaVersion"`
	// Storage is "sqlite" or "postgres".
	Storage   string    `json:"storage"`
	StartedAt time.Time `json:"startedAt"`
	UptimeMs  int64     `json:"uptimeMs"`
	// Ready is what /readyz says; NotReady the reason when it is false.
	Ready    bool   `json:"ready"`
	NotReady string `json:"notReady,omitempty"`
	// Hooks lists the host hooks this node asks (scopes, validate, token).
	Hooks []string  `json:"hooks"`
	Relay RelayInfo `json:"relay"`
}

// RelayInfo is the commit relay's progress: its counters since the node
// started, and the lag between the commit log and SYNC_COMMITS.
type RelayInfo struct {
	Events    int64 `json:"events"`
	Batches   int64 `json:"batches"`
	Conflicts int64 `json:"conflicts"`
	Failures  int64 `json:"failures"`
	// Lag is the number of commits in SQL not yet in the stream, summed
	// over the partitions checked; PartitionsBehind how many have any.
	Lag              int64 `json:"lag"`
	PartitionsBehind int   `json:"partitionsBehind"`
	// PartitionsChecked is how many partitions Lag covers: all of them,
	// unless there are more than MaxLagPartitions (Partial).
	PartitionsChecked int  `json:"partitionsChecked"`
	Partial           bool `json:"partial,omitempty"`
	// LagError is set when the stream could not be read.
	LagError string `json:"lagError,omitempty"`
}

// PartitionsRequest asks partitions.list for a page of partitions, in id
// order after After (absent: from the first; "" is a valid partition id).
type PartitionsRequest struct {
	After *string `json:"after,omitempty"`
	// Limit defaults to DefaultLimit, at most MaxLimit.
	Limit int `json:"limit,omitempty"`
}

// PartitionsResponse is one page; Next is the After of the next page,
// absent on the last.
type PartitionsResponse struct {
	Partitions []Partition `json:"partitions"`
	Next       *string     `json:"next,omitempty"`
}

// Partition is a partition's registry row.
type Partition struct {
	Partition     string `json:"partition"`
	LogEpoch      string `json:"logEpoch"`
	EpochRequired bool   `json:"epochRequired,omitempty"`
	MaxCommitSeq  int64  `json:"maxCommitSeq"`
	HorizonSeq    int64  `json:"horizonSeq"`
	CreatedAtMs   int64  `json:"createdAtMs"`
	LastSeenMs    int64  `json:"lastSeenMs"`
}

func partitionOf(p storage.Partition) Partition {
	return Partition{Partition: p.ID, LogEpoch: p.LogEpoch, EpochRequired: p.EpochRequired, MaxCommitSeq: p.MaxCommitSeq,
		HorizonSeq: p.HorizonSeq, CreatedAtMs: p.CreatedAtMs, LastSeenMs: p.LastSeenMs}
}

// PartitionRequest names one partition.
type PartitionRequest struct {
	Partition string `json:"partition"`
}

// PartitionInfo answers partitions.info.
type PartitionInfo struct {
	Partition
	// Token is the partition's subject token (sync.<token>.commit.>).
	Token string         `json:"token"`
	Relay PartitionRelay `json:"relay"`
	Gate  GateInfo       `json:"gate"`
}

// PartitionRelay is how far the stream holds the partition's log.
type PartitionRelay struct {
	// PublishedSeq is the last commitSeq of the current epoch in
	// SYNC_COMMITS (0: none); Lag = MaxCommitSeq - PublishedSeq, or the
	// retained log when the stream holds another epoch.
	PublishedSeq int64  `json:"publishedSeq"`
	Lag          int64  `json:"lag"`
	StreamSeq    uint64 `json:"streamSeq,omitempty"`
	Error        string `json:"error,omitempty"`
}

// GateInfo is the serve gate of one partition, as SQL has it, and whether
// this node serves it.
type GateInfo struct {
	// SchemaVersion and SchemaRevision are the stored schema's;
	// RunningSchemaVersion the build's.
	SchemaVersion        int32  `json:"schemaVersion"`
	SchemaRevision       int64  `json:"schemaRevision"`
	RunningSchemaVersion int32  `json:"runningSchemaVersion"`
	Registered           bool   `json:"registered"`
	LogEpoch             string `json:"logEpoch,omitempty"`
	// Revision rises with every epoch rotation and checkpoint transition.
	Revision int64 `json:"revision"`
	// WriterFence is the lowest schema version allowed to write, if set.
	WriterFence *int32 `json:"writerFence,omitempty"`
	// Pending are the unactivated checkpoints at the running version:
	// while there are any, only processes that declared them serve.
	Pending []PendingCheckpoint `json:"pending"`
	// Serving says whether the answering node admits requests for the
	// partition; Refusal is its serve-gate error otherwise.
	Serving bool   `json:"serving"`
	Refusal *Error `json:"refusal,omitempty"`
	// WatchLive is true when the node admits from its KV-watched view,
	// false when it reads SQL per request.
	WatchLive bool `json:"watchLive"`
}

// PendingCheckpoint is an unactivated checkpoint.
type PendingCheckpoint struct {
	Name  string `json:"name"`
	State string `json:"state"`
}

// ClientsRequest asks partitions.clients for a page of a partition's
// client records, in client id order after After.
type ClientsRequest struct {
	Partition string `json:"partition"`
	After     string `json:"after,omitempty"`
	Limit     int    `json:"limit,omitempty"`
}

// ClientsResponse is one page; Next is the After of the next page, absent
// on the last.
type ClientsResponse struct {
	Clients []ClientRecord `json:"clients"`
	Next    string         `json:"next,omitempty"`
}

// ClientRecord is one client record.
type ClientRecord struct {
	ClientID    string `json:"clientId"`
	ActorID     string `json:"actorId"`
	WireVersion uint16 `json:"wireVersion"`
	Cursor      int64  `json:"cursor"`
	// Behind is the partition's MaxCommitSeq minus the client's cursor.
	Behind      int64 `json:"behind"`
	UpdatedAtMs int64 `json:"updatedAtMs"`
	// Subscriptions is the client's last subscription list, as the engine
	// stored it.
	Subscriptions json.RawMessage `json:"subscriptions,omitempty"`
}

// PruneRequest asks partitions.prune to prune one partition's commit log
// (SPEC.md §4.6): the horizon rises to ThroughSeq (default: the max
// commitSeq) lowered by the retention floors; zero floors are the store's
// defaults unless Literal.
type PruneRequest struct {
	Partition          string `json:"partition"`
	ThroughSeq         int64  `json:"throughSeq,omitempty"`
	ActiveWindowMs     int64  `json:"activeWindowMs,omitempty"`
	AgeForceMs         int64  `json:"ageForceMs,omitempty"`
	MinRetainedCommits int64  `json:"minRetainedCommits,omitempty"`
	Literal            bool   `json:"literal,omitempty"`
}

// PruneResponse is the horizon after the pass.
type PruneResponse struct {
	Partition      string `json:"partition"`
	HorizonSeq     int64  `json:"horizonSeq"`
	RemovedCommits int64  `json:"removedCommits"`
}

// CheckpointsRequest asks checkpoints.list for every checkpoint, or one
// partition's.
type CheckpointsRequest struct {
	Partition *string `json:"partition,omitempty"`
}

// CheckpointsResponse lists checkpoints.
type CheckpointsResponse struct {
	Checkpoints []Checkpoint `json:"checkpoints"`
}

// Checkpoint is a backfill checkpoint (package gate).
type Checkpoint struct {
	Partition     string `json:"partition"`
	Name          string `json:"name"`
	SchemaVersion int32  `json:"schemaVersion"`
	State         string `json:"state"`
	OwnerEpoch    int64  `json:"ownerEpoch"`
	Watermark     int64  `json:"watermark"`
	ObservedRows  int64  `json:"observedRows"`
	UpdatedAtMs   int64  `json:"updatedAtMs"`
}

// CheckpointOf converts a stored checkpoint.
func CheckpointOf(c storage.Checkpoint) Checkpoint {
	return Checkpoint{Partition: c.Partition, Name: c.Name, SchemaVersion: c.SchemaVersion, State: string(c.State),
		OwnerEpoch: c.OwnerEpoch, Watermark: c.Watermark, ObservedRows: c.ObservedRows, UpdatedAtMs: c.UpdatedAtMs}
}

// DeclareRequest asks checkpoints.declare to declare a checkpoint of the
// stored schema version.
type DeclareRequest struct {
	Partition string `json:"partition"`
	Name      string `json:"name"`
}

// ActivateRequest asks checkpoints.activate to activate a checkpoint;
// OwnerEpoch and Watermark default to the stored row's.
type ActivateRequest struct {
	Partition  string   `json:"partition"`
	Name       string   `json:"name"`
	Sources    []string `json:"sources"`
	OwnerEpoch *int64   `json:"ownerEpoch,omitempty"`
	Watermark  *int64   `json:"watermark,omitempty"`
}

// ActivateResponse is an activated checkpoint. A checkpoint that did not
// activate is an admin.conflict error whose details are an
// ActivateResponse with the outcome.
type ActivateResponse struct {
	Partition  string `json:"partition"`
	Name       string `json:"name"`
	Outcome    string `json:"outcome"`
	OwnerEpoch int64  `json:"ownerEpoch"`
	Watermark  int64  `json:"watermark"`
}

// RotateEpochResponse is a partition's new log epoch.
type RotateEpochResponse struct {
	Partition string `json:"partition"`
	LogEpoch  string `json:"logEpoch"`
}

// RepublishResponse answers checkpoints.republish.
type RepublishResponse struct {
	Republished bool `json:"republished"`
}

// SegmentStats answers segments.stats.
type SegmentStats struct {
	Objects        int64  `json:"objects"`
	Bytes          int64  `json:"bytes"`
	Publications   int64  `json:"publications"`
	StoredBytes    uint64 `json:"storedBytes"`
	Builds         int64  `json:"builds"`
	Reuses         int64  `json:"reuses"`
	Puts           int64  `json:"puts"`
	Uploads        int64  `json:"uploads"`
	UploadsSkipped int64  `json:"uploadsSkipped"`
	CacheHits      int64  `json:"cacheHits"`
	CacheMisses    int64  `json:"cacheMisses"`
	CachedBytes    int64  `json:"cachedBytes"`
}

// SegmentPruneRequest asks segments.prune to delete expired publications
// and the objects left without one; GC also collects what the index no
// longer references (it lists the bucket).
type SegmentPruneRequest struct {
	GC bool `json:"gc,omitempty"`
}

// SegmentPruneResponse counts what was removed.
type SegmentPruneResponse struct {
	Publications  int64 `json:"publications"`
	Objects       int64 `json:"objects"`
	Busy          int64 `json:"busy"`
	ChunkSubjects int   `json:"chunkSubjects,omitempty"`
	Unindexed     int   `json:"unindexed,omitempty"`
}
