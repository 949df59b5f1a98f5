package ssp2

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// ColumnBitmap is a set of column positions in the sparse-row presence
// layout (§2.4): ceil(n/8) bytes for n columns, bit i set for column i,
// LSB-first within byte i/8, padding bits zero. It is the presence bitmap
// of a sparse row and the conflictColumns of a v3 conflict record (§6.3).
type ColumnBitmap []byte

// NewColumnBitmap returns an empty bitmap for n columns.
func NewColumnBitmap(n int) ColumnBitmap { return make(ColumnBitmap, (n+7)/8) }

// FullColumnBitmap returns the bitmap with every one of n columns set: the
// presence of a full row, which is how a v2 write reads in v3 terms.
func FullColumnBitmap(n int) ColumnBitmap {
	b := NewColumnBitmap(n)
	for i := range b {
		b[i] = 0xFF
	}
	if r := n & 7; r != 0 {
		b[len(b)-1] = 1<<r - 1
	}
	return b
}

// Has reports whether column i is in the set; positions beyond the bitmap
// are not.
func (b ColumnBitmap) Has(i int) bool {
	return i >= 0 && i>>3 < len(b) && b[i>>3]&(1<<(i&7)) != 0
}

// Set adds column i, which must lie inside the bitmap.
func (b ColumnBitmap) Set(i int) { b[i>>3] |= 1 << (i & 7) }

// Count returns the number of columns in the set.
func (b ColumnBitmap) Count() int {
	n := 0
	for _, x := range b {
		n += bits.OnesCount8(x)
	}
	return n
}

// Fits reports whether b is a well-formed bitmap for n columns: exactly
// ceil(n/8) bytes with every padding bit clear. A client checks a received
// conflictColumns with it.
func (b ColumnBitmap) Fits(n int) bool {
	if len(b) != (n+7)/8 {
		return false
	}
	return n&7 == 0 || b[len(b)-1]&^(1<<(n&7)-1) == 0
}

// SparseRow is a sparse row in decoded form: Present marks the columns the
// operation writes, Values holds one Value per table column in declaration
// order. The Value of an absent column is meaningless (zero after decode,
// ignored on encode).
type SparseRow struct {
	Present ColumnBitmap
	Values  []Value
}

// SparseViolation names the sparse-row rule a payload broke. The first four
// are checked in this order, before any value (§2.4 "Sparse rows"); the
// rest are the row codec's usual value and framing checks.
type SparseViolation uint8

// Sparse-row violations.
const (
	// SparsePresencePadding: a presence padding bit is set.
	SparsePresencePadding SparseViolation = iota + 1
	// SparseKeyAbsent: the primary-key column is not present.
	SparseKeyAbsent
	// SparseNullPadding: a null-bitmap padding bit is set, a NULL for a
	// column that is not present.
	SparseNullPadding
	// SparseNullNotNullable: a present column that is not nullable is NULL.
	SparseNullNotNullable
	// SparseMalformed: a truncated bitmap or value, a length past the end,
	// an integer outside ±(2^53−1), a bool byte other than 0 or 1, or
	// trailing bytes.
	SparseMalformed
	// SparseBadText: a string, json or blob_ref value that is not valid
	// UTF-8, a JSON document or a canonical BlobRef.
	SparseBadText
)

var sparseViolationNames = [...]string{
	SparsePresencePadding: "presence_padding",
	SparseKeyAbsent:       "primary_key_absent",
	SparseNullPadding:     "null_padding",
	SparseNullNotNullable: "null_not_nullable",
	SparseMalformed:       "malformed",
	SparseBadText:         "bad_text",
}

func (v SparseViolation) String() string {
	return enumString("SparseViolation", sparseViolationNames[:], v)
}

// SparseRowError is the error of DecodeSparseRow. It unwraps to an *Error
// with code sync.invalid_request, which a server reports as the commit-level
// rejection of the enclosing commit (§1.7, §6.1).
type SparseRowError struct {
	Violation SparseViolation
	// Column is the position of the offending column, -1 when the fault is
	// not about one column.
	Column int
	Err    *Error
}

func (e *SparseRowError) Error() string { return e.Err.Error() }

// Unwrap returns the coded *Error.
func (e *SparseRowError) Unwrap() error { return e.Err }

