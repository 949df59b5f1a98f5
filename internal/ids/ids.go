// Package ids holds the rules for the strings a request names that end up
// in SQL and on the bus: partition, actor, client and commit ids, row ids
// and string values.
//
// Two rules, each written once here:
//
//   - Storable text has no U+0000. PostgreSQL text cannot hold NUL
//     (SQLSTATE 22021) while SQLite can, so both stores refuse it alike,
//     as a typed rejection rather than an internal error.
//   - Identifiers are text of at most MaxBytes bytes: an id rides in
//     every commit event (partition ids are escaped into subjects), and an
//     id the bus cannot carry would be acknowledged but never published.
package ids

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// MaxBytes bounds an identifier. It is the bus's partition id limit
// (bus.MaxPartitionIDBytes) and far below any message size limit.
const MaxBytes = 1024

// ErrInvalid matches every error of this package.
var ErrInvalid = errors.New("invalid identifier")

// Storable reports whether text holds no U+0000. (UTF-8 validity is the
// codec's rule: every SSP2 str is checked when it is decoded.)
func Storable[T ~string | ~[]byte](text T) bool {
	for i := 0; i < len(text); i++ {
		if text[i] == 0 {
			return false
		}
	}
	return true
}

// Check returns an error naming what when s is not an identifier: valid
// UTF-8, no U+0000, at most MaxBytes bytes. The empty string passes; where
// an id must not be empty its caller says so.
func Check(what, s string) error {
	switch {
	case len(s) > MaxBytes:
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrInvalid, what, len(s), MaxBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, what)
	case !Storable(s):
		return fmt.Errorf("%w: %s contains U+0000", ErrInvalid, what)
	}
	return nil
}
