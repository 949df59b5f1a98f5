package ssp2

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"slices"
)

// SSG2 rows segments (§5.2):
//
//	"SSG2" · formatVersion u16 = 1 · flags u16 = 0
//	table str · schemaVersion i32 · u16 ncols × {name str, type u8, flags u8}
//	blocks: rowCount u32 (> 0) · byteLength u32 · rowCount × {serverVersion i64 ≥ 1, row}
//	end:    rowCount u32 = 0, and nothing after it
//
// Column flags carry only bit 0 (nullable). Every structural fault is
// sync.invalid_request; comparing the column table with a generated schema
// (sync.schema_mismatch) is the receiver's job, not the codec's.

const (
	segmentMagic         = "SSG2"
	segmentFormatVersion = 1
	columnFlagNullable   = 1
	blockHeaderSize      = 8

	// DefaultBlockRows and DefaultBlockBytes are the block targets of §5.2.
	DefaultBlockRows  = 1000
	DefaultBlockBytes = 256 << 10
)

// SegmentHeader is the header of a rows segment (formatVersion 1, flags 0).
type SegmentHeader struct {
	Table         string
	SchemaVersion int32
	Columns       []Column
}

const opDecodeSegment = "decode segment"

// readSegmentHeader reads the header fields after the 8-byte prefix.
func readSegmentHeader(r *reader) SegmentHeader {
	var h SegmentHeader
	h.Table = r.str("segment table")
	h.SchemaVersion = r.i32("segment schemaVersion")
	n := int(r.u16("segment column count"))
	if r.err == nil && n*6 > r.remaining() {
		r.fail("segment column count %d cannot fit in the remaining %d bytes", n, r.remaining())
	}
	if r.err != nil {
		return h
	}
	h.Columns = make([]Column, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		var c Column
		c.Name = r.str("column name")
		at := r.pos()
		c.Type = ColumnType(r.u8("column type"))
		if r.err == nil && !c.Type.Valid() {
			r.failAt(at, "column %q: unknown type tag %d", c.Name, uint8(c.Type))
		}
		at = r.pos()
		flags := r.u8("column flags")
		if r.err == nil && flags&^columnFlagNullable != 0 {
			r.failAt(at, "column %q: reserved flag bits set (0x%02x)", c.Name, flags)
		}
		c.Nullable = flags&columnFlagNullable != 0
		h.Columns = append(h.Columns, c)
	}
	return h
}

// checkSegmentPrefix checks magic, formatVersion and flags.
func checkSegmentPrefix(p []byte, base int, op string) *Error {
	if string(p[:4]) != segmentMagic {
		return decodeError(op, base, "bad segment magic %q", p[:4])
	}
	if v := binary.LittleEndian.Uint16(p[4:]); v != segmentFormatVersion {
		return decodeError(op, base+4, "unsupported segment formatVersion %d", v)
	}
	if f := binary.LittleEndian.Uint16(p[6:]); f != 0 {
		return decodeError(op, base+6, "segment flags 0x%04x are not zero", f)
	}
	return nil
}

// scanBlock validates the rows of one block (rowCount records filling
// exactly len(rows) bytes) and records where each record ends.
// vals receives the decoded values: one row's worth reused for every row,
// or, with keep, rowCount rows' worth, row k at vals[k*columns:].
func scanBlock(codec *RowCodec, rows []byte, rowCount uint32, base int, op string, ends []int, vals []Value, keep bool) ([]int, *Error) {
	if uint64(rowCount)*uint64(8+codec.minLen) > uint64(len(rows)) {
		return ends, decodeError(op, base-blockHeaderSize, "block of %d rows cannot fit in %d bytes", rowCount, len(rows))
	}
	ends = ends[:0]
	off := 0
	for k := uint32(0); k < rowCount; k++ {
		if len(rows)-off < 8 {
			return ends, decodeError(op, base+off, "block rows end inside a record (row %d of %d)", k, rowCount)
		}
		sv := int64(binary.LittleEndian.Uint64(rows[off:]))
		if sv < 1 || sv > MaxSafeInt {
			return ends, decodeError(op, base+off, "row serverVersion %d outside 1…2^53−1", sv)
		}
		off += 8
		rowVals := vals
		if keep {
			rowVals = vals[int(k)*len(codec.types):]
		}
		n, f := codec.decode(rows[off:], rowVals)
		if f.kind != faultNone {
			err := codec.faultError(f, rows[off:], base+off)
			err.Op = op
			return ends, err
		}
		off += n
		ends = append(ends, off)
	}
	if off != len(rows) {
		return ends, decodeError(op, base+off, "block rows leave %d of byteLength %d unconsumed", len(rows)-off, len(rows))
	}
	return ends, nil
}