// SparseCodec encodes and decodes sparse rows (§2.4 "Sparse rows"), the
// push payload of wire version 3, for one column list: a presence bitmap
// over the columns, a null bitmap over the present columns, then the
// non-NULL present values in column order, each encoded as in a full row.
// It is immutable and safe for concurrent use.
type SparseCodec struct {
	row     *RowCodec
	pk      int
	presPad byte // padding bits of the last presence byte
}

const opSparse = "sparse row"

// NewSparseCodec compiles a codec for cols whose primary key is column
// primaryKey, which must not be nullable.
func NewSparseCodec(cols []Column, primaryKey int) (*SparseCodec, error) {
	row, err := NewRowCodec(cols)
	if err != nil {
		return nil, err
	}
	if primaryKey < 0 || primaryKey >= len(cols) {
		return nil, Errorf(CodeInvalidRequest, "primary key position %d outside %d columns", primaryKey, len(cols))
	}
	if cols[primaryKey].Nullable {
		return nil, Errorf(CodeInvalidRequest, "primary key column %q is nullable", cols[primaryKey].Name)
	}
	return &SparseCodec{row: row, pk: primaryKey, presPad: row.padMask}, nil
}

// Columns returns the column list the codec was compiled for.
func (c *SparseCodec) Columns() []Column { return c.row.cols }

// PrimaryKey returns the position of the primary-key column.
func (c *SparseCodec) PrimaryKey() int { return c.pk }

// nullable reports whether column i admits NULL.
func (c *SparseCodec) nullable(i int) bool { return c.row.nullMask[i>>3]&(1<<(i&7)) != 0 }

// AppendSparseRow appends the encoding of r to dst. It refuses, leaving dst
// unchanged, what DecodeSparseRow would reject: a presence bitmap of the
// wrong width or with padding bits, an absent primary key, a NULL in a
// present column that is not nullable, and any value AppendRow refuses.
func (c *SparseCodec) AppendSparseRow(dst []byte, r SparseRow) ([]byte, error) {
	out, err := c.appendSparseRow(dst, r)
	if err != nil {
		return dst, err
	}
	return out, nil
}

func (c *SparseCodec) appendSparseRow(dst []byte, r SparseRow) ([]byte, *Error) {
	n := len(c.row.types)
	switch {
	case len(r.Values) != n:
		return dst, encodeError(opSparse, "row has %d values for %d columns", len(r.Values), n)
	case !r.Present.Fits(n):
		return dst, encodeError(opSparse, "presence bitmap of %d bytes does not fit %d columns", len(r.Present), n)
	case !r.Present.Has(c.pk):
		return dst, encodeError(opSparse, "primary key column %q is not present", c.row.cols[c.pk].Name)
	}
	start := len(dst)
	dst = append(dst, r.Present...)
	p := r.Present.Count()
	nullStart := len(dst)
	dst = append(dst, make([]byte, (p+7)/8)...)
	// The value section is a full row's with the absent columns left out:
	// encode a copy in which they read as NULL.
	var small [16]Value
	vals := small[:0]
	if n > len(small) {
		vals = make([]Value, 0, n)
	}
	j := 0
	for i := range n {
		v := r.Values[i]
		if !r.Present.Has(i) {
			v = Value{Null: true}
		} else {
			if v.Null {
				if !c.nullable(i) {
					return dst[:start], encodeError(opSparse, "column %q is not nullable", c.row.cols[i].Name)
				}
				dst[nullStart+j>>3] |= 1 << (j & 7)
			}
			j++
		}
		vals = append(vals, v)
	}
	return c.row.appendValues(dst, start, vals)
}

// DecodeSparseRow decodes src, which must hold exactly one sparse row, into
// dst (grown to one Value per column; its capacity is reused). Present
// aliases src and Bytes fields alias src, so with enough capacity in dst
// the call does not allocate. Failures are *SparseRowError, checked in the
// order §2.4 prescribes: presence padding, primary key absent, null-bitmap
// padding, NULL on a non-nullable column, then the value checks.
func (c *SparseCodec) DecodeSparseRow(src []byte, dst []Value) (SparseRow, error) {
	n := len(c.row.types)
	if cap(dst) < n {
		dst = make([]Value, n)
	}
	dst = dst[:n]
	if err := c.decode(src, dst); err != nil {
		return SparseRow{Values: dst[:0]}, err
	}
	return SparseRow{Present: ColumnBitmap(src[:len(c.row.nullMask):len(c.row.nullMask)]), Values: dst}, nil
}

