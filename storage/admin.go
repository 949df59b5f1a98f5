package storage

import (
	"context"

	"github.com/syncnode/syncnode/ssp2"
)

// Admin is privileged maintenance outside the sync protocol: what a test
// harness, a load fixture or an operator's tool needs and no client
// request may reach. None of it is scope-checked, and none of it writes
// the commit log.
type Admin interface {
	// RowList returns the rows of one table in one partition, with their
	// stored scopes, in ascending row id order (bytewise) after
	// p.AfterRowID (exclusive), at most p.Limit rows. Unlike RowScan it
	// takes no scope filter. A limit outside 1..MaxScanLimit is refused
	// (CodeStorageInvalidLimit), a table the installed schema does not
	// declare with CodeUnknownTable.
	RowList(ctx context.Context, p RowListParams) ([]Row, error)

	// RowSeed inserts p.Count rows into one table of a registered
	// partition in one transaction holding the partition write lock, at
	// server version 1, without commits, changes or scope-index entries:
	// a fixture that exists before any client writes. The rows' blob_ref
	// values go into the blob reference index as RowUpsert's do, so
	// their blobs are downloadable by whoever may see the rows; each
	// needs its blob held, or nothing is seeded. A row id that
	// already exists fails the whole seed with a *ConstraintError
	// (ConstraintUnique), inserting nothing. An unregistered partition is
	// refused with CodeStoragePartitionUnregistered, a negative count with
	// CodeStorageInvalidLimit.
	RowSeed(ctx context.Context, p SeedParams) error

	// PartitionWipe deletes everything the store keeps for the partition —
	// its rows in every table of the installed schema, commits, changes,
	// scope-index entries, tombstones, push results, client records, segment
	// publications, reactions, blob references, and its registry row — in one transaction
	// holding the partition write lock. The next PartitionTouch registers it afresh,
	// with a new log epoch, so clients of the old log are told to reset.
	// Segment address rows are left for the segment store's pruning, blob
	// rows (their references gone) for the orphan sweep. Wiping
	// an unregistered partition does nothing.
	PartitionWipe(ctx context.Context, partition string) error

	// PartitionWipeFrom is PartitionWipe fenced in the same transaction:
	// it wipes only while the partition, read under its write lock, has
	// log epoch fromEpoch and a max commit seq of at least minSeq (an
	// unregistered partition counts as epoch "" at seq 0, and wiping it
	// does nothing). Otherwise nothing changes and the error is
	// CodeStoragePruneEpochMismatch. A hub's replica rebuild wipes this
	// way, so a node that lost the replica to another cannot wipe what
	// the other wrote since it last looked.
	PartitionWipeFrom(ctx context.Context, partition, fromEpoch string, minSeq int64) error

	// ClientList returns the client records of one partition in ascending
	// client id order (bytewise) after p.AfterClientID (exclusive), at
	// most p.Limit records, for operators. A limit outside
	// 1..MaxClientListLimit is refused (CodeStorageInvalidLimit). An
	// unregistered partition has no clients.
	ClientList(ctx context.Context, p ClientListParams) ([]Client, error)
}

// ClientListParams selects a keyset page of a partition's client records.
type ClientListParams struct {
	Partition     string
	AfterClientID string // exclusive; "" starts at the beginning
	Limit         int
}

// MaxClientListLimit bounds the limit of ClientList.
const MaxClientListLimit = 10_000

// RowListParams selects a keyset page of a table's rows.
type RowListParams struct {
	Partition  string
	Table      string
	AfterRowID string // exclusive; "" starts at the beginning
	Limit      int
}

// SeedParams describes a bulk seed.
type SeedParams struct {
	Partition string
	Table     string
	Count     int
	// Row fills row i (0 ≤ i < Count): RowID, Values (one per column, in
	// declaration order), Scopes and Payload. w is reused between calls,
	// so Row must set every field; it may reuse w's slices, because the
	// store consumes each row before asking for the next.
	Row func(i int, w *RowWrite) error
}

// WipeFence is PartitionWipeFrom's condition: the partition's log epoch
// and the least max commit seq it may have.
type WipeFence struct {
	Epoch  string
	MinSeq int64
}

// Check is nil when p, read under the partition's write lock (the zero
// Partition for an unregistered one), passes the fence; a nil fence
// passes everything. Both stores' wipes share it.
func (f *WipeFence) Check(partition string, p Partition) error {
	if f == nil || p.LogEpoch == f.Epoch && p.MaxCommitSeq >= f.MinSeq {
		return nil
	}
	return ssp2.Errorf(ssp2.CodeStoragePruneEpochMismatch, "partition %q is at %s@%d, the wipe expected %s@%d or later", partition, p.LogEpoch, p.MaxCommitSeq, f.Epoch, f.MinSeq)
}
