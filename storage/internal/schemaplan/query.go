package schemaplan

import (
	"fmt"
	"strings"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
)

// QueryRelations returns the WITH items that replace the application
// tables a registered query reads (REMOTE.md §2), written once for both
// stores, and the scope values they bind after the partition
// (placeholder 1), for placeholders 2, 3, …: for a scoped query, each
// scope column's covered values, one placeholder each (their number is
// bounded by the query's coverage, so a query has few statement texts).
// Each item, named like its table, selects the table's application
// columns from(table) where the partition and, for a scoped query, every
// scope column match; NOT MATERIALIZED keeps a table read twice an
// inlined relation (like a view), never a copy of the partition. An
// unqualified name resolves to a common table expression before any
// table on both stores, so the statement reads only these relations
// while its own text stays unchanged and its values bound. ph writes
// placeholder n; the values are typed as their columns are (string,
// int64, bool) for the store to bind.
func QueryRelations(sc *schema.Schema, p *storage.QueryParams, from func(table string) string, ph func(n int) string) (string, []any, error) {
	var (
		b    strings.Builder
		args []any
	)
	for i, name := range p.Tables {
		t, ok := sc.Table(name)
		if !ok {
			return "", nil, fmt.Errorf("unknown table %q", name)
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteIdent(t.Name) + " AS NOT MATERIALIZED (SELECT ")
		for j, c := range t.Columns {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(quoteIdent(c.Name))
		}
		b.WriteString(" FROM " + from(t.Name) + " WHERE " + quoteIdent(ColPartition) + " = " + ph(1))
		if p.Scopes == nil {
			b.WriteString(")")
			continue
		}
		for _, s := range t.Scopes {
			vals, err := scopeValues(t, s.Variable, p.Scopes[name][s.Variable])
			if err != nil {
				return "", nil, err
			}
			switch len(vals) {
			case 0:
				b.WriteString(" AND 1 = 0") // no usable value: the relation is empty
			case 1:
				b.WriteString(" AND " + quoteIdent(s.Column) + " = " + ph(len(args)+2))
			default:
				b.WriteString(" AND " + quoteIdent(s.Column) + " IN (")
				for k := range vals {
					if k > 0 {
						b.WriteString(", ")
					}
					b.WriteString(ph(len(args) + 2 + k))
				}
				b.WriteString(")")
			}
			args = append(args, vals...)
		}
		b.WriteString(")")
	}
	return b.String(), args, nil
}

// scopeValues converts a scope variable's covered values (rendered as
// stored scopes are) to the values its column stores; a value the column
// cannot hold is dropped.
func scopeValues(t *schema.Table, variable string, values []string) ([]any, error) {
	if len(values) == 0 {
		return nil, nil
	}
	f, none, err := ScanFilters(t, &storage.ScanParams{Table: t.Name, Scopes: map[string][]string{variable: values}, Limit: 1})
	if err != nil || none {
		return nil, err
	}
	vals := make([]any, 0, f[0].Len())
	for _, v := range f[0].Strings {
		vals = append(vals, v)
	}
	for _, v := range f[0].Ints {
		vals = append(vals, v)
	}
	for _, v := range f[0].Bools {
		vals = append(vals, v)
	}
	return vals, nil
}

func quoteIdent(ident string) string { return `"` + ident + `"` }
