package ssp2

import (
	"encoding/binary"
	"math"
)

// RowCodec encodes and decodes full rows (§2.4) for one column list: a null
// bitmap of ceil(n/8) bytes (bit i = column i, LSB-first) followed by the
// non-null values in column order. It is immutable and safe for concurrent
// use.
type RowCodec struct {
	cols      []Column
	types     []ColumnType // cols[i].Type
	kinds     []uint8      // wire shape per column (kindVar, …), for decode loops
	bitmapLen int
	// nullMask[i] holds the bits of bitmap byte i that may be set: the
	// nullable columns. Padding bits are never in it, so one AND-NOT per
	// byte checks both "null on a non-nullable column" and "padding bit".
	nullMask []byte
	padMask  byte // padding bits of the last bitmap byte
	// minLen is the smallest encoding of any row: the bitmap plus the
	// fixed or length-prefix bytes of every non-nullable column.
	minLen int
	// textCols lists the string, json and blob_ref columns, whose content
	// decode checks in a second pass.
	textCols []int
	// firstMask keeps the bitmap bytes of an eight-byte load from a row.
	firstMask uint64
}

const opRow = "row codec"

// NewRowCodec compiles a codec for cols. Every column must carry a defined
// type tag.
func NewRowCodec(cols []Column) (*RowCodec, error) {
	c := &RowCodec{
		cols:      append([]Column(nil), cols...),
		bitmapLen: (len(cols) + 7) / 8,
	}
	c.nullMask = make([]byte, c.bitmapLen)
	c.types = make([]ColumnType, len(cols))
	c.kinds = make([]uint8, len(cols))
	c.minLen = c.bitmapLen
	for i, col := range cols {
		c.types[i] = col.Type
		c.kinds[i] = wireKind(col.Type)
		switch col.Type {
		case TypeString, TypeJSON, TypeBlobRef:
			c.textCols = append(c.textCols, i)
		}
		if !col.Type.Valid() {
			return nil, Errorf(CodeInvalidRequest, "column %d (%q): unknown type tag %d", i, col.Name, uint8(col.Type))
		}
		if col.Nullable {
			c.nullMask[i>>3] |= 1 << (i & 7)
		} else {
			c.minLen += minValueLen(col.Type)
		}
	}
	if r := len(cols) & 7; r != 0 {
		c.padMask = ^byte(0) << r
	}
	c.firstMask = ^uint64(0)
	if c.bitmapLen < 8 {
		c.firstMask = 1<<(8*c.bitmapLen) - 1
	}
	return c, nil
}

// Wire shapes of values: length-prefixed (string, json, bytes, blob_ref,
// crdt), eight bytes (integer, float) or one byte (boolean). Length-
// prefixed comes first: switches test it first.
const (
	kindVar = iota
	kindInt
	kindFloat
	kindBool
)

func wireKind(t ColumnType) uint8 {
	switch t {
	case TypeInteger:
		return kindInt
	case TypeFloat:
		return kindFloat
	case TypeBoolean:
		return kindBool
	}
	return kindVar
}

func minValueLen(t ColumnType) int {
	switch t {
	case TypeInteger, TypeFloat:
		return 8
	case TypeBoolean:
		return 1
	}
	return 4 // u32 length prefix
}

// valueLen is the encoded length of the non-null value of type t at the
// start of p, a value decode accepted (a variable-length one's prefix is
// read, not checked).
func valueLen(t ColumnType, p []byte) int {
	n := minValueLen(t)
	if n == 4 {
		n += int(binary.LittleEndian.Uint32(p))
	}
	return n
}

// Columns returns the column list the codec was compiled for.
func (c *RowCodec) Columns() []Column { return c.cols }

// AppendRow appends the encoding of row (one Value per column, in order)
// to dst. It refuses, leaving dst unchanged, a NULL in a non-nullable
// column, an integer outside ±(2^53−1), invalid UTF-8 in a string, json or
// blob_ref column, json that does not parse and a blob_ref that is not a
// canonical BlobRef.
func (c *RowCodec) AppendRow(dst []byte, row []Value) ([]byte, error) {
	out, err := c.appendRow(dst, row)
	if err != nil {
		return dst, err
	}
	return out, nil
}

func (c *RowCodec) appendRow(dst []byte, row []Value) ([]byte, *Error) {
	if len(row) != len(c.types) {
		return dst, encodeError(opRow, "row has %d values for %d columns", len(row), len(c.types))
	}
	start := len(dst)
	dst = append(dst, make([]byte, c.bitmapLen)...)
	bitmap := dst[start:]
	for i := range row {
		if row[i].Null {
			bitmap[i>>3] |= 1 << (i & 7)
		}
	}
	for i := range bitmap {
		if bitmap[i]&^c.nullMask[i] != 0 {
			col := i<<3 + trailingZeros8(bitmap[i]&^c.nullMask[i])
			return dst[:start], encodeError(opRow, "column %q is not nullable", c.cols[col].Name)
		}
	}
	return c.appendValues(dst, start, row)
}

