package ssp2

import (
	"math"
	"strconv"
)

// JSON output helpers that follow JavaScript's JSON.stringify, because
// digests (§3.5, §11.2) and the reference's byte sizes are defined by it.
// encoding/json differs: it escapes <, >, & and U+2028/U+2029, which
// JSON.stringify writes raw.

const hexDigits = "0123456789abcdef"

// appendJSString appends s as a JSON string the way JSON.stringify writes a
// well-formed string: only ", \ and C0 controls are escaped, the common
// controls with their short forms, the rest as lowercase \u00XX.
func appendJSString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendJSONString appends s as JSON.stringify writes a well-formed
// string, for keys that must match what a JavaScript server derives.
func AppendJSONString(dst []byte, s string) []byte { return appendJSString(dst, s) }

// jsStringLen is len(appendJSString(nil, s)) without building it.
func jsStringLen(s string) int {
	n := 2 + len(s)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
			n++
		case c < 0x20:
			n += 5
		}
	}
	return n
}

// appendJSNumber appends f as JavaScript's Number#toString would, so the
// rendering reads like the reference's; non-finite values become null
// (§11.1 rule 10).
func appendJSNumber(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	if f == 0 {
		return append(dst, '0') // -0 too
	}
	if a := math.Abs(f); a >= 1e-6 && a < 1e21 {
		return strconv.AppendFloat(dst, f, 'f', -1, 64)
	}
	// Exponent form: Go writes e+21 / e-07, JavaScript e+21 / e-7.
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, 'e', -1, 64)
	for i := start; i < len(dst); i++ {
		if dst[i] == 'e' && i+2 < len(dst) && dst[i+2] == '0' {
			j := i + 2
			for j < len(dst)-1 && dst[j] == '0' {
				j++
			}
			dst = append(dst[:i+2], dst[j:]...)
			break
		}
	}
	return dst
}