// walkSegment validates an in-memory segment; visit, when non-nil, sees
// each row after its block validated.
func walkSegment(b []byte, base int, op string, visit func(h *SegmentHeader, codec *RowCodec, block int, serverVersion int64, row []byte)) (SegmentHeader, *Error) {
	if len(b) < 8 {
		return SegmentHeader{}, decodeError(op, base, "truncated segment header: %d bytes", len(b))
	}
	if err := checkSegmentPrefix(b, base, op); err != nil {
		return SegmentHeader{}, err
	}
	r := newReader(b, base, op)
	r.off = 8
	h := readSegmentHeader(&r)
	if r.err != nil {
		return h, r.err
	}
	codec, err := NewRowCodec(h.Columns)
	if err != nil {
		return h, decodeError(op, r.pos(), "%v", err)
	}
	var ends []int
	scratch := make([]Value, len(h.Columns))
	for block := 0; ; block++ {
		if r.remaining() == 0 {
			return h, decodeError(op, r.pos(), "truncated segment: missing end marker")
		}
		rowCount := r.u32("block rowCount")
		if r.err != nil {
			return h, r.err
		}
		if rowCount == 0 {
			if r.remaining() != 0 {
				return h, decodeError(op, r.pos(), "%d trailing bytes after the end marker", r.remaining())
			}
			return h, nil
		}
		rows := r.bytes("block rows")
		if r.err != nil {
			return h, r.err
		}
		rowsAt := r.pos() - len(rows)
		var err *Error
		if ends, err = scanBlock(codec, rows, rowCount, rowsAt, op, ends, scratch, false); err != nil {
			return h, err
		}
		if visit != nil {
			start := 0
			for _, end := range ends {
				visit(&h, codec, block, int64(binary.LittleEndian.Uint64(rows[start:])), rows[start+8:end])
				start = end
			}
		}
	}
}

// ValidateSegment checks that b is one structurally valid rows segment.
func ValidateSegment(b []byte) error {
	if err := validateSegmentAt(b, 0, opDecodeSegment); err != nil {
		return err
	}
	return nil
}

func validateSegmentAt(b []byte, base int, op string) *Error {
	_, err := walkSegment(b, base, op, nil)
	return err
}

