package pgstore

import (
	"fmt"
	"testing"

	"github.com/syncnode/syncnode/storage"
)

// TestHintsBounded: a partition keeps its newest maxHintsPerPartition
// keys, a stored key is forgotten, keys already read are skipped, and the
// number of partitions keeping hints is bounded.
func TestHintsBounded(t *testing.T) {
	var h idemHints
	for i := range maxHintsPerPartition + 10 {
		h.add("p", idemKey{"c", fmt.Sprint(i)})
	}
	keys := h.keys("p", nil)
	if len(keys) != maxHintsPerPartition || keys[0].clientCommitID != "10" {
		t.Fatalf("%d keys from %v, want %d from 10", len(keys), keys[0], maxHintsPerPartition)
	}
	h.drop("p", idemKey{"c", "10"})
	if keys := h.keys("p", map[idemKey]*storage.PushRecord{{"c", "11"}: nil}); len(keys) != maxHintsPerPartition-2 || keys[0].clientCommitID != "12" {
		t.Fatalf("after drop and skip: %d keys from %v", len(keys), keys[0])
	}
	for i := range maxHintPartitions + 1 {
		h.add(fmt.Sprint("q", i), idemKey{"c", "x"})
	}
	if len(h.m) > maxHintPartitions {
		t.Fatalf("%d partitions keep hints, want at most %d", len(h.m), maxHintPartitions)
	}
}