// appendValues appends the non-NULL values of row in column order: the
// value section of a full or sparse row. It refuses what a decoder would
// reject, returning dst[:start].
func (c *RowCodec) appendValues(dst []byte, start int, row []Value) ([]byte, *Error) {
	for i, t := range c.types {
		v := &row[i]
		if v.Null {
			continue
		}
		switch t {
		case TypeInteger:
			if !safeInt(v.Int) {
				return dst[:start], encodeError(opRow, "column %q: integer %d outside ±(2^53−1)", c.cols[i].Name, v.Int)
			}
			dst = binary.LittleEndian.AppendUint64(dst, uint64(v.Int))
			continue
		case TypeFloat:
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v.Float))
			continue
		case TypeBoolean:
			dst = appendBool(dst, v.Bool)
			continue
		case TypeString:
			if !shortASCII(v.Bytes) && !validUTF8(v.Bytes) {
				return dst[:start], encodeError(opRow, "column %q: not valid UTF-8", c.cols[i].Name)
			}
		case TypeJSON:
			if !validJSON(v.Bytes) {
				return dst[:start], encodeError(opRow, "column %q: json value is not a JSON document", c.cols[i].Name)
			}
		case TypeBlobRef:
			if msg := checkText(t, v.Bytes); msg != "" {
				return dst[:start], encodeError(opRow, "column %q: %s", c.cols[i].Name, msg)
			}
		}
		// Length-prefixed kinds: string, json, blob_ref, bytes, crdt.
		if uint64(len(v.Bytes)) > math.MaxUint32 {
			return dst[:start], encodeError(opRow, "column %q: %d bytes exceed the u32 length", c.cols[i].Name, len(v.Bytes))
		}
		dst = appendU32(dst, uint32(len(v.Bytes)))
		dst = append(dst, v.Bytes...)
	}
	return dst, nil
}

// shortASCII reports, without a call, that b is 8–16 bytes of ASCII: the
// shape of ids, codes and names, which then skip validUTF8 entirely.
func shortASCII(b []byte) bool {
	return len(b) >= 8 && len(b) <= 16 &&
		(binary.LittleEndian.Uint64(b)|binary.LittleEndian.Uint64(b[len(b)-8:]))&msbs == 0
}

// checkText validates a string, json or blob_ref value; "" means valid.
func checkText(t ColumnType, b []byte) string {
	switch t {
	case TypeJSON:
		if !validJSON(b) { // UTF-8 included
			return "json value is not a JSON document"
		}
		return ""
	case TypeBlobRef:
		if !validBlobRef(b) {
			return "blob_ref value is not a canonical BlobRef"
		}
	}
	if !validUTF8(b) {
		return "not valid UTF-8"
	}
	return ""
}

// DecodeRow decodes src, which must hold exactly one row, into dst (grown
// to one Value per column; its capacity is reused). Bytes fields alias src,
// so with enough capacity in dst the call does not allocate. Failures are
// *Error with code sync.invalid_request.
func (c *RowCodec) DecodeRow(src []byte, dst []Value) ([]Value, error) {
	if cap(dst) < len(c.types) {
		dst = make([]Value, len(c.types))
	}
	dst = dst[:len(c.types)]
	n, f := c.decode(src, dst)
	if f.kind != faultNone {
		return dst[:0], c.faultError(f, src, 0)
	}
	if n != len(src) {
		return dst[:0], decodeError(opRow, n, "%d trailing bytes after the row", len(src)-n)
	}
	return dst, nil
}

// ValidateRow checks that src is exactly one valid row.
func (c *RowCodec) ValidateRow(src []byte) error {
	var small [16]Value
	scratch := small[:]
	if len(c.types) > len(small) {
		scratch = make([]Value, len(c.types))
	}
	if err := c.validateRow(src, scratch, 0); err != nil {
		return err
	}
	return nil
}

// validateRow is ValidateRow with caller-provided scratch values and the
// absolute offset of src for messages.
func (c *RowCodec) validateRow(src []byte, scratch []Value, base int) *Error {
	n, f := c.decode(src, scratch)
	if f.kind != faultNone {
		return c.faultError(f, src, base)
	}
	if n != len(src) {
		return decodeError(opRow, base+n, "%d trailing bytes after the row", len(src)-n)
	}
	return nil
}

