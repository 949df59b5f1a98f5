package ssp2

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// maxJSONDepth bounds array/object nesting. It matches encoding/json, so the
// two validators agree on every input.
const maxJSONDepth = 10000

// validJSON reports whether b is valid UTF-8 holding exactly one RFC 8259
// JSON value (any value, top-level scalars included) with optional
// surrounding whitespace: encoding/json.Valid(b) && utf8.Valid(b) in one
// pass. It does not allocate for nesting up to 256 levels.
func validJSON(b []byte) bool {
	i := scanJSONShallow(b, 0) // skips leading whitespace itself
	if i == tooDeep {
		i = scanJSONValue(b, skipJSONSpace(b, 0))
	}
	return i == len(b) || (i >= 0 && skipJSONSpace(b, i) == len(b))
}

// tooDeep is scanJSONShallow's answer for nesting beyond 64 levels.
const tooDeep = -2

// scanJSONShallow is scanJSONValue for documents nested at most 64 deep,
// which is nearly all of them: the nesting stack is one register (push
// shifts left, bit 0 is the innermost level, 1 for an object), keys and
// values scan their strings in separate copies of the loop (stringRun,
// written out by hand: it is too large for the compiler to inline), and
// escapes and non-ASCII leave the loop through stringSpecial. Fewer live
// values keep the hot path in registers. Deeper documents return tooDeep
// and are scanned again by scanJSONValue.
func scanJSONShallow(b []byte, i int) int {
	var stack uint64
	depth := 0
	var c byte

	// Whitespace is skipped lazily where the next byte is read: every
	// whitespace byte is ≤ ' ', so compact JSON pays one comparison.
value: // a value starts at b[i], maybe after whitespace
	if i >= len(b) {
		return -1
	}
	c = b[i]
	if c <= ' ' {
		if i = skipJSONSpace(b, i); i >= len(b) {
			return -1
		}
		c = b[i]
	}
	switch jsonValueStart[c] {
	case vsString:
		i++
		for {
			if i+8 <= len(b) {
				m := stringStops(binary.LittleEndian.Uint64(b[i:]))
				if m == 0 {
					i += 8
					continue
				}
				i += bits.TrailingZeros64(m) >> 3
			} else if len(b) >= 8 {
				x := binary.LittleEndian.Uint64(b[len(b)-8:]) >> (uint(i-(len(b)-8)) * 8)
				i += bits.TrailingZeros64(stringStops(x)) >> 3
			}
			if i >= len(b) {
				return -1
			}
			if b[i] == '"' {
				i++
				break
			}
			if i = stringSpecial(b, i); i < 0 {
				return -1
			}
		}
		goto after
	case vsDigit:
		if c != '0' {
			start := i
			for i++; i < len(b) && b[i]-'0' <= 9; i++ {
			}
			if i >= len(b) || (b[i] != '.' && b[i]|0x20 != 'e') {
				goto after
			}
			i = start
		}
		i = scanJSONNumber(b, i)
	case vsContainer:
		if depth == 64 {
			return tooDeep
		}
		depth++
		stack = stack<<1 | uint64(c>>5&1) // bit 5: 1 in '{', 0 in '['
		i++
		if i < len(b) && b[i] <= ' ' {
			i = skipJSONSpace(b, i)
		}
		if i < len(b) && b[i] == c+2 { // '{'+2 == '}', '['+2 == ']'
			i++
			depth--
			stack >>= 1
			goto after
		}
		if c == '{' {
			goto key
		}
		goto value
	case vsTrue:
		i = scanJSONLiteral(b, i, "true")
	case vsFalse:
		i = scanJSONLiteral(b, i, "false")
	case vsNull:
		i = scanJSONLiteral(b, i, "null")
	case vsMinus:
		i = scanJSONNumber(b, i)
	default:
		return -1
	}
	if i < 0 {
		return -1
	}

after: // a value ended at b[i]
	if depth == 0 {
		return i
	}
	if i >= len(b) {
		return -1
	}
	c = b[i]
	if c <= ' ' {
		if i = skipJSONSpace(b, i); i >= len(b) {
			return -1
		}
		c = b[i]
	}
	i++
	switch c {
	case ',':
		if stack&1 != 0 {
			goto key
		}
		goto value
	case '}':
		if stack&1 == 0 {
			return -1
		}
	case ']':
		if stack&1 != 0 {
			return -1
		}
	default:
		return -1
	}
	depth--
	stack >>= 1
	goto after

key: // a member name starts at b[i], maybe after whitespace
	if i >= len(b) {
		return -1
	}
	if b[i] <= ' ' {
		i = skipJSONSpace(b, i)
	}
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	i++
	for {
		if i+8 <= len(b) {
			m := stringStops(binary.LittleEndian.Uint64(b[i:]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		} else if len(b) >= 8 {
			x := binary.LittleEndian.Uint64(b[len(b)-8:]) >> (uint(i-(len(b)-8)) * 8)
			i += bits.TrailingZeros64(stringStops(x)) >> 3
		}
		if i >= len(b) {
			return -1
		}
		if b[i] == '"' {
			i++
			break
		}
		if i = stringSpecial(b, i); i < 0 {
			return -1
		}
	}
	if i < len(b) && b[i] <= ' ' {
		i = skipJSONSpace(b, i)
	}
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	i++
	goto value
}

// stringSpecial handles the string byte at b[i] that stopped the word scan
// and is not the closing quote: an escape, a control character (invalid),
// a non-ASCII sequence, or an ASCII byte flagged by a borrow. It returns
// the index after it, or -1.
func stringSpecial(b []byte, i int) int {
	switch c := b[i]; {
	case c == '\\':
		if i+1 >= len(b) {
			return -1
		}
		switch b[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			return i + 2
		case 'u':
			if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
				return -1
			}
			return i + 6
		}
		return -1
	case c < 0x20:
		return -1
	case c < utf8.RuneSelf:
		return i + 1
	}
	if n := utf8Seq(b, i); n > 0 {
		return i + n
	}
	return -1
}

// skipJSONSpace skips JSON whitespace. Every whitespace byte is ≤ ' ', so
// the common case costs one comparison.
func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// scanJSONValue scans one value starting at b[i] (no leading whitespace) and
// returns the index just past it, or -1. It is validJSON's fallback for
// documents nested deeper than scanJSONShallow goes, so it trades the last
// nanosecond for sharing: strings go through stringRun and stringSpecial,
// numbers through scanJSONNumber. It is one flat state machine (the labels
// are its states). Nesting lives on a bit stack, 1 for an object: a
// register for the first 64 levels and a slice beyond, so hostile depth
// costs neither call stack nor more than one pass.
func scanJSONValue(b []byte, i int) int {
	var (
		stack uint64   // levels 1–64
		deep  []uint64 // levels 65 and up
		depth int
		c     byte
		isKey bool
	)

value: // a value starts at b[i]
	if i >= len(b) {
		return -1
	}
	c = b[i]
	switch jsonValueStart[c] {
	case vsString:
		isKey = false
		goto str
	case vsDigit, vsMinus:
		i = scanJSONNumber(b, i)
	case vsContainer:
		depth++
		if depth > maxJSONDepth {
			return -1
		}
		if depth <= 64 {
			stack = stack&^(1<<(depth-1)) | uint64(c&^'[')>>5<<(depth-1) // '{'&^'[' == 0x20
		} else {
			d := depth - 65
			if d>>6 >= len(deep) {
				deep = append(deep, 0)
			}
			deep[d>>6] = deep[d>>6]&^(1<<(d&63)) | uint64(c&^'[')>>5<<(d&63)
		}
		i = skipJSONSpace(b, i+1)
		if i < len(b) && b[i] == c+2 { // '{'+2 == '}', '['+2 == ']'
			i++
			depth--
			goto after
		}
		if c == '{' {
			goto key
		}
		goto value
	case vsTrue:
		i = scanJSONLiteral(b, i, "true")
	case vsFalse:
		i = scanJSONLiteral(b, i, "false")
	case vsNull:
		i = scanJSONLiteral(b, i, "null")
	default:
		return -1
	}
	if i < 0 {
		return -1
	}

after: // a value ended at b[i]
	if depth == 0 {
		return i
	}
	if i = skipJSONSpace(b, i); i >= len(b) {
		return -1
	}
	c = b[i]
	i++
	switch c {
	case ',':
		i = skipJSONSpace(b, i)
		if inObject(stack, deep, depth) {
			goto key
		}
		goto value
	case '}':
		if !inObject(stack, deep, depth) {
			return -1
		}
	case ']':
		if inObject(stack, deep, depth) {
			return -1
		}
	default:
		return -1
	}
	depth--
	goto after

key: // a member name starts at b[i]
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	isKey = true

str: // a string token starts at b[i] == '"'
	if i = scanJSONString(b, i); i < 0 {
		return -1
	}
	if !isKey {
		goto after
	}
	if i = skipJSONSpace(b, i); i >= len(b) || b[i] != ':' {
		return -1
	}
	i = skipJSONSpace(b, i+1)
	goto value
}

// Value-start classes, indexed by the first byte of a value.
const (
	vsInvalid = iota
	vsString
	vsDigit
	vsContainer
	vsTrue
	vsFalse
	vsNull
	vsMinus
)

var jsonValueStart = func() (t [256]uint8) {
	t['"'] = vsString
	for c := '0'; c <= '9'; c++ {
		t[c] = vsDigit
	}
	t['{'], t['['] = vsContainer, vsContainer
	t['t'], t['f'], t['n'], t['-'] = vsTrue, vsFalse, vsNull, vsMinus
	return t
}()

// inObject reports whether nesting level depth (≥ 1) is an object.
func inObject(stack uint64, deep []uint64, depth int) bool {
	if depth <= 64 {
		return stack>>(depth-1)&1 != 0
	}
	d := depth - 65
	return deep[d>>6]>>(d&63)&1 != 0
}

// Word-at-a-time helpers (SWAR): a uint64 holds eight input bytes and
// each test sets the high bit of a byte lane when the lane matches. Borrows
// can only add false positives above a true match, so "any lane matches"
// is exact, which is all the fast paths ask.
const (
	lsbs = 0x0101010101010101
	msbs = 0x8080808080808080
)

// stringStops flags lanes that end a run of plain string bytes: the quote,
// the backslash, controls below 0x20 and non-ASCII bytes (which need UTF-8
// checking). x-0x20 borrows into the high bit exactly for lanes below 0x20
// among ASCII lanes; non-ASCII lanes are flagged by x itself.
func stringStops(x uint64) uint64 {
	// A lane of q or bs is zero exactly at a quote or a backslash; q-1
	// borrows into the high bit there. Lanes ≥ 0x80 may light up in any
	// term, but they are flagged by x anyway.
	q := x ^ (lsbs * '"')
	bs := x ^ (lsbs * '\\')
	return ((x - lsbs*0x20) | (q - lsbs) | (bs - lsbs) | x) & msbs
}

// scanJSONString scans a string token at b[i] == '"', checking that its
// content is valid UTF-8, and returns the index just past it, or -1.
func scanJSONString(b []byte, i int) int {
	i++
	for {
		if i = stringRun(b, i); i >= len(b) {
			return -1
		}
		if b[i] == '"' {
			return i + 1
		}
		if i = stringSpecial(b, i); i < 0 {
			return -1
		}
	}
}

// validUTF8 is utf8.Valid tuned for mostly-ASCII text: sixteen ASCII bytes
// per step, a jump to the first non-ASCII lane, and multi-byte sequences
// checked in place, returning to the fast path after each one (utf8.Valid
// goes bytewise for the rest of the input after its first one).
func validUTF8(b []byte) bool {
	p := b
	for {
		// Written over a shrinking slice rather than an index so the
		// compiler can drop the bounds checks of the word loads.
		for len(p) >= 32 && (binary.LittleEndian.Uint64(p)|binary.LittleEndian.Uint64(p[8:])|
			binary.LittleEndian.Uint64(p[16:])|binary.LittleEndian.Uint64(p[24:]))&msbs == 0 {
			p = p[32:]
		}
		if len(p) >= 16 && (binary.LittleEndian.Uint64(p)|binary.LittleEndian.Uint64(p[8:]))&msbs == 0 {
			p = p[16:]
		}
		if len(p) >= 8 {
			m := binary.LittleEndian.Uint64(p) & msbs
			if m == 0 {
				p = p[8:]
				continue
			}
			p = p[bits.TrailingZeros64(m)>>3:]
		} else {
			// Fewer than eight bytes left: test the last eight of b
			// (overlapping bytes already checked) in one step if it has them.
			if len(b) >= 8 {
				m := binary.LittleEndian.Uint64(b[len(b)-8:]) & msbs
				if m == 0 {
					return true
				}
				if j := bits.TrailingZeros64(m)>>3 - (8 - len(p)); j > 0 {
					p = p[j:]
				}
			}
			for len(p) > 0 && p[0] < utf8.RuneSelf {
				p = p[1:]
			}
			if len(p) == 0 {
				return true
			}
		}
		// p[0] is non-ASCII. Two- and three-byte forms, the common ones in
		// text, are checked here; the rest in utf8Seq.
		switch c := p[0]; {
		case c >= 0xC2 && c < 0xE0:
			if len(p) < 2 || p[1]&0xC0 != 0x80 {
				return false
			}
			p = p[2:]
		case c > 0xE0 && c < 0xF0 && c != 0xED:
			if len(p) < 3 || p[1]&0xC0 != 0x80 || p[2]&0xC0 != 0x80 {
				return false
			}
			p = p[3:]
		default:
			n := utf8Seq(p, 0)
			if n == 0 {
				return false
			}
			p = p[n:]
		}
	}
}

// utf8Seq returns the length of the well-formed multi-byte UTF-8 sequence
// starting at b[i] (a byte ≥ 0x80), or 0: no overlongs, no surrogates,
// nothing above U+10FFFF.
func utf8Seq(b []byte, i int) int {
	c := b[i]
	switch {
	case c < 0xC2:
		return 0
	case c < 0xE0:
		if i+1 < len(b) && b[i+1]&0xC0 == 0x80 {
			return 2
		}
	case c < 0xF0:
		lo, hi := byte(0x80), byte(0xBF)
		switch c {
		case 0xE0:
			lo = 0xA0
		case 0xED:
			hi = 0x9F
		}
		if i+2 < len(b) && b[i+1] >= lo && b[i+1] <= hi && b[i+2]&0xC0 == 0x80 {
			return 3
		}
	case c < 0xF5:
		lo, hi := byte(0x80), byte(0xBF)
		switch c {
		case 0xF0:
			lo = 0x90
		case 0xF4:
			hi = 0x8F
		}
		if i+3 < len(b) && b[i+1] >= lo && b[i+1] <= hi && b[i+2]&0xC0 == 0x80 && b[i+3]&0xC0 == 0x80 {
			return 4
		}
	}
	return 0
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

// stringRun returns the index of the first byte at or after b[i] that can
// end a run of plain string bytes (see stringStops), or len(b). Eight bytes
// are tested at a time; the lowest flagged lane is always a true stop.
// Near the end the last eight bytes are loaded and shifted so lane 0 is
// b[i]; the lanes shifted in are zero, which flags them as controls, so a
// string without its closing quote lands on len(b). Inputs shorter than
// eight bytes are left to the caller's byte-wise path (i is returned).
func stringRun(b []byte, i int) int {
	for i+8 <= len(b) {
		if m := stringStops(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	if len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b[len(b)-8:]) >> (uint(i-(len(b)-8)) * 8)
		i += bits.TrailingZeros64(stringStops(x)) >> 3
	}
	return i
}
