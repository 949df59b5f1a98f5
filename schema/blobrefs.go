package schema

import (
	"slices"

	"github.com/syncnode/syncnode/ssp2"
)

// HasBlobRefs reports whether t declares a blob_ref column.
func (t *Table) HasBlobRefs() bool {
	return slices.ContainsFunc(t.Columns, func(c Column) bool { return c.Type == ssp2.TypeBlobRef })
}

// BlobRefIDs appends to dst the distinct blob ids a row of t references:
// the blobId of every non-NULL blob_ref value (SPEC.md §5.9.4). A value
// that is not a canonical BlobRef (the codec refuses those) references
// nothing.
func (t *Table) BlobRefIDs(vals []ssp2.Value, dst []string) []string {
	for i, c := range t.Columns {
		if c.Type != ssp2.TypeBlobRef || i >= len(vals) || vals[i].Null {
			continue
		}
		if id, ok := ssp2.BlobRefID(vals[i].Bytes); ok && !slices.Contains(dst, id) {
			dst = append(dst, id)
		}
	}
	return dst
}
