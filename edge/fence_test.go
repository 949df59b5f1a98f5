package edge

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

const fenceSchema = `{"version": 1, "tables": [
 {"name": "todos", "primaryKey": "id", "scopes": ["project:{project_id}"],
  "columns": [{"name": "id", "type": "string"}, {"name": "project_id", "type": "string"}]}]}`

// TestDeposedHolderFenced: hub node A lost the replication lease in the
// middle of a snapshot rebuild without noticing yet, and node B, the new
// holder, started a rebuild of its own (its placeholder epoch replaced
// A's). A's remaining writes — a snapshot page, the rebase that would
// make the replica servable, the wipe of a rebuild — are refused with
// errFenced and change nothing (the wipe even when A passed the early
// check just before B's wipe: it is fenced in its own transaction); B's
// go through. A lease A knows it lost
// refuses them before the database is asked; an apply over a replica
// another node moved reloads it instead of failing the replica.
func TestDeposedHolderFenced(t *testing.T) {
	sch, err := schema.Parse([]byte(fenceSchema))
	if err != nil {
		t.Fatal(err)
	}
	stores := map[string]func(t *testing.T) storage.Store{
		"sqlite": func(t *testing.T) storage.Store {
			st, err := sqlitestore.Open(t.Context(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "hub.db")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
		"postgres": func(t *testing.T) storage.Store {
			url, schemaName := pgtest.Schema(t)
			st, err := pgstore.Open(t.Context(), pgstore.Config{URL: url, Schema: schemaName})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			st := open(t)
			if err := st.EnsureSchema(ctx, sch); err != nil {
				t.Fatal(err)
			}
			const part, edgeEpoch = "p-shop1", "e0e0e0"
			hub := func() (*Hub, *link) {
				h, err := NewHub(Config{Homes: map[string]string{part: "shop1"}, Store: st, Schema: sch})
				if err != nil {
					t.Fatal(err)
				}
				h.ctx, h.cancel = context.WithCancel(ctx)
				t.Cleanup(h.cancel)
				return h, h.links["shop1"]
			}
			a, la := hub()
			b, lb := hub()
			held := make(chan struct{}) // a lease not lost
			lost := make(chan struct{})
			close(lost)
			row := func(id string) func(storage.Tx) error {
				return func(tx storage.Tx) error {
					_, err := tx.RowUpsert(ctx, "todos", storage.RowWrite{RowID: id, Version: 1, Scopes: map[string]string{"project": "x"},
						Values: []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte("x")}}})
					return err
				}
			}
			count := func() int {
				rows, err := st.RowList(ctx, storage.RowListParams{Partition: part, Table: "todos", Limit: 100})
				if err != nil {
					t.Fatal(err)
				}
				return len(rows)
			}

			// A's rebuild registered its placeholder and wrote a page.
			phA, phB := placeholderPrefix+"a", placeholderPrefix+"b"
			if err := a.reregister(ctx, la, &replicaState{loaded: true}, part, phA); err != nil {
				t.Fatal(err)
			}
			sa := &replicaState{loaded: true, epoch: phA}
			if err := a.fencedWrite(part, phA, held, row("a1")); err != nil {
				t.Fatal(err)
			}
			// B took the lease and, finding A's placeholder, rebuilds.
			sb := &replicaState{loaded: true, epoch: phA}
			if err := b.unchanged(lb, sb, part, held); err != nil {
				t.Fatalf("B's fence before its wipe: %v", err)
			}
			if err := b.reregister(ctx, lb, sb, part, phB); err != nil {
				t.Fatal(err)
			}
			sb.epoch = phB
			if err := b.fencedWrite(part, phB, held, row("b1")); err != nil {
				t.Fatal(err)
			}

			// A carries on, still believing it holds the lease.
			if err := a.fencedWrite(part, phA, held, row("a2")); !errors.Is(err, errFenced) {
				t.Fatalf("A's snapshot page after B's takeover: %v, want errFenced", err)
			}
			if err := a.rebase(la, sa, part, phA, edgeEpoch, 0, held); !errors.Is(err, errFenced) {
				t.Fatalf("A's rebase after B's takeover: %v, want errFenced", err)
			}
			if sa.loaded || sa.err != nil {
				t.Fatalf("A's replica state %+v: want reloaded, not failed", sa)
			}
			sa = &replicaState{loaded: true, epoch: phA}
			if err := a.unchanged(la, sa, part, held); !errors.Is(err, errFenced) || sa.loaded {
				t.Fatalf("A's fence before a wipe: %v (loaded %v), want errFenced and a reload", err, sa.loaded)
			}
			// A passed that check just before B's wipe (the instant
			// between them): its own wipe, fenced in its transaction,
			// still wipes nothing of B's.
			sa = &replicaState{loaded: true, epoch: phA}
			if err := a.reregister(ctx, la, sa, part, placeholderPrefix+"a2"); !errors.Is(err, errFenced) || sa.loaded || sa.err != nil {
				t.Fatalf("A's wipe after B's: %v, state %+v; want errFenced, a reload and no failure", err, sa)
			}
			if p, err := st.PartitionGet(ctx, part); err != nil || p.LogEpoch != phB || count() != 1 {
				t.Fatalf("after A's attempts: partition %+v %v, %d rows; want B's placeholder and B's row only", p, err, count())
			}
			// A lease known lost refuses before the database is asked.
			for what, err := range map[string]error{
				"write":  a.fencedWrite(part, phB, lost, row("a3")),
				"rebase": a.rebase(la, sa, part, phB, edgeEpoch, 0, lost),
				"wipe":   a.unchanged(la, sb, part, lost),
			} {
				if !errors.Is(err, errLeaseLost) {
					t.Fatalf("%s under a lost lease: %v, want errLeaseLost", what, err)
				}
			}

			// B completes: the replica is the edge's, and servable.
			if err := b.rebase(lb, sb, part, phB, edgeEpoch, 0, held); err != nil {
				t.Fatal(err)
			}
			// A's stale view of it (a position past SQL's): the apply
			// reloads instead of failing the replica.
			stale := &replicaState{loaded: true, epoch: edgeEpoch, applied: 5}
			if err := a.apply(la, stale, part, commitsReply{LogEpoch: edgeEpoch, MaxCommitSeq: 6}); !errors.Is(err, errFenced) || stale.loaded || stale.err != nil {
				t.Fatalf("apply over a moved replica: %v, state %+v; want errFenced, a reload and no failure", err, stale)
			}
			if p, err := st.PartitionGet(ctx, part); err != nil || p.LogEpoch != edgeEpoch || count() != 1 {
				t.Fatalf("final partition %+v %v, %d rows", p, err, count())
			}
		})
	}
}