// rowFault says why decode stopped: a fault kind, the column (or bitmap
// byte) and the offset within the row. Faults become messages only in
// faultError, which keeps the decode loop small enough to stay in
// registers.
type rowFault struct{ kind, col, off int }

const (
	faultNone = iota
	faultTruncated
	faultBitmap
	faultInteger
	faultBool
	faultLength
	faultText
)

// decode validates one row at the start of src and decodes it into vals,
// which must hold at least one Value per column (a caller that only
// validates passes scratch). It returns the row's length.
//
// It runs in two passes: the first walks the layout and fills vals without
// calling anything, so its loop stays in registers; the second checks the
// content of the text columns (UTF-8, JSON, BlobRef).
func (c *RowCodec) decode(src []byte, vals []Value) (int, rowFault) {
	n, f := c.decodeLayout(src, vals)
	if f.kind != faultNone {
		return 0, f
	}
	if i := c.badText(vals, nil); i >= 0 {
		return 0, rowFault{faultText, i, c.valueOffset(src, i)}
	}
	return n, rowFault{}
}

// badText checks the content of the non-NULL string, json and blob_ref
// values (of the present columns only, when present is not nil) and
// returns the first column that fails, or -1.
func (c *RowCodec) badText(vals []Value, present ColumnBitmap) int {
	for _, i := range c.textCols {
		v := &vals[i]
		if v.Null || present != nil && !present.Has(i) {
			continue
		}
		var ok bool
		switch c.types[i] {
		case TypeString:
			ok = shortASCII(v.Bytes) || validUTF8(v.Bytes)
		case TypeJSON:
			ok = validJSON(v.Bytes)
		default:
			ok = checkText(TypeBlobRef, v.Bytes) == ""
		}
		if !ok {
			return i
		}
	}
	return -1
}

// decodeLayout is decode's first pass: bitmap, bounds, integer range and
// bool bytes, with every value stored in vals.
func (c *RowCodec) decodeLayout(src []byte, vals []Value) (int, rowFault) {
	if len(src) < c.bitmapLen {
		return 0, rowFault{faultTruncated, -1, 0}
	}
	for i, b := range src[:c.bitmapLen] {
		if b&^c.nullMask[i] != 0 {
			return 0, rowFault{faultBitmap, i, i}
		}
	}
	p := src[c.bitmapLen:]
	// Columns in runs of 64, one word of null bits each.
	for base := 0; base < len(c.kinds); base += 64 {
		kinds := c.kinds[base:min(base+64, len(c.kinds))]
		vs := vals[base : base+len(kinds)]
		nulls := c.firstBits(src)
		if base > 0 {
			nulls = loadBits(src[base>>3 : c.bitmapLen])
		}
		for i, k := range kinds {
			null := nulls&1 != 0
			nulls >>= 1
			if null {
				vs[i].set(true, 0, 0, false, nil)
				continue
			}
			switch k {
			case kindVar:
				if len(p) < 4 {
					return 0, rowFault{faultTruncated, base + i, len(src) - len(p)}
				}
				n := uint64(binary.LittleEndian.Uint32(p))
				if n > uint64(len(p)-4) {
					return 0, rowFault{faultLength, base + i, len(src) - len(p)}
				}
				vs[i].set(false, 0, 0, false, p[4:4+n:4+n])
				p = p[4+n:]
			case kindInt:
				if len(p) < 8 {
					return 0, rowFault{faultTruncated, base + i, len(src) - len(p)}
				}
				v := int64(binary.LittleEndian.Uint64(p))
				if !safeInt(v) {
					return 0, rowFault{faultInteger, base + i, len(src) - len(p)}
				}
				vs[i].set(false, v, 0, false, nil)
				p = p[8:]
			case kindFloat:
				if len(p) < 8 {
					return 0, rowFault{faultTruncated, base + i, len(src) - len(p)}
				}
				vs[i].set(false, 0, math.Float64frombits(binary.LittleEndian.Uint64(p)), false, nil)
				p = p[8:]
			default: // kindBool
				if len(p) < 1 {
					return 0, rowFault{faultTruncated, base + i, len(src) - len(p)}
				}
				if p[0] > 1 {
					return 0, rowFault{faultBool, base + i, len(src) - len(p)}
				}
				vs[i].set(false, 0, 0, p[0] == 1, nil)
				p = p[1:]
			}
		}
	}
	return len(src) - len(p), rowFault{}
}

