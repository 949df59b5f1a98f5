package sqliteimage

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/syncnode/syncnode/ssp2"
)

// Image is an opened image: its metadata and data table, read from the
// bytes given to Open, which it aliases (do not modify them).
type Image struct {
	data     []byte
	pageSize int
	usable   int
	pages    int

	meta     Meta
	table    string   // the data table's name
	root     int      // its root page
	columns  []string // its columns in order
	rowidCol int      // the column that is the rowid (INTEGER PRIMARY KEY), or -1
}

const headerMagic = "SQLite format 3\x00"

func invalid(format string, args ...any) error {
	return ssp2.Errorf(ssp2.CodeInvalidRequest, "sqlite image: "+format, args...)
}

// Open reads an image's header, schema table and metadata row. Bytes
// that are not a SQLite database, a schema with other tables than the
// data table and _syncular_segment, and a metadata table without
// exactly one well-typed row are sync.invalid_request.
func Open(data []byte) (*Image, error) {
	if len(data) < 512 || string(data[:16]) != headerMagic {
		return nil, invalid("not a SQLite database file")
	}
	ps := int(binary.BigEndian.Uint16(data[16:18]))
	if ps == 1 {
		ps = 65536
	}
	if ps < 512 || ps > 65536 || ps&(ps-1) != 0 {
		return nil, invalid("page size %d", ps)
	}
	if len(data)%ps != 0 {
		return nil, invalid("file of %d bytes is not a whole number of %d-byte pages", len(data), ps)
	}
	reserved := int(data[20])
	if data[21] != 64 || data[22] != 32 || data[23] != 32 {
		return nil, invalid("payload fractions %d/%d/%d", data[21], data[22], data[23])
	}
	if enc := binary.BigEndian.Uint32(data[56:60]); enc != 1 {
		return nil, invalid("text encoding %d is not UTF-8", enc)
	}
	im := &Image{data: data, pageSize: ps, usable: ps - reserved, pages: len(data) / ps, rowidCol: -1}
	if im.usable < 480 {
		return nil, invalid("usable page size %d", im.usable)
	}
	if err := im.readSchema(); err != nil {
		return nil, err
	}
	return im, nil
}

// Meta is the metadata row.
func (im *Image) Meta() Meta { return im.meta }

// Table is the data table's name.
func (im *Image) Table() string { return im.table }

// Columns are the data table's column names in order.
func (im *Image) Columns() []string { return im.columns }

// Check compares the image with what the receiver expects (SPEC.md §5.3
// steps 2 and 3): the metadata equal to want (sync.invalid_request), the
// data table named l.Table with exactly l's columns in order and the
// version column last (sync.schema_mismatch).
func (im *Image) Check(l Layout, want Meta) error {
	if im.meta != want {
		return invalid("metadata (%s) does not match the descriptor (%s)", im.meta, want)
	}
	if im.table != l.Table || !slices.Equal(im.columns, l.ColumnNames()) {
		return ssp2.Errorf(ssp2.CodeSchemaMismatch, "sqlite image: table %q columns %v do not match table %q columns %v",
			im.table, im.columns, l.Table, l.ColumnNames())
	}
	if im.rowidCol >= 0 && (im.rowidCol != l.PK || l.Columns[l.PK].Type != ssp2.TypeInteger) {
		return ssp2.Errorf(ssp2.CodeSchemaMismatch, "sqlite image: column %q is the rowid but is not the integer primary key", im.columns[im.rowidCol])
	}
	return nil
}

// Rows calls fn for every data row in b-tree order with its version and
// its values converted to l's column types (Check first). vals is reused
// between calls and its Bytes alias the image. A cell of the wrong
// storage class, a version below 1 or a malformed page is
// sync.invalid_request; an error of fn stops the walk and is returned.
func (im *Image) Rows(l Layout, fn func(version int64, vals []ssp2.Value) error) (int64, error) {
	return Part{im: im, seen: im.newSeen(), trees: []subtree{{page: im.root}}}.Rows(l, fn)
}

// Part is a key range of an image's data rows (Split): every row of one
// part precedes every row of the next.
type Part struct {
	im    *Image
	seen  []atomic.Bool // shared by the parts of one Split
	trees []subtree     // in key order
}

