package schema

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// OnDelete is what deleting a parent row does to the rows that reference it
// (SPEC §6.11).
type OnDelete uint8

// The three actions a declared reference may take.
const (
	// Restrict refuses the delete while a child references the parent
	// (sync.reference_violation, reason restricted_delete).
	Restrict OnDelete = iota + 1
	// Cascade deletes every child, recursively.
	Cascade
	// SetNull sets the child's reference column to NULL.
	SetNull
)

var onDeleteNames = [...]string{Restrict: "RESTRICT", Cascade: "CASCADE", SetNull: "SET NULL"}

// String returns the IR spelling: RESTRICT, CASCADE or SET NULL.
func (o OnDelete) String() string {
	if o >= Restrict && o <= SetNull {
		return onDeleteNames[o]
	}
	return fmt.Sprintf("OnDelete(%d)", uint8(o))
}

// Reference is one declared reference: column Column of table Child holds
// the primary key of a row of ParentTable (SPEC §6.11). The server enforces
// it once per commit; local replicas never do.
type Reference struct {
	Child       string
	Column      string
	ColumnIndex int
	ParentTable string
	OnDelete    OnDelete
}

// Index is one declared secondary index over columns of its table, in
// declaration order. The IR emits a non-unique one over each reference
// column, for reaching children from a parent.
type Index struct {
	Name          string
	Columns       []string
	ColumnIndexes []int
	Unique        bool
}

type irReference struct {
	Column      string `json:"column"`
	ParentTable string `json:"parentTable"`
	// ParentColumn is optional: the IR names only the parent table, whose
	// primary key is the target; a named column must be that key.
	ParentColumn string          `json:"parentColumn"`
	OnDelete     string          `json:"onDelete"`
	OnUpdate     json.RawMessage `json:"onUpdate"`
}

type irIndex struct {
	Name    string   `json:"name"`
	Columns []string `json:"columns"`
	Unique  bool     `json:"unique"`
}

// compileReferences validates the references of table t against the whole
// schema, with the refusals of SPEC §6.11: an undeclared column or parent
// table, a target other than the parent's primary key, a type differing from
// that key's, scope patterns differing between parent and child, ON UPDATE,
// an action other than RESTRICT, CASCADE and SET NULL, SET NULL on a
// non-nullable column, and more than one reference on a column. It also
// refuses SET NULL on a scope column, which would leave the child without
// the scope it is stored under (SPEC §3.1).
func (s *Schema) compileReferences(t *Table, irs []irReference) error {
	seen := make(map[string]bool, len(irs))
	for _, ir := range irs {
		r, err := s.compileReference(t, ir)
		if err != nil {
			return err
		}
		if seen[r.Column] {
			return &Error{Table: t.Name, Column: r.Column, Field: "references.column", Reason: "a column declares at most one reference"}
		}
		seen[r.Column] = true
		t.References = append(t.References, r)
		s.referencing[r.ParentTable] = append(s.referencing[r.ParentTable], r)
	}
	return nil
}

