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
	types     []ColumnType // cols[i].Type, packed for the decode loop
	bitmapLen int
	// nullMask[i] holds the bits of bitmap byte i that may be set: the
	// nullable columns. Padding bits are never in it, so one AND-NOT per
	// byte checks both "null on a non-nullable column" and "padding bit".
	nullMask []byte
	padMask  byte // padding bits of the last bitmap byte
	// minLen is the smallest encoding of any row: the bitmap plus the
	// fixed or length-prefix bytes of every non-nullable column.
	minLen int
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
	c.minLen = c.bitmapLen
	for i, col := range cols {
		c.types[i] = col.Type
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
	return c, nil
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
	if len(row) != len(c.cols) {
		return dst, encodeError(opRow, "row has %d values for %d columns", len(row), len(c.cols))
	}
	start := len(dst)
	dst = append(dst, make([]byte, c.bitmapLen)...)
	bitmap := dst[start:]
	for i := range row {
		if row[i].Null {
			if !c.cols[i].Nullable {
				return dst[:start], encodeError(opRow, "column %q is not nullable", c.cols[i].Name)
			}
			bitmap[i>>3] |= 1 << (i & 7)
		}
	}
	for i := range row {
		v := &row[i]
		if v.Null {
			continue
		}
		switch c.cols[i].Type {
		case TypeInteger:
			if !safeInt(v.Int) {
				return dst[:start], encodeError(opRow, "column %q: integer %d outside ±(2^53−1)", c.cols[i].Name, v.Int)
			}
			dst = binary.LittleEndian.AppendUint64(dst, uint64(v.Int))
		case TypeFloat:
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v.Float))
		case TypeBoolean:
			dst = appendBool(dst, v.Bool)
		case TypeBytes, TypeCrdt:
			if uint64(len(v.Bytes)) > math.MaxUint32 {
				return dst[:start], encodeError(opRow, "column %q: %d bytes exceed the u32 length", c.cols[i].Name, len(v.Bytes))
			}
			dst = appendU32(dst, uint32(len(v.Bytes)))
			dst = append(dst, v.Bytes...)
		default: // string, json, blob_ref
			if msg := checkText(c.cols[i].Type, v.Bytes); msg != "" {
				return dst[:start], encodeError(opRow, "column %q: %s", c.cols[i].Name, msg)
			}
			if uint64(len(v.Bytes)) > math.MaxUint32 {
				return dst[:start], encodeError(opRow, "column %q: %d bytes exceed the u32 length", c.cols[i].Name, len(v.Bytes))
			}
			dst = appendU32(dst, uint32(len(v.Bytes)))
			dst = append(dst, v.Bytes...)
		}
	}
	return dst, nil
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
	if cap(dst) < len(c.cols) {
		dst = make([]Value, len(c.cols))
	}
	dst = dst[:len(c.cols)]
	n, err := c.scan(src, dst, 0, true)
	if err != nil {
		return dst[:0], err
	}
	if n != len(src) {
		return dst[:0], decodeError(opRow, n, "%d trailing bytes after the row", len(src)-n)
	}
	return dst, nil
}

// ValidateRow checks that src is exactly one valid row.
func (c *RowCodec) ValidateRow(src []byte) error {
	n, err := c.scan(src, nil, 0, true)
	if err != nil {
		return err
	}
	if n != len(src) {
		return decodeError(opRow, n, "%d trailing bytes after the row", len(src)-n)
	}
	return nil
}

// scan reads one row at the start of src and returns its length. With
// vals non-nil it fills one Value per column; with validate false it skips
// the content checks (UTF-8, JSON, BlobRef, safe integers, bool bytes) of a
// row already validated, but never the bounds checks. base is the absolute
// offset of src[0], for error messages.
func (c *RowCodec) scan(src []byte, vals []Value, base int, validate bool) (int, *Error) {
	if len(src) < c.bitmapLen {
		return 0, decodeError(opRow, base, "truncated row: null bitmap needs %d bytes, have %d", c.bitmapLen, len(src))
	}
	bitmap := src[:c.bitmapLen]
	for i, b := range bitmap {
		if bad := b &^ c.nullMask[i]; bad != 0 {
			if i == c.bitmapLen-1 && bad&c.padMask != 0 {
				return 0, decodeError(opRow, base+i, "null bitmap padding bit set (0x%02x)", b)
			}
			col := i<<3 + trailingZeros8(bad)
			return 0, decodeError(opRow, base+i, "null bit set for non-nullable column %q", c.cols[col].Name)
		}
	}
	off := c.bitmapLen
	for i, t := range c.types {
		if bitmap[i>>3]&(1<<(i&7)) != 0 {
			if vals != nil {
				vals[i] = Value{Null: true}
			}
			continue
		}
		switch t {
		case TypeInteger:
			if len(src)-off < 8 {
				return 0, truncatedValue(c.cols[i], base+off, 8, len(src)-off)
			}
			v := int64(binary.LittleEndian.Uint64(src[off:]))
			if validate && !safeInt(v) {
				return 0, decodeError(opRow, base+off, "column %q: integer %d outside ±(2^53−1)", c.cols[i].Name, v)
			}
			if vals != nil {
				vals[i] = Value{Int: v}
			}
			off += 8
		case TypeFloat:
			if len(src)-off < 8 {
				return 0, truncatedValue(c.cols[i], base+off, 8, len(src)-off)
			}
			if vals != nil {
				vals[i] = Value{Float: math.Float64frombits(binary.LittleEndian.Uint64(src[off:]))}
			}
			off += 8
		case TypeBoolean:
			if len(src)-off < 1 {
				return 0, truncatedValue(c.cols[i], base+off, 1, 0)
			}
			b := src[off]
			if validate && b > 1 {
				return 0, decodeError(opRow, base+off, "column %q: bool byte 0x%02x is not 0x00 or 0x01", c.cols[i].Name, b)
			}
			if vals != nil {
				vals[i] = Value{Bool: b == 1}
			}
			off++
		default: // length-prefixed: string, json, bytes, blob_ref, crdt
			if len(src)-off < 4 {
				return 0, truncatedValue(c.cols[i], base+off, 4, len(src)-off)
			}
			n := binary.LittleEndian.Uint32(src[off:])
			off += 4
			if uint64(n) > uint64(len(src)-off) {
				return 0, decodeError(opRow, base+off-4, "column %q: length %d exceeds the remaining %d bytes", c.cols[i].Name, n, len(src)-off)
			}
			end := off + int(n)
			v := src[off:end:end]
			if validate && t != TypeBytes && t != TypeCrdt {
				if msg := checkText(t, v); msg != "" {
					return 0, decodeError(opRow, base+off, "column %q: %s", c.cols[i].Name, msg)
				}
			}
			if vals != nil {
				vals[i] = Value{Bytes: v}
			}
			off = end
		}
	}
	return off, nil
}

func truncatedValue(col Column, off, need, have int) *Error {
	return decodeError(opRow, off, "truncated row: column %q needs %d bytes, have %d", col.Name, need, have)
}

func trailingZeros8(b byte) int {
	n := 0
	for b&1 == 0 && n < 8 {
		b >>= 1
		n++
	}
	return n
}
