package ssp2

import (
	"unicode/utf16"
	"unicode/utf8"
)

// maxJSONDepth bounds array/object nesting. It matches encoding/json, so the
// two validators agree on every input.
const maxJSONDepth = 10000

// validJSON reports whether b is exactly one RFC 8259 JSON value (any value,
// top-level scalars included) with optional surrounding whitespace. Like
// encoding/json.Valid it does not check UTF-8 inside strings; the str layer
// around every json field already does. It does not allocate for nesting up
// to 256 levels.
func validJSON(b []byte) bool {
	i := scanJSONValue(b, skipJSONSpace(b, 0))
	return i >= 0 && skipJSONSpace(b, i) == len(b)
}

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanJSONValue scans one value starting at b[i] (no leading whitespace) and
// returns the index just past it, or -1. Nesting is tracked on an explicit
// bit stack (1 = object) rather than by recursion, so hostile depth costs
// neither stack nor time beyond one pass.
func scanJSONValue(b []byte, i int) int {
	var small [4]uint64
	stack := small[:]
	depth := 0
	for {
		// A value is expected at b[i].
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			depth++
			if depth > maxJSONDepth {
				return -1
			}
			w := (depth - 1) >> 6
			if w >= len(stack) {
				stack = append(stack, 0)
			}
			bit := uint64(1) << ((depth - 1) & 63)
			i = skipJSONSpace(b, i+1)
			if c == '{' {
				stack[w] |= bit
				if i < len(b) && b[i] == '}' {
					i++
					depth--
					break
				}
				if i = scanJSONKey(b, i); i < 0 {
					return -1
				}
			} else {
				stack[w] &^= bit
				if i < len(b) && b[i] == ']' {
					i++
					depth--
					break
				}
			}
			continue // the first element's value
		case c == '"':
			i = scanJSONString(b, i)
		case c == '-' || (c >= '0' && c <= '9'):
			i = scanJSONNumber(b, i)
		case c == 't':
			i = scanJSONLiteral(b, i, "true")
		case c == 'f':
			i = scanJSONLiteral(b, i, "false")
		case c == 'n':
			i = scanJSONLiteral(b, i, "null")
		default:
			return -1
		}
		if i < 0 {
			return -1
		}
		// After a value: close containers or move to the next element.
		for {
			if depth == 0 {
				return i
			}
			i = skipJSONSpace(b, i)
			if i >= len(b) {
				return -1
			}
			inObject := stack[(depth-1)>>6]&(uint64(1)<<((depth-1)&63)) != 0
			c := b[i]
			if c == ',' {
				i = skipJSONSpace(b, i+1)
				if inObject {
					if i = scanJSONKey(b, i); i < 0 {
						return -1
					}
				}
				break
			}
			if (inObject && c == '}') || (!inObject && c == ']') {
				i++
				depth--
				continue
			}
			return -1
		}
	}
}

// scanJSONKey scans `"key" :` plus trailing whitespace, leaving i at the
// member value.
func scanJSONKey(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = scanJSONString(b, i); i < 0 {
		return -1
	}
	i = skipJSONSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipJSONSpace(b, i+1)
}

// jsonPlain marks string bytes that need no attention: everything but the
// quote, the backslash and control characters.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanJSONString scans a string token at b[i] == '"'.
func scanJSONString(b []byte, i int) int {
	i++
	for {
		// Fast path over plain bytes, eight at a time where possible.
		for i+8 <= len(b) && jsonPlain[b[i]] && jsonPlain[b[i+1]] && jsonPlain[b[i+2]] &&
			jsonPlain[b[i+3]] && jsonPlain[b[i+4]] && jsonPlain[b[i+5]] &&
			jsonPlain[b[i+6]] && jsonPlain[b[i+7]] {
			i += 8
		}
		for i < len(b) && jsonPlain[b[i]] {
			i++
		}
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return -1
				}
				i += 6
			default:
				return -1
			}
		default: // control character
			return -1
		}
	}
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// scanJSONNumber scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanJSONNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
		if i >= len(b) {
			return -1
		}
	}
	switch {
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i++
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return -1
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return -1
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	return i
}

func scanJSONLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// unquoteJSON decodes one complete JSON string token (quotes included). It
// reports ok=false for a malformed token, invalid UTF-8, or an escaped lone
// surrogate, which a Go string cannot carry faithfully.
func unquoteJSON(tok []byte) (s string, ok bool) {
	if len(tok) < 2 || tok[0] != '"' || tok[len(tok)-1] != '"' {
		return "", false
	}
	body := tok[1 : len(tok)-1]
	plain := true
	for _, c := range body {
		if c == '\\' || c < 0x20 || c == '"' {
			plain = false
			break
		}
	}
	if plain {
		if !utf8.Valid(body) {
			return "", false
		}
		return string(body), true
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); {
		c := body[i]
		if c < 0x20 || c == '"' {
			return "", false
		}
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		if i+1 >= len(body) {
			return "", false
		}
		switch body[i+1] {
		case '"', '\\', '/':
			out = append(out, body[i+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(body, i+2)
			if !ok {
				return "", false
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if r >= 0xDC00 || i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
					return "", false
				}
				lo, ok := hex4(body, i+2)
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return "", false
				}
				r = utf16.DecodeRune(r, lo)
				i += 6
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return "", false
		}
		i += 2
	}
	if !utf8.Valid(out) {
		return "", false
	}
	return string(out), true
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
