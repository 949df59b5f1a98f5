package schemaplan

import (
	"errors"
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
	args, counts, err := QueryRelationArgs(sc, p)
	if err != nil {
		return "", nil, err
	}
	defs, err := QueryRelationDefs(sc, p.Tables, p.Scopes != nil, counts, from, ph)
	if err != nil {
		return "", nil, err
	}
	return defs, args, nil
}

// QueryRelationArgs returns the scope values QueryRelations binds and
// how many each scope variable of each table has (in the tables' and
// their scopes' order; nil for a privileged query): the text's shape,
// which QueryRelationDefs writes. A store that keeps a query's text
// converts the values of each run and writes the text once per shape.
func QueryRelationArgs(sc *schema.Schema, p *storage.QueryParams) ([]any, []int, error) {
	if p.Scopes == nil {
		return nil, nil, nil
	}
	var (
		args   []any
		counts []int
	)
	for _, name := range p.Tables {
		t, ok := sc.Table(name)
		if !ok {
			return nil, nil, fmt.Errorf("unknown table %q", name)
		}
		for _, s := range t.Scopes {
			vals, err := scopeValues(t, s.Variable, p.Scopes[name][s.Variable])
			if err != nil {
				return nil, nil, err
			}
			counts = append(counts, len(vals))
			args = append(args, vals...)
		}
	}
	return args, counts, nil
}

// QueryRelationDefs writes QueryRelations' WITH items for tables, scoped
// or not, with counts values (QueryRelationArgs) bound for each scope
// variable.
func QueryRelationDefs(sc *schema.Schema, tables []string, scoped bool, counts []int, from func(table string) string, ph func(n int) string) (string, error) {
	var b strings.Builder
	n := 2 // the next placeholder: 1 is the partition
	for i, name := range tables {
		t, ok := sc.Table(name)
		if !ok {
			return "", fmt.Errorf("unknown table %q", name)
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
		if !scoped {
			b.WriteString(")")
			continue
		}
		for _, s := range t.Scopes {
			if len(counts) == 0 {
				return "", fmt.Errorf("table %q: no value count for scope %q", name, s.Variable)
			}
			k := counts[0]
			counts = counts[1:]
			switch k {
			case 0:
				b.WriteString(" AND 1 = 0") // no usable value: the relation is empty
			case 1:
				b.WriteString(" AND " + quoteIdent(s.Column) + " = " + ph(n))
			default:
				b.WriteString(" AND " + quoteIdent(s.Column) + " IN (")
				for j := range k {
					if j > 0 {
						b.WriteString(", ")
					}
					b.WriteString(ph(n + j))
				}
				b.WriteString(")")
			}
			n += k
		}
		b.WriteString(")")
	}
	if len(counts) > 0 {
		return "", errors.New("more value counts than scope variables")
	}
	return b.String(), nil
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