func (s *Schema) compileReference(t *Table, ir irReference) (Reference, error) {
	fail := func(field, format string, args ...any) (Reference, error) {
		return Reference{}, &Error{Table: t.Name, Column: ir.Column, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	idx, ok := t.colIndex[ir.Column]
	if !ok {
		return fail("references.column", "reference names an undeclared column")
	}
	col := t.Columns[idx]
	if ir.OnUpdate != nil {
		return fail("references.onUpdate", "ON UPDATE is not supported: a primary key never changes")
	}
	var on OnDelete
	switch ir.OnDelete {
	case "", "RESTRICT":
		on = Restrict
	case "CASCADE":
		on = Cascade
	case "SET NULL":
		on = SetNull
	case "NO ACTION", "SET DEFAULT":
		return fail("references.onDelete", "ON DELETE %s is not supported: use RESTRICT, CASCADE or SET NULL", ir.OnDelete)
	default:
		return fail("references.onDelete", "unknown ON DELETE action %q (RESTRICT, CASCADE or SET NULL)", ir.OnDelete)
	}
	parent, ok := s.byName[ir.ParentTable]
	if !ok {
		return fail("references.parentTable", "reference names an undeclared parent table %q", ir.ParentTable)
	}
	if ir.ParentColumn != "" && ir.ParentColumn != parent.PrimaryKey {
		return fail("references.parentColumn", "a reference must target the primary key %q of %q, not %q", parent.PrimaryKey, parent.Name, ir.ParentColumn)
	}
	if pk := parent.Columns[parent.PKIndex]; col.Type != pk.Type {
		return fail("references.column", "type %s differs from the type %s of the primary key %s.%s", col.Type, pk.Type, parent.Name, pk.Name)
	}
	if cp, pp := scopePatterns(t), scopePatterns(parent); !slices.Equal(cp, pp) {
		return fail("references.parentTable", "scope patterns [%s] differ from the parent %q's [%s]", strings.Join(cp, ", "), parent.Name, strings.Join(pp, ", "))
	}
	if on == SetNull {
		if !col.Nullable {
			return fail("references.onDelete", "ON DELETE SET NULL on a column that is not nullable")
		}
		if t.IsScopeColumn(idx) {
			return fail("references.onDelete", "ON DELETE SET NULL on a scope column would leave the row without its scope")
		}
	}
	return Reference{Child: t.Name, Column: col.Name, ColumnIndex: idx, ParentTable: parent.Name, OnDelete: on}, nil
}

// scopePatterns returns the table's scope patterns, sorted: parent and
// child must declare the same set, whichever columns bind them.
func scopePatterns(t *Table) []string {
	out := make([]string, len(t.Scopes))
	for i, sc := range t.Scopes {
		out[i] = sc.Prefix + ":{" + sc.Variable + "}"
	}
	slices.Sort(out)
	return out
}

// compileIndexes validates the indexes of table t. Index names are unique
// across the schema and distinct from table names (SQL relations share one
// namespace); names maps each index name seen so far to its table.
func (s *Schema) compileIndexes(t *Table, irs []irIndex, names map[string]string) error {
	for _, ir := range irs {
		if r := checkName("index", ir.Name); r != "" {
			return &Error{Table: t.Name, Field: "indexes.name", Reason: r}
		}
		if other, dup := names[ir.Name]; dup {
			return &Error{Table: t.Name, Field: "indexes.name", Reason: fmt.Sprintf("index name %q is already used by table %q", ir.Name, other)}
		}
		if _, clash := s.byName[ir.Name]; clash {
			return &Error{Table: t.Name, Field: "indexes.name", Reason: fmt.Sprintf("index name %q is the name of a table", ir.Name)}
		}
		names[ir.Name] = t.Name
		if len(ir.Columns) == 0 {
			return &Error{Table: t.Name, Field: "indexes.columns", Reason: fmt.Sprintf("index %q names no columns", ir.Name)}
		}
		ix := Index{Name: ir.Name, Unique: ir.Unique}
		for _, c := range ir.Columns {
			i, ok := t.colIndex[c]
			if !ok {
				return &Error{Table: t.Name, Column: c, Field: "indexes.columns", Reason: fmt.Sprintf("index %q names an undeclared column", ir.Name)}
			}
			if slices.Contains(ix.ColumnIndexes, i) {
				return &Error{Table: t.Name, Column: c, Field: "indexes.columns", Reason: fmt.Sprintf("index %q names the column twice", ir.Name)}
			}
			ix.Columns = append(ix.Columns, c)
			ix.ColumnIndexes = append(ix.ColumnIndexes, i)
		}
		t.Indexes = append(t.Indexes, ix)
	}
	return nil
}

// Referencing returns the references whose parent is table, in table and
// declaration order: what a delete of one of its rows must enforce.
func (s *Schema) Referencing(table string) []Reference { return s.referencing[table] }
