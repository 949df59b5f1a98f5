package commitlog

import (
	"crypto/rand"
	"encoding/hex"
)

// NewEpoch returns a fresh, unpredictable log epoch: 128 random bits in
// lowercase hex (SPEC.md §2.1).
func NewEpoch() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
