package schema

import (
	"encoding/json"
	"fmt"
)

// TableLayout is the storage-relevant shape of a table: what a schema
// marker records per table so a later start can tell whether the running
// schema still matches what the database was built for.
type TableLayout struct {
	Name       string         `json:"name"`
	PrimaryKey string         `json:"primaryKey"`
	Columns    []ColumnLayout `json:"columns"`
	Scopes     []string       `json:"scopes"`
}

// ColumnLayout is one column of a TableLayout.
type ColumnLayout struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

// Layout returns the table's layout.
func (t *Table) Layout() TableLayout {
	l := TableLayout{Name: t.Name, PrimaryKey: t.PrimaryKey}
	for _, c := range t.Columns {
		l.Columns = append(l.Columns, ColumnLayout{Name: c.Name, Type: c.Type.String(), Nullable: c.Nullable})
	}
	for _, sc := range t.Scopes {
		l.Scopes = append(l.Scopes, sc.Pattern+"="+sc.Column)
	}
	return l
}

// Layouts returns every table's layout, in declaration order.
func (s *Schema) Layouts() []TableLayout {
	out := make([]TableLayout, len(s.Tables))
	for i, t := range s.Tables {
		out[i] = t.Layout()
	}
	return out
}

// LayoutDiff describes the first difference between a stored layout and the
// running one.
type LayoutDiff struct {
	Table  string
	Column string
	Reason string
}

func (d LayoutDiff) String() string {
	if d.Column != "" {
		return fmt.Sprintf("table %s column %s: %s", d.Table, d.Column, d.Reason)
	}
	return fmt.Sprintf("table %s: %s", d.Table, d.Reason)
}

// CompareLayouts compares stored layouts with running ones table by table
// and column by column. It returns the first difference, or ok=true when
// they are identical.
func CompareLayouts(stored, running []TableLayout) (LayoutDiff, bool) {
	byName := make(map[string]TableLayout, len(stored))
	for _, l := range stored {
		byName[l.Name] = l
	}
	if len(stored) != len(running) {
		for _, r := range running {
			if _, ok := byName[r.Name]; !ok {
				return LayoutDiff{Table: r.Name, Reason: "table missing from the stored layout"}, false
			}
		}
		runningNames := make(map[string]bool, len(running))
		for _, r := range running {
			runningNames[r.Name] = true
		}
		for _, l := range stored {
			if !runningNames[l.Name] {
				return LayoutDiff{Table: l.Name, Reason: "stored table missing from the running schema"}, false
			}
		}
	}
	for _, r := range running {
		l, ok := byName[r.Name]
		if !ok {
			return LayoutDiff{Table: r.Name, Reason: "table missing from the stored layout"}, false
		}
		if l.PrimaryKey != r.PrimaryKey {
			return LayoutDiff{Table: r.Name, Column: r.PrimaryKey, Reason: fmt.Sprintf("primary key %q stored, %q running", l.PrimaryKey, r.PrimaryKey)}, false
		}
		if len(l.Columns) != len(r.Columns) {
			return LayoutDiff{Table: r.Name, Reason: fmt.Sprintf("%d columns stored, %d running", len(l.Columns), len(r.Columns))}, false
		}
		for i := range r.Columns {
			if l.Columns[i] != r.Columns[i] {
				return LayoutDiff{Table: r.Name, Column: r.Columns[i].Name, Reason: fmt.Sprintf("column %d stored as %+v, running %+v", i, l.Columns[i], r.Columns[i])}, false
			}
		}
		if fmt.Sprint(l.Scopes) != fmt.Sprint(r.Scopes) {
			return LayoutDiff{Table: r.Name, Reason: fmt.Sprintf("scopes %v stored, %v running", l.Scopes, r.Scopes)}, false
		}
	}
	return LayoutDiff{}, true
}

// MarshalLayouts encodes layouts for a schema marker.
func MarshalLayouts(ls []TableLayout) ([]byte, error) { return json.Marshal(ls) }

// UnmarshalLayouts decodes layouts stored by MarshalLayouts.
func UnmarshalLayouts(b []byte) ([]TableLayout, error) {
	var ls []TableLayout
	if err := json.Unmarshal(b, &ls); err != nil {
		return nil, fmt.Errorf("decode stored layouts: %w", err)
	}
	return ls, nil
}
