package schemaplan

import (
	"errors"
	"fmt"
	"math"

	"github.com/syncnode/syncnode/ssp2"
)

// BindValue is the driver value a store binds for v in a column of type
// typ; a boolean binds as isFalse or isTrue, the one thing the dialects
// store differently (PostgreSQL boolean, SQLite STRICT INTEGER 0/1).
// The stores wrap it in an inlined bindValue on their write paths.
func BindValue(typ ssp2.ColumnType, v ssp2.Value, isFalse, isTrue any) any {
	if v.Null {
		return nil
	}
	switch typ {
	case ssp2.TypeInteger:
		return v.Int
	case ssp2.TypeFloat:
		if math.IsNaN(v.Float) {
			// SQL has no portable NaN (SQLite stores NULL): both stores
			// store NULL, which a NOT NULL column refuses. The payload
			// keeps the bits.
			return nil
		}
		return v.Float
	case ssp2.TypeBoolean:
		if v.Bool {
			return isTrue
		}
		return isFalse
	case ssp2.TypeBytes, ssp2.TypeCrdt:
		if v.Bytes == nil {
			return []byte{}
		}
		return v.Bytes
	default:
		return string(v.Bytes)
	}
}

// ErrNoSchema is the error of a row operation before EnsureSchema.
var ErrNoSchema = errors.New("no schema installed: call EnsureSchema first")

// TableError is op's error for table name when the store has no installed
// schema (installed=false) or the installed schema has no such table.
func TableError(op, name string, installed bool) error {
	if !installed {
		return fmt.Errorf("%s: %w", op, ErrNoSchema)
	}
	e := ssp2.Errorf(ssp2.CodeUnknownTable, "table %q is not in the installed schema", name)
	e.Op = op
	return e
}
