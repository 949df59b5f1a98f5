package ssp2

// ColumnType is a column's wire type tag (SPEC.md §2.4).
type ColumnType uint8

// Column type tags. BlobRef rides the JSON machinery and Crdt the Bytes
// machinery on the wire; the distinct tags exist for schema and apply
// surfaces.
const (
	TypeString  ColumnType = 1
	TypeInteger ColumnType = 2
	TypeFloat   ColumnType = 3
	TypeBoolean ColumnType = 4
	TypeJSON    ColumnType = 5
	TypeBytes   ColumnType = 6
	TypeBlobRef ColumnType = 7
	TypeCrdt    ColumnType = 8
)

var columnTypeNames = [...]string{
	TypeString:  "string",
	TypeInteger: "integer",
	TypeFloat:   "float",
	TypeBoolean: "boolean",
	TypeJSON:    "json",
	TypeBytes:   "bytes",
	TypeBlobRef: "blob_ref",
	TypeCrdt:    "crdt",
}

// Valid reports whether t is one of the eight defined tags.
func (t ColumnType) Valid() bool { return t >= TypeString && t <= TypeCrdt }

// String returns the spec name of the type ("string", "blob_ref", …).
func (t ColumnType) String() string { return enumString("ColumnType", columnTypeNames[:], t) }

// ParseColumnType maps a spec type name to its tag.
func ParseColumnType(name string) (ColumnType, bool) {
	for t := TypeString; t <= TypeCrdt; t++ {
		if columnTypeNames[t] == name {
			return t, true
		}
	}
	return 0, false
}

// Column describes one column as the wire sees it: the SSG2 column table
// carries exactly these three fields.
type Column struct {
	Name     string
	Type     ColumnType
	Nullable bool
}

// Value is one column value of a decoded or to-be-encoded row. Which field
// carries the value follows from the column's type:
//
//	string, json, blob_ref   Bytes (UTF-8 text; json kept verbatim)
//	bytes, crdt              Bytes
//	integer                  Int
//	float                    Float
//	boolean                  Bool
//
// A decoder may alias Bytes into its input buffer; copy it before the
// buffer is reused. (Fields are ordered for size: 48 bytes, not 56.)
type Value struct {
	Bytes []byte
	Int   int64
	Float float64
	Null  bool
	Bool  bool
}
