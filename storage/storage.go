package storage

import (
	"context"
	"encoding/json"
	"time"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

// Store is the SQL source of truth. Methods that take a partition operate
// on that partition only. Implementations are safe for concurrent use.
//
// The interface is large on purpose (one seam, two dialects, one contract
// suite); consumers should declare the narrow interface they need.
type Store interface {
	LeaseStore

	// EnsureSchema installs or migrates the internal tables and one
	// application table per schema table, then records a schema marker
	// (version and per-table layouts). It refuses, changing nothing:
	//   - a stored version newer than s.Version (CodeStorageSchemaVersionNewer);
	//   - at an equal version, stored layouts that differ from s
	//     (CodeStorageStoredLayoutMismatch) or a physical catalog with
	//     missing tables/columns or wrong types, nullability or primary key
	//     (CodeStoragePhysicalLayoutMismatch).
	// An older stored version migrates forward in one transaction: new
	// tables, appended nullable columns, rebuilt indexes.
	EnsureSchema(ctx context.Context, s *schema.Schema) error

	// SchemaMarker returns the stored schema version and layouts, or
	// ok=false on a fresh database.
	SchemaMarker(ctx context.Context) (m SchemaMarker, ok bool, err error)

	// PartitionTouch returns the partition's registry row, creating it on
	// first touch with a random log epoch, and refreshes its last-seen time.
	// To keep the request path free of writes it refreshes last-seen only
	// when the stored value is older than TouchGranularityMs.
	PartitionTouch(ctx context.Context, partition string, nowMs int64) (Partition, error)

	// PartitionTouchClient is PartitionTouch that also returns clientID's
	// record (ok=false when it has none), read in one statement with the
	// partition row: the start of a sync request in one read. A partition
	// created by the touch has no client records.
	PartitionTouchClient(ctx context.Context, partition, clientID string, nowMs int64) (p Partition, c Client, ok bool, err error)

	// PartitionGet returns the registry row without touching it
	// (CodeStoragePartitionUnregistered when absent).
	PartitionGet(ctx context.Context, partition string) (Partition, error)

	// Partitions lists every registered partition, ordered by id.
	Partitions(ctx context.Context) ([]Partition, error)

	// PartitionRotateEpoch gives the partition a new random log epoch, marks
	// epoch validation required, and deletes its client records, in one
	// transaction serialized with pushes and pruning. Used after a backup
	// restore (SPEC.md §2.1).
	PartitionRotateEpoch(ctx context.Context, partition string, nowMs int64) (Partition, error)

	// PartitionAdopt registers the partition with the given log epoch when
	// it has no registry row, and returns the row: a read replica of a log
	// kept by another node (an edge's, on its hub) carries that node's
	// epoch. An existing row is returned unchanged, whatever its epoch:
	// the caller compares. An epoch the stores cannot hold (empty, over 1
	// KiB, U+0000) is refused with CodeInvalidRequest.
	PartitionAdopt(ctx context.Context, partition, logEpoch string, nowMs int64) (Partition, error)

	// PartitionRebase sets a registered partition's log epoch from
	// fromEpoch to logEpoch and raises its max commit seq and horizon to
	// seq, under the partition write lock: a read replica rebuilt from a
	// snapshot of its home's rows continues the home's log after the
	// snapshot's seq, under the home's epoch. A partition whose epoch is
	// not fromEpoch is refused (CodeStoragePruneEpochMismatch: the
	// rebuild was superseded), as are seq below the max commit seq, or
	// above it while the partition retains commits
	// (CodeStorageInvalidPruneCursor), an epoch the stores cannot hold
	// (CodeInvalidRequest) and an unregistered partition
	// (CodeStoragePartitionUnregistered). Client records and rows are
	// left alone.
	PartitionRebase(ctx context.Context, partition, fromEpoch, logEpoch string, seq int64) (Partition, error)

	// WriteTx runs fn in a transaction holding the partition write lock.
	// fn's error rolls the transaction back and is returned unchanged; a nil
	// return commits. The partition must be registered
	// (CodeStoragePartitionUnregistered). If a database error inside fn was
	// not undone by rolling back a Savepoint, a nil return from fn rolls
	// back too and WriteTx returns ErrTxAborted. WriteTx returns after the
	// commit is durable. fn must use only tx: calling a writing Store
	// method from inside fn deadlocks where the store has one writer.
	WriteTx(ctx context.Context, partition string, fn func(tx Tx) error) error

	// ReadTx runs fn in a read-only transaction with a consistent snapshot.
	// It takes no lock.
	ReadTx(ctx context.Context, fn func(tx ReadTx) error) error

	// IdempotencyGet returns the stored push result for the key outside any
	// lock: the optimistic lookup of the push path.
	IdempotencyGet(ctx context.Context, partition, clientID, clientCommitID string) (PushRecord, bool, error)

	// ClientGet returns the client record.
	ClientGet(ctx context.Context, partition, clientID string) (Client, bool, error)

	// ClientBind creates c's record if its client id has none and returns
	// the stored record: c itself, or the existing one, which may be bound
	// to another actor (the caller refuses that, SPEC.md §1.5). It takes no
	// partition lock; of two concurrent binds of one id the first wins.
	ClientBind(ctx context.Context, c Client) (Client, error)

	// ClientPut creates or replaces the client record of c's actor. A
	// record bound to another actor is left alone and the put fails with
	// ssp2.CodeInvalidClientID: a client id never changes hands. It takes
	// no partition lock.
	ClientPut(ctx context.Context, c Client) error

	// ClientAck atomically raises the client's cursor to cursor (never
	// lowers it) and stamps updatedAtMs, if the record exists, is bound to
	// actorID, and logEpoch is still the partition's current epoch. It never
	// creates a record. It reports whether the record was updated.
	ClientAck(ctx context.Context, p ClientAckParams) (bool, error)

	// ClientAdvance is ClientAck for a cursor advance whose loss is
	// harmless (the pull path's: the client holds its own cursor, and an
	// older stored one only keeps more log and replays more deltas). The
	// store may acknowledge it before it is durable: it becomes durable
	// with a later write transaction of the store, at most
	// ClientAdvanceDelay later while the store is open, and a crash may
	// lose it, leaving the previous cursor. Reads may not see it until
	// then. A ClientPut of the same client supersedes a pending advance.
	ClientAdvance(ctx context.Context, p ClientAckParams) error

	// CommitMaxSeq returns the partition's highest commitSeq (0 when none).
	CommitMaxSeq(ctx context.Context, partition string) (int64, error)

	// CommitRange returns whole commits (every change, every table) with
	// afterSeq < commitSeq, oldest first, at most limit commits (limit
	// outside 1..MaxCommitRangeLimit: CodeStorageInvalidLimit). The relay
	// publishes from it.
	CommitRange(ctx context.Context, partition string, afterSeq int64, limit int) ([]Commit, error)

	// PartitionCommitRange is CommitRange with the partition's registry
	// row read in the same snapshot (CodeStoragePartitionUnregistered when
	// it has none): the commits are the log of that row's epoch.
	PartitionCommitRange(ctx context.Context, partition string, afterSeq int64, limit int) (Partition, []Commit, error)

	// Prune raises the partition's horizon and deletes commits, changes,
	// scope-index entries and tombstones at or below it, in one transaction
	// holding the
	// partition write lock (SPEC.md §4.6). It refuses an unregistered
	// partition (CodeStoragePartitionUnregistered), an epoch that is not the
	// current one (CodeStoragePruneEpochMismatch), a ThroughSeq below 0 or
	// above the max commitSeq (CodeStorageInvalidPruneCursor) and negative
	// windows or counts (CodeStorageInvalidLimit). A ThroughSeq at or below
	// the current horizon changes nothing: the horizon never goes down.
	Prune(ctx context.Context, p PruneParams) (PruneResult, error)

	// SegmentIndex is the bootstrap segment index (segments.go).
	SegmentIndex

	// BlobIndex holds blob rows and the blob reference index (blobs.go).
	BlobIndex

	// GateStore holds checkpoints, the writer fence and the serve-gate
	// read (gate.go).
	GateStore

	// Admin is privileged maintenance outside the protocol (admin.go).
	Admin

	// ReactionStore claims, completes and inspects durable reactions
	// (reactions.go).
	ReactionStore

	// Capabilities declares the behaviour that legitimately differs
	// between stores.
	Capabilities() Capabilities

	// Close releases connections. It is idempotent.
	Close() error
}

// Capabilities is what a Store declares about itself, so callers and the
// contract suite branch on behaviour rather than on the implementation.
type Capabilities struct {
	// ConcurrentPartitionWriters is true when WriteTx calls on different
	// partitions run in parallel (PostgreSQL: one row lock per partition).
	// False means every write transaction queues behind one writer
	// (SQLite: one writer connection), so a long WriteTx delays every
	// partition.
	ConcurrentPartitionWriters bool
}

// ReadTx is a consistent read snapshot.
type ReadTx interface {
	// Partition returns the registry row as of the snapshot.
	Partition(ctx context.Context, partition string) (Partition, error)

	// RowGet returns one stored row, with its stored scopes and column
	// versions.
	RowGet(ctx context.Context, partition, table, rowID string) (Row, bool, error)

	// RowScanByColumn returns the rows of one table whose column p.Column
	// holds p.Value, in ascending row id order (bytewise), after
	// p.AfterRowID (exclusive), at most p.Limit rows, each with its stored
	// scopes and column versions, as RowGet returns it. It is a trusted
	// server lookup, not scope-checked: the push path reaches the children
	// of a declared reference (SPEC.md §6.11) through it. Reference columns
	// and the leading column of a declared index are indexed; any other
	// column is scanned. A NULL value, a column the table does not declare
	// or a limit outside 1..MaxScanLimit is refused
	// (CodeStorageInvalidLimit for the limit).
	RowScanByColumn(ctx context.Context, p ColumnScanParams) ([]Row, error)

	// RowScan returns rows of one table whose scope columns match scopes
	// (every variable's value in its list), in ascending row id order
	// (bytewise), after p.AfterRowID (exclusive), at most p.Limit rows. A
	// scan with no scope variable is refused (CodeStorageScanRequiresScope);
	// a limit outside 1..MaxScanLimit is refused (CodeStorageInvalidLimit).
	// A variable the table does not declare, or an empty value list,
	// matches no row. The rows carry RowID, ServerVersion and Payload but
	// no Scopes: a scan serves bootstrap pages, which need none, and
	// reading and decoding them would cost a third of the scan; RowGet
	// returns a row's stored scopes.
	RowScan(ctx context.Context, p ScanParams) ([]Row, error)

	// CommitWindow reads the incremental pull window of one table for one
	// set of effective scopes (SPEC.md §4.5). Like RowScan it requires at
	// least one scope variable (CodeStorageScanRequiresScope), and a change
	// matches when its stored value of every variable is in that
	// variable's list. A limit outside 1..MaxWindowLimit is refused
	// (CodeStorageInvalidLimit).
	CommitWindow(ctx context.Context, p WindowParams) (Window, error)

	// LastScopeSeq returns the newest commitSeq of the snapshot holding a
	// change to table whose stored value of variable is one of values, as
	// the scope index records it (the candidates CommitWindow walks for a
	// window whose first variable is variable); 0 when there is none (no
	// such change, or only pruned ones). The engine derives the scope pin
	// of SPEC.md §4.7 from it.
	LastScopeSeq(ctx context.Context, partition, table, variable string, values []string) (int64, error)

	// GateReader is the serve-gate read in this snapshot (gate.go).
	GateReader
}

// Tx is a write transaction holding one partition's write lock. It reads
// its own writes.
//
// A database error inside a Tx (a constraint violation, say) leaves the
// transaction aborted, as PostgreSQL does natively: every later call
// returns ErrTxAborted until a Savepoint taken before the failure is rolled
// back. Both stores behave this way so callers cannot come to rely on
// SQLite's statement-level rollback. Argument errors that never reach the
// database (an unknown table, a bad limit) do not abort.
//
// A store may send a write whose result it already knows (CommitAppend's
// seq, a push result the locked re-check proved absent) together with the
// next statement, to save a round trip; an error of that write then
// surfaces from a later call or from WriteTx, and aborts the transaction
// all the same.
type Tx interface {
	ReadTx

	// Locked returns the locked partition's registry row, read under the
	// lock.
	Locked() Partition

	// IdempotencyGet is the locked re-check of the push path.
	IdempotencyGet(ctx context.Context, clientID, clientCommitID string) (PushRecord, bool, error)

	// IdempotencyPut stores a push result unless one exists for the key;
	// it returns the record that is stored afterwards (the first writer's).
	IdempotencyPut(ctx context.Context, r PushRecord) (PushRecord, error)

	// RowUpsert writes a row of the locked partition: server_version 1 on
	// insert, stored version + 1 on update; it returns the new version.
	// Typed column values come from r.Values; _sync_payload from r.Payload,
	// _sync_column_versions from r.ColumnVersions. An insert clears the
	// row's tombstone (SPEC.md §2.2). The row's references replace its old
	// ones in the blob reference index, one per distinct non-NULL
	// blob_ref value (SPEC.md §5.9.4); each needs its blob held
	// (BlobHeld), or the transaction aborts. A unique, not-null, check or
	// foreign-key violation is returned as a *ConstraintError.
	RowUpsert(ctx context.Context, table string, r RowWrite) (version int64, err error)

	// RowDelete deletes a row of the locked partition and its blob
	// references; it reports whether a row existed. The delete's tombstone
	// is written by CommitAppend.
	RowDelete(ctx context.Context, table, rowID string) (bool, error)

	// TombstoneGet returns the commitSeq of the applied delete that left
	// the row's tombstone in the locked partition (SPEC.md §2.2, §6.2),
	// ok=false when there is none: never deleted, re-inserted since, or
	// pruned with the commit log.
	TombstoneGet(ctx context.Context, table, rowID string) (commitSeq int64, ok bool, err error)

	// CommitAppend appends a commit with the next dense commitSeq, its
	// changes and its scope-index entries (one per table, variable and
	// value, however many changes share it), and raises the partition's max
	// seq. Every row whose last change in the commit is a delete gets a
	// tombstone at the commit's seq, replacing an older one (SPEC.md §2.2).
	// It returns the assigned seq. A change with an unknown op, an upsert
	// without a row or a change without stored scopes is refused before
	// anything is written (the last with CodeMissingScopes, SPEC.md §3.1).
	CommitAppend(ctx context.Context, c CommitParams) (int64, error)

	// Savepoint marks a point the transaction can roll back to without
	// releasing the partition lock (a rejected commit's writes are undone
	// and its rejection persisted under the same lock, SPEC.md §6.8).
	Savepoint(ctx context.Context) (Savepoint, error)

	// CheckpointAdvancer records backfill progress in this transaction
	// (gate.go).
	CheckpointAdvancer

	// ReactionEnqueuer writes the commit's planned reactions in this
	// transaction (reactions.go).
	ReactionEnqueuer

	// BlobChecker is the push-time blob existence check (blobs.go).
	BlobChecker
}

// Savepoint is a rollback point inside a Tx. After Rollback or Release it
// is spent; savepoints nest and must be ended innermost first.
type Savepoint interface {
	// Rollback undoes every write since the savepoint (including commits
	// appended since, whose seqs are reused) and clears an abort caused
	// after it; the transaction stays open and locked.
	Rollback(ctx context.Context) error
	// Release keeps the writes and forgets the savepoint.
	Release(ctx context.Context) error
}

// Partition is a row of the partition registry.
type Partition struct {
	ID       string
	LogEpoch string
	// EpochRequired is set by the first epoch rotation; from then on wire
	// version 1 clients are refused (sync.client_wire_unsupported).
	EpochRequired bool
	CreatedAtMs   int64
	LastSeenMs    int64
	MaxCommitSeq  int64
	HorizonSeq    int64
}

// SchemaMarker is the stored schema version and table layouts.
type SchemaMarker struct {
	Version int32
	Layouts []schema.TableLayout
}

// Row is one stored application row.
type Row struct {
	RowID         string
	ServerVersion int64
	Scopes        map[string]string // variable → stored value (RowGet, RowScanByColumn)
	Payload       []byte            // the full row, SSP2 row codec
	// ColumnVersions is the _sync_column_versions blob (RowGet,
	// RowScanByColumn): see DecodeColumnVersions. nil is NULL.
	ColumnVersions []byte
}

// RowWrite is a row to upsert.
type RowWrite struct {
	RowID   string
	Values  []ssp2.Value // one per schema column, in declaration order
	Scopes  map[string]string
	Payload []byte
	// ColumnVersions is stored as _sync_column_versions (see
	// AppendColumnVersions); nil stores NULL: every column at the row's
	// new server version.
	ColumnVersions []byte
	// Version, when above 0, is stored as the row's server version in
	// place of the computed one (and RowUpsert returns it): a read replica
	// rebuilt from its home's rows keeps the home's versions. The push
	// path leaves it 0.
	Version int64
}

// ColumnScanParams selects a keyset page of the rows of one table whose
// column holds one value.
type ColumnScanParams struct {
	Partition  string
	Table      string
	Column     string
	Value      ssp2.Value // of the column's type, not NULL
	AfterRowID string     // exclusive; "" starts at the beginning
	Limit      int
}

// ScanParams selects a keyset page of rows.
type ScanParams struct {
	Partition  string
	Table      string
	Scopes     map[string][]string // variable → allowed values; required
	AfterRowID string              // exclusive; "" starts at the beginning
	Limit      int
}

// TouchGranularityMs is how stale a partition's last-seen time may get
// before PartitionTouch rewrites it.
const TouchGranularityMs = 60_000

// MaxScanLimit bounds RowScan pages.
const MaxScanLimit = 50001

// MaxWindowLimit bounds WindowParams.Limit (SPEC.md §4.1 limitCommits).
const MaxWindowLimit = 1000

// ClientAdvanceDelay bounds how long a ClientAdvance may wait for a write
// transaction to carry it.
const ClientAdvanceDelay = 100 * time.Millisecond

// MaxCommitRangeLimit bounds CommitRange pages.
const MaxCommitRangeLimit = 10000

// Op is a change operation, numbered as on the wire.
type Op uint8

const (
	OpUpsert Op = 1
	OpDelete Op = 2
)

// Change is one row change of a commit.
type Change struct {
	Table      string
	RowID      string
	Op         Op
	RowVersion int64             // upsert only
	Scopes     map[string]string // stored scopes, variable → value
	Row        []byte            // upsert only: the full row, SSP2 row codec
}

// Commit is one committed commit as read back from the log.
type Commit struct {
	CommitSeq      int64
	CreatedAtMs    int64
	ActorID        string
	ClientID       string
	ClientCommitID string
	SchemaVersion  int32
	Changes        []Change
}

// CommitParams is a commit to append; the Store assigns CommitSeq.
type CommitParams struct {
	CreatedAtMs    int64
	ActorID        string
	ClientID       string
	ClientCommitID string
	SchemaVersion  int32
	// WriterVersion is the appending build's writer version, checked
	// against the partition's writer fence (gate.go); 0 means
	// SchemaVersion, the running schema's version.
	WriterVersion int32
	Changes       []Change
}

// WindowParams selects an incremental pull window.
type WindowParams struct {
	Partition string
	Table     string
	Scopes    map[string][]string // effective scopes; every variable must match
	AfterSeq  int64               // the request cursor (exclusive)
	Limit     int                 // maximum number of changes (1..MaxWindowLimit)
}

// Window is an incremental pull window: commits touching the table with at
// least one matching change, oldest first, each carrying only its matching
// changes of that table. The window stops before the change total would
// exceed the limit and never splits a commit; a single commit larger than
// the limit is returned alone.
type Window struct {
	Commits []Commit
	// Complete is true when no further matching commit exists up to MaxSeq.
	Complete bool
	// MaxSeq is the partition's max commitSeq in the read snapshot.
	MaxSeq int64
	// HorizonSeq is the partition's horizon in the read snapshot.
	HorizonSeq int64
}

// NextCursor is the subscription cursor after delivering w (SPEC.md §4.5):
// max(cursor, MaxSeq) when the window was exhausted, else the last
// delivered commitSeq.
func (w Window) NextCursor(cursor int64) int64 {
	if w.Complete {
		return max(cursor, w.MaxSeq)
	}
	return w.Commits[len(w.Commits)-1].CommitSeq
}

// PushStatus is a push commit outcome, numbered as on the wire.
type PushStatus uint8

const (
	PushApplied  PushStatus = 1
	PushCached   PushStatus = 2
	PushRejected PushStatus = 3
)

// PushRecord is a persisted push result, keyed by (partition, clientId,
// clientCommitId).
type PushRecord struct {
	ClientID       string
	ClientCommitID string
	// ActorID is the actor whose commit it is; a result is replayed to no
	// one else. Empty for records older than the column that an upgrade
	// could not attribute.
	ActorID   string
	Status    PushStatus // PushApplied or PushRejected
	CommitSeq int64      // applied only
	// Result is the engine's encoding of the full result (the PUSH_RESULT
	// frame payload and any details), returned byte for byte on replay.
	Result      []byte
	CreatedAtMs int64
}

// Client is a client record (SPEC.md §4.5, §8.1).
type Client struct {
	Partition   string
	ClientID    string
	ActorID     string
	WireVersion uint16
	Cursor      int64
	UpdatedAtMs int64
	// Subscriptions is the client's last registered subscription list,
	// opaque to the Store (the engine's JSON).
	Subscriptions json.RawMessage
}

// ClientAckParams is a realtime ack.
type ClientAckParams struct {
	Partition string
	ClientID  string
	ActorID   string
	LogEpoch  string
	Cursor    int64
	NowMs     int64
}

// PruneParams bounds one pruning pass. A zero window or count means its
// default; the SPEC's numbers are floors for a conforming deployment, but
// the Store applies whatever the host configures.
type PruneParams struct {
	Partition string
	LogEpoch  string // must be the partition's current epoch
	// ThroughSeq is the requested horizon; the Store lowers it to respect
	// the retention floors below, never raises it.
	ThroughSeq int64
	NowMs      int64
	// ActiveWindowMs: the horizon never passes the lowest cursor of a client
	// updated within this window (default 14 days) ...
	ActiveWindowMs int64
	// ... except that commits older than AgeForceMs (default 30 days) may
	// be pruned regardless of laggard cursors.
	AgeForceMs int64
	// MinRetainedCommits newest commits are always kept (default 1000).
	MinRetainedCommits int64
	// Literal takes zero windows and counts as zero rather than as their
	// defaults: a host that states its whole retention policy.
	Literal bool
}

// Retention defaults (SPEC.md §4.6).
const (
	DefaultActiveWindowMs     = 14 * 24 * 60 * 60 * 1000
	DefaultAgeForceMs         = 30 * 24 * 60 * 60 * 1000
	DefaultMinRetainedCommits = 1000
)

// PruneResult reports one pruning pass.
type PruneResult struct {
	HorizonSeq     int64 // the horizon after the pass
	RemovedCommits int64
}
