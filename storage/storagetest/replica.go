package storagetest

import (
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// The writes of a read replica rebuilt from its home's rows
// (edge replicas): explicit row versions and a log rebased past a
// snapshot.
var replicaTests = []test{
	{"RowWriteVersion", testRowWriteVersion},
	{"PartitionRebase", testPartitionRebase},
}

// testRowWriteVersion: a RowWrite with a Version stores and returns it,
// on insert and update, upward and downward; without one the computed
// version counts on from the stored one.
func testRowWriteVersion(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	rw := task(t, sc, "t1", "p1", 1, "x")
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		for _, want := range []int64{7, 9, 3} {
			w := rw
			w.Version = want
			if v, err := tx.RowUpsert(ctx, "tasks", w); err != nil || v != want {
				t.Fatalf("upsert at version %d = %d, %v", want, v, err)
			}
			got, ok, err := tx.RowGet(ctx, p.ID, "tasks", "t1")
			if err != nil || !ok || got.ServerVersion != want {
				t.Fatalf("RowGet after upsert at %d = %+v %v %v", want, got, ok, err)
			}
		}
		if v, err := tx.RowUpsert(ctx, "tasks", rw); err != nil || v != 4 {
			t.Fatalf("upsert without a version = %d, %v; want 4", v, err)
		}
		return nil
	})
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
		if got, ok, err := tx.RowGet(ctx, p.ID, "tasks", "t1"); err != nil || !ok || got.ServerVersion != 4 {
			t.Fatalf("committed row = %+v %v %v, want version 4", got, ok, err)
		}
		return nil
	}))
}

// testPartitionRebase: a partition with no commits is rebased to a seq
// (max and horizon) and an epoch, and its next commit follows that seq;
// with retained commits only the epoch changes, at the max seq; a seq
// that would drop or skip commits, a bad epoch, an epoch other than the
// expected one and an unregistered partition are refused, changing
// nothing.
func testPartitionRebase(t *testing.T, e *env) {
	s, sc := e.store()
	ctx := t.Context()
	p, err := s.PartitionAdopt(ctx, "replica-rebase", "placeholder", 1)
	check(t, err)
	got, err := s.PartitionRebase(ctx, p.ID, "placeholder", "placeholder", 40)
	check(t, err)
	if got.MaxCommitSeq != 40 || got.HorizonSeq != 40 || got.LogEpoch != "placeholder" {
		t.Fatalf("rebased = %+v, want max and horizon 40", got)
	}
	rw := task(t, sc, "t1", "p1", 1, "x")
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		if _, err := tx.RowUpsert(ctx, "tasks", rw); err != nil {
			return err
		}
		seq, err := tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: 1, ActorID: "a", ClientID: "c", ClientCommitID: "1",
			SchemaVersion: 1, Changes: []storage.Change{change(rw, "tasks", 1)}})
		if err != nil || seq != 41 {
			t.Fatalf("commit after the rebase = %d, %v; want 41", seq, err)
		}
		return nil
	})
	// Another writer's epoch: a superseded rebuild changes nothing.
	_, err = s.PartitionRebase(ctx, p.ID, "other-placeholder", "edge-epoch", 41)
	wantCode(t, err, ssp2.CodeStoragePruneEpochMismatch)
	for _, seq := range []int64{40, 42} {
		_, err := s.PartitionRebase(ctx, p.ID, "placeholder", "edge-epoch", seq)
		wantCode(t, err, ssp2.CodeStorageInvalidPruneCursor)
	}
	_, err = s.PartitionRebase(ctx, p.ID, "placeholder", "", 41)
	wantCode(t, err, ssp2.CodeInvalidRequest)
	got, err = s.PartitionRebase(ctx, p.ID, "placeholder", "edge-epoch", 41)
	check(t, err)
	if got.MaxCommitSeq != 41 || got.HorizonSeq != 40 || got.LogEpoch != "edge-epoch" {
		t.Fatalf("rebased with a retained commit = %+v, want epoch edge-epoch, max 41, horizon 40", got)
	}
	stored, err := s.PartitionGet(ctx, p.ID)
	check(t, err)
	if stored.LogEpoch != got.LogEpoch || stored.MaxCommitSeq != got.MaxCommitSeq || stored.HorizonSeq != got.HorizonSeq {
		t.Fatalf("stored %+v, rebase returned %+v", stored, got)
	}
	_, err = s.PartitionRebase(ctx, "unregistered", "", "edge-epoch", 0)
	wantCode(t, err, ssp2.CodeStoragePartitionUnregistered)
}
