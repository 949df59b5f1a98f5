// Package sqliteimage is the SQLite-image segment format (SPEC.md §5.3,
// mediaType sqlite): a complete SQLite database file holding one table's
// rows for one scope digest at one pin, plus a one-row metadata table.
//
// The package is pure: Layout renders the DDL a writer creates (the
// writer, sqlitestore.WriteImage, runs the SQLite we ship), and Open
// reads an image straight from its bytes — the file header, the schema
// table and the table b-trees — without a SQLite engine, so a client
// applies an image at memory speed. Reading checks what §5.3 asks a
// receiver to check: the bytes open as a SQLite database (else
// sync.invalid_request), exactly the two tables, one metadata row equal
// to the descriptor (sync.invalid_request), and the data table's column
// names and order against the generated schema plus the trailing
// _syncular_version (sync.schema_mismatch). Every malformed input is a
// typed error, never a panic or an endless walk: pages are visited at
// most once.
package sqliteimage

import (
	"strconv"
	"strings"

	"github.com/syncnode/syncnode/ssp2"
)

// Format is the image format this package writes and reads.
const Format = 1

// Names fixed by §5.3.
const (
	MetaTable     = "_syncular_segment"
	VersionColumn = "_syncular_version"
)

// Meta is the metadata row: the descriptor duplicated inside the file.
type Meta struct {
	Format        int64
	Table         string
	SchemaVersion int32
	AsOfCommitSeq int64
	ScopeDigest   string
	RowCount      int64
}

// Layout is the data table of an image: the table's wire columns in
// declaration order and its primary-key column.
type Layout struct {
	Table   string
	Columns []ssp2.Column
	PK      int
}

// Row is one image row: its server version and its values, one per
// layout column.
type Row struct {
	Version int64
	Values  []ssp2.Value
}

// Affinity is the declared SQLite type of a wire column type (§5.3):
// string, json and blob_ref are TEXT; integer and boolean INTEGER; float
// REAL; bytes and crdt BLOB.
func Affinity(t ssp2.ColumnType) string {
	switch t {
	case ssp2.TypeInteger, ssp2.TypeBoolean:
		return "INTEGER"
	case ssp2.TypeFloat:
		return "REAL"
	case ssp2.TypeBytes, ssp2.TypeCrdt:
		return "BLOB"
	}
	return "TEXT"
}

// Quote renders an identifier for SQL.
func Quote(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// CreateData is the data table's CREATE TABLE statement: the columns with
// their affinities, NOT NULL where not nullable, the primary key, and
// _syncular_version INTEGER NOT NULL last. An integer primary key is the
// table's rowid (INTEGER PRIMARY KEY), so the image holds it once.
func (l Layout) CreateData() string {
	var b strings.Builder
	b.WriteString("CREATE TABLE ")
	b.WriteString(Quote(l.Table))
	b.WriteString(" (")
	for i, c := range l.Columns {
		b.WriteString(Quote(c.Name))
		b.WriteByte(' ')
		b.WriteString(Affinity(c.Type))
		if i == l.PK {
			b.WriteString(" PRIMARY KEY")
		}
		if !c.Nullable {
			b.WriteString(" NOT NULL")
		}
		b.WriteString(", ")
	}
	b.WriteString(Quote(VersionColumn))
	b.WriteString(" INTEGER NOT NULL)")
	return b.String()
}

// CreateMeta is the metadata table's CREATE TABLE statement.
func CreateMeta() string {
	return "CREATE TABLE " + MetaTable + ` (format INTEGER NOT NULL, "table" TEXT NOT NULL, schemaVersion INTEGER NOT NULL, ` +
		"asOfCommitSeq INTEGER NOT NULL, scopeDigest TEXT NOT NULL, rowCount INTEGER NOT NULL)"
}

// InsertMeta inserts the metadata row; its parameters are the Meta
// fields in order.
func InsertMeta() string {
	return "INSERT INTO " + MetaTable + ` (format, "table", schemaVersion, asOfCommitSeq, scopeDigest, rowCount) VALUES (?, ?, ?, ?, ?, ?)`
}

// InsertData inserts n rows into the data table, one parameter per
// column and the version last, row after row.
func (l Layout) InsertData(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(Quote(l.Table))
	b.WriteString(" VALUES ")
	one := "(" + strings.Repeat("?, ", len(l.Columns)) + "?)"
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(one)
	}
	return b.String()
}

// ColumnNames are the data table's column names in order, the version
// column last: what a receiver compares an image's columns with.
func (l Layout) ColumnNames() []string {
	out := make([]string, 0, len(l.Columns)+1)
	for _, c := range l.Columns {
		out = append(out, c.Name)
	}
	return append(out, VersionColumn)
}

// Arg is a value as a SQL parameter of its column type: NULL as nil,
// booleans as 0/1, text as string, bytes as []byte.
func Arg(t ssp2.ColumnType, v ssp2.Value) any {
	if v.Null {
		return nil
	}
	switch t {
	case ssp2.TypeInteger:
		return v.Int
	case ssp2.TypeFloat:
		return v.Float
	case ssp2.TypeBoolean:
		if v.Bool {
			return int64(1)
		}
		return int64(0)
	case ssp2.TypeBytes, ssp2.TypeCrdt:
		if v.Bytes == nil {
			return []byte{} // an empty blob, not NULL
		}
		return v.Bytes
	}
	return string(v.Bytes)
}

func (m Meta) String() string {
	return "format " + strconv.FormatInt(m.Format, 10) + ", table " + strconv.Quote(m.Table) +
		", schema v" + strconv.Itoa(int(m.SchemaVersion)) + ", as of " + strconv.FormatInt(m.AsOfCommitSeq, 10) +
		", scope digest " + m.ScopeDigest + ", " + strconv.FormatInt(m.RowCount, 10) + " rows"
}
