// Package storagetest is the contract suite every storage.Store must pass
// (river's riverdrivertest, the stdlib's fstest.TestFS): Run from the
// store's tests, Benchmark from its benchmarks. It runs against real
// databases only.
//
// A store's test files reach below the interface by implementing Hooks on
// the value open returns; behaviour that legitimately differs between
// stores is asserted through storage.Capabilities.
package storagetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Hooks is implemented by the store under test, in its _test.go files, so
// the suite can change the physical catalog and count log rows. The SQL
// stays in the store package.
type Hooks interface {
	// HookTamper changes table's physical catalog so that EnsureSchema's
	// inspection reports reason for column: ReasonMissingTable drops the
	// table, ReasonMissingColumn drops the column, ReasonType changes the
	// column's type, ReasonNullability makes a NOT NULL column nullable,
	// ReasonPrimaryKey rebuilds the primary key as (_sync_row_id,
	// _sync_partition). The column is neither a key nor a scope column.
	HookTamper(ctx context.Context, table, column, reason string) error
	// HookConstrain adds a constraint of kind to table.column (a nullable
	// string column): ConstraintNotNull makes it NOT NULL,
	// ConstraintCheck forbids the value CheckForbiddenValue,
	// ConstraintUnique makes it unique, ConstraintForeignKey makes it
	// reference an empty table.
	HookConstrain(ctx context.Context, table, column string, kind storage.ConstraintKind) error
	// HookCatalog returns a canonical description of every table, column
	// and index, to prove that a refused call changed nothing.
	HookCatalog(ctx context.Context) (string, error)
	// HookCountLog counts the partition's rows in the commit, change and
	// scope-index tables.
	HookCountLog(ctx context.Context, partition string) (commits, changes, index int64, err error)
}

// Twinner is implemented, in its test files, by a store that can open a
// second store on its own database: another process's (or another
// node's) view, whose writes a store's caches must see.
type Twinner interface {
	// HookTwin opens another store on the receiver's database, closed at
	// tb's cleanup.
	// It returns nil when the receiver allows no other writer of its
	// database (a PostgreSQL sole writer): its own writes are then all
	// a cache must see.
	HookTwin(tb testing.TB) storage.Store
}

// Physical mismatch reasons (Details.reason of
// sync.storage.physical_layout_mismatch).
const (
	ReasonMissingTable  = "missing_table"
	ReasonMissingColumn = "missing_column"
	ReasonType          = "type"
	ReasonNullability   = "nullability"
	ReasonPrimaryKey    = "primary_key"
)

// CheckForbiddenValue is the value HookConstrain's CHECK constraint
// refuses.
const CheckForbiddenValue = "forbidden-by-check"

// Fixture schemas. tasks has a string and an integer scope; notes an
// integer key, a string and a boolean scope.
const schemaV1 = `{"version": 1, "tables": [
 {"name": "tasks", "primaryKey": "id",
  "columns": [
   {"name": "id", "type": "string"},
   {"name": "project_id", "type": "string"},
   {"name": "owner_id", "type": "integer"},
   {"name": "title", "type": "string", "nullable": true},
   {"name": "done", "type": "boolean"},
   {"name": "score", "type": "float", "nullable": true},
   {"name": "meta", "type": "json", "nullable": true},
   {"name": "data", "type": "bytes", "nullable": true}],
  "scopes": [{"pattern": "project:{project}", "column": "project_id"}, {"pattern": "owner:{owner}", "column": "owner_id"}]},
 {"name": "notes", "primaryKey": "id",
  "columns": [
   {"name": "id", "type": "integer"},
   {"name": "project_id", "type": "string"},
   {"name": "archived", "type": "boolean"},
   {"name": "body", "type": "string", "nullable": true}],
  "scopes": [{"pattern": "project:{project}", "column": "project_id"}, "archived:{archived}"]}]}`

func mustParse(tb testing.TB, doc string) *schema.Schema {
	tb.Helper()
	s, err := schema.Parse([]byte(doc))
	if err != nil {
		tb.Fatalf("parse fixture schema: %v", err)
	}
	return s
}

// Run runs the contract suite. open returns a fresh, empty store owned by
// t (closed in t.Cleanup), with no schema installed.
func Run(t *testing.T, open func(t *testing.T) storage.Store) {
	t.Helper()
	groups := []struct {
		name  string
		tests []test
	}{
		{"Schema", schemaTests},
		{"Partition", partitionTests},
		{"Replica", replicaTests},
		{"Tx", txTests},
		{"Row", rowTests},
		{"Commit", commitTests},
		{"Window", windowTests},
		{"Idempotency", idempotencyTests},
		{"Client", clientTests},
		{"Prune", pruneTests},
		{"Constraint", constraintTests},
		{"Store", storeTests},
		{"Segment", segmentTests},
		{"Admin", adminTests},
		{"Gate", gateTests},
		{"Reaction", reactionTests},
		{"Columns", columnTests},
		{"Blob", blobTests},
		{"Lease", leaseTests},
		{"TxQuery", txQueryTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, &env{t: t, open: open})
				})
			}
		})
	}
}

type test struct {
	name string
	fn   func(t *testing.T, e *env)
}

// env builds stores for one test.
type env struct {
	t    *testing.T
	open func(t *testing.T) storage.Store
}

