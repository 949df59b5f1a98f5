package storage

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

// GateStore is the SQL half of the serve gate (package gate): backfill
// checkpoints, the writer fence and the serve-gate read.
//
// A backfill checkpoint is keyed by (partition, name, schema version) and
// moves declared → backfilling → activated; activated is terminal within
// its schema version. While a checkpoint of the running schema version is
// unactivated, only the process that declared it may serve the partition.
//
// The writer fence is a required writer version per partition. Every
// commit records the writer version of the build that appended it
// (CommitParams.WriterVersion), and a database trigger on the commit table
// refuses a commit whose writer version is missing or below the fence
// (CodeStorageWriterFenceRejected), whoever sends it. A partition without a
// fence row has no barrier. Declaring a checkpoint raises the fence to the
// checkpoint's schema version in the same transaction, and a schema
// migration raises every registered partition's fence to the new version,
// so an older build cannot write into a partition a newer one migrated.
//
// The gate's revisions count changes, not values: the schema revision
// rises whenever the stored schema version changes, and a partition's
// revision whenever its log epoch rotates or one of its checkpoints is
// declared, activated or deleted. They are kept by database triggers, so
// every writer (an older build, an operator's SQL) moves them.
type GateStore interface {
	// EnsureSchemaWithCheckpoints is EnsureSchema for a build that
	// declares checkpoints: in the one transaction that installs, verifies
	// or migrates the schema (and writes the marker), it creates every
	// declaration absent so far as a declared row (existing rows are
	// kept), raises the declared partitions' fences, and, when the stored
	// version was older, every registered partition's fence to s.Version.
	// Declarations must be at s.Version (CodeStorageInvalidCheckpoint). It
	// then refuses, rolling everything back, when an unactivated
	// checkpoint at s.Version exists that decls does not name
	// (CodeStorageCheckpointIncomplete, with the missing ones in
	// Details). EnsureSchema(ctx, s) is this with no declarations.
	EnsureSchemaWithCheckpoints(ctx context.Context, s *schema.Schema, decls []CheckpointKey) error

	// CheckpointDeclare creates the checkpoint as declared unless it
	// exists (a declared, backfilling or activated row is returned
	// unchanged), and raises the partition's writer fence to its schema
	// version, in one transaction holding the partition write lock (an
	// unregistered partition is declared without one: it has no commits).
	// The schema version must be the stored one
	// (CodeStorageInvalidCheckpoint).
	CheckpointDeclare(ctx context.Context, key CheckpointKey, nowMs int64) (Checkpoint, error)

	// CheckpointClaim makes the caller the checkpoint's owner: it
	// increments the owner epoch and moves declared to backfilling, in one
	// statement, so racing claims get distinct epochs and the last one
	// owns it. An absent or activated checkpoint is refused
	// (CodeStorageCheckpointNotDeclared).
	CheckpointClaim(ctx context.Context, key CheckpointKey, nowMs int64) (Checkpoint, error)

	// CheckpointAdvance records progress in its own transaction; see
	// CheckpointAdvancer.
	CheckpointAdvance(ctx context.Context, p CheckpointAdvanceParams) (bool, error)

	// CheckpointActivate activates the checkpoint under the partition
	// write lock, after checking, in this order: the row exists and is
	// not activated (CodeStorageCheckpointNotDeclared), p.OwnerEpoch is
	// its owner epoch (CodeStorageCheckpointSuperseded), the watermark is
	// within 0..max commitSeq and the source tables are tables of the
	// stored schema (CodeStorageInvalidCheckpoint), and the partition's writer fence is
	// at least the checkpoint's schema version
	// (CodeStorageCheckpointFenceMissing). Then the source tables'
	// changes above the watermark decide: ActivateStale when one exists,
	// ActivateUnverifiable when pruning passed the watermark (a pruned
	// window is never reported clean), else the row becomes activated
	// with p.Watermark and ActivateActivated is returned. Every refusal
	// and every outcome but ActivateActivated changes nothing.
	CheckpointActivate(ctx context.Context, p CheckpointActivateParams) (ActivateOutcome, error)

	// Checkpoints lists the checkpoints of the given partitions (of every
	// partition when none is given), ordered by partition, schema version
	// and name.
	Checkpoints(ctx context.Context, partitions ...string) ([]Checkpoint, error)

	// SourceCoverage returns the highest commitSeq whose changes touch one
	// of tables (0 when none does, or tables is empty). It reads the
	// retained log only.
	SourceCoverage(ctx context.Context, partition string, tables []string) (int64, error)

	// SourceChangesAbove reports whether a change to one of tables was
	// committed above seq: SourceUnverifiable when the partition's horizon
	// passed seq (the window was pruned), else SourceChanged or
	// SourceClean. No tables is SourceClean.
	SourceChangesAbove(ctx context.Context, partition string, tables []string, seq int64) (SourceChange, error)

	// WriterFence returns the partition's required writer version; ok is
	// false when the partition has no fence.
	WriterFence(ctx context.Context, partition string) (required int32, ok bool, err error)

	// GateRead is the serve-gate read outside a transaction; see
	// GateReader.
	GateRead(ctx context.Context, partition string, running int32) (GateState, error)
}

