package backfill_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/syncnode/syncnode/backfill"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/gate"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	_ backfill.Gate   = (*gate.Gate)(nil)
	_ backfill.Writer = (*engine.Engine)(nil)
)

// Version 1 has tasks(id, project_id, title); version 2 adds title_len,
// computed from title by the backfill "title-len".
const schemaV1 = `{"version": 1, "tables": [{"name": "tasks", "primaryKey": "id", "columns": [
	{"name": "id", "type": "string"},
	{"name": "project_id", "type": "string"},
	{"name": "title", "type": "string", "nullable": true}],
	"scopes": ["project:{project_id}"]},
	{"name": "notes", "primaryKey": "id", "columns": [
	{"name": "id", "type": "string"},
	{"name": "project_id", "type": "string"}],
	"scopes": ["project:{project_id}"]}]}`

var schemaV2 = strings.Replace(strings.Replace(schemaV1, `"version": 1`, `"version": 2`, 1),
	`{"name": "title", "type": "string", "nullable": true}]`,
	`{"name": "title", "type": "string", "nullable": true}, {"name": "title_len", "type": "integer", "nullable": true}]`, 1)

const partition = "acme"

type env struct {
	t      *testing.T
	ctx    context.Context
	store  *sqlitestore.Store
	v2     *schema.Schema
	gate   *gate.Gate
	engine *engine.Engine
}

// newEnv writes n tasks under version 1, migrates to version 2 declaring
// title-len, and returns a version-2 engine and gate (SQL alone).
func newEnv(t *testing.T, n int) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(t.TempDir(), "sync.db"), Synchronous: sqlitestore.SynchronousNormal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	v1 := mustSchema(t, schemaV1)
	if err := st.EnsureSchema(ctx, v1); err != nil {
		t.Fatal(err)
	}
	e1, err := engine.New(engine.Config{Schema: v1, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := v1.Table("tasks")
	for i := range n {
		title := strings.Repeat("x", i+1)
		payload, err := tasks.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte(fmt.Sprint("t", i))}, {Bytes: []byte("p1")}, {Bytes: []byte(title)}})
		if err != nil {
			t.Fatal(err)
		}
		op := ssp2.Operation{Table: "tasks", RowID: fmt.Sprint("t", i), Op: ssp2.OpUpsert, Payload: payload}
		if _, err := e1.PushAuthoritative(ctx, engine.AuthoritativeCommit{Partition: partition, ActorID: "seed", ClientID: "seed", ClientCommitID: fmt.Sprint(i),
			Operations: func(context.Context, storage.Tx) ([]ssp2.Operation, error) { return []ssp2.Operation{op}, nil }}); err != nil {
			t.Fatal(err)
		}
	}
	v2 := mustSchema(t, schemaV2)
	decl := storage.CheckpointKey{Partition: partition, Name: "title-len", SchemaVersion: 2}
	if err := st.EnsureSchemaWithCheckpoints(ctx, v2, []storage.CheckpointKey{decl}); err != nil {
		t.Fatal(err)
	}
	g, err := gate.New(gate.Config{Store: st, Schema: v2, Declared: []storage.CheckpointKey{decl}})
	if err != nil {
		t.Fatal(err)
	}
	e2, err := engine.New(engine.Config{Schema: v2, Store: st, Gate: engine.GateOf(g)})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: ctx, store: st, v2: v2, gate: g, engine: e2}
}

