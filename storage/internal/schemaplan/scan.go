package schemaplan

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Filter is one scope variable of a RowScan, turned into typed values of
// its scope column: stored scopes are rendered strings, while the filter
// runs on the typed column so the scope index serves it.
type Filter struct {
	Column string
	Type   ssp2.ColumnType
	// Exactly one is used, by Type; values that cannot be a rendering of
	// the column type (say "x" for an integer) are dropped.
	Strings []string
	Ints    []int64
	Bools   []bool
}

// Len is the number of usable values.
func (f *Filter) Len() int { return len(f.Strings) + len(f.Ints) + len(f.Bools) }

// ScanFilters validates p against table t and returns one filter per
// variable, ordered by column name. none=true means no row can match (an
// undeclared variable, or a list with no usable value).
func ScanFilters(t *schema.Table, p *storage.ScanParams) (filters []Filter, none bool, err error) {
	if len(p.Scopes) == 0 {
		e := ssp2.Errorf(ssp2.CodeStorageScanRequiresScope, "scan of table %s without a scope variable", t.Name)
		e.Op = "scan rows"
		return nil, false, e
	}
	if p.Limit < 1 || p.Limit > storage.MaxScanLimit {
		e := ssp2.Errorf(ssp2.CodeStorageInvalidLimit, "scan limit %d outside 1..%d", p.Limit, storage.MaxScanLimit)
		e.Op = "scan rows"
		return nil, false, e
	}
	for v, values := range p.Scopes {
		sc, ok := t.Scope(v)
		if !ok {
			return nil, true, nil
		}
		f := Filter{Column: sc.Column, Type: t.Columns[sc.ColumnIndex].Type}
		for _, s := range values {
			switch f.Type {
			case ssp2.TypeInteger:
				if n, err := strconv.ParseInt(s, 10, 64); err == nil && strconv.FormatInt(n, 10) == s {
					f.Ints = append(f.Ints, n)
				}
			case ssp2.TypeBoolean:
				if b, err := strconv.ParseBool(s); err == nil && strconv.FormatBool(b) == s {
					f.Bools = append(f.Bools, b)
				}
			default:
				f.Strings = append(f.Strings, s)
			}
		}
		if f.Len() == 0 {
			return nil, true, nil
		}
		filters = append(filters, f)
	}
	slices.SortFunc(filters, func(a, b Filter) int {
		switch {
		case a.Column < b.Column:
			return -1
		case a.Column > b.Column:
			return 1
		}
		return 0
	})
	return filters, false, nil
}

// ColumnScan validates p against table t and returns the position of the
// column it filters on.
func ColumnScan(t *schema.Table, p *storage.ColumnScanParams) (int, error) {
	if p.Limit < 1 || p.Limit > storage.MaxScanLimit {
		e := ssp2.Errorf(ssp2.CodeStorageInvalidLimit, "scan limit %d outside 1..%d", p.Limit, storage.MaxScanLimit)
		e.Op = "scan rows by column"
		return 0, e
	}
	i, ok := t.ColumnIndex(p.Column)
	if !ok {
		return 0, fmt.Errorf("scan rows by column: table %s has no column %q", t.Name, p.Column)
	}
	if p.Value.Null {
		return 0, fmt.Errorf("scan rows by column: %s.%s: a NULL value matches no row by equality", t.Name, p.Column)
	}
	return i, nil
}
