// Package admincore holds the checks of storage.Admin that both stores
// make before any statement, so they refuse the same input alike.
package admincore

import (
	"fmt"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/schemaplan"
)

// CheckListLimit refuses a RowList limit outside 1..MaxScanLimit.
func CheckListLimit(limit int) error {
	if limit < 1 || limit > storage.MaxScanLimit {
		return ssp2.Errorf(ssp2.CodeStorageInvalidLimit, "row list limit %d outside 1..%d", limit, storage.MaxScanLimit)
	}
	return nil
}

// CheckClientListLimit refuses a ClientList limit outside
// 1..storage.MaxClientListLimit.
func CheckClientListLimit(limit int) error {
	if limit < 1 || limit > storage.MaxClientListLimit {
		return ssp2.Errorf(ssp2.CodeStorageInvalidLimit, "client list limit %d outside 1..%d", limit, storage.MaxClientListLimit)
	}
	return nil
}

// CheckSeedCount refuses a negative seed count.
func CheckSeedCount(n int) error {
	if n < 0 {
		return ssp2.Errorf(ssp2.CodeStorageInvalidLimit, "seed count %d is negative", n)
	}
	return nil
}

// CheckSeedRow refuses seed row i when SeedParams.Row did not give one
// value per column of t.
func CheckSeedRow(i int, w *storage.RowWrite, t *schema.Table) error {
	if len(w.Values) != len(t.Columns) {
		return fmt.Errorf("row %d: %d values for %d columns of table %s", i, len(w.Values), len(t.Columns), t.Name)
	}
	return nil
}

// WipeTarget is one DELETE of a partition wipe: the rows of Table whose
// Column holds the partition id.
type WipeTarget struct{ Table, Column string }

// wipeInternal are the internal tables keyed by a partition column.
var wipeInternal = []string{"sync_changes", "sync_scope_index", "sync_commits", "sync_idempotency", "sync_clients", "sync_segment_publications", "sync_reactions", "sync_tombstones", "sync_blob_refs", "sync_auth_leases"}

// WipeTargets lists what PartitionWipe deletes, in order: the rows of
// every application table of sc (nil before EnsureSchema), every internal
// table keyed by the partition, and last the partition row itself. Both
// stores run them in the one write transaction that holds the partition.
func WipeTargets(sc *schema.Schema) []WipeTarget {
	var out []WipeTarget
	if sc != nil {
		out = make([]WipeTarget, 0, len(sc.Tables)+len(wipeInternal)+1)
		for _, t := range sc.Tables {
			out = append(out, WipeTarget{t.Name, schemaplan.ColPartition})
		}
	}
	for _, table := range wipeInternal {
		out = append(out, WipeTarget{table, "partition"})
	}
	return append(out, WipeTarget{"sync_partitions", "id"})
}