// set overwrites every field of v. Assigning field by field (rather than
// a whole Value) keeps the compiler on its register-preserving pointer
// write barrier, so decode loops are not spilled to the stack around a
// call to the general one.
func (v *Value) set(null bool, i int64, f float64, b bool, bytes []byte) {
	v.Null, v.Int, v.Float, v.Bool, v.Bytes = null, i, f, b, bytes
}

// valueOffset finds where column col's value starts in a row whose layout
// decodeLayout accepted; it serves error messages only.
func (c *RowCodec) valueOffset(src []byte, col int) int {
	off := c.bitmapLen
	for i, t := range c.types[:col] {
		if src[i>>3]&(1<<(i&7)) == 0 {
			off += valueLen(t, src[off:])
		}
	}
	return off + 4
}

// decodeTrusted extracts the values of a row that decode already accepted
// (a validated segment block), skipping every content check.
func (c *RowCodec) decodeTrusted(src []byte, vals []Value) int {
	p := src[c.bitmapLen:]
	for base := 0; base < len(c.kinds); base += 64 {
		kinds := c.kinds[base:min(base+64, len(c.kinds))]
		vs := vals[base : base+len(kinds)]
		nulls := c.firstBits(src)
		if base > 0 {
			nulls = loadBits(src[base>>3 : c.bitmapLen])
		}
		for i, k := range kinds {
			null := nulls&1 != 0
			nulls >>= 1
			if null {
				vs[i].set(true, 0, 0, false, nil)
				continue
			}
			switch k {
			case kindVar:
				n := uint64(binary.LittleEndian.Uint32(p))
				vs[i].set(false, 0, 0, false, p[4:4+n:4+n])
				p = p[4+n:]
			case kindInt:
				vs[i].set(false, int64(binary.LittleEndian.Uint64(p)), 0, false, nil)
				p = p[8:]
			case kindFloat:
				vs[i].set(false, 0, math.Float64frombits(binary.LittleEndian.Uint64(p)), false, nil)
				p = p[8:]
			default:
				vs[i].set(false, 0, 0, p[0] == 1, nil)
				p = p[1:]
			}
		}
	}
	return len(src) - len(p)
}

// firstBits returns the null bits of columns 0–63. Rows are nearly always
// at least eight bytes long, so one word load masked to the bitmap does it.
func (c *RowCodec) firstBits(src []byte) uint64 {
	if len(src) >= 8 {
		return binary.LittleEndian.Uint64(src) & c.firstMask
	}
	return loadBits(src[:min(c.bitmapLen, 8)])
}

// loadBits reads up to eight bitmap bytes as a little-endian word.
func loadBits(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.LittleEndian.Uint64(b)
	}
	var x uint64
	for k := len(b) - 1; k >= 0; k-- {
		x = x<<8 | uint64(b[k])
	}
	return x
}

// faultError turns a decode fault into its *Error; base is the absolute
// offset of src[0].
func (c *RowCodec) faultError(f rowFault, src []byte, base int) *Error {
	i, off := f.col, f.off
	switch f.kind {
	case faultBitmap:
		bad := src[i] &^ c.nullMask[i]
		if i == c.bitmapLen-1 && bad&c.padMask != 0 {
			return decodeError(opRow, base+i, "null bitmap padding bit set (0x%02x)", src[i])
		}
		return decodeError(opRow, base+i, "null bit set for non-nullable column %q", c.cols[i<<3+trailingZeros8(bad)].Name)
	case faultInteger:
		return decodeError(opRow, base+off, "column %q: integer %d outside ±(2^53−1)", c.cols[i].Name, int64(binary.LittleEndian.Uint64(src[off:])))
	case faultBool:
		return decodeError(opRow, base+off, "column %q: bool byte 0x%02x is not 0x00 or 0x01", c.cols[i].Name, src[off])
	case faultLength:
		return decodeError(opRow, base+off, "column %q: length %d exceeds the remaining %d bytes", c.cols[i].Name, binary.LittleEndian.Uint32(src[off:]), len(src)-off-4)
	case faultText:
		v := src[off:]
		v = v[:min(len(v), int(binary.LittleEndian.Uint32(src[off-4:])))]
		return decodeError(opRow, base+off, "column %q: %s", c.cols[i].Name, checkText(c.cols[i].Type, v))
	}
	if i < 0 {
		return decodeError(opRow, base, "truncated row: null bitmap needs %d bytes, have %d", c.bitmapLen, len(src))
	}
	return decodeError(opRow, base+off, "truncated row: column %q needs %d bytes, have %d", c.cols[i].Name, minValueLen(c.cols[i].Type), len(src)-off)
}

func trailingZeros8(b byte) int {
	n := 0
	for b&1 == 0 && n < 8 {
		b >>= 1
		n++
	}
	return n
}