type subtree struct{ page, depth int }

// Split divides the data table into at most n key-ordered parts of about
// the same number of pages, whose Rows may run concurrently: it expands
// the b-tree from the root until there are several subtrees per part and
// deals them out in order. Pages stay visited at most once across all the
// parts, so a page two parts reach is an error, as in Rows.
func (im *Image) Split(n int) ([]Part, error) {
	seen := im.newSeen()
	trees := []subtree{{page: im.root}}
	for len(trees) < 4*n {
		next := make([]subtree, 0, len(trees))
		expanded := false
		for _, st := range trees {
			kids, err := im.children(st, seen)
			if err != nil {
				return nil, err
			}
			if kids == nil { // a leaf
				next = append(next, st)
				continue
			}
			expanded = true
			for _, k := range kids {
				next = append(next, subtree{page: k, depth: st.depth + 1})
			}
		}
		trees = next
		if !expanded {
			break
		}
	}
	n = max(1, min(n, len(trees)))
	parts := make([]Part, n)
	for i := range parts {
		parts[i] = Part{im: im, seen: seen, trees: trees[i*len(trees)/n : (i+1)*len(trees)/n]}
	}
	return parts, nil
}

// Rows is Image.Rows over the part's rows.
func (p Part) Rows(l Layout, fn func(version int64, vals []ssp2.Value) error) (int64, error) {
	im := p.im
	n := len(l.Columns)
	vals := make([]ssp2.Value, n)
	cells := make([]cell, 0, n+1)
	var count int64
	w := walker{im: im, seen: p.seen, fn: func(rowid int64, rec []byte) error {
		var err error
		if cells, err = parseRecord(rec, cells[:0]); err != nil {
			return err
		}
		if len(cells) > n+1 {
			return invalid("row %d has %d cells, the table %d columns", rowid, len(cells), n+1)
		}
		for i := range n {
			var c cell // absent trailing cells are NULL
			if i < len(cells) {
				c = cells[i]
			}
			if i == im.rowidCol && c.kind == cellNull {
				c = cell{kind: cellInt, i: rowid}
			}
			if err := convert(&vals[i], c, l.Columns[i]); err != nil {
				return invalid("row %d column %q: %v", rowid, l.Columns[i].Name, err)
			}
		}
		if len(cells) != n+1 || cells[n].kind != cellInt || cells[n].i < 1 {
			return invalid("row %d: %s must be an integer ≥ 1", rowid, VersionColumn)
		}
		count++
		return fn(cells[n].i, vals)
	}}
	for _, st := range p.trees {
		if err := w.visit(st.page, st.depth); err != nil {
			return count, err
		}
	}
	return count, nil
}

func convert(v *ssp2.Value, c cell, col ssp2.Column) error {
	*v = ssp2.Value{}
	if c.kind == cellNull {
		if !col.Nullable {
			return fmt.Errorf("NULL in a non-nullable column")
		}
		v.Null = true
		return nil
	}
	switch col.Type {
	case ssp2.TypeInteger:
		if c.kind != cellInt {
			return fmt.Errorf("%s cell in an integer column", c.kind)
		}
		v.Int = c.i
	case ssp2.TypeBoolean:
		if c.kind != cellInt || c.i < 0 || c.i > 1 {
			return fmt.Errorf("boolean cell is not 0 or 1")
		}
		v.Bool = c.i == 1
	case ssp2.TypeFloat:
		switch c.kind {
		case cellFloat:
			v.Float = c.f
		case cellInt: // REAL affinity stores integral values as integers
			v.Float = float64(c.i)
		default:
			return fmt.Errorf("%s cell in a float column", c.kind)
		}
	case ssp2.TypeBytes, ssp2.TypeCrdt:
		if c.kind != cellBlob {
			return fmt.Errorf("%s cell in a %s column", c.kind, col.Type)
		}
		v.Bytes = c.b
	default:
		if c.kind != cellText {
			return fmt.Errorf("%s cell in a %s column", c.kind, col.Type)
		}
		v.Bytes = c.b
	}
	return nil
}

