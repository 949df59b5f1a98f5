package ssp2

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"
)

// MaxSafeInt is the largest i64 the protocol admits (2^53−1, the JavaScript
// safe-integer contract). Readers reject anything outside ±MaxSafeInt and
// writers refuse to produce it.
const MaxSafeInt = 1<<53 - 1

// safeInt reports whether v is inside ±MaxSafeInt.
func safeInt(v int64) bool { return v >= -MaxSafeInt && v <= MaxSafeInt }

// decodeError builds the one kind of error every decoder returns: code
// sync.invalid_request (unless named) with the absolute byte offset of the
// fault in the message text.
func decodeError(op string, off int, format string, args ...any) *Error {
	e := Errorf(CodeInvalidRequest, "offset %d: %s", off, fmt.Sprintf(format, args...))
	e.Op = op
	return e
}

// encodeError reports a value an encoder refuses to emit. Producing it is a
// bug in the caller, so it carries sync.internal_error.
func encodeError(op string, format string, args ...any) *Error {
	e := Errorf(CodeInternalError, format, args...)
	e.Op = op
	return e
}

// reader is a bounds-checked little-endian cursor over one buffer. It keeps
// the first error and afterwards returns zero values, so a record decoder
// reads its fields straight through and checks r.err once; every loop over
// an untrusted count must still stop on r.err (count() returns 0 then).
type reader struct {
	b    []byte
	off  int
	base int // absolute offset of b[0] in the outer input, for messages
	op   string
	err  *Error
}

func newReader(b []byte, base int, op string) reader {
	return reader{b: b, base: base, op: op}
}

func (r *reader) remaining() int { return len(r.b) - r.off }

// pos is the absolute offset of the next byte.
func (r *reader) pos() int { return r.base + r.off }

// fail records the first error at the current position.
func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = decodeError(r.op, r.pos(), format, args...)
	}
}

// failAt records the first error at absolute offset off.
func (r *reader) failAt(off int, format string, args ...any) {
	if r.err == nil {
		r.err = decodeError(r.op, off, format, args...)
	}
}

func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > r.remaining() {
		r.fail("truncated %s: need %d bytes, have %d", what, n, r.remaining())
		return nil
	}
	s := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return s
}

func (r *reader) u8(what string) uint8 {
	s := r.take(1, what)
	if s == nil {
		return 0
	}
	return s[0]
}

func (r *reader) u16(what string) uint16 {
	s := r.take(2, what)
	if s == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(s)
}

func (r *reader) u32(what string) uint32 {
	s := r.take(4, what)
	if s == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(s)
}

func (r *reader) i32(what string) int32 { return int32(r.u32(what)) }

func (r *reader) i64(what string) int64 {
	at := r.pos()
	s := r.take(8, what)
	if s == nil {
		return 0
	}
	v := int64(binary.LittleEndian.Uint64(s))
	if !safeInt(v) {
		r.failAt(at, "%s %d outside ±(2^53−1)", what, v)
		return 0
	}
	return v
}

func (r *reader) bool(what string) bool {
	at := r.pos()
	b := r.u8(what)
	if b > 1 {
		r.failAt(at, "%s: bool byte 0x%02x is not 0x00 or 0x01", what, b)
		return false
	}
	return b == 1
}

// present reads an opt() presence byte.
func (r *reader) present(what string) bool {
	at := r.pos()
	b := r.u8(what)
	if b > 1 {
		r.failAt(at, "%s: presence byte 0x%02x is not 0x00 or 0x01", what, b)
		return false
	}
	return b == 1
}

// bytes reads a u32-length-prefixed byte string, aliasing the input. A
// present empty value comes back non-nil so opt(bytes) keeps absent and
// empty apart.
func (r *reader) bytes(what string) []byte {
	n := r.u32(what)
	if r.err != nil {
		return nil
	}
	if uint64(n) > uint64(r.remaining()) {
		r.fail("truncated %s: length %d exceeds the remaining %d bytes", what, n, r.remaining())
		return nil
	}
	return r.take(int(n), what)
}

// strBytes reads a str and checks UTF-8, aliasing the input.
func (r *reader) strBytes(what string) []byte {
	at := r.pos() + 4
	s := r.bytes(what)
	if s != nil && !validUTF8(s) {
		r.failAt(at, "%s is not valid UTF-8", what)
		return nil
	}
	return s
}

func (r *reader) str(what string) string {
	return string(r.strBytes(what))
}

// jsonText reads a json field: a str that must hold one RFC 8259 value. The
// raw text is kept verbatim (aliasing the input).
func (r *reader) jsonText(what string) []byte {
	at := r.pos() + 4
	s := r.bytes(what)
	if s != nil && !validJSON(s) { // validJSON checks UTF-8 too
		r.failAt(at, "%s is not a JSON document", what)
		return nil
	}
	return s
}

// count reads a u32 element count and checks that count×minSize bytes can
// still follow, so a hostile count fails before anything is allocated or
// looped over. It returns 0 after an error.
func (r *reader) count(what string, minSize int) int {
	at := r.pos()
	n := r.u32(what)
	if r.err != nil {
		return 0
	}
	if uint64(n)*uint64(minSize) > uint64(r.remaining()) {
		r.failAt(at, "%s %d cannot fit in the remaining %d bytes", what, n, r.remaining())
		return 0
	}
	return int(n)
}

