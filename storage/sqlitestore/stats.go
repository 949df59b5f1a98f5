package sqlitestore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage/internal/schemaplan"
)

// Planner statistics. Without sqlite_stat1 rows SQLite guesses that an
// equality on an index's first column already selects about ten rows, so
// for a statement filtering on the partition and a scope column (a scoped
// registered query's relation) it prefers the clustered primary key range
// of the whole partition, no seeks, over the scope index: at 20,000 rows
// in a partition that is the partition read for a project's hundred.
// PRAGMA optimize gathers real statistics only at Open and Close, and
// only for tables that have rows then; an application table starts empty
// and fills while the node runs. So EnsureSchema writes approximate
// statistics (SQLite supports hand-written sqlite_stat1 rows) for an
// application table that has none: many rows, a partition selects a
// good share of them, and each further indexed column narrows tenfold.
// They hold until ANALYZE (PRAGMA optimize, when the table's size has
// moved far from them) replaces them with measured ones.
const (
	seedRows          = 1_000_000
	seedPartitionRows = 10_000
)

// seedStats writes the approximate statistics of every application table
// of sc without sqlite_stat1 rows, and reloads the connection's.
func seedStats(ctx context.Context, c *conn, sc *schema.Schema) error {
	// ANALYZE of sqlite_schema creates sqlite_stat1 if missing, reads
	// no application table, and reloads the statistics.
	if err := c.execOnce(ctx, "ANALYZE sqlite_schema"); err != nil {
		return fmt.Errorf("ensure schema: statistics: %w", err)
	}
	seeded := false
	for _, t := range sc.Tables {
		rows, err := c.queryOnce(ctx, "SELECT 1 FROM sqlite_stat1 WHERE tbl = ? LIMIT 1", t.Name)
		if err != nil {
			return fmt.Errorf("ensure schema: statistics of %s: %w", t.Name, err)
		}
		has := rows.Next()
		err = rows.Err()
		_ = rows.Close()
		if err != nil {
			return fmt.Errorf("ensure schema: statistics of %s: %w", t.Name, err)
		}
		if has {
			continue
		}
		// The primary key (_sync_partition, _sync_row_id) is named like
		// its table (WITHOUT ROWID).
		ixs := append([]schemaplan.IndexDef{{Name: t.Name, Columns: schemaplan.KeyColumns, Unique: true}}, schemaplan.Indexes(t)...)
		for _, ix := range ixs {
			if err := c.execOnce(ctx, "INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES (?, ?, ?)", t.Name, ix.Name, seedStat(ix)); err != nil {
				return fmt.Errorf("ensure schema: statistics of %s: %w", t.Name, err)
			}
		}
		seeded = true
	}
	if !seeded {
		return nil
	}
	if err := c.execOnce(ctx, "ANALYZE sqlite_schema"); err != nil {
		return fmt.Errorf("ensure schema: statistics: %w", err)
	}
	return nil
}

// seedStat is an index's sqlite_stat1 stat: the table's rows, then the
// rows an equality on each prefix of its columns selects.
func seedStat(ix schemaplan.IndexDef) string {
	parts := []string{strconv.Itoa(seedRows)}
	n := seedRows
	for i, col := range ix.Columns {
		switch {
		case i == len(ix.Columns)-1 && (ix.Unique || col == schemaplan.ColRowID):
			n = 1
		case col == schemaplan.ColPartition:
			n = seedPartitionRows
		default:
			n = max(n/10, 1)
		}
		parts = append(parts, strconv.Itoa(n))
	}
	return strings.Join(parts, " ")
}