// ValidateSparseRow checks that src is exactly one valid sparse row.
func (c *SparseCodec) ValidateSparseRow(src []byte) error {
	var small [16]Value
	scratch := small[:]
	if n := len(c.row.types); n > len(small) {
		scratch = make([]Value, n)
	}
	if err := c.decode(src, scratch); err != nil {
		return err
	}
	return nil
}

func (c *SparseCodec) fail(v SparseViolation, col, off int, format string, args ...any) *SparseRowError {
	return &SparseRowError{Violation: v, Column: col, Err: decodeError(opSparse, off, format, args...)}
}

// decode validates src and decodes it into vals (one per column).
func (c *SparseCodec) decode(src []byte, vals []Value) *SparseRowError {
	rc := c.row
	presLen := len(rc.nullMask)
	if len(src) < presLen {
		return c.fail(SparseMalformed, -1, 0, "truncated sparse row: presence bitmap needs %d bytes, have %d", presLen, len(src))
	}
	pres := src[:presLen]
	if pres[presLen-1]&c.presPad != 0 {
		return c.fail(SparsePresencePadding, -1, presLen-1, "presence bitmap padding bit set (0x%02x)", pres[presLen-1])
	}
	if pres[c.pk>>3]&(1<<(c.pk&7)) == 0 {
		return c.fail(SparseKeyAbsent, c.pk, c.pk>>3, "primary key column %q is not present", rc.cols[c.pk].Name)
	}
	p := ColumnBitmap(pres).Count()
	nullLen := (p + 7) / 8
	if len(src) < presLen+nullLen {
		return c.fail(SparseMalformed, -1, presLen, "truncated sparse row: null bitmap over %d present columns needs %d bytes, have %d", p, nullLen, len(src)-presLen)
	}
	nulls := src[presLen : presLen+nullLen]
	if r := p & 7; r != 0 && nulls[nullLen-1]&^(1<<r-1) != 0 {
		return c.fail(SparseNullPadding, -1, presLen+nullLen-1, "null bitmap padding bit set (0x%02x): a NULL for an absent column", nulls[nullLen-1])
	}
	body := presLen + nullLen
	if p == len(rc.kinds) {
		// Every column present: the rest is exactly a full row.
		return c.decodeFull(src, presLen, vals)
	}
	q := src[body:]
	j := 0 // index among the present columns
	// Columns in runs of 56: one eight-byte load of the null bitmap at the
	// run's first present column, shifted to it, still holds 57 bits.
	for base := 0; base < len(rc.kinds); base += 56 {
		kinds := rc.kinds[base:min(base+56, len(rc.kinds))]
		vs := vals[base : base+len(kinds)]
		pw := loadBits(pres[base>>3 : min(base>>3+8, presLen)])
		nw := loadBits(nulls[j>>3:min(j>>3+8, nullLen)]) >> (j & 7)
		nn := c.row.nullMask
		for k, kind := range kinds {
			present := pw&1 != 0
			pw >>= 1
			v := &vs[k]
			if !present {
				v.set(false, 0, 0, false, nil)
				continue
			}
			null := nw&1 != 0
			nw >>= 1
			j++
			i := base + k
			if null {
				if nn[i>>3]&(1<<(i&7)) == 0 {
					return c.fail(SparseNullNotNullable, i, presLen+(j-1)>>3, "null bit set for non-nullable column %q", rc.cols[i].Name)
				}
				v.set(true, 0, 0, false, nil)
				continue
			}
			ok := true
			switch kind {
			case kindVar:
				if len(q) < 4 {
					ok = false
					break
				}
				m := uint64(binary.LittleEndian.Uint32(q))
				if m > uint64(len(q)-4) {
					ok = false
					break
				}
				v.set(false, 0, 0, false, q[4:4+m:4+m])
				q = q[4+m:]
			case kindInt:
				if len(q) < 8 {
					ok = false
					break
				}
				x := int64(binary.LittleEndian.Uint64(q))
				if !safeInt(x) {
					ok = false
					break
				}
				v.set(false, x, 0, false, nil)
				q = q[8:]
			case kindFloat:
				if len(q) < 8 {
					ok = false
					break
				}
				v.set(false, 0, math.Float64frombits(binary.LittleEndian.Uint64(q)), false, nil)
				q = q[8:]
			default: // kindBool
				if len(q) < 1 || q[0] > 1 {
					ok = false
					break
				}
				v.set(false, 0, 0, q[0] == 1, nil)
				q = q[1:]
			}
			if !ok {
				// A NULL on a non-nullable column further on outranks this
				// value fault (§2.4 check order).
				if err := c.nullFault(pres, nulls, i+1, j); err != nil {
					return err
				}
				return c.valueFault(i, src, len(src)-len(q))
			}
		}
	}
	if len(q) != 0 {
		return c.fail(SparseMalformed, -1, len(src)-len(q), "%d trailing bytes after the sparse row", len(q))
	}
	if i := rc.badText(vals, pres); i >= 0 {
		off := body + c.valueOffset(src[body:], pres, nulls, i)
		return c.fail(SparseBadText, i, off, "column %q: %s", rc.cols[i].Name, checkText(rc.types[i], vals[i].Bytes))
	}
	return nil
}

