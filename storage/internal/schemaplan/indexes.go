package schemaplan

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/syncnode/syncnode/schema"
)

// IndexDef is one index a store keeps on an application table.
type IndexDef struct {
	Name string
	// Columns are the indexed columns in order, _sync_partition first.
	Columns []string
	Unique  bool
}

// CreateSQL is the CREATE INDEX statement of ix on table, with identifiers
// quoted by quote; the DDL is the same in both dialects.
func (ix IndexDef) CreateSQL(table string, quote func(string) string) string {
	cols := make([]string, len(ix.Columns))
	for i, col := range ix.Columns {
		cols[i] = quote(col)
	}
	unique := ""
	if ix.Unique {
		unique = "UNIQUE "
	}
	return "CREATE " + unique + "INDEX " + quote(ix.Name) + " ON " + quote(table) + " (" + strings.Join(cols, ", ") + ")"
}

// ManagedIndexPrefix starts the name of every index EnsureSchema manages
// on an application table. Such an index that Indexes no longer lists is
// stale and dropped; indexes with other names (an operator's own) are
// left alone. Schema names cannot start with it (schema.Parse reserves
// "sync_").
const ManagedIndexPrefix = "sync_"

// Indexes returns every managed index of table t:
//   - one on (_sync_partition, column, _sync_row_id) per scope column,
//     which RowScan and bootstrap pages read in row id order;
//   - one per declared index (schema.Table.Indexes): a unique one on
//     (_sync_partition, columns…), unique per partition, a non-unique one
//     on (_sync_partition, columns…, _sync_row_id);
//   - one on (_sync_partition, column, _sync_row_id) per reference column
//     (SPEC.md §6.11) that neither a scope index nor a declared non-unique
//     index over exactly that column already serves: the push path finds
//     a parent's children through it.
//
// A declared index's name carries a hash of its definition, so a changed
// definition is a new index and the old one is dropped.
func Indexes(t *schema.Table) []IndexDef {
	var out []IndexDef
	// served marks the columns some index already covers as
	// (_sync_partition, column, _sync_row_id).
	served := map[string]bool{}
	for _, col := range ScopeColumns(t.Layout()) {
		out = append(out, IndexDef{Name: ScopeIndexName(t.Name, col), Columns: []string{ColPartition, col, ColRowID}})
		served[col] = true
	}
	for _, ix := range t.Indexes {
		cols := append([]string{ColPartition}, ix.Columns...)
		if !ix.Unique {
			cols = append(cols, ColRowID)
			if len(ix.Columns) == 1 {
				served[ix.Columns[0]] = true
			}
		}
		key := t.Name + "\x00" + ix.Name + "\x00" + strconv.FormatBool(ix.Unique)
		for _, c := range ix.Columns {
			key += "\x00" + c
		}
		out = append(out, IndexDef{Name: indexName("sync_index_", key, ix.Name), Columns: cols, Unique: ix.Unique})
	}
	for _, r := range t.References {
		if served[r.Column] {
			continue
		}
		out = append(out, IndexDef{Name: ReferenceIndexName(t.Name, r.Column), Columns: []string{ColPartition, r.Column, ColRowID}})
	}
	return out
}

// ScopeIndexName is the name of the index on (_sync_partition, column,
// _sync_row_id) of a scope column. Index names are database-wide in both
// dialects, so a hash of (table, column) keeps them unique, and the name
// fits PostgreSQL's 63-byte identifiers.
func ScopeIndexName(table, column string) string {
	return indexName("sync_scope_", table+"\x00"+column, table+"_"+column)
}

// ReferenceIndexName is the name of the index on (_sync_partition,
// column, _sync_row_id) of a reference column.
func ReferenceIndexName(table, column string) string {
	return indexName("sync_ref_", table+"\x00"+column, table+"_"+column)
}

// indexName is prefix, a short hash of key, and a readable suffix, cut to
// PostgreSQL's identifier limit.
func indexName(prefix, key, readable string) string {
	sum := sha256.Sum256([]byte(key))
	name := prefix + hex.EncodeToString(sum[:4]) + "_" + readable
	if len(name) > schema.MaxIdentifierLength {
		name = name[:schema.MaxIdentifierLength]
	}
	return name
}