// SegmentID is a segment's content address: "sha256:" + lowercase hex of
// the SHA-256 of its uncompressed bytes (§5.1).
func SegmentID(segment []byte) string {
	sum := sha256.Sum256(segment)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func appendSegmentHeader(w *writer, h SegmentHeader) {
	w.b = append(w.b, segmentMagic...)
	w.u16(segmentFormatVersion)
	w.u16(0)
	w.str("segment table", h.Table)
	w.i32(h.SchemaVersion)
	if len(h.Columns) > math.MaxUint16 {
		w.fail("%d columns exceed the u16 column count", len(h.Columns))
	}
	w.u16(uint16(len(h.Columns)))
	for _, c := range h.Columns {
		if !c.Type.Valid() {
			w.fail("column %q: unknown type tag %d", c.Name, uint8(c.Type))
		}
		w.str("column name", c.Name)
		w.u8(uint8(c.Type))
		if c.Nullable {
			w.u8(columnFlagNullable)
		} else {
			w.u8(0)
		}
	}
}

const opEncodeSegment = "encode segment"

// SegmentWriter streams a rows segment to an io.Writer. It buffers only the
// block being filled: a block is written (one Write call, the segment
// header riding with the first) once adding a row would pass MaxBlockRows
// or MaxBlockBytes, and Close writes the last block and the end marker.
type SegmentWriter struct {
	// MaxBlockRows and MaxBlockBytes bound a block (defaults
	// DefaultBlockRows and DefaultBlockBytes). A single row larger than
	// MaxBlockBytes gets a block of its own. Set them before the first row.
	MaxBlockRows  int
	MaxBlockBytes int

	w     io.Writer
	codec *RowCodec
	// buf holds [unwritten segment header] + block header placeholder +
	// the block's row records.
	buf        []byte
	rec        []byte  // scratch for a record moved into a new block
	scratch    []Value // for validating rows given encoded
	blockStart int
	blockRows  int
	rows       int64
	written    int64
	err        error
	closed     bool
}

// NewSegmentWriter starts a segment with header h. Nothing is written
// until the first block fills or Close.
func NewSegmentWriter(w io.Writer, h SegmentHeader) (*SegmentWriter, error) {
	s := &SegmentWriter{MaxBlockRows: DefaultBlockRows, MaxBlockBytes: DefaultBlockBytes}
	if err := s.Reset(w, h); err != nil {
		return nil, err
	}
	return s, nil
}

// Reset starts a new segment on w with header h, keeping the writer's
// buffers (and its row codec when the columns are unchanged), so a pooled
// writer encodes without allocating. The block limits are kept.
func (s *SegmentWriter) Reset(w io.Writer, h SegmentHeader) error {
	if s.codec == nil || !slices.Equal(s.codec.cols, h.Columns) {
		codec, err := NewRowCodec(h.Columns)
		if err != nil {
			return encodeError(opEncodeSegment, "%v", err)
		}
		s.codec = codec
		s.scratch = make([]Value, len(h.Columns))
	}
	hw := writer{b: s.buf[:0], op: opEncodeSegment}
	appendSegmentHeader(&hw, h)
	if hw.err != nil {
		return hw.err
	}
	s.w = w
	s.buf = hw.b
	s.blockStart = len(s.buf)
	s.buf = append(s.buf, make([]byte, blockHeaderSize)...)
	s.blockRows, s.rows, s.written = 0, 0, 0
	s.err, s.closed = nil, false
	return nil
}

// Codec returns the row codec of the segment's column table.
func (s *SegmentWriter) Codec() *RowCodec { return s.codec }

// WriteRow adds a row already encoded with the segment's row codec. The
// row is validated, so a segment written here always decodes.
func (s *SegmentWriter) WriteRow(serverVersion int64, row []byte) error {
	if err := s.ready(serverVersion); err != nil {
		return err
	}
	if err := s.codec.validateRow(row, s.scratch, 0); err != nil {
		return encodeError(opEncodeSegment, "row is not valid for the segment columns: %s", err.Message)
	}
	start := len(s.buf)
	s.buf = binary.LittleEndian.AppendUint64(s.buf, uint64(serverVersion))
	s.buf = append(s.buf, row...)
	return s.added(start)
}

// WriteValues encodes row with the segment's row codec and adds it.
func (s *SegmentWriter) WriteValues(serverVersion int64, row []Value) error {
	if err := s.ready(serverVersion); err != nil {
		return err
	}
	start := len(s.buf)
	buf := binary.LittleEndian.AppendUint64(s.buf, uint64(serverVersion))
	buf, err := s.codec.appendRow(buf, row)
	if err != nil {
		s.buf = buf[:start]
		err.Op = opEncodeSegment
		return err
	}
	s.buf = buf
	return s.added(start)
}

func (s *SegmentWriter) ready(serverVersion int64) error {
	if s.err != nil {
		return s.err
	}
	if s.closed {
		return encodeError(opEncodeSegment, "segment writer is closed")
	}
	if serverVersion < 1 || serverVersion > MaxSafeInt {
		return encodeError(opEncodeSegment, "serverVersion %d outside 1…2^53−1", serverVersion)
	}
	return nil
}

// added accounts for the record appended at buf[start:], first moving it
// into a fresh block when the current one is full.
func (s *SegmentWriter) added(start int) error {
	blockBytes := start - s.blockStart - blockHeaderSize
	recLen := len(s.buf) - start
	if s.blockRows > 0 && (s.blockRows >= s.MaxBlockRows || blockBytes+recLen > s.MaxBlockBytes) {
		s.rec = append(s.rec[:0], s.buf[start:]...)
		s.buf = s.buf[:start]
		if err := s.flush(false); err != nil {
			return err
		}
		s.buf = append(s.buf, s.rec...)
	}
	s.blockRows++
	s.rows++
	return nil
}

// flush writes the buffered block (and, with end, the end marker) and
// starts a new empty block.
func (s *SegmentWriter) flush(end bool) error {
	if s.blockRows > 0 {
		n := len(s.buf) - s.blockStart - blockHeaderSize
		if uint64(n) > math.MaxUint32 {
			s.err = encodeError(opEncodeSegment, "block of %d bytes exceeds the u32 byteLength", n)
			return s.err
		}
		binary.LittleEndian.PutUint32(s.buf[s.blockStart:], uint32(s.blockRows))
		binary.LittleEndian.PutUint32(s.buf[s.blockStart+4:], uint32(n))
	} else {
		s.buf = s.buf[:s.blockStart] // drop the unused placeholder
	}
	if end {
		s.buf = append(s.buf, 0, 0, 0, 0)
	}
	n, err := s.w.Write(s.buf)
	s.written += int64(n)
	if err == nil && n != len(s.buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		s.err = &Error{Code: CodeInternalError, Op: opEncodeSegment, Message: "write segment", err: err}
		return s.err
	}
	s.buf = append(s.buf[:0], make([]byte, blockHeaderSize)...)
	s.blockStart = 0
	s.blockRows = 0
	return nil
}

// FlushBlock ends the current block early and writes it; it does nothing
// when the block is empty. Blocks otherwise end at the configured limits;
// this lets a caller keep given block boundaries (re-encoding a segment
// byte for byte) or bound latency.
func (s *SegmentWriter) FlushBlock() error {
	if s.err != nil {
		return s.err
	}
	if s.closed {
		return encodeError(opEncodeSegment, "segment writer is closed")
	}
	if s.blockRows == 0 {
		return nil
	}
	return s.flush(false)
}

// Close writes the last block and the end marker. It does not close the
// underlying writer.
func (s *SegmentWriter) Close() error {
	if s.err != nil {
		return s.err
	}
	if s.closed {
		return nil
	}
	s.closed = true
	return s.flush(true)
}

// Rows is the number of rows added so far.
func (s *SegmentWriter) Rows() int64 { return s.rows }

// BytesWritten is the number of segment bytes written to the underlying
// writer so far; after Close it is the segment's byteLength.
func (s *SegmentWriter) BytesWritten() int64 { return s.written }

// SegmentReader reads a rows segment from an io.Reader block by block,
// holding only the current block in memory (§5.2). NextBlock loads and
// fully validates the next block before any of its rows is handed out, so
// a caller applying one block per transaction never applies a bad block.
type SegmentReader struct {
	r      io.Reader
	header SegmentHeader
	codec  *RowCodec
	off    int // absolute offset of the next unread byte
	block  []byte
	ends   []int
	row    int // index of the current row in the block; -1 before Next
	err    error
	done   bool
	tmp    []byte
	vals   []Value // the current block's decoded values, if kept
	kept   bool
}

// maxKeptValues caps the values a SegmentReader keeps for one block
// (64 Ki values, 3.5 MiB); bigger blocks are decoded again row by row.
const maxKeptValues = 1 << 16

// NewSegmentReader reads and validates the segment header from r.
func NewSegmentReader(r io.Reader) (*SegmentReader, error) {
	s := &SegmentReader{}
	if err := s.Reset(r); err != nil {
		return nil, err
	}
	return s, nil
}

// Reset starts reading a new segment from r, keeping the reader's buffers
// (and its row codec when the columns are unchanged).
func (s *SegmentReader) Reset(r io.Reader) error {
	*s = SegmentReader{r: r, row: -1, codec: s.codec, block: s.block[:0], ends: s.ends[:0], tmp: s.tmp[:0], vals: s.vals[:0]}
	prefix, err := s.read(8, "segment header")
	if err != nil {
		return err
	}
	if err := checkSegmentPrefix(prefix, 0, opDecodeSegment); err != nil {
		return err
	}
	// The rest of the header is read field by field: string lengths are
	// untrusted, so bytes are fetched only as they are needed.
	hdr := append([]byte(nil), prefix...)
	field := func(n int, what string) ([]byte, error) {
		b, err := s.read(n, what)
		hdr = append(hdr, b...)
		return b, err
	}
	str := func(what string) error {
		b, err := field(4, what)
		if err != nil {
			return err
		}
		_, err = field(int(binary.LittleEndian.Uint32(b)), what)
		return err
	}
	if err := str("segment table"); err != nil {
		return err
	}
	b, err := field(6, "segment schemaVersion and column count")
	if err != nil {
		return err
	}
	for n := int(binary.LittleEndian.Uint16(b[4:])); n > 0; n-- {
		if err := str("column name"); err != nil {
			return err
		}
		if _, err := field(2, "column type and flags"); err != nil {
			return err
		}
	}
	hr := newReader(hdr, 0, opDecodeSegment)
	hr.off = 8
	s.header = readSegmentHeader(&hr)
	hr.done("segment header")
	if hr.err != nil {
		return hr.err
	}
	if s.codec == nil || !slices.Equal(s.codec.cols, s.header.Columns) {
		if s.codec, err = NewRowCodec(s.header.Columns); err != nil {
			return decodeError(opDecodeSegment, s.off, "%v", err)
		}
	}
	return nil
}

// read returns the next n bytes of the stream. The buffer grows with the
// data actually received, so a hostile length costs no more memory than
// the input holds. The result is valid until the next read.
func (s *SegmentReader) read(n int, what string) ([]byte, error) {
	const chunk = 1 << 20
	buf := s.tmp[:0]
	for len(buf) < n {
		want := min(n-len(buf), chunk)
		buf = slices.Grow(buf, want)
		m, err := io.ReadFull(s.r, buf[len(buf):len(buf)+want])
		buf = buf[:len(buf)+m]
		if err != nil {
			s.tmp = buf
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, decodeError(opDecodeSegment, s.off+len(buf), "truncated segment: %s needs %d bytes, have %d", what, n, len(buf))
			}
			return nil, &Error{Code: CodeInvalidRequest, Op: opDecodeSegment, Message: "read segment", err: err}
		}
	}
	s.tmp = buf
	s.off += n
	return buf, nil
}