// done checks that a record consumed its input exactly.
func (r *reader) done(what string) {
	if r.err == nil && r.remaining() != 0 {
		r.fail("%d trailing bytes after %s", r.remaining(), what)
	}
}

// mapNames are the names a map field's errors give its parts, made once
// per field: building them per key and value (what + " key") allocated on
// every map encoded or decoded.
type mapNames struct {
	what, key, value, valueCount, values string
}

func newMapNames(what string) *mapNames {
	return &mapNames{what: what, key: what + " key", value: what + " value", valueCount: what + " value count", values: what + " values"}
}

// mapKey reads the key of entry i of a map field and refuses one that does
// not sort strictly after prev, the key before it: canonical maps have
// unique keys, ascending by UTF-16 code units.
func (r *reader) mapKey(names *mapNames, i int, prev []byte) []byte {
	at := r.pos()
	k := r.strBytes(names.key)
	if r.err == nil && i > 0 && compareUTF16Bytes(prev, k) >= 0 {
		r.failAt(at, "%s keys not unique and ascending by UTF-16 code units at %q", names.what, k)
	}
	return k
}

// stringListMap reads map str → list(str) with canonical key order.
func (r *reader) stringListMap(names *mapNames) map[string][]string {
	n := r.count(names.what, 8) // key length + list count
	m := make(map[string][]string, n)
	var prev []byte
	for i := 0; i < n && r.err == nil; i++ {
		k := r.mapKey(names, i, prev)
		if r.err != nil {
			break
		}
		prev = k
		vn := r.count(names.valueCount, 4)
		vals := make([]string, 0, vn)
		for j := 0; j < vn && r.err == nil; j++ {
			vals = append(vals, r.str(names.value))
		}
		m[string(k)] = vals
	}
	if r.err != nil {
		return nil
	}
	return m
}

// stringMap reads map str → str with canonical key order.
func (r *reader) stringMap(names *mapNames) map[string]string {
	n := r.count(names.what, 8)
	m := make(map[string]string, n)
	var prev []byte
	for i := 0; i < n && r.err == nil; i++ {
		k := r.mapKey(names, i, prev)
		if r.err != nil {
			break
		}
		prev = k
		m[string(k)] = r.str(names.value)
	}
	if r.err != nil {
		return nil
	}
	return m
}

// Appenders. Each refuses what a reader would reject, so an encoder can
// never produce bytes the decoder does not accept.

func appendU16(b []byte, v uint16) []byte { return binary.LittleEndian.AppendUint16(b, v) }
func appendU32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
func appendI32(b []byte, v int32) []byte  { return binary.LittleEndian.AppendUint32(b, uint32(v)) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// writer accumulates an encoded record and keeps the first refusal, the
// appender twin of reader.
type writer struct {
	b   []byte
	op  string
	err *Error
}

func (w *writer) fail(format string, args ...any) {
	if w.err == nil {
		w.err = encodeError(w.op, format, args...)
	}
}

func (w *writer) u8(v uint8)   { w.b = append(w.b, v) }
func (w *writer) u16(v uint16) { w.b = appendU16(w.b, v) }
func (w *writer) u32(v uint32) { w.b = appendU32(w.b, v) }
func (w *writer) i32(v int32)  { w.b = appendI32(w.b, v) }
func (w *writer) bool(v bool)  { w.b = appendBool(w.b, v) }

func (w *writer) i64(what string, v int64) {
	if !safeInt(v) {
		w.fail("%s %d outside ±(2^53−1)", what, v)
	}
	w.b = binary.LittleEndian.AppendUint64(w.b, uint64(v))
}

func (w *writer) length(what string, n int) {
	if uint64(n) > math.MaxUint32 {
		w.fail("%s of %d bytes exceeds the u32 length limit", what, n)
	}
	w.u32(uint32(n))
}

func (w *writer) bytes(what string, v []byte) {
	w.length(what, len(v))
	w.b = append(w.b, v...)
}

func (w *writer) str(what string, v string) {
	if !utf8.ValidString(v) {
		w.fail("%s is not valid UTF-8", what)
	}
	w.length(what, len(v))
	w.b = append(w.b, v...)
}

func (w *writer) strBytes(what string, v []byte) {
	if !utf8.Valid(v) {
		w.fail("%s is not valid UTF-8", what)
	}
	w.bytes(what, v)
}

func (w *writer) jsonText(what string, v []byte) {
	if !validJSON(v) {
		w.fail("%s is not a JSON document", what)
	}
	w.length(what, len(v))
	w.b = append(w.b, v...)
}

func (w *writer) present(p bool) { w.bool(p) }

func (w *writer) count(what string, n int) { w.length(what, n) }

func (w *writer) stringListMap(names *mapNames, m map[string][]string) {
	keys := sortedKeysUTF16(m)
	w.count(names.what, len(keys))
	for _, k := range keys {
		w.str(names.key, k)
		vals := m[k]
		w.count(names.values, len(vals))
		for _, v := range vals {
			w.str(names.value, v)
		}
	}
}

func (w *writer) stringMap(names *mapNames, m map[string]string) {
	keys := sortedKeysUTF16(m)
	w.count(names.what, len(keys))
	for _, k := range keys {
		w.str(names.key, k)
		w.str(names.value, m[k])
	}
}