// GateReader is the serve-gate read. Every ReadTx and Tx implements it, so
// the gate is checked on the connection and in the snapshot that serves.
type GateReader interface {
	// GateRead reads, in one statement, the stored schema version and
	// schema revision, the partition's log epoch and gate revision, and
	// every unactivated checkpoint of the partition at schema version
	// running. Nothing is cached across calls outside a transaction or
	// across transactions. Inside one, a store may answer from the gate
	// columns it read in that transaction with the partition row (Tx's
	// lock, ReadTx.Partition): a read transaction is one snapshot, and
	// under the partition write lock nothing can change the locked
	// partition's gate (rotations, declarations, activations and
	// migrations all take the lock), so a new statement would answer the
	// same.
	GateRead(ctx context.Context, partition string, running int32) (GateState, error)
}

// CheckpointAdvancer records backfill progress. Every Tx implements it, so
// a backfill batch's writes and its progress commit together.
type CheckpointAdvancer interface {
	// CheckpointAdvance sets the watermark and observed rows of a
	// backfilling checkpoint if p.OwnerEpoch is still its owner epoch (a
	// compare-and-set). It reports false, never an error, for a superseded
	// owner, an activated or absent checkpoint; nothing changes then.
	CheckpointAdvance(ctx context.Context, p CheckpointAdvanceParams) (bool, error)
}

// CheckpointState is a checkpoint's lifecycle state.
type CheckpointState string

// Checkpoint states.
const (
	CheckpointDeclared    CheckpointState = "declared"
	CheckpointBackfilling CheckpointState = "backfilling"
	CheckpointActivated   CheckpointState = "activated"
)

// CheckpointKey names a checkpoint; it is also a build's declaration.
type CheckpointKey struct {
	Partition     string
	Name          string
	SchemaVersion int32
}

func (k CheckpointKey) String() string {
	return fmt.Sprintf("%q/%s@%d", k.Partition, k.Name, k.SchemaVersion)
}

// MaxCheckpointNameLen bounds checkpoint names.
const MaxCheckpointNameLen = 128

// MaxPartitionIDLen bounds the partition ids the gate accepts (the bus
// refuses longer ones too).
const MaxPartitionIDLen = 1024

// Check validates the key: a partition id of valid UTF-8 up to
// MaxPartitionIDLen bytes, a name of 1..MaxCheckpointNameLen bytes of
// [A-Za-z0-9_.-], and a positive schema version
// (CodeStorageInvalidCheckpoint).
func (k CheckpointKey) Check() error {
	switch {
	case len(k.Partition) > MaxPartitionIDLen || !utf8.ValidString(k.Partition):
		return invalidCheckpoint("partition id must be valid UTF-8 of at most %d bytes", MaxPartitionIDLen)
	case k.Name == "" || len(k.Name) > MaxCheckpointNameLen:
		return invalidCheckpoint("checkpoint name must be 1 to %d bytes", MaxCheckpointNameLen)
	case strings.IndexFunc(k.Name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.')
	}) >= 0:
		return invalidCheckpoint("checkpoint name %q may hold only letters, digits, '_', '-' and '.'", k.Name)
	case k.SchemaVersion < 1:
		return invalidCheckpoint("checkpoint schema version %d must be positive", k.SchemaVersion)
	}
	return nil
}