func mustSchema(t *testing.T, doc string) *schema.Schema {
	t.Helper()
	s, err := schema.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// job computes title_len for pages of size rows.
func (e *env) job(size int) backfill.Job {
	tasks, _ := e.v2.Table("tasks")
	return backfill.Job{
		Partition: partition, Name: "title-len", Sources: []string{"tasks"},
		Batch: func(ctx context.Context, tx storage.Tx, cursor string) ([]ssp2.Operation, string, bool, error) {
			rows, err := tx.RowScan(ctx, storage.ScanParams{Partition: partition, Table: "tasks",
				Scopes: map[string][]string{"project_id": {"p1"}}, AfterRowID: cursor, Limit: size})
			if err != nil {
				return nil, "", false, err
			}
			var ops []ssp2.Operation
			for _, r := range rows {
				vals, err := tasks.Codec.DecodeRow(r.Payload, nil)
				if err != nil {
					return nil, "", false, err
				}
				vals[3] = ssp2.Value{Int: int64(len(vals[2].Bytes))}
				payload, err := tasks.Codec.AppendRow(nil, vals)
				if err != nil {
					return nil, "", false, err
				}
				ops = append(ops, ssp2.Operation{Table: "tasks", RowID: r.RowID, Op: ssp2.OpUpsert, Payload: payload})
			}
			if len(rows) < size {
				return ops, "", true, nil
			}
			return ops, rows[len(rows)-1].RowID, false, nil
		},
	}
}

// titleLens reads title_len of every task.
func (e *env) titleLens() map[string]any {
	e.t.Helper()
	tasks, _ := e.v2.Table("tasks")
	out := map[string]any{}
	err := e.store.ReadTx(e.ctx, func(tx storage.ReadTx) error {
		rows, err := tx.RowScan(e.ctx, storage.ScanParams{Partition: partition, Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}, Limit: 1000})
		for _, r := range rows {
			vals, derr := tasks.Codec.DecodeRow(r.Payload, nil)
			if derr != nil {
				return derr
			}
			if vals[3].Null {
				out[r.RowID] = nil
			} else {
				out[r.RowID] = vals[3].Int
			}
		}
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) checkpoint() storage.Checkpoint {
	e.t.Helper()
	cps, err := e.store.Checkpoints(e.ctx, partition)
	if err != nil || len(cps) != 1 {
		e.t.Fatalf("checkpoints %+v, %v", cps, err)
	}
	return cps[0]
}

func (e *env) runner(g backfill.Gate) *backfill.Runner {
	e.t.Helper()
	r, err := backfill.New(backfill.Config{Gate: g, Writer: e.engine})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func TestBackfillActivates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	for id, v := range e.titleLens() {
		if v != nil {
			t.Fatalf("%s has title_len %v before the backfill", id, v)
		}
	}
	res, err := e.runner(e.gate).Run(e.ctx, e.job(2))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != storage.ActivateActivated || res.Attempts != 1 || res.Batches != 3 || res.Rows != 5 || res.Watermark != 5 {
		t.Fatalf("result %+v", res)
	}
	for i := range 5 {
		if got := e.titleLens()[fmt.Sprint("t", i)]; got != int64(i+1) {
			t.Fatalf("t%d title_len = %v, want %d", i, got, i+1)
		}
	}
	cp := e.checkpoint()
	if cp.State != storage.CheckpointActivated || cp.ObservedRows != 5 || cp.Watermark != 5 || cp.OwnerEpoch != res.OwnerEpoch {
		t.Fatalf("checkpoint %+v", cp)
	}
	// The batches are ordinary commits of the log, after the seed.
	maxSeq, err := e.store.CommitMaxSeq(e.ctx, partition)
	if err != nil || maxSeq != 5+3 {
		t.Fatalf("max seq %d, %v; want 8", maxSeq, err)
	}
	// Once activated, a run is a no-op.
	again, err := e.runner(e.gate).Run(e.ctx, e.job(2))
	if err != nil || !again.AlreadyActive {
		t.Fatalf("second run %+v, %v", again, err)
	}
}

// staleOnce wraps the real gate: before its first activation, a client
// writes a source row, as if it had raced the backfill.
type staleOnce struct {
	*gate.Gate
	write func()
	done  bool
}

func (s *staleOnce) Activate(ctx context.Context, p storage.CheckpointActivateParams) (storage.ActivateOutcome, error) {
	if !s.done {
		s.done = true
		s.write()
	}
	return s.Gate.Activate(ctx, p)
}

func TestBackfillRetriesStale(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	tasks, _ := e.v2.Table("tasks")
	g := &staleOnce{Gate: e.gate, write: func() {
		payload, _ := tasks.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte("t9")}, {Bytes: []byte("p1")}, {Bytes: []byte("late")}, {Null: true}})
		op := ssp2.Operation{Table: "tasks", RowID: "t9", Op: ssp2.OpUpsert, Payload: payload}
		if _, err := e.engine.PushAuthoritative(e.ctx, engine.AuthoritativeCommit{Partition: partition, ActorID: "client", ClientID: "client", ClientCommitID: "late",
			Operations: func(context.Context, storage.Tx) ([]ssp2.Operation, error) { return []ssp2.Operation{op}, nil }}); err != nil {
			t.Error(err)
		}
	}}
	res, err := e.runner(g).Run(e.ctx, e.job(3))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != storage.ActivateActivated || res.Attempts != 2 || res.Rows != 5 {
		t.Fatalf("result %+v, want activated on the second pass over 5 rows", res)
	}
	if got := e.titleLens()["t9"]; got != int64(4) {
		t.Fatalf("the late row's title_len = %v, want 4", got)
	}
	if cp := e.checkpoint(); cp.OwnerEpoch != 2 || cp.State != storage.CheckpointActivated {
		t.Fatalf("checkpoint %+v", cp)
	}
}

// supersedeAfterFirst wraps the real gate: after the first batch another
// owner claims the checkpoint.
type supersedeAfterFirst struct {
	*gate.Gate
	ctx  context.Context
	done bool
}

func (s *supersedeAfterFirst) Advanced(ctx context.Context, p storage.CheckpointAdvanceParams) {
	s.Gate.Advanced(ctx, p)
	if !s.done {
		s.done = true
		if _, err := s.Gate.Claim(s.ctx, p.CheckpointKey); err != nil {
			panic(err)
		}
	}
}

func TestBackfillSupersededBatchRollsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	_, err := e.runner(&supersedeAfterFirst{Gate: e.gate, ctx: e.ctx}).Run(e.ctx, e.job(2))
	if !errors.Is(err, backfill.ErrSuperseded) {
		t.Fatalf("run = %v, want ErrSuperseded", err)
	}
	lens := e.titleLens()
	if lens["t0"] != int64(1) || lens["t1"] != int64(2) || lens["t2"] != nil || lens["t3"] != nil {
		t.Fatalf("title_len after a superseded second batch: %v (the first batch lands, the second not)", lens)
	}
	cp := e.checkpoint()
	if cp.State != storage.CheckpointBackfilling || cp.ObservedRows != 2 || cp.OwnerEpoch != 2 {
		t.Fatalf("checkpoint %+v", cp)
	}
}

// TestBackfillServesOnlyTheOwner: during the backfill the partition is
// refused to another process of the same build that did not declare it,
// and served by the declaring one.
func TestBackfillServesOnlyTheOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	other, err := gate.New(gate.Config{Store: e.store, Schema: e.v2})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Verify(e.ctx, partition); ssp2.CodeOf(err) != ssp2.CodeSchemaNotReady {
		t.Fatalf("an undeclaring process = %v, want refused", err)
	}
	if err := e.gate.Verify(e.ctx, partition); err != nil {
		t.Fatalf("the declaring process = %v", err)
	}
	if _, err := e.runner(e.gate).Run(e.ctx, e.job(10)); err != nil {
		t.Fatal(err)
	}
	if err := other.Verify(e.ctx, partition); err != nil {
		t.Fatalf("after activation = %v", err)
	}
}