// readSchema reads sqlite_schema (page 1): exactly the data table and
// the metadata table (indexes allowed), then the metadata row.
func (im *Image) readSchema() error {
	type entry struct {
		name string
		root int
		sql  string
	}
	var tables []entry
	var cells []cell
	err := im.walk(1, func(_ int64, rec []byte) error {
		var err error
		if cells, err = parseRecord(rec, cells[:0]); err != nil {
			return err
		}
		if len(cells) != 5 || cells[0].kind != cellText {
			return invalid("malformed schema row")
		}
		switch string(cells[0].b) {
		case "table":
		case "index", "trigger", "view":
			if string(cells[0].b) != "index" {
				return invalid("schema holds a %s", cells[0].b)
			}
			return nil
		default:
			return invalid("schema row of type %q", cells[0].b)
		}
		if cells[1].kind != cellText || cells[3].kind != cellInt || cells[4].kind != cellText {
			return invalid("malformed schema row")
		}
		tables = append(tables, entry{name: string(cells[1].b), root: int(cells[3].i), sql: string(cells[4].b)})
		if cells[3].i < 2 || cells[3].i > int64(im.pages) {
			return invalid("table %q has root page %d", cells[1].b, cells[3].i)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(tables) != 2 {
		return invalid("%d tables; an image holds exactly the data table and %s", len(tables), MetaTable)
	}
	var metaRoot int
	var metaSQL string
	for _, t := range tables {
		if t.name == MetaTable {
			metaRoot, metaSQL = t.root, t.sql
		} else {
			im.table, im.root = t.name, t.root
			cols, rowid, err := parseCreateTable(t.sql)
			if err != nil {
				return invalid("table %q: %v", t.name, err)
			}
			im.columns, im.rowidCol = cols, rowid
		}
	}
	if metaRoot == 0 || im.root == 0 {
		return invalid("no %s table", MetaTable)
	}
	mcols, _, err := parseCreateTable(metaSQL)
	if err != nil || !slices.Equal(mcols, []string{"format", "table", "schemaVersion", "asOfCommitSeq", "scopeDigest", "rowCount"}) {
		return invalid("%s has columns %v", MetaTable, mcols)
	}
	rows := 0
	err = im.walk(metaRoot, func(_ int64, rec []byte) error {
		if rows++; rows > 1 {
			return invalid("%s holds more than one row", MetaTable)
		}
		c, err := parseRecord(rec, nil)
		if err != nil {
			return err
		}
		if len(c) != 6 || c[0].kind != cellInt || c[1].kind != cellText || c[2].kind != cellInt ||
			c[3].kind != cellInt || c[4].kind != cellText || c[5].kind != cellInt ||
			c[2].i < math.MinInt32 || c[2].i > math.MaxInt32 {
			return invalid("malformed %s row", MetaTable)
		}
		im.meta = Meta{Format: c[0].i, Table: string(c[1].b), SchemaVersion: int32(c[2].i), AsOfCommitSeq: c[3].i,
			ScopeDigest: string(c[4].b), RowCount: c[5].i}
		return nil
	})
	if err != nil {
		return err
	}
	if rows != 1 {
		return invalid("%s holds no row", MetaTable)
	}
	return nil
}

// page returns page n (1-based) and the offset of its b-tree header.
func (im *Image) page(n int) ([]byte, int, error) {
	if n < 1 || n > im.pages {
		return nil, 0, invalid("page %d out of range (%d pages)", n, im.pages)
	}
	p := im.data[(n-1)*im.pageSize : n*im.pageSize]
	if n == 1 {
		return p, 100, nil
	}
	return p, 0, nil
}

func (im *Image) newSeen() []atomic.Bool { return make([]atomic.Bool, im.pages+1) }

// walk visits a table b-tree's rows in key order, each row's record
// reassembled from its overflow pages.
func (im *Image) walk(root int, fn func(rowid int64, rec []byte) error) error {
	w := walker{im: im, seen: im.newSeen(), fn: fn}
	return w.visit(root, 0)
}

// A walker visits b-tree pages, each at most once (seen), so a cyclic or
// shared page is an error, not a loop.
type walker struct {
	im      *Image
	seen    []atomic.Bool
	scratch []byte
	fn      func(rowid int64, rec []byte) error
}

// treePage checks page n of a table b-tree at depth and marks it seen.
func (im *Image) treePage(n, depth int, seen []atomic.Bool) (p []byte, h, kind, ncells, ptrs int, err error) {
	if depth > 40 {
		return nil, 0, 0, 0, 0, invalid("b-tree deeper than 40 levels")
	}
	if p, h, err = im.page(n); err != nil {
		return nil, 0, 0, 0, 0, err
	}
	if seen[n].Swap(true) {
		return nil, 0, 0, 0, 0, invalid("page %d is reached twice", n)
	}
	if len(p) < h+8 {
		return nil, 0, 0, 0, 0, invalid("page %d too short", n)
	}
	kind = int(p[h])
	ncells = int(binary.BigEndian.Uint16(p[h+3:]))
	hdr := 8
	if kind == 0x05 {
		hdr = 12
	} else if kind != 0x0d {
		return nil, 0, 0, 0, 0, invalid("page %d has type 0x%02x, not a table b-tree page", n, kind)
	}
	ptrs = h + hdr
	if ptrs+2*ncells > im.usable {
		return nil, 0, 0, 0, 0, invalid("page %d: %d cells do not fit", n, ncells)
	}
	return p, h, kind, ncells, ptrs, nil
}

// cell returns cell i of a page whose pointer array starts at ptrs.
func (im *Image) cell(p []byte, n, i, ptrs, ncells int) ([]byte, error) {
	off := int(binary.BigEndian.Uint16(p[ptrs+2*i:]))
	if off < ptrs+2*ncells || off >= im.usable {
		return nil, invalid("page %d cell %d at offset %d", n, i, off)
	}
	return p[off:im.usable], nil
}

// children returns an interior page's child pages in key order (marking
// it seen), nil for a leaf (left unseen, for its walker to visit).
func (im *Image) children(st subtree, seen []atomic.Bool) ([]int, error) {
	if p, h, err := im.page(st.page); err == nil && len(p) > h && p[h] == 0x0d {
		return nil, nil
	}
	p, h, _, ncells, ptrs, err := im.treePage(st.page, st.depth, seen)
	if err != nil {
		return nil, err
	}
	kids := make([]int, 0, ncells+1)
	for i := range ncells {
		c, err := im.cell(p, st.page, i, ptrs, ncells)
		if err != nil {
			return nil, err
		}
		if len(c) < 5 {
			return nil, invalid("page %d cell %d truncated", st.page, i)
		}
		kids = append(kids, int(binary.BigEndian.Uint32(c)))
	}
	return append(kids, int(binary.BigEndian.Uint32(p[h+8:]))), nil
}

func (w *walker) visit(n, depth int) error {
	im := w.im
	p, h, kind, ncells, ptrs, err := im.treePage(n, depth, w.seen)
	if err != nil {
		return err
	}
	for i := range ncells {
		c, err := im.cell(p, n, i, ptrs, ncells)
		if err != nil {
			return err
		}
		if kind == 0x05 {
			if len(c) < 5 {
				return invalid("page %d cell %d truncated", n, i)
			}
			if err := w.visit(int(binary.BigEndian.Uint32(c)), depth+1); err != nil {
				return err
			}
			continue
		}
		size, k := varint(c)
		if k == 0 || size < 0 || size > int64(len(im.data)) {
			return invalid("page %d cell %d: payload size", n, i)
		}
		rowid, k2 := varint(c[k:])
		if k2 == 0 {
			return invalid("page %d cell %d: rowid", n, i)
		}
		c = c[k+k2:]
		rec, err := im.payload(c, int(size), &w.scratch, w.seen)
		if err != nil {
			return invalid("page %d cell %d: %v", n, i, err)
		}
		if err := w.fn(rowid, rec); err != nil {
			return err
		}
	}
	if kind == 0x05 {
		return w.visit(int(binary.BigEndian.Uint32(p[h+8:])), depth+1)
	}
	return nil
}

// payload returns a cell's record: in place when it fits the page, else
// gathered from its overflow chain into scratch.
func (im *Image) payload(c []byte, size int, scratch *[]byte, seen []atomic.Bool) ([]byte, error) {
	u := im.usable
	x := u - 35
	local := size
	if size > x {
		m := (u-12)*32/255 - 23
		local = m + (size-m)%(u-4)
		if local > x {
			local = m
		}
	}
	if local > len(c) {
		return nil, fmt.Errorf("payload of %d bytes overruns the page", local)
	}
	if local == size {
		return c[:size], nil
	}
	if len(c) < local+4 {
		return nil, fmt.Errorf("missing overflow pointer")
	}
	buf := append((*scratch)[:0], c[:local]...)
	next := int(binary.BigEndian.Uint32(c[local:]))
	for len(buf) < size {
		if next < 1 || next > im.pages || seen[next].Swap(true) {
			return nil, fmt.Errorf("overflow chain broken at page %d", next)
		}
		p, _, err := im.page(next)
		if err != nil {
			return nil, err
		}
		next = int(binary.BigEndian.Uint32(p))
		take := min(u-4, size-len(buf))
		buf = append(buf, p[4:4+take]...)
	}
	*scratch = buf
	return buf, nil
}

// A cell is one record value.
type cell struct {
	kind cellKind
	i    int64
	f    float64
	b    []byte
}

type cellKind uint8

const (
	cellNull cellKind = iota
	cellInt
	cellFloat
	cellText
	cellBlob
)

func (k cellKind) String() string {
	return [...]string{"NULL", "integer", "real", "text", "blob"}[k]
}

// parseRecord splits a record (the SQLite record format) into cells,
// aliasing rec.
func parseRecord(rec []byte, out []cell) ([]cell, error) {
	hsize, k := varint(rec)
	if k == 0 || hsize < int64(k) || hsize > int64(len(rec)) {
		return nil, invalid("record header")
	}
	hdr, body := rec[k:hsize], rec[hsize:]
	for len(hdr) > 0 {
		st, k := varint(hdr)
		if k == 0 {
			return nil, invalid("record serial type")
		}
		hdr = hdr[k:]
		var c cell
		var n int
		switch {
		case st == 0:
		case st >= 1 && st <= 6:
			n = [...]int{0, 1, 2, 3, 4, 6, 8}[st]
			if len(body) < n {
				return nil, invalid("record truncated")
			}
			c = cell{kind: cellInt, i: beInt(body[:n])}
		case st == 7:
			n = 8
			if len(body) < n {
				return nil, invalid("record truncated")
			}
			c = cell{kind: cellFloat, f: math.Float64frombits(binary.BigEndian.Uint64(body))}
		case st == 8 || st == 9:
			c = cell{kind: cellInt, i: st - 8}
		case st >= 12:
			if st > int64(2*len(body)+13) {
				return nil, invalid("record truncated")
			}
			n = int((st - 12) / 2)
			if len(body) < n {
				return nil, invalid("record truncated")
			}
			c = cell{kind: cellBlob, b: body[:n:n]}
			if st%2 == 1 {
				c.kind = cellText
			}
		default:
			return nil, invalid("reserved serial type %d", st)
		}
		body = body[n:]
		out = append(out, c)
	}
	return out, nil
}

// beInt reads a big-endian two's-complement integer of 1–8 bytes.
func beInt(b []byte) int64 {
	v := int64(int8(b[0]))
	for _, x := range b[1:] {
		v = v<<8 | int64(x)
	}
	return v
}

// varint reads SQLite's big-endian varint: 1–9 bytes, the ninth whole.
// It returns 0 bytes read when b is too short.
func varint(b []byte) (int64, int) {
	var v uint64
	for i := 0; i < 9; i++ {
		if i >= len(b) {
			return 0, 0
		}
		if i == 8 {
			return int64(v<<8 | uint64(b[i])), 9
		}
		v = v<<7 | uint64(b[i]&0x7f)
		if b[i] < 0x80 {
			return int64(v), i + 1
		}
	}
	return 0, 0
}

// parseCreateTable reads the column names of a CREATE TABLE statement in
// order, and which column (if any) is the rowid: one declared INTEGER
// PRIMARY KEY, as a column or a table constraint, not DESC.
func parseCreateTable(sql string) ([]string, int, error) {
	toks, err := tokenize(sql)
	if err != nil {
		return nil, -1, err
	}
	open := slices.IndexFunc(toks, func(t token) bool { return t.punct == '(' })
	if open < 0 {
		return nil, -1, fmt.Errorf("no column list")
	}
	if n := len(toks); n >= 2 && toks[n-1].is("ROWID") && toks[n-2].is("WITHOUT") {
		return nil, -1, fmt.Errorf("a WITHOUT ROWID table")
	}
	var defs [][]token
	depth, start := 0, open+1
	closed := false
	for i := open; i < len(toks) && !closed; i++ {
		switch toks[i].punct {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				defs = append(defs, toks[start:i])
				closed = true
			}
		case ',':
			if depth == 1 {
				defs = append(defs, toks[start:i])
				start = i + 1
			}
		}
	}
	if !closed {
		return nil, -1, fmt.Errorf("unterminated column list")
	}
	var names []string
	var types []string
	rowid, pkName := -1, ""
	for _, d := range defs {
		if len(d) == 0 || d[0].punct != 0 {
			return nil, -1, fmt.Errorf("empty column definition")
		}
		if d[0].bare && (d[0].is("CONSTRAINT") || d[0].is("PRIMARY") || d[0].is("UNIQUE") || d[0].is("CHECK") || d[0].is("FOREIGN")) {
			// PRIMARY KEY ( name ) names the rowid if that column is INTEGER.
			for i := 0; i+3 < len(d); i++ {
				if d[i].is("PRIMARY") && d[i+1].is("KEY") && d[i+2].punct == '(' && d[i+3].punct == 0 &&
					i+4 < len(d) && d[i+4].punct == ')' {
					pkName = d[i+3].text
				}
			}
			continue
		}
		typ := ""
		j := 1
		for ; j < len(d) && d[j].bare && !constraintWord(d[j]); j++ {
			typ += strings.ToUpper(d[j].text) + " "
		}
		names = append(names, d[0].text)
		types = append(types, strings.TrimSpace(typ))
		for ; j+1 < len(d); j++ {
			if d[j].is("PRIMARY") && d[j+1].is("KEY") && types[len(types)-1] == "INTEGER" && !(j+2 < len(d) && d[j+2].is("DESC")) {
				rowid = len(names) - 1
			}
		}
	}
	if pkName != "" {
		if i := slices.Index(names, pkName); i >= 0 && types[i] == "INTEGER" {
			rowid = i
		}
	}
	return names, rowid, nil
}

func constraintWord(t token) bool {
	for _, w := range []string{"CONSTRAINT", "PRIMARY", "NOT", "NULL", "UNIQUE", "CHECK", "DEFAULT", "COLLATE", "REFERENCES", "GENERATED", "AS"} {
		if t.is(w) {
			return true
		}
	}
	return false
}

type token struct {
	text  string
	bare  bool // an unquoted word
	punct byte // '(', ')', ',' or another punctuation byte; 0 for words
}

func (t token) is(word string) bool { return t.bare && strings.EqualFold(t.text, word) }

// tokenize splits SQL into words (quoted identifiers unquoted), string
// literals and punctuation, dropping whitespace and comments.
func tokenize(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return nil, fmt.Errorf("unterminated comment")
			}
			i += end + 4
		case c == '"' || c == '`' || c == '\'' || c == '[':
			closeBy := c
			if c == '[' {
				closeBy = ']'
			}
			var b strings.Builder
			j := i + 1
			for {
				if j >= len(s) {
					return nil, fmt.Errorf("unterminated quote")
				}
				if s[j] == closeBy {
					if closeBy != ']' && j+1 < len(s) && s[j+1] == closeBy {
						b.WriteByte(closeBy)
						j += 2
						continue
					}
					break
				}
				b.WriteByte(s[j])
				j++
			}
			out = append(out, token{text: b.String()})
			i = j + 1
		case c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= 0x80:
			j := i
			for j < len(s) && (s[j] == '_' || s[j] == '$' || s[j] >= '0' && s[j] <= '9' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 0x80) {
				j++
			}
			out = append(out, token{text: s[i:j], bare: true})
			i = j
		default:
			out = append(out, token{text: s[i : i+1], punct: c})
			i++
		}
	}
	return out, nil
}
