package engine

import (
	"reflect"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// TestAppliedResultAsStored: push sends an applied commit's result
// without decoding the record it stored, so that result must be exactly
// what the record decodes to, in every wire version, for commits of one
// and of many operations.
func TestAppliedResultAsStored(t *testing.T) {
	for _, ops := range []int{0, 1, 3} {
		pc := &ssp2.PushCommit{ClientCommitID: "c-1", Operations: make([]ssp2.Operation, ops)}
		for _, wire := range []uint16{1, 2, 3} {
			res := appliedResult(pc, 42)
			b, err := encodeRecord(res, nil)
			if err != nil {
				t.Fatal(err)
			}
			stored, details, err := decodeRecord(storage.PushRecord{ClientCommitID: "c-1", Result: b})
			if err != nil {
				t.Fatal(err)
			}
			fitWire(res, wire)
			fitWire(stored, wire)
			if details != nil || !reflect.DeepEqual(res, stored) {
				t.Fatalf("%d ops, wire %d: sent %+v, the record decodes to %+v (details %+v)", ops, wire, res, stored, details)
			}
		}
	}
}
