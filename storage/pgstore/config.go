package pgstore

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Defaults.
const (
	DefaultSchema   = "public"
	DefaultMaxConns = 16
)

// Config configures Open.
type Config struct {
	// URL is the PostgreSQL connection string (postgres://…).
	URL string
	// Schema is the schema syncnode's tables live in; it becomes the
	// connections' search_path and is created if absent (default public).
	Schema string
	// MaxConns bounds the connection pool (default 16).
	MaxConns int32
	// SoleWriter declares this store the only writer of its schema, so
	// that it may serve the start of a request (storage.RequestStarter)
	// from memory, without a round trip (solewriter.go). It holds a
	// session lock that keeps every other store of this package off the
	// schema while it lives; when another store already holds the schema
	// the store opens without the cache. Writers that are not stores of
	// this package (psql, an older node) are not kept off: do not set it
	// where any could write the schema.
	SoleWriter bool
}

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	return c
}

// Validate refuses bad values with field-specific errors.
func (c Config) Validate() error {
	var errs []error
	if !strings.HasPrefix(c.URL, "postgres://") && !strings.HasPrefix(c.URL, "postgresql://") {
		errs = append(errs, errors.New("pgstore config: URL must start with postgres:// or postgresql://"))
	}
	if !schemaRE.MatchString(c.Schema) {
		errs = append(errs, fmt.Errorf("pgstore config: Schema %q must match %s", c.Schema, schemaRE))
	}
	if c.MaxConns < 1 || c.MaxConns > 1000 {
		errs = append(errs, fmt.Errorf("pgstore config: MaxConns %d outside 1..1000", c.MaxConns))
	}
	return errors.Join(errs...)
}
