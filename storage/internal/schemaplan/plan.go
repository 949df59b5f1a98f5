// Package schemaplan is the dialect-neutral half of Store.EnsureSchema that
// both SQL stores share: deciding from the stored marker and the running
// schema whether to install, verify or migrate, checking a table's physical
// catalog against a layout, and re-encoding stored row payloads when
// columns are appended. The stores supply the SQL; this package never
// touches a database.
package schemaplan

import (
	"fmt"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

// Internal column names of every application table.
const (
	ColPartition     = "_sync_partition"
	ColRowID         = "_sync_row_id"
	ColServerVersion = "_sync_server_version"
	ColScopes        = "_sync_scopes"
	ColPayload       = "_sync_payload"
	// ColColumnVersions holds the row's column versions (SPEC.md §2.2,
	// storage.DecodeColumnVersions); NULL for a row written before them.
	ColColumnVersions = "_sync_column_versions"
)

// InternalColumns are the columns every application table carries before
// its schema columns, typed as the SSP2 type whose SQL mapping they use.
var InternalColumns = []ssp2.Column{
	{Name: ColPartition, Type: ssp2.TypeString},
	{Name: ColRowID, Type: ssp2.TypeString},
	{Name: ColServerVersion, Type: ssp2.TypeInteger},
	{Name: ColScopes, Type: ssp2.TypeJSON},
	{Name: ColPayload, Type: ssp2.TypeBytes},
	{Name: ColColumnVersions, Type: ssp2.TypeBytes, Nullable: true},
}

// upgradable are the internal columns that tables created by an older
// build lack and that only a forward migration (a schema version bump)
// adds; a same-version open refuses such a table (SPEC.md §2.4).
var upgradable = []string{ColColumnVersions}

// Upgradable returns the internal columns a forward migration adds to a
// table whose catalog is cols: those it was created without.
func Upgradable(cols []PhysicalColumn) []ssp2.Column {
	var out []ssp2.Column
	for _, name := range upgradable {
		found := false
		for _, c := range cols {
			if c.Name == name {
				found = true
				break
			}
		}
		if found {
			continue
		}
		for _, c := range InternalColumns {
			if c.Name == name {
				out = append(out, c)
			}
		}
	}
	return out
}

// Mismatch reasons carried in the Details of a layout refusal.
const (
	ReasonMissingTable  = "missing_table"
	ReasonMissingColumn = "missing_column"
	ReasonType          = "type"
	ReasonNullability   = "nullability"
	ReasonPrimaryKey    = "primary_key"
)

// Details is the JSON object a layout refusal carries.
type Details struct {
	Table  string `json:"table"`
	Column string `json:"column,omitempty"`
	Reason string `json:"reason"`
}

// Refuse returns the *ssp2.Error for a layout refusal. The message names
// the table, column and reason; it never carries engine text.
func Refuse(code ssp2.Code, d Details) error {
	msg := "table " + d.Table
	if d.Column != "" {
		msg += " column " + d.Column
	}
	msg += ": " + d.Reason
	e := ssp2.Errorf(code, "%s", msg).WithDetails(d)
	e.Op = "ensure schema"
	return e
}

// ScopeColumns returns the distinct scope columns of a layout, in
// declaration order of the scope patterns.
func ScopeColumns(l schema.TableLayout) []string {
	var out []string
	seen := map[string]bool{}
	for _, sc := range l.Scopes {
		// A layout scope is "pattern=column".
		col := sc
		for i := len(sc) - 1; i >= 0; i-- {
			if sc[i] == '=' {
				col = sc[i+1:]
				break
			}
		}
		if !seen[col] {
			seen[col] = true
			out = append(out, col)
		}
	}
	return out
}

// Marker is a stored schema marker.
type Marker struct {
	Version int32
	Layouts []schema.TableLayout
}

// Action is what EnsureSchema does with the stored database.
type Action int

const (
	// Install: no marker yet. Create every table (verifying any that
	// already exists), then write the marker.
	Install Action = iota
	// Verify: equal versions. Layouts matched; check the catalog of every
	// table and change nothing else.
	Verify
	// Migrate: the stored version is older and the running schema is a
	// compatible extension of it.
	Migrate
)

// Plan is the outcome of comparing the stored marker with the running
// schema.
type Plan struct {
	Action Action
	// Create lists tables absent from the stored layouts (all tables on
	// Install).
	Create []*schema.Table
	// Keep lists tables present in both, with their stored layouts; on
	// Migrate some gain appended columns.
	Keep []Kept
}

// Kept is a table present in the stored layouts.
type Kept struct {
	Table  *schema.Table
	Stored schema.TableLayout
	// Added are the columns appended since the stored layout (Migrate).
	Added []schema.Column
	// ScopesChanged is set when the scope patterns differ from the stored
	// layout (Migrate): scope indexes are rebuilt and stored scopes
	// recomputed.
	ScopesChanged bool
}

// NeedsRewrite reports whether every stored row must be rewritten: its
// payload re-encoded for appended columns, its stored scopes recomputed.
func (k Kept) NeedsRewrite() bool { return len(k.Added) > 0 || k.ScopesChanged }

// Decide compares the stored marker (nil on a fresh database) with the
// running schema. It refuses a newer stored version
// (CodeStorageSchemaVersionNewer), at an equal version any layout
// difference (CodeStorageStoredLayoutMismatch), and on an older version any
// change other than new tables and appended nullable columns
// (CodeStorageStoredLayoutMismatch naming the table and column).
func Decide(stored *Marker, s *schema.Schema) (Plan, error) {
	if stored == nil {
		return Plan{Action: Install, Create: s.Tables}, nil
	}
	if stored.Version > s.Version {
		e := ssp2.Errorf(ssp2.CodeStorageSchemaVersionNewer,
			"stored schema version %d is newer than the running version %d", stored.Version, s.Version)
		e.Op = "ensure schema"
		return Plan{}, e.WithDetails(map[string]int32{"storedVersion": stored.Version, "runningVersion": s.Version})
	}
	if stored.Version == s.Version {
		if d, ok := schema.CompareLayouts(stored.Layouts, s.Layouts()); !ok {
			return Plan{}, Refuse(ssp2.CodeStorageStoredLayoutMismatch, Details{Table: d.Table, Column: d.Column, Reason: d.Reason})
		}
		p := Plan{Action: Verify}
		for i, t := range s.Tables {
			p.Keep = append(p.Keep, Kept{Table: t, Stored: s.Layouts()[i]})
		}
		return p, nil
	}

	byName := make(map[string]schema.TableLayout, len(stored.Layouts))
	for _, l := range stored.Layouts {
		byName[l.Name] = l
	}
	p := Plan{Action: Migrate}
	running := make(map[string]bool, len(s.Tables))
	for _, t := range s.Tables {
		running[t.Name] = true
		l, ok := byName[t.Name]
		if !ok {
			p.Create = append(p.Create, t)
			continue
		}
		added, err := appended(l, t)
		if err != nil {
			return Plan{}, err
		}
		p.Keep = append(p.Keep, Kept{Table: t, Stored: l, Added: added,
			ScopesChanged: fmt.Sprint(l.Scopes) != fmt.Sprint(t.Layout().Scopes)})
	}
	for _, l := range stored.Layouts {
		if !running[l.Name] {
			return Plan{}, Refuse(ssp2.CodeStorageStoredLayoutMismatch, Details{Table: l.Name, Reason: "table dropped from the running schema"})
		}
	}
	return p, nil
}

// appended returns the columns t appends to the stored layout l, or a
// refusal when t changes l in any other way.
func appended(l schema.TableLayout, t *schema.Table) ([]schema.Column, error) {
	refuse := func(col, reason string) error {
		return Refuse(ssp2.CodeStorageStoredLayoutMismatch, Details{Table: t.Name, Column: col, Reason: reason})
	}
	if l.PrimaryKey != t.PrimaryKey {
		return nil, refuse(t.PrimaryKey, fmt.Sprintf("primary key changed from %q", l.PrimaryKey))
	}
	for i, sc := range l.Columns {
		if i >= len(t.Columns) {
			return nil, refuse(sc.Name, "column dropped")
		}
		c := t.Columns[i]
		switch {
		case c.Name != sc.Name:
			return nil, refuse(sc.Name, "column dropped, renamed or reordered")
		case c.Type.String() != sc.Type:
			return nil, refuse(sc.Name, fmt.Sprintf("type changed from %s to %s", sc.Type, c.Type))
		case c.Nullable != sc.Nullable:
			return nil, refuse(sc.Name, "nullability changed")
		}
	}
	added := t.Columns[len(l.Columns):]
	for _, c := range added {
		if !c.Nullable {
			return nil, refuse(c.Name, "appended column must be nullable")
		}
	}
	return added, nil
}
