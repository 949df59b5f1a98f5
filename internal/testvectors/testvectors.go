// Package testvectors locates the SSP2 golden vectors for tests.
//
// The wire v1/v2 set lives beside the project at ../shared/ssp2-vectors, or
// wherever $SSP2_VECTORS points; the wire v3 set at
// ../shared/ssp2-vectors-v3, or $SSP2_VECTORS_V3. Tests skip when a set is
// absent, except under CI (CI=true), where its absence is a failure.
package testvectors

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the wire v1/v2 vector directory, skipping (or, under CI,
// failing) tb when it cannot be found.
func Dir(tb testing.TB) string {
	tb.Helper()
	return find(tb, "SSP2_VECTORS", "ssp2-vectors")
}

// DirV3 returns the wire v3 vector directory, skipping (or, under CI,
// failing) tb when it cannot be found.
func DirV3(tb testing.TB) string {
	tb.Helper()
	return find(tb, "SSP2_VECTORS_V3", "ssp2-vectors-v3")
}

// Lookup returns the directory of a vector set without a testing.TB: from
// env when set, else ../shared/<name> beside the repository. Fuzz seeding
// uses it; ok is false when the directory does not exist.
func Lookup(env, name string) (string, bool) {
	if d := os.Getenv(env); d != "" {
		return d, isDir(d)
	}
	if root, ok := repoRoot(); ok {
		d := filepath.Join(root, "..", "shared", name)
		return d, isDir(d)
	}
	return "", false
}

func find(tb testing.TB, env, name string) string {
	tb.Helper()
	d, ok := Lookup(env, name)
	switch {
	case ok:
		return d
	case os.Getenv(env) != "":
		tb.Fatalf("%s=%q is not a directory", env, d)
	case os.Getenv("CI") != "":
		tb.Fatalf("SSP2 golden vectors %s not found: set %s or place them at ../shared/%s (required under CI)", name, env, name)
	}
	tb.Skipf("SSP2 golden vectors %s not found (set %s or place them at ../shared/%s)", name, env, name)
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
