// Package schema reads and validates the schema IR that Syncular uses and
// compiles it into tables syncnode can serve: wire column lists, row
// codecs, primary-key rendering and scope patterns.
//
// The IR is JSON:
//
//	{"version": 1,
//	 "tables": [{"name": "tasks",
//	             "columns": [{"name": "id", "type": "string", "nullable": false}, …],
//	             "primaryKey": "id",
//	             "scopes": [{"pattern": "project:{project_id}", "column": "project_id"}]}]}
//
// Columns may also carry "crdtType" (crdt columns), "encrypted" and
// "declaredType" (client-side encrypted columns, whose wire type is bytes).
// These are IR metadata and never reach the wire. A scope may be written as
// a bare pattern string; without "column" it binds the column named like
// its variable.
//
// A table may carry "materialize" (a boolean; Syncular's server table
// option, DESIGN-relational-server-storage "Optional materialization"):
// false declares that the table's application columns are not a
// queryable projection, so no registered query may read it (REMOTE.md
// §2). It defaults to true, except for a table whose every column other
// than the primary key and the scope columns is encrypted (there is at
// least one), whose projection would hold only ciphertext. syncnode's
// stores write the same layout either way.
//
// A table may declare "references" (SPEC §6.11), each
// {"column", "parentTable", "onDelete"} with onDelete RESTRICT (the
// default), CASCADE or SET NULL, and "indexes", each {"name", "columns",
// "unique"}; see references.go.
package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/syncnode/syncnode/ssp2"
)

// Schema is a validated, compiled schema IR document.
type Schema struct {
	Version int32
	Tables  []*Table

	byName    map[string]*Table
	variables map[string]bool
	// referencing maps a parent table to the references naming it, in
	// table and declaration order.
	referencing map[string][]Reference
}

// Table is one compiled synced table.
type Table struct {
	Name       string
	Columns    []Column
	PrimaryKey string
	Scopes     []Scope

	// Materialize is false when the table is not a queryable projection
	// (the IR's "materialize", defaulted as the package comment says).
	Materialize bool

	// References are the table's declared references (SPEC §6.11), in
	// declaration order; Indexes its declared secondary indexes.
	References []Reference
	Indexes    []Index

	// PKIndex is the position of the primary-key column.
	PKIndex int
	// Codec encodes and decodes full rows of this table.
	Codec *ssp2.RowCodec
	// Sparse encodes and decodes the table's sparse rows, the push payload
	// of wire version 3.
	Sparse *ssp2.SparseCodec

	wire       []ssp2.Column
	colIndex   map[string]int
	byVariable map[string]int // variable → index into Scopes
}

// Column is one IR column.
type Column struct {
	Name     string
	Type     ssp2.ColumnType
	Nullable bool
	// CrdtType names the server merger of a crdt column.
	CrdtType string
	// Encrypted marks a client-side encrypted column (wire type bytes);
	// DeclaredType is its application type before encryption.
	Encrypted    bool
	DeclaredType ssp2.ColumnType
}

// Scope is one compiled scope pattern "prefix:{variable}" bound to a column.
type Scope struct {
	Pattern     string
	Prefix      string
	Variable    string
	Column      string
	ColumnIndex int
}

