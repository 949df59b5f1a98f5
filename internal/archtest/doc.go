// Package archtest holds the test that the import graph keeps the layers
// of ARCHITECTURE.md. It has no code of its own.
package archtest
