package schemaplan

import (
	"strings"

	"github.com/syncnode/syncnode/ssp2"
)

// KeyColumns are the primary key of every application table.
var KeyColumns = []string{ColPartition, ColRowID}

// DDL spells the application-table DDL of one dialect; what the tables
// hold and in which order is written here once.
type DDL struct {
	Quote   func(string) string
	SQLType TypeFunc
	// KeyCollate follows the type of the partition and row id columns
	// (PostgreSQL's COLLATE "C", so row ids order bytewise as in SQLite).
	KeyCollate string
	// TableOptions follow CREATE TABLE's closing parenthesis (SQLite's
	// STRICT, WITHOUT ROWID).
	TableOptions string
}

// CreateTable is the DDL of an application table: the internal columns,
// then cols in declaration order, each NOT NULL unless nullable, and the
// primary key pk (KeyColumns but in the tests that break it).
func (d DDL) CreateTable(name string, cols []ssp2.Column, pk []string) string {
	var b strings.Builder
	b.WriteString("CREATE TABLE " + d.Quote(name) + " (\n")
	for _, c := range append(append([]ssp2.Column(nil), InternalColumns...), cols...) {
		b.WriteString("  " + d.Quote(c.Name) + " " + d.SQLType(c.Type))
		if c.Name == ColPartition || c.Name == ColRowID {
			b.WriteString(d.KeyCollate)
		}
		if !c.Nullable {
			b.WriteString(" NOT NULL")
		}
		b.WriteString(",\n")
	}
	quoted := make([]string, len(pk))
	for i, c := range pk {
		quoted[i] = d.Quote(c)
	}
	b.WriteString("  PRIMARY KEY (" + strings.Join(quoted, ", ") + ")\n)" + d.TableOptions)
	return b.String()
}

// AddColumn is the DDL adding col (nullable: an existing row has no value)
// to table.
func (d DDL) AddColumn(table string, col ssp2.Column) string {
	return "ALTER TABLE " + d.Quote(table) + " ADD COLUMN " + d.Quote(col.Name) + " " + d.SQLType(col.Type)
}