// Error is a schema validation failure naming the table, column and IR
// member it is about. It is returned by Parse and Load.
type Error struct {
	Table  string
	Column string
	// Field is the IR member at fault when it is not the column itself,
	// e.g. "references.onDelete" or "indexes.columns".
	Field  string
	Reason string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("schema")
	if e.Table != "" {
		fmt.Fprintf(&b, ": table %q", e.Table)
	}
	if e.Column != "" {
		fmt.Fprintf(&b, ": column %q", e.Column)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": %s", e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// MaxIdentifierLength bounds table and column names; it is PostgreSQL's
// identifier limit, so every name maps to a real SQL column unchanged.
const MaxIdentifierLength = 63

var (
	identRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	patternRE = regexp.MustCompile(`^([^{}:]+):\{([A-Za-z_][A-Za-z0-9_]*)\}$`)
)

// reservedPrefixes are name prefixes kept for syncnode's own tables and
// internal columns.
var reservedPrefixes = []string{"_sync", "sync_", "_syncular"}

// Load reads and parses the IR file at path.
func Load(path string) (*Schema, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load schema: %w", err)
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("load schema %s: %w", path, err)
	}
	return s, nil
}

type irDoc struct {
	Version *int64    `json:"version"`
	Tables  []irTable `json:"tables"`
}

type irTable struct {
	Name       string          `json:"name"`
	Columns    []irColumn      `json:"columns"`
	PrimaryKey json.RawMessage `json:"primaryKey"`
	Scopes     []irScope       `json:"scopes"`
	References []irReference   `json:"references"`
	Indexes    []irIndex       `json:"indexes"`
	// Materialize is nil when the IR leaves it to the default.
	Materialize *bool `json:"materialize"`
}

type irColumn struct {
	Name         string `json:"name"`
	Type         string `json:"type"`
	Nullable     bool   `json:"nullable"`
	CrdtType     string `json:"crdtType"`
	Encrypted    bool   `json:"encrypted"`
	DeclaredType string `json:"declaredType"`
}

type irScope struct {
	Pattern string
	Column  string
}

func (s *irScope) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &s.Pattern)
	}
	var obj struct {
		Pattern string `json:"pattern"`
		Column  string `json:"column"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	s.Pattern, s.Column = obj.Pattern, obj.Column
	return nil
}

// Parse validates an IR document and compiles it.
func Parse(data []byte) (*Schema, error) {
	var doc irDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, &Error{Reason: "invalid JSON: " + err.Error()}
	}
	if doc.Version == nil {
		return nil, &Error{Reason: `missing "version"`}
	}
	if *doc.Version < 1 || *doc.Version > 1<<31-1 {
		return nil, &Error{Reason: fmt.Sprintf("version %d out of range (1..2147483647)", *doc.Version)}
	}
	if len(doc.Tables) == 0 {
		return nil, &Error{Reason: "no tables"}
	}
	s := &Schema{
		Version:     int32(*doc.Version),
		byName:      make(map[string]*Table, len(doc.Tables)),
		variables:   make(map[string]bool),
		referencing: make(map[string][]Reference),
	}
	for _, it := range doc.Tables {
		t, err := compileTable(it)
		if err != nil {
			return nil, err
		}
		if _, dup := s.byName[t.Name]; dup {
			return nil, &Error{Table: t.Name, Reason: "duplicate table name"}
		}
		s.byName[t.Name] = t
		s.Tables = append(s.Tables, t)
		for _, sc := range t.Scopes {
			s.variables[sc.Variable] = true
		}
	}
	// References and indexes name other tables and schema-wide index
	// names, so they compile once every table is known.
	indexNames := make(map[string]string)
	for i, t := range s.Tables {
		if err := s.compileReferences(t, doc.Tables[i].References); err != nil {
			return nil, err
		}
		if err := s.compileIndexes(t, doc.Tables[i].Indexes, indexNames); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func checkName(kind, name string) string {
	switch {
	case name == "":
		return kind + " name is empty"
	case len(name) > MaxIdentifierLength:
		return fmt.Sprintf("%s name longer than %d bytes", kind, MaxIdentifierLength)
	case !identRE.MatchString(name):
		return kind + " name must match [A-Za-z_][A-Za-z0-9_]*"
	}
	lower := strings.ToLower(name)
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(lower, p) {
			return fmt.Sprintf("%s name uses the reserved prefix %q", kind, p)
		}
	}
	return ""
}

func compileTable(it irTable) (*Table, error) {
	if r := checkName("table", it.Name); r != "" {
		return nil, &Error{Table: it.Name, Reason: r}
	}
	t := &Table{
		Name:       it.Name,
		colIndex:   make(map[string]int, len(it.Columns)),
		byVariable: make(map[string]int),
	}
	if len(it.Columns) == 0 {
		return nil, &Error{Table: t.Name, Reason: "no columns"}
	}
	if len(it.Columns) > 1<<16-1 {
		return nil, &Error{Table: t.Name, Reason: "too many columns"}
	}
	for i, ic := range it.Columns {
		c, err := compileColumn(t.Name, ic)
		if err != nil {
			return nil, err
		}
		if _, dup := t.colIndex[c.Name]; dup {
			return nil, &Error{Table: t.Name, Column: c.Name, Reason: "duplicate column name"}
		}
		t.colIndex[c.Name] = i
		t.Columns = append(t.Columns, c)
		t.wire = append(t.wire, ssp2.Column{Name: c.Name, Type: c.Type, Nullable: c.Nullable})
	}

	pk, err := parsePrimaryKey(it.PrimaryKey)
	if err != nil {
		return nil, &Error{Table: t.Name, Reason: err.Error()}
	}
	idx, ok := t.colIndex[pk]
	if !ok {
		return nil, &Error{Table: t.Name, Column: pk, Reason: "primary key names an undeclared column"}
	}
	pkc := t.Columns[idx]
	switch {
	case pkc.Nullable:
		return nil, &Error{Table: t.Name, Column: pk, Reason: "primary key column must not be nullable"}
	case pkc.Encrypted:
		return nil, &Error{Table: t.Name, Column: pk, Reason: "primary key column must not be encrypted"}
	case pkc.Type != ssp2.TypeString && pkc.Type != ssp2.TypeInteger &&
		pkc.Type != ssp2.TypeBoolean && pkc.Type != ssp2.TypeJSON:
		return nil, &Error{Table: t.Name, Column: pk, Reason: "primary key type must be string, integer, boolean or json, not " + pkc.Type.String()}
	}
	t.PrimaryKey, t.PKIndex = pk, idx

	if len(it.Scopes) == 0 {
		return nil, &Error{Table: t.Name, Reason: "a table must declare at least one scope pattern"}
	}
	for _, is := range it.Scopes {
		sc, err := compileScope(t, is)
		if err != nil {
			return nil, err
		}
		if j, dup := t.byVariable[sc.Variable]; dup {
			if t.Scopes[j].Column != sc.Column {
				return nil, &Error{Table: t.Name, Column: sc.Column, Reason: fmt.Sprintf("scope variable %q maps to two columns (%q and %q)", sc.Variable, t.Scopes[j].Column, sc.Column)}
			}
			return nil, &Error{Table: t.Name, Column: sc.Column, Reason: fmt.Sprintf("scope variable %q declared twice", sc.Variable)}
		}
		t.byVariable[sc.Variable] = len(t.Scopes)
		t.Scopes = append(t.Scopes, sc)
	}

	t.Materialize = defaultMaterialize(t)
	if it.Materialize != nil {
		t.Materialize = *it.Materialize
	}

	codec, err := ssp2.NewRowCodec(t.wire)
	if err != nil {
		return nil, &Error{Table: t.Name, Reason: err.Error()}
	}
	t.Codec = codec
	if t.Sparse, err = ssp2.NewSparseCodec(t.wire, t.PKIndex); err != nil {
		return nil, &Error{Table: t.Name, Reason: err.Error()}
	}
	return t, nil
}

// defaultMaterialize is true unless the table has columns besides its
// primary key and scope columns and every one of them is encrypted.
func defaultMaterialize(t *Table) bool {
	scope := map[int]bool{t.PKIndex: true}
	for _, sc := range t.Scopes {
		scope[sc.ColumnIndex] = true
	}
	payload := 0
	for i, c := range t.Columns {
		if scope[i] {
			continue
		}
		if !c.Encrypted {
			return true
		}
		payload++
	}
	return payload == 0
}

func parsePrimaryKey(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", fmt.Errorf(`missing "primaryKey"`)
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return one, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return "", fmt.Errorf(`"primaryKey" must be a column name`)
	}
	if len(many) != 1 {
		return "", fmt.Errorf("composite primary keys are not supported: rowId is one column rendered as a string")
	}
	return many[0], nil
}

func compileColumn(table string, ic irColumn) (Column, error) {
	if r := checkName("column", ic.Name); r != "" {
		return Column{}, &Error{Table: table, Column: ic.Name, Reason: r}
	}
	typ, ok := ssp2.ParseColumnType(ic.Type)
	if !ok {
		return Column{}, &Error{Table: table, Column: ic.Name, Reason: fmt.Sprintf("unknown column type %q", ic.Type)}
	}
	c := Column{Name: ic.Name, Type: typ, Nullable: ic.Nullable, CrdtType: ic.CrdtType, Encrypted: ic.Encrypted}
	if typ == ssp2.TypeCrdt && c.CrdtType == "" {
		return Column{}, &Error{Table: table, Column: c.Name, Reason: `a crdt column must name its "crdtType"`}
	}
	if typ != ssp2.TypeCrdt && c.CrdtType != "" {
		return Column{}, &Error{Table: table, Column: c.Name, Reason: `"crdtType" is only valid on crdt columns`}
	}
	if c.Encrypted {
		if typ != ssp2.TypeBytes {
			return Column{}, &Error{Table: table, Column: c.Name, Reason: "an encrypted column travels as bytes: its type must be bytes"}
		}
		dt, ok := ssp2.ParseColumnType(ic.DeclaredType)
		if !ok {
			return Column{}, &Error{Table: table, Column: c.Name, Reason: fmt.Sprintf("encrypted column has unknown declaredType %q", ic.DeclaredType)}
		}
		if dt == ssp2.TypeCrdt {
			return Column{}, &Error{Table: table, Column: c.Name, Reason: "a crdt column cannot be encrypted"}
		}
		c.DeclaredType = dt
	} else if ic.DeclaredType != "" {
		return Column{}, &Error{Table: table, Column: c.Name, Reason: `"declaredType" is only valid on encrypted columns`}
	}
	return c, nil
}

func compileScope(t *Table, is irScope) (Scope, error) {
	m := patternRE.FindStringSubmatch(is.Pattern)
	if m == nil {
		return Scope{}, &Error{Table: t.Name, Reason: fmt.Sprintf("scope pattern %q must have the form prefix:{variable} with exactly one variable", is.Pattern)}
	}
	sc := Scope{Pattern: is.Pattern, Prefix: m[1], Variable: m[2], Column: is.Column}
	if sc.Column == "" {
		sc.Column = sc.Variable
	}
	idx, ok := t.colIndex[sc.Column]
	if !ok {
		return Scope{}, &Error{Table: t.Name, Column: sc.Column, Reason: fmt.Sprintf("scope pattern %q names an undeclared column", is.Pattern)}
	}
	c := t.Columns[idx]
	if c.Encrypted {
		return Scope{}, &Error{Table: t.Name, Column: c.Name, Reason: "a scope column must not be encrypted"}
	}
	switch c.Type {
	case ssp2.TypeString, ssp2.TypeInteger, ssp2.TypeBoolean:
	default:
		return Scope{}, &Error{Table: t.Name, Column: c.Name, Reason: "a scope column must be string, integer or boolean, not " + c.Type.String()}
	}
	sc.ColumnIndex = idx
	return sc, nil
}

// Table returns the table named name.
func (s *Schema) Table(name string) (*Table, bool) {
	t, ok := s.byName[name]
	return t, ok
}

// HasVariable reports whether any table declares scope variable v. The
// allowed scopes a resolver returns may only use such variables (SPEC §3.2).
func (s *Schema) HasVariable(v string) bool { return s.variables[v] }

// WireColumns returns the table's column list as the wire sees it.
func (t *Table) WireColumns() []ssp2.Column { return t.wire }

// ColumnIndex returns the position of the named column.
func (t *Table) ColumnIndex(name string) (int, bool) {
	i, ok := t.colIndex[name]
	return i, ok
}

// Scope returns the table's scope for variable v.
func (t *Table) Scope(v string) (Scope, bool) {
	i, ok := t.byVariable[v]
	if !ok {
		return Scope{}, false
	}
	return t.Scopes[i], true
}

// IsScopeColumn reports whether column i is bound by a scope pattern.
func (t *Table) IsScopeColumn(i int) bool {
	for _, sc := range t.Scopes {
		if sc.ColumnIndex == i {
			return true
		}
	}
	return false
}

// RowID renders the row's primary key as the wire rowId.
func (t *Table) RowID(row []ssp2.Value) (string, error) {
	if len(row) != len(t.Columns) {
		return "", fmt.Errorf("row id: row has %d values, table %s has %d columns", len(row), t.Name, len(t.Columns))
	}
	s, ok := RenderValue(t.Columns[t.PKIndex].Type, row[t.PKIndex])
	if !ok {
		return "", fmt.Errorf("row id: primary key of table %s is null", t.Name)
	}
	return s, nil
}

// StoredScopes extracts the row's scope values, variable → rendered value.
// A missing (NULL) or empty value is reported by ok=false with the variable
// that lacks it: such a row can neither be authorized nor stored (SPEC §3.1,
// §3.4).
func (t *Table) StoredScopes(row []ssp2.Value) (scopes map[string]string, missing string, ok bool) {
	scopes = make(map[string]string, len(t.Scopes))
	for _, sc := range t.Scopes {
		v, present := RenderValue(t.Columns[sc.ColumnIndex].Type, row[sc.ColumnIndex])
		if !present || v == "" {
			return nil, sc.Variable, false
		}
		scopes[sc.Variable] = v
	}
	return scopes, "", true
}

// RenderValue renders a primary-key or scope value as its string form:
// strings and json as their text, integers in decimal, booleans as
// true/false. It reports false for NULL and for types without a string form.
func RenderValue(typ ssp2.ColumnType, v ssp2.Value) (string, bool) {
	if v.Null {
		return "", false
	}
	switch typ {
	case ssp2.TypeString, ssp2.TypeJSON:
		return string(v.Bytes), true
	case ssp2.TypeInteger:
		return strconv.FormatInt(v.Int, 10), true
	case ssp2.TypeBoolean:
		return strconv.FormatBool(v.Bool), true
	}
	return "", false
}
