package ssp2

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"unicode/utf8"
)

// CanonicalScopes renders a scope map as the canonical JSON of §11.2: no
// whitespace, keys and values sorted by UTF-16 code units, values
// deduplicated, strings escaped as JavaScript's JSON.stringify escapes them.
// It is the input of the scope digest and the X-Syncular-Scopes form.
func CanonicalScopes(scopes map[string][]string) []byte {
	keys := sortedKeysUTF16(scopes)
	out := []byte{'{'}
	var vals []string
	for i, k := range keys {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendJSString(out, k)
		out = append(out, ':', '[')
		vals = append(vals[:0], scopes[k]...)
		slices.SortFunc(vals, CompareUTF16)
		vals = slices.Compact(vals)
		for j, v := range vals {
			if j > 0 {
				out = append(out, ',')
			}
			out = appendJSString(out, v)
		}
		out = append(out, ']')
	}
	return append(out, '}')
}

// ScopeDigest is the scope digest of §3.5: lowercase hex SHA-256 of
// CanonicalScopes(scopes).
func ScopeDigest(scopes map[string][]string) string {
	sum := sha256.Sum256(CanonicalScopes(scopes))
	return hex.EncodeToString(sum[:])
}

const opParseScopes = "parse scopes header"

// ParseScopesHeader parses an X-Syncular-Scopes value: any JSON object
// mapping strings to arrays of strings, in any key order and with any
// whitespace. Duplicate keys, escaped lone surrogates (which no Go string
// can carry, so the digest could not match the sender's) and any other
// shape are sync.invalid_request.
func ParseScopesHeader(s string) (map[string][]string, error) {
	b := []byte(s)
	bad := func(msg string) error {
		e := Errorf(CodeInvalidRequest, "%s", msg)
		e.Op = opParseScopes
		return e
	}
	if !utf8.Valid(b) || !validJSON(b) {
		return nil, bad("not a JSON document")
	}
	c := jsonCursor{b: b}
	if !c.consume('{') {
		return nil, bad("not a JSON object")
	}
	m := map[string][]string{}
	for first := true; !c.consume('}'); first = false {
		if !first && !c.consume(',') {
			return nil, bad("malformed object")
		}
		k, ok := c.str()
		if !ok || !c.consume(':') {
			return nil, bad("malformed or unrepresentable scope key")
		}
		if _, dup := m[k]; dup {
			return nil, bad("duplicate scope key " + string(appendJSString(nil, k)))
		}
		if !c.consume('[') {
			return nil, bad("scope " + string(appendJSString(nil, k)) + " is not an array")
		}
		vals := []string{}
		for firstVal := true; !c.consume(']'); firstVal = false {
			if !firstVal && !c.consume(',') {
				return nil, bad("malformed array")
			}
			v, ok := c.str()
			if !ok {
				return nil, bad("scope " + string(appendJSString(nil, k)) + " holds a value that is not a representable string")
			}
			vals = append(vals, v)
		}
		m[k] = vals
	}
	if !c.atEnd() {
		return nil, bad("trailing data")
	}
	return m, nil
}
