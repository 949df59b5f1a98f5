package main

import (
	"os"
	"testing"
)

// TestMain lets the test binary stand in for other processes, so tests can
// observe real exit statuses and kill real children:
//   - SYNCNODE_TEST_MAIN=1 runs main on the arguments (`load` starts
//     "itself" as a `serve --load-fixture` child);
//   - SYNCNODE_E2E_CHILD=serve|worker runs `serve` from JSON arguments, or a
//     reaction worker written with plain nats.go (reactions_e2e_test.go).
func TestMain(m *testing.M) {
	if os.Getenv("SYNCNODE_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	switch os.Getenv(childEnv) {
	case "serve":
		os.Exit(childServe())
	case "worker":
		os.Exit(childWorker())
	}
	os.Exit(m.Run())
}