// decodeFull decodes a sparse row presenting every column, whose null
// bitmap and values after the presence bitmap are a full row, with the row
// codec. Null padding was checked by the caller, so a bitmap fault is a
// NULL on a non-nullable column.
func (c *SparseCodec) decodeFull(src []byte, presLen int, vals []Value) *SparseRowError {
	rc := c.row
	row := src[presLen:]
	n, f := rc.decode(row, vals)
	switch f.kind {
	case faultNone:
		if n != len(row) {
			return c.fail(SparseMalformed, -1, presLen+n, "%d trailing bytes after the sparse row", len(row)-n)
		}
		return nil
	case faultBitmap:
		i := f.col<<3 + trailingZeros8(row[f.col]&^rc.nullMask[f.col])
		return c.fail(SparseNullNotNullable, i, presLen+f.col, "null bit set for non-nullable column %q", rc.cols[i].Name)
	}
	err := rc.faultError(f, row, presLen)
	err.Op = opSparse
	v := SparseMalformed
	if f.kind == faultText {
		v = SparseBadText
	}
	return &SparseRowError{Violation: v, Column: f.col, Err: err}
}

// nullFault finds a NULL on a non-nullable present column at or after
// column from, the j-th present column.
func (c *SparseCodec) nullFault(pres, nulls []byte, from, j int) *SparseRowError {
	for i := from; i < len(c.row.types); i++ {
		if pres[i>>3]&(1<<(i&7)) == 0 {
			continue
		}
		if nulls[j>>3]&(1<<(j&7)) != 0 && !c.nullable(i) {
			return c.fail(SparseNullNotNullable, i, len(pres)+j>>3, "null bit set for non-nullable column %q", c.row.cols[i].Name)
		}
		j++
	}
	return nil
}

// valueFault describes the malformed value of column i starting at src[at].
func (c *SparseCodec) valueFault(i int, src []byte, at int) *SparseRowError {
	name := c.row.cols[i].Name
	q := src[at:]
	switch c.row.kinds[i] {
	case kindVar:
		if len(q) >= 4 {
			return c.fail(SparseMalformed, i, at, "column %q: length %d exceeds the remaining %d bytes", name, binary.LittleEndian.Uint32(q), len(q)-4)
		}
	case kindInt:
		if len(q) >= 8 {
			return c.fail(SparseMalformed, i, at, "column %q: integer %d outside ±(2^53−1)", name, int64(binary.LittleEndian.Uint64(q)))
		}
	case kindBool:
		if len(q) >= 1 {
			return c.fail(SparseMalformed, i, at, "column %q: bool byte 0x%02x is not 0x00 or 0x01", name, q[0])
		}
	}
	return c.fail(SparseMalformed, i, at, "truncated sparse row: column %q needs %d bytes, have %d", name, minValueLen(c.row.types[i]), len(q))
}

// valueOffset finds where column col's value content starts in a value
// section decode accepted; it serves error messages only.
func (c *SparseCodec) valueOffset(body, pres, nulls []byte, col int) int {
	off, j := 0, 0
	for i, t := range c.row.types[:col] {
		if pres[i>>3]&(1<<(i&7)) == 0 {
			continue
		}
		null := nulls[j>>3]&(1<<(j&7)) != 0
		j++
		if !null {
			off += valueLen(t, body[off:])
		}
	}
	return off + 4
}
