package commitlog

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/syncnode/syncnode/internal/ids"
	"github.com/syncnode/syncnode/ssp2"
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
