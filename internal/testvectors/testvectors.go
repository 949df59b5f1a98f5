// Package testvectors locates the SSP2 golden vectors for tests.
//
// The vectors live beside the project at ../shared/ssp2-vectors, or wherever
// $SSP2_VECTORS points. Tests skip when they are absent, except under CI
// (CI=true), where their absence is a failure.
package testvectors

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the vector directory, skipping (or, under CI, failing) t when
// it cannot be found.
func Dir(tb testing.TB) string {
	tb.Helper()
	if d := os.Getenv("SSP2_VECTORS"); d != "" {
		if isDir(d) {
			return d
		}
		tb.Fatalf("SSP2_VECTORS=%q is not a directory", d)
	}
	if root, ok := repoRoot(); ok {
		d := filepath.Join(root, "..", "shared", "ssp2-vectors")
		if isDir(d) {
			return d
		}
	}
	if os.Getenv("CI") != "" {
		tb.Fatal("SSP2 golden vectors not found: set SSP2_VECTORS or place them at ../shared/ssp2-vectors (required under CI)")
	}
	tb.Skip("SSP2 golden vectors not found (set SSP2_VECTORS or place them at ../shared/ssp2-vectors)")
	return ""
}

// repoRoot walks up from the working directory to the directory holding
// go.mod.
func repoRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
