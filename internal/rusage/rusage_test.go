package rusage

import (
	"crypto/sha256"
	"testing"
)

// TestSelf burns some CPU and sees the reading grow.
func TestSelf(t *testing.T) {
	before := Self()
	if before.CPU <= 0 || before.MaxRSSBytes <= 0 {
		t.Fatalf("Self() = %+v, want positive CPU and RSS", before)
	}
	b := make([]byte, 1<<20)
	for range 20 {
		s := sha256.Sum256(b)
		b[0] = s[0]
	}
	if after := Self(); after.CPU <= before.CPU {
		t.Fatalf("CPU did not grow: %v then %v", before.CPU, after.CPU)
	}
}
