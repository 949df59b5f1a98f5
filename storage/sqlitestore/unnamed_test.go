package sqlitestore

import (
	"context"
	"database/sql/driver"
	"slices"
	"testing"

	"github.com/syncnode/syncnode/storage"
)

// TestHotStatementsUnnamed: the statements of a sync round return columns
// with no name and no declared type, so the driver copies neither out of
// SQLite per query (unnamed), and their rows still scan by position.
func TestHotStatementsUnnamed(t *testing.T) {
	ctx := context.Background()
	s := openTB(t, SynchronousNormal)
	if _, err := s.PartitionTouch(ctx, "p", 1); err != nil {
		t.Fatal(err)
	}
	stmts := map[string]string{
		"qPartition":       qPartition,
		"qPartitionClient": qPartitionClient,
		"qRequestStart":    qRequestStart,
		"qIdempotencyGet":  qIdempotencyGet,
		"window":           windowText([]byte("1n")),
		"PartitionGate":    gateSQL.PartitionGate,
		"GateRead":         gateSQL.GateRead,
	}
	err := s.write(ctx, func(c *conn) error {
		for name, q := range stmts {
			st, err := c.stmt(ctx, q)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			args := make([]driver.NamedValue, 0, 16)
			for i := range 16 {
				args = append(args, driver.NamedValue{Ordinal: i + 1, Value: int64(1)}) // also JSON, for json_each
			}
			// The driver binds the statement's parameters from these by
			// position and ignores the rest.
			dr, err := st.qu.QueryContext(stmtCtx, args)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			types, _ := dr.(driver.RowsColumnTypeDatabaseTypeName)
			for i, col := range dr.Columns() {
				if col != "" {
					t.Errorf("%s: column %d is named %q", name, i, col)
				}
				if types != nil && types.ColumnTypeDatabaseTypeName(i) != "" {
					t.Errorf("%s: column %d has declared type %q", name, i, types.ColumnTypeDatabaseTypeName(i))
				}
			}
			if err := dr.Close(); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSortChanges: a commit's changes read out of idx order are put back
// in it (offerWindow).
func TestSortChanges(t *testing.T) {
	changes := []storage.Change{{RowID: "c"}, {RowID: "a"}, {RowID: "b"}}
	idx := []int64{2, 0, 1}
	sortChanges(changes, idx)
	if got := changes[0].RowID + changes[1].RowID + changes[2].RowID; got != "abc" || !slices.IsSorted(idx) {
		t.Fatalf("sorted %s, idx %v", got, idx)
	}
}