// Header returns the segment header.
func (s *SegmentReader) Header() SegmentHeader { return s.header }

// Codec returns the row codec of the segment's column table.
func (s *SegmentReader) Codec() *RowCodec { return s.codec }

// NextBlock loads and validates the next block. It returns false at the
// end marker (after checking nothing follows it) or on error; Err tells
// them apart.
func (s *SegmentReader) NextBlock() bool {
	if s.err != nil || s.done {
		return false
	}
	s.row = -1
	s.ends = s.ends[:0]
	at := s.off
	b, err := s.read(4, "block rowCount")
	if err != nil {
		if e, ok := err.(*Error); ok && e.err == nil {
			err = decodeError(opDecodeSegment, at, "truncated segment: missing end marker")
		}
		s.err = err
		return false
	}
	rowCount := binary.LittleEndian.Uint32(b)
	if rowCount == 0 {
		s.done = true
		var one [1]byte
		if n, _ := io.ReadFull(s.r, one[:]); n != 0 {
			s.err = decodeError(opDecodeSegment, s.off, "trailing bytes after the end marker")
		}
		return false
	}
	if b, err = s.read(4, "block byteLength"); err != nil {
		s.err = err
		return false
	}
	byteLength := binary.LittleEndian.Uint32(b)
	if uint64(rowCount)*uint64(8+s.codec.minLen) > uint64(byteLength) {
		s.err = decodeError(opDecodeSegment, at, "block of %d rows cannot fit in %d bytes", rowCount, byteLength)
		return false
	}
	rowsAt := s.off
	s.tmp, s.block = s.block, s.tmp // read into the block buffer
	rows, err := s.read(int(byteLength), "block rows")
	s.tmp, s.block = s.block, rows
	if err != nil {
		s.err = err
		return false
	}
	// Validation decodes every row anyway; a block of ordinary size keeps
	// those values so Values need not decode again. (rowCount is bounded
	// by the bytes actually read, and the cap bounds the memory.)
	cols := len(s.header.Columns)
	s.kept = uint64(rowCount)*uint64(cols) <= maxKeptValues
	need := cols
	if s.kept {
		need = int(rowCount) * cols
	}
	if cap(s.vals) < need {
		s.vals = make([]Value, need)
	}
	s.vals = s.vals[:need]
	var derr *Error
	if s.ends, derr = scanBlock(s.codec, rows, rowCount, rowsAt, opDecodeSegment, s.ends, s.vals, s.kept); derr != nil {
		s.err = derr
		return false
	}
	return true
}

