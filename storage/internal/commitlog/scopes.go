// Package commitlog is the dialect-neutral logic of the commit log that
// both SQL stores share: the stored-scopes JSON encoding, change
// validation and scope-index keys for CommitAppend, the pull-window
// assembly of CommitWindow, and the horizon arithmetic of Prune. It never
// touches a database.
package commitlog

import (
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// AppendScopesJSON appends the stored scopes as a JSON object with keys in
// byte order, so equal maps always store equal bytes.
func AppendScopesJSON(dst []byte, scopes map[string]string) []byte {
	var keysBuf [8]string
	keys := keysBuf[:0]
	for k := range scopes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendJSONString(dst, k)
		dst = append(dst, ':')
		dst = AppendJSONString(dst, scopes[k])
	}
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string, escaped as encoding/json does, minus its HTML
// escaping: quotes, backslashes and control characters are escaped,
// invalid UTF-8 becomes U+FFFD.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// ParseScopesJSON decodes stored scopes. Objects written by
// AppendScopesJSON without escapes take a fast path that allocates only
// the map and its strings.
func ParseScopesJSON(b []byte) (map[string]string, error) {
	if m, ok := parseSimple(b); ok {
		return m, nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode stored scopes: %w", err)
	}
	return m, nil
}

// parseSimple handles {"k":"v",...} with no whitespace, no escapes and
// valid UTF-8; anything else goes to encoding/json.
func parseSimple(b []byte) (map[string]string, bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, false
	}
	m := make(map[string]string, 2)
	i := 1
	if b[i] == '}' {
		return m, i == len(b)-1
	}
	for {
		k, n, ok := simpleString(b, i)
		if !ok || n >= len(b) || b[n] != ':' {
			return nil, false
		}
		v, n2, ok := simpleString(b, n+1)
		if !ok || n2 >= len(b) {
			return nil, false
		}
		m[k] = v
		switch b[n2] {
		case ',':
			i = n2 + 1
		case '}':
			return m, n2 == len(b)-1
		default:
			return nil, false
		}
	}
}

func simpleString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			if !utf8.Valid(b[i+1 : j]) {
				return "", 0, false
			}
			return string(b[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		}
	}
	return "", 0, false
}
