package schemaplan

import (
	"context"
	"fmt"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Steps is what EnsureSchema does in one store's dialect, inside the
// store's one schema transaction. Ensure calls them in the order both
// stores share; each step's SQL, placeholders and driver stay in the store.
type Steps interface {
	// ReadMarker reads the stored schema marker; ok=false when none.
	ReadMarker(ctx context.Context) (m storage.SchemaMarker, ok bool, err error)
	// Catalog reads a table's physical columns; exists=false when absent.
	Catalog(ctx context.Context, table string) (exists bool, cols []PhysicalColumn, err error)
	// Exec runs one DDL statement.
	Exec(ctx context.Context, ddl string) error
	// RewriteRows re-encodes the stored rows of k's table (Kept.NeedsRewrite).
	RewriteRows(ctx context.Context, k Kept) error
	// ReconcileIndexes makes the managed indexes of t exactly Indexes(t).
	ReconcileIndexes(ctx context.Context, t *schema.Table) error
	// Analyzed runs after the indexes, before a verified schema returns
	// (the store's planner statistics); it may do nothing.
	Analyzed(ctx context.Context, sc *schema.Schema) error
	// WriteMarker stores sc's version and the marshalled layouts.
	WriteMarker(ctx context.Context, version int32, layouts []byte) error
}

// Ensure installs, migrates or verifies sc through st, spelling the
// application tables' DDL with d: decide from the
// stored marker, create the new tables (or check one left without a
// marker), upgrade and check the kept ones, add their new columns and
// rewrite their rows, reconcile every table's indexes, and write the
// marker unless only verifying. A refusal returns before the marker.
func Ensure(ctx context.Context, st Steps, d DDL, sc *schema.Schema) error {
	marker, ok, err := st.ReadMarker(ctx)
	if err != nil {
		return err
	}
	var stored *Marker
	if ok {
		stored = &Marker{Version: marker.Version, Layouts: marker.Layouts}
	}
	plan, err := Decide(stored, sc)
	if err != nil {
		return err
	}
	for _, t := range plan.Create {
		exists, cols, err := st.Catalog(ctx, t.Name)
		if err != nil {
			return err
		}
		if exists {
			// A table left by an earlier run without a marker must
			// already be what we would create.
			if err := CheckPhysical(t.Layout(), true, cols, d.SQLType); err != nil {
				return err
			}
			continue
		}
		if err := st.Exec(ctx, d.CreateTable(t.Name, t.WireColumns(), KeyColumns)); err != nil {
			return fmt.Errorf("ensure schema: create %s: %w", t.Name, err)
		}
	}
	for _, k := range plan.Keep {
		// Before migrating, the table must match the layout it was built
		// for; when verifying, stored and running layouts are equal.
		exists, cols, err := st.Catalog(ctx, k.Table.Name)
		if err != nil {
			return err
		}
		if plan.Action == Migrate && exists {
			// Internal columns a table built by an older build lacks
			// arrive only with a schema version bump (SPEC.md §2.4).
			for _, col := range Upgradable(cols) {
				if err := addColumn(ctx, st, d, k.Table.Name, col); err != nil {
					return err
				}
				cols = append(cols, PhysicalColumn{Name: col.Name, Type: d.SQLType(col.Type)})
			}
		}
		if err := CheckPhysical(k.Stored, exists, cols, d.SQLType); err != nil {
			return err
		}
		for _, col := range k.Added {
			if err := addColumn(ctx, st, d, k.Table.Name, ssp2.Column{Name: col.Name, Type: col.Type}); err != nil {
				return err
			}
		}
		if k.NeedsRewrite() {
			if err := st.RewriteRows(ctx, k); err != nil {
				return err
			}
		}
	}
	for _, t := range sc.Tables {
		if err := st.ReconcileIndexes(ctx, t); err != nil {
			return err
		}
	}
	if err := st.Analyzed(ctx, sc); err != nil {
		return err
	}
	if plan.Action == Verify {
		return nil
	}
	layouts, err := schema.MarshalLayouts(sc.Layouts())
	if err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	if err := st.WriteMarker(ctx, sc.Version, layouts); err != nil {
		return fmt.Errorf("ensure schema: write marker: %w", err)
	}
	return nil
}

func addColumn(ctx context.Context, st Steps, d DDL, table string, col ssp2.Column) error {
	if err := st.Exec(ctx, d.AddColumn(table, col)); err != nil {
		return fmt.Errorf("ensure schema: add column %s.%s: %w", table, col.Name, err)
	}
	return nil
}
