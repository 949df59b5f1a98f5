package schemaplan

import (
	"strings"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

// PhysicalColumn is one column as a database catalog reports it.
type PhysicalColumn struct {
	Name    string
	Type    string // the catalog's type name, compared case-insensitively
	NotNull bool
	// PKPos is the 1-based position in the primary key, 0 outside it.
	PKPos int
}

// TypeFunc maps an SSP2 column type to the type name the dialect's
// catalog reports for the column that stores it.
type TypeFunc func(ssp2.ColumnType) string

// ExpectedColumns returns the columns a table with layout l must have:
// the internal columns, then the schema columns.
func ExpectedColumns(l schema.TableLayout) ([]ssp2.Column, error) {
	out := make([]ssp2.Column, 0, len(InternalColumns)+len(l.Columns))
	out = append(out, InternalColumns...)
	for _, c := range l.Columns {
		typ, ok := ssp2.ParseColumnType(c.Type)
		if !ok {
			return nil, Refuse(ssp2.CodeStorageStoredLayoutMismatch, Details{Table: l.Name, Column: c.Name, Reason: "unknown column type " + c.Type})
		}
		out = append(out, ssp2.Column{Name: c.Name, Type: typ, Nullable: c.Nullable})
	}
	return out, nil
}

// CheckPhysical compares the catalog of one table (cols; exists=false when
// the table is missing) with layout l and returns a
// CodeStoragePhysicalLayoutMismatch refusal for the first difference:
// missing table, missing column, wrong type, wrong nullability, or a
// primary key other than (_sync_partition, _sync_row_id). Columns the
// layout does not know are ignored.
func CheckPhysical(l schema.TableLayout, exists bool, cols []PhysicalColumn, typeOf TypeFunc) error {
	refuse := func(col, reason string) error {
		return Refuse(ssp2.CodeStoragePhysicalLayoutMismatch, Details{Table: l.Name, Column: col, Reason: reason})
	}
	if !exists {
		return refuse("", ReasonMissingTable)
	}
	want, err := ExpectedColumns(l)
	if err != nil {
		return err
	}
	byName := make(map[string]PhysicalColumn, len(cols))
	for _, c := range cols {
		byName[c.Name] = c
	}
	for _, w := range want {
		got, ok := byName[w.Name]
		switch {
		case !ok:
			return refuse(w.Name, ReasonMissingColumn)
		case !strings.EqualFold(got.Type, typeOf(w.Type)):
			return refuse(w.Name, ReasonType)
		case got.NotNull == w.Nullable:
			return refuse(w.Name, ReasonNullability)
		}
	}
	var pk []string
	for _, c := range cols {
		if c.PKPos > 0 {
			for len(pk) < c.PKPos {
				pk = append(pk, "")
			}
			pk[c.PKPos-1] = c.Name
		}
	}
	if len(pk) != 2 || pk[0] != ColPartition || pk[1] != ColRowID {
		return refuse(strings.Join(pk, ","), ReasonPrimaryKey)
	}
	return nil
}