// BlockRows is the number of rows in the current block.
func (s *SegmentReader) BlockRows() int { return len(s.ends) }

// Next advances to the next row of the current block.
func (s *SegmentReader) Next() bool {
	if s.row+1 >= len(s.ends) {
		return false
	}
	s.row++
	return true
}

func (s *SegmentReader) rowStart() int {
	if s.row <= 0 {
		return 0
	}
	return s.ends[s.row-1]
}

// ServerVersion is the current row's serverVersion.
func (s *SegmentReader) ServerVersion() int64 {
	if s.row < 0 || s.row >= len(s.ends) {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(s.block[s.rowStart():]))
}

// Row is the current row's encoding, valid until the next NextBlock.
func (s *SegmentReader) Row() []byte {
	if s.row < 0 || s.row >= len(s.ends) {
		return nil
	}
	return s.block[s.rowStart()+8 : s.ends[s.row]]
}

// Values decodes the current row into dst (see RowCodec.DecodeRow). The
// row was validated by NextBlock, so only the values are extracted; Bytes
// alias the block buffer and stay valid until the next NextBlock.
func (s *SegmentReader) Values(dst []Value) ([]Value, error) {
	if cap(dst) < len(s.header.Columns) {
		dst = make([]Value, len(s.header.Columns))
	}
	dst = dst[:len(s.header.Columns)]
	row := s.Row()
	if row == nil {
		return dst[:0], encodeError(opDecodeSegment, "Values called without a current row")
	}
	if s.kept {
		cols := len(dst)
		copy(dst, s.vals[s.row*cols:(s.row+1)*cols])
	} else {
		s.codec.decodeTrusted(row, dst)
	}
	return dst, nil
}

// RowValues returns the current row's values without copying: a view
// into the reader, valid until the next NextBlock, not to be modified. It
// is Values for callers that consume each row before moving on.
func (s *SegmentReader) RowValues() []Value {
	row := s.Row()
	if row == nil {
		return nil
	}
	cols := len(s.header.Columns)
	if s.kept {
		return s.vals[s.row*cols : (s.row+1)*cols : (s.row+1)*cols]
	}
	// A block too big to keep was validated through one row's worth of
	// values; decode the current row into it.
	s.vals = s.vals[:cols]
	s.codec.decodeTrusted(row, s.vals)
	return s.vals
}

// Err returns the first error met, nil after a clean end marker.
func (s *SegmentReader) Err() error { return s.err }
