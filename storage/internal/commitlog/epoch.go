package commitlog

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/syncnode/syncnode/internal/ids"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// NewEpoch returns a fresh, unpredictable log epoch: 128 random bits in
// lowercase hex (SPEC.md §2.1).
func NewEpoch() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// CheckEpoch refuses a log epoch adopted from another node
// (storage.Store.PartitionAdopt) that the stores cannot hold: empty, or
// failing the id rules (package ids).
func CheckEpoch(epoch string) error {
	if epoch == "" {
		return ssp2.Errorf(ssp2.CodeInvalidRequest, "adopt partition: empty log epoch")
	}
	if err := ids.Check("the log epoch", epoch); err != nil {
		return ssp2.Errorf(ssp2.CodeInvalidRequest, "adopt partition: %v", err)
	}
	return nil
}

// RebaseHorizon checks a PartitionRebase of part from fromEpoch to seq
// and returns the horizon to store: seq when the partition retains no
// commits (its max seq is its horizon), else the current horizon, and
// then seq must be the max seq — a rebase never drops or skips retained
// commits. part's epoch must be fromEpoch: the rebase is a compare-and-set,
// so a writer that lost the partition to another cannot rebase that one's
// work.
func RebaseHorizon(part storage.Partition, fromEpoch string, seq int64) (int64, error) {
	if part.LogEpoch != fromEpoch {
		e := ssp2.Errorf(ssp2.CodeStoragePruneEpochMismatch, "rebase partition: the partition's log epoch is not the expected one")
		e.Op = "rebase partition"
		return 0, e
	}
	retains := part.MaxCommitSeq > part.HorizonSeq
	if seq < part.MaxCommitSeq || retains && seq != part.MaxCommitSeq {
		e := ssp2.Errorf(ssp2.CodeStorageInvalidPruneCursor, "rebase partition: seq %d, the partition's max seq is %d with %d commits retained",
			seq, part.MaxCommitSeq, part.MaxCommitSeq-part.HorizonSeq)
		e.Op = "rebase partition"
		return 0, e
	}
	if retains {
		return part.HorizonSeq, nil
	}
	return seq, nil
}