// fresh returns an empty store without a schema.
func (e *env) fresh() storage.Store { return e.open(e.t) }

// store returns a store with schema v1 installed.
func (e *env) store() (storage.Store, *schema.Schema) {
	e.t.Helper()
	s := e.fresh()
	sc := mustParse(e.t, schemaV1)
	if err := s.EnsureSchema(e.t.Context(), sc); err != nil {
		e.t.Fatalf("EnsureSchema(v1): %v", err)
	}
	return s, sc
}

func hooks(t *testing.T, s storage.Store) Hooks {
	t.Helper()
	h, ok := s.(Hooks)
	if !ok {
		t.Fatalf("%T does not implement storagetest.Hooks: add the hooks to the store's test files", s)
	}
	return h
}

var partitionCounter atomic.Int64

// partition registers a new partition with a unique id.
func partition(t testing.TB, s storage.Store) storage.Partition {
	t.Helper()
	id := fmt.Sprintf("part-%d", partitionCounter.Add(1))
	p, err := s.PartitionTouch(context.Background(), id, 1_000_000)
	if err != nil {
		t.Fatalf("PartitionTouch(%q): %v", id, err)
	}
	return p
}

// values maps column name to a Go value: string, int, int64, float64,
// bool, []byte, or nil for NULL.
type values map[string]any

// rowWrite builds the RowWrite of a row of table from vals: typed values,
// row id, stored scopes and an SSP2-encoded payload.
func rowWrite(t testing.TB, table *schema.Table, vals values) storage.RowWrite {
	t.Helper()
	row := make([]ssp2.Value, len(table.Columns))
	for i, c := range table.Columns {
		v, ok := vals[c.Name]
		if !ok || v == nil {
			row[i] = ssp2.Value{Null: true}
			continue
		}
		switch x := v.(type) {
		case string:
			row[i] = ssp2.Value{Bytes: []byte(x)}
		case []byte:
			row[i] = ssp2.Value{Bytes: x}
		case int:
			row[i] = ssp2.Value{Int: int64(x)}
		case int64:
			row[i] = ssp2.Value{Int: x}
		case float64:
			row[i] = ssp2.Value{Float: x}
		case bool:
			row[i] = ssp2.Value{Bool: x}
		default:
			t.Fatalf("rowWrite: column %s: unsupported %T", c.Name, v)
		}
	}
	id, err := table.RowID(row)
	if err != nil {
		t.Fatalf("rowWrite: %v", err)
	}
	scopes, missing, ok := table.StoredScopes(row)
	if !ok {
		t.Fatalf("rowWrite: scope %s missing", missing)
	}
	payload, err := table.Codec.AppendRow(nil, row)
	if err != nil {
		t.Fatalf("rowWrite: encode: %v", err)
	}
	return storage.RowWrite{RowID: id, Values: row, Scopes: scopes, Payload: payload}
}

func table(t testing.TB, sc *schema.Schema, name string) *schema.Table {
	t.Helper()
	tb, ok := sc.Table(name)
	if !ok {
		t.Fatalf("fixture has no table %s", name)
	}
	return tb
}

// task is a tasks row with the given scopes.
func task(t testing.TB, sc *schema.Schema, id, project string, owner int64, title any) storage.RowWrite {
	return rowWrite(t, table(t, sc, "tasks"), values{"id": id, "project_id": project, "owner_id": owner, "title": title, "done": false})
}

// writeTx runs fn under the partition lock and fails the test on error.
func writeTx(t testing.TB, s storage.Store, partition string, fn func(tx storage.Tx) error) {
	t.Helper()
	if err := s.WriteTx(context.Background(), partition, fn); err != nil {
		t.Fatalf("WriteTx(%s): %v", partition, err)
	}
}

// wantCode fails unless err carries the SSP2 code.
func wantCode(t testing.TB, err error, code ssp2.Code) *ssp2.Error {
	t.Helper()
	var e *ssp2.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("error = %v, want code %s", err, code)
	}
	return e
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func details(t testing.TB, e *ssp2.Error) map[string]string {
	t.Helper()
	var d map[string]string
	if err := json.Unmarshal(e.Details, &d); err != nil {
		t.Fatalf("details %s: %v", e.Details, err)
	}
	return d
}

// change is an upsert change of a tasks row.
func change(rw storage.RowWrite, table string, version int64) storage.Change {
	return storage.Change{Table: table, RowID: rw.RowID, Op: storage.OpUpsert, RowVersion: version, Scopes: rw.Scopes, Row: rw.Payload}
}

// ColumnType is the type of table.column in the installed schema sc (nil
// before EnsureSchema), for a store's HookTamper to pick a type other
// than the one EnsureSchema expects.
func ColumnType(sc *schema.Schema, table, column string) (ssp2.ColumnType, error) {
	if sc == nil {
		return 0, errors.New("no schema installed: call EnsureSchema first")
	}
	t, ok := sc.Table(table)
	if !ok {
		return 0, fmt.Errorf("no table %s", table)
	}
	i, ok := t.ColumnIndex(column)
	if !ok {
		return 0, fmt.Errorf("no column %s.%s", table, column)
	}
	return t.Columns[i].Type, nil
}
