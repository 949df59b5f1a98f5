package ssp2

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Limits of the PUSH_RESULT_DETAILS detailsJson shape (SPEC.md §6.3.1).
const (
	detailsMaxEncodedBytes  = 4096
	detailsMaxFieldPaths    = 32
	detailsMaxFieldPathLen  = 160
	detailsMaxTokenLen      = 96
	detailsMaxReferences    = 16
	detailsMaxRefKeyLen     = 64
	detailsMaxRefValueBytes = 256
)

// validateRejectionDetails checks a detailsJson text against the bounded
// shape of §6.3.1: an object with only fieldPaths, reason, requiredAction
// and references, at least one of them, each well-formed, no duplicates,
// and at most 4096 bytes once normalized (serialized as JSON.stringify
// would, members in that order). The text itself is kept verbatim.
func validateRejectionDetails(b []byte) error {
	if !utf8.Valid(b) || !validJSON(b) {
		return errors.New("not a JSON document")
	}
	c := jsonCursor{b: b}
	if !c.consume('{') {
		return errors.New("not a JSON object")
	}
	size := 2 // {}
	members := 0
	var seen [4]bool
	for first := true; !c.consume('}'); first = false {
		if !first && !c.consume(',') {
			return errors.New("malformed object")
		}
		key, ok := c.str()
		if !ok || !c.consume(':') {
			return errors.New("malformed member name")
		}
		idx := -1
		switch key {
		case "fieldPaths":
			idx = 0
		case "reason":
			idx = 1
		case "requiredAction":
			idx = 2
		case "references":
			idx = 3
		default:
			return fmt.Errorf("unknown member %q", key)
		}
		if seen[idx] {
			return fmt.Errorf("duplicate member %q", key)
		}
		seen[idx] = true
		if members > 0 {
			size++ // comma
		}
		members++
		size += jsStringLen(key) + 1
		var n int
		var err error
		switch idx {
		case 0:
			n, err = c.fieldPaths()
		case 1, 2:
			n, err = c.token(key, detailsMaxTokenLen)
		case 3:
			n, err = c.references()
		}
		if err != nil {
			return err
		}
		size += n
	}
	if members == 0 {
		return errors.New("no supported member")
	}
	if size > detailsMaxEncodedBytes {
		return fmt.Errorf("normalized size %d exceeds %d bytes", size, detailsMaxEncodedBytes)
	}
	return nil
}

// fieldPaths reads 1–32 unique schema paths and returns their normalized
// encoded length.
func (c *jsonCursor) fieldPaths() (int, error) {
	if !c.consume('[') {
		return 0, errors.New("fieldPaths is not an array")
	}
	var paths []string
	size := 2
	for first := true; !c.consume(']'); first = false {
		if !first && !c.consume(',') {
			return 0, errors.New("malformed fieldPaths")
		}
		p, ok := c.str()
		if !ok || !isFieldPath(p) {
			return 0, errors.New("fieldPaths entry is not a schema path of at most 160 characters")
		}
		for _, q := range paths {
			if q == p {
				return 0, fmt.Errorf("duplicate field path %q", p)
			}
		}
		paths = append(paths, p)
		if len(paths) > detailsMaxFieldPaths {
			return 0, errors.New("fieldPaths holds more than 32 paths")
		}
		if len(paths) > 1 {
			size++
		}
		size += jsStringLen(p)
	}
	if len(paths) == 0 {
		return 0, errors.New("fieldPaths is empty")
	}
	return size, nil
}

// token reads a stable lowercase token of at most maxLen characters.
func (c *jsonCursor) token(what string, maxLen int) (int, error) {
	s, ok := c.str()
	if !ok || len(s) > maxLen || !isStableToken(s) {
		return 0, fmt.Errorf("%s is not a lowercase stable token of at most %d characters", what, maxLen)
	}
	return jsStringLen(s), nil
}

// references reads 1–16 token → safe-string entries.
func (c *jsonCursor) references() (int, error) {
	if !c.consume('{') {
		return 0, errors.New("references is not an object")
	}
	var keys []string
	size := 2
	for first := true; !c.consume('}'); first = false {
		if !first && !c.consume(',') {
			return 0, errors.New("malformed references")
		}
		k, ok := c.str()
		if !ok || !c.consume(':') || len(k) > detailsMaxRefKeyLen || !isStableToken(k) {
			return 0, errors.New("reference key is not a lowercase stable token of at most 64 characters")
		}
		for _, q := range keys {
			if q == k {
				return 0, fmt.Errorf("duplicate reference key %q", k)
			}
		}
		keys = append(keys, k)
		if len(keys) > detailsMaxReferences {
			return 0, errors.New("references holds more than 16 entries")
		}
		v, ok := c.str()
		if !ok || !isSafeReference(v) {
			return 0, fmt.Errorf("reference %q is not a non-empty trimmed string without control characters of at most 256 bytes", k)
		}
		if len(keys) > 1 {
			size++
		}
		size += jsStringLen(k) + 1 + jsStringLen(v)
	}
	if len(keys) == 0 {
		return 0, errors.New("references is empty")
	}
	return size, nil
}

// isFieldPath matches identifier(.identifier)*, identifier =
// [A-Za-z_][A-Za-z0-9_]*, at most 160 characters.
func isFieldPath(s string) bool {
	if s == "" || len(s) > detailsMaxFieldPathLen {
		return false
	}
	start := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if start {
				return false
			}
			start = true
		case c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'):
			start = false
		case c >= '0' && c <= '9':
			if start {
				return false
			}
		default:
			return false
		}
	}
	return !start
}

// isStableToken matches [a-z][a-z0-9]*([._-][a-z0-9]+)*.
func isStableToken(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	sep := false
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.' || c == '_' || c == '-':
			if sep {
				return false
			}
			sep = true
		case (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'):
			sep = false
		default:
			return false
		}
	}
	return !sep
}

// isSafeReference: non-empty, at most 256 UTF-8 bytes, no leading or
// trailing JavaScript whitespace, no C0/C1 control characters.
func isSafeReference(s string) bool {
	if s == "" || len(s) > detailsMaxRefValueBytes {
		return false
	}
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	if isJSSpace(first) || isJSSpace(last) {
		return false
	}
	for _, r := range s {
		if r <= 0x1f || (r >= 0x7f && r <= 0x9f) {
			return false
		}
	}
	return true
}

// isJSSpace is the set String.prototype.trim removes.
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

// jsonCursor walks a document already known to be valid JSON, for the few
// places that need its structure (details shape, scopes header).
type jsonCursor struct {
	b []byte
	i int
}

func (c *jsonCursor) ws() { c.i = skipJSONSpace(c.b, c.i) }

// consume skips whitespace and then ch if it is next.
func (c *jsonCursor) consume(ch byte) bool {
	c.ws()
	if c.i < len(c.b) && c.b[c.i] == ch {
		c.i++
		return true
	}
	return false
}

// str reads a string token; ok is false for any other value or an escaped
// lone surrogate.
func (c *jsonCursor) str() (string, bool) {
	c.ws()
	if c.i >= len(c.b) || c.b[c.i] != '"' {
		return "", false
	}
	end := scanJSONString(c.b, c.i)
	if end < 0 {
		return "", false
	}
	s, ok := unquoteJSON(c.b[c.i:end])
	c.i = end
	return s, ok
}

// atEnd reports whether only whitespace remains.
func (c *jsonCursor) atEnd() bool {
	c.ws()
	return c.i == len(c.b)
}