func invalidCheckpoint(format string, args ...any) error {
	return ssp2.Errorf(ssp2.CodeStorageInvalidCheckpoint, format, args...)
}

// Checkpoint is a stored checkpoint row.
type Checkpoint struct {
	CheckpointKey
	State CheckpointState
	// Watermark is the highest source commitSeq the projection was
	// derived from.
	Watermark int64
	// OwnerEpoch counts claims; the current owner holds the latest.
	OwnerEpoch   int64
	ObservedRows int64
	UpdatedAtMs  int64
}

// CheckpointAdvanceParams is one progress record of a backfill.
type CheckpointAdvanceParams struct {
	CheckpointKey
	OwnerEpoch   int64
	Watermark    int64
	ObservedRows int64
	NowMs        int64
}

// CheckpointActivateParams asks to activate a checkpoint.
type CheckpointActivateParams struct {
	CheckpointKey
	OwnerEpoch int64
	// Watermark is the highest source commitSeq the projection covers.
	Watermark int64
	// Sources are the tables the projection is derived from; a change to
	// any of them above Watermark makes the activation stale.
	Sources []string
	// OwnClientID, when set, is the client id of the backfill's own
	// commits: their changes are the projection's writes, not source
	// changes, so a backfill may write into a source table (a new column
	// of the table it is computed from).
	OwnClientID string
	NowMs       int64
}

// ActivateOutcome is the result of CheckpointActivate.
type ActivateOutcome string

// Activation outcomes.
const (
	ActivateActivated    ActivateOutcome = "activated"
	ActivateStale        ActivateOutcome = "stale"
	ActivateUnverifiable ActivateOutcome = "unverifiable"
)

// SourceChange is the answer of SourceChangesAbove.
type SourceChange string

// Source change answers.
const (
	SourceClean        SourceChange = "clean"
	SourceChanged      SourceChange = "changed"
	SourceUnverifiable SourceChange = "unverifiable"
)

// GateState is one serve-gate read.
type GateState struct {
	// HasMarker is false on a database without a schema marker.
	HasMarker     bool
	SchemaVersion int32
	// SchemaRevision rises whenever the stored schema version changes.
	SchemaRevision int64
	// Registered is false for an unknown partition (LogEpoch is then "").
	Registered bool
	LogEpoch   string
	// Revision rises whenever the partition's log epoch rotates or one of
	// its checkpoints is declared, activated or deleted.
	Revision int64
	// Pending are the partition's unactivated checkpoints at the running
	// schema version, by name.
	Pending []PendingCheckpoint
}

// PendingCheckpoint is an unactivated checkpoint in a GateState.
type PendingCheckpoint struct {
	Name  string
	State CheckpointState
}

// SameToken reports whether two reads saw the same gate: equal schema
// version and revision, log epoch and partition revision. Revisions make
// a change that was undone (V → W → V) visible.
func (g GateState) SameToken(o GateState) bool {
	return g.HasMarker == o.HasMarker && g.SchemaVersion == o.SchemaVersion && g.SchemaRevision == o.SchemaRevision &&
		g.Registered == o.Registered && g.LogEpoch == o.LogEpoch && g.Revision == o.Revision
}

// IncompleteDetails is the Details of CodeStorageCheckpointIncomplete.
type IncompleteDetails struct {
	Missing []IncompleteCheckpoint `json:"missing"`
}

// IncompleteCheckpoint names one undeclared, unactivated checkpoint.
type IncompleteCheckpoint struct {
	Partition     string `json:"partition"`
	Name          string `json:"name"`
	SchemaVersion int32  `json:"schemaVersion"`
	State         string `json:"state"`
}
