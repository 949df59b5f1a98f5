// Package pgtest gives tests a fresh PostgreSQL schema.
//
// Tests read the server URL from SYNCNODE_TEST_POSTGRES_URL. Without it
// they skip — except under CI (CI set), where the PostgreSQL half must run
// and a missing URL fails the test.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL is the variable holding the test server's URL.
const EnvURL = "SYNCNODE_TEST_POSTGRES_URL"

// URL returns the test server URL, skipping tb (or failing it under CI)
// when none is configured.
func URL(tb testing.TB) string {
	tb.Helper()
	url := os.Getenv(EnvURL)
	if url == "" {
		if os.Getenv("CI") != "" {
			tb.Fatal(EnvURL + " is not set, and CI requires the PostgreSQL tests")
		}
		tb.Skip(EnvURL + " is not set: skipping a PostgreSQL test (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
	}
	return url
}

// Schema returns the test server URL and the name of a fresh schema that
// is dropped (with everything in it) when tb ends. The schema itself is
// created by whoever opens a store in it.
func Schema(tb testing.TB) (url, schema string) {
	tb.Helper()
	url = URL(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema = "syncnode_test_" + hex.EncodeToString(b[:])
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return url, schema
}
