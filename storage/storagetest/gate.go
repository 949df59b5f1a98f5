package storagetest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// GateHooks is implemented by the store under test, in its _test.go
// files, so the gate tests can write what only an older build or an
// operator would: rows that bypass the Store's own checks.
type GateHooks interface {
	// HookRawCommit inserts a bare commit row (no changes) at seq with
	// the given writer version (nil: NULL, a writer from before the
	// fence), and returns the store's translated error.
	HookRawCommit(ctx context.Context, partition string, seq int64, writerVersion *int32) error
	// HookWriterVersion returns the writer version recorded on a commit
	// (nil: NULL).
	HookWriterVersion(ctx context.Context, partition string, seq int64) (*int32, error)
	// HookRawCheckpoint inserts a checkpoint row as is, raising no fence.
	HookRawCheckpoint(ctx context.Context, cp storage.Checkpoint) error
	// HookSetFence sets (or lowers) the partition's required writer
	// version.
	HookSetFence(ctx context.Context, partition string, required int32) error
}

func gateHooks(t *testing.T, s storage.Store) GateHooks {
	t.Helper()
	h, ok := s.(GateHooks)
	if !ok {
		t.Fatalf("%T does not implement storagetest.GateHooks: add the hooks to the store's test files", s)
	}
	return h
}

var gateTests = []test{
	{"DeclareIdempotentAndFenced", testGateDeclare},
	{"DeclareRefusals", testGateDeclareRefusals},
	{"ClaimRace", testGateClaimRace},
	{"ClaimRefusals", testGateClaimRefusals},
	{"AdvanceCompareAndSet", testGateAdvance},
	{"AdvanceInsidePush", testGateAdvanceInTx},
	{"ActivateOneWay", testGateActivate},
	{"ActivateStaleAfterSourceWrite", testGateActivateStale},
	{"ActivateUnverifiableAfterPrune", testGateActivateUnverifiable},
	{"ActivateFenceMissing", testGateActivateFenceMissing},
	{"ActivateRefusals", testGateActivateRefusals},
	{"WriterFence", testGateWriterFence},
	{"SourceCoverage", testGateSourceCoverage},
	{"GateRead", testGateRead},
	{"GateReadRevisions", testGateRevisions},
	{"EnsureSchemaDeclares", testGateEnsureDeclares},
	{"EnsureSchemaIncomplete", testGateEnsureIncomplete},
	{"EnsureSchemaRefusalsChangeNothing", testGateEnsureRefusals},
}

const gateNow = int64(5_000_000)

// declareCheckpoint declares k at now and returns the stored row.
func declareCheckpoint(t *testing.T, s storage.Store, k storage.CheckpointKey, now int64) storage.Checkpoint {
	t.Helper()
	cp, err := s.CheckpointDeclare(t.Context(), k, now)
	check(t, err)
	return cp
}

// claimCheckpoint claims k at now and returns the claimed row.
func claimCheckpoint(t *testing.T, s storage.Store, k storage.CheckpointKey, now int64) storage.Checkpoint {
	t.Helper()
	cp, err := s.CheckpointClaim(t.Context(), k, now)
	check(t, err)
	return cp
}

// activateAs runs an activation that must succeed with the outcome want;
// what names it in the failure.
func activateAs(t *testing.T, s storage.Store, what string, a storage.CheckpointActivateParams, want storage.ActivateOutcome) {
	t.Helper()
	out, err := s.CheckpointActivate(t.Context(), a)
	check(t, err)
	if out != want {
		t.Fatalf("%s = %s, want %s", what, out, want)
	}
}

func key(p storage.Partition, name string) storage.CheckpointKey {
	return storage.CheckpointKey{Partition: p.ID, Name: name, SchemaVersion: 1}
}

// only returns the single checkpoint of a partition.
func only(t *testing.T, s storage.Store, partition string) storage.Checkpoint {
	t.Helper()
	cps, err := s.Checkpoints(t.Context(), partition)
	check(t, err)
	if len(cps) != 1 {
		t.Fatalf("checkpoints of %q = %+v, want one", partition, cps)
	}
	return cps[0]
}

// gateSnapshot is everything a refused gate call must leave unchanged.
type gateSnapshot struct {
	checkpoints []storage.Checkpoint
	fences      map[string]int32
	marker      int32
}

func snapshot(t *testing.T, s storage.Store, partitions ...string) gateSnapshot {
	t.Helper()
	ctx := t.Context()
	cps, err := s.Checkpoints(ctx)
	check(t, err)
	g := gateSnapshot{checkpoints: cps, fences: map[string]int32{}}
	for _, p := range partitions {
		if v, ok, err := s.WriterFence(ctx, p); err != nil {
			t.Fatal(err)
		} else if ok {
			g.fences[p] = v
		}
	}
	if m, ok, err := s.SchemaMarker(ctx); err != nil {
		t.Fatal(err)
	} else if ok {
		g.marker = m.Version
	}
	return g
}

func unchanged(t *testing.T, what string, before gateSnapshot, s storage.Store, partitions ...string) {
	t.Helper()
	after := snapshot(t, s, partitions...)
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("%s changed the gate state:\nbefore %+v\nafter  %+v", what, before, after)
	}
}

// appendTask commits one change of a tasks row (a source write).
func appendTask(t *testing.T, s storage.Store, sc *schema.Schema, partition, id string) int64 {
	t.Helper()
	var seq int64
	writeTx(t, s, partition, func(tx storage.Tx) error {
		rw := task(t, sc, id, "p1", 1, nil)
		var err error
		seq, err = tx.CommitAppend(t.Context(), storage.CommitParams{CreatedAtMs: gateNow, ActorID: "a", ClientID: "c",
			ClientCommitID: "task-" + id, SchemaVersion: 1, Changes: []storage.Change{change(rw, "tasks", 1)}})
		return err
	})
	return seq
}

// appendNote commits one change of a notes row (not a source of the
// checkpoints below).
func appendNote(t *testing.T, s storage.Store, sc *schema.Schema, partition string, id int64) int64 {
	t.Helper()
	var seq int64
	writeTx(t, s, partition, func(tx storage.Tx) error {
		rw := rowWrite(t, table(t, sc, "notes"), values{"id": id, "project_id": "p1", "archived": false})
		var err error
		seq, err = tx.CommitAppend(t.Context(), storage.CommitParams{CreatedAtMs: gateNow, ActorID: "a", ClientID: "c",
			ClientCommitID: fmt.Sprint("note-", id), SchemaVersion: 1, Changes: []storage.Change{change(rw, "notes", 1)}})
		return err
	})
	return seq
}

func testGateDeclare(t *testing.T, e *env) {
	s, _ := e.store()
	ctx := t.Context()
	p := partition(t, s)
	k := key(p, "tasks-projection")
	if _, ok, err := s.WriterFence(ctx, p.ID); err != nil || ok {
		t.Fatalf("fence before any declaration: ok %v, err %v; want none", ok, err)
	}
	cp := declareCheckpoint(t, s, k, gateNow)
	want := storage.Checkpoint{CheckpointKey: k, State: storage.CheckpointDeclared, UpdatedAtMs: gateNow}
	if cp != want {
		t.Fatalf("declared = %+v, want %+v", cp, want)
	}
	if v, ok, err := s.WriterFence(ctx, p.ID); err != nil || !ok || v != 1 {
		t.Fatalf("fence after declare = %d, %v, %v; want 1", v, ok, err)
	}
	// Idempotent on a declared row and on a backfilling row.
	again := declareCheckpoint(t, s, k, gateNow+10)
	if again != want {
		t.Fatalf("second declare = %+v, want the stored row %+v", again, want)
	}
	claimed := claimCheckpoint(t, s, k, gateNow+20)
	again = declareCheckpoint(t, s, k, gateNow+30)
	if again != claimed || again.State != storage.CheckpointBackfilling {
		t.Fatalf("declare over backfilling = %+v, want the claimed row %+v", again, claimed)
	}
	// A fence already above the version is never lowered.
	check(t, gateHooks(t, s).HookSetFence(ctx, p.ID, 7))
	declareCheckpoint(t, s, key(p, "other"), gateNow)
	if v, _, err := s.WriterFence(ctx, p.ID); err != nil || v != 7 {
		t.Fatalf("fence after declaring under a higher fence = %d, %v; want 7", v, err)
	}
	// An unregistered partition can be declared (it has no commits yet).
	cp = declareCheckpoint(t, s, storage.CheckpointKey{Partition: "not-yet", Name: "x", SchemaVersion: 1}, gateNow)
	if cp.State != storage.CheckpointDeclared {
		t.Fatalf("declare on an unregistered partition = %+v", cp)
	}
}

func testGateDeclareRefusals(t *testing.T, e *env) {
	s, _ := e.store()
	ctx := t.Context()
	p := partition(t, s)
	before := snapshot(t, s, p.ID)
	for _, k := range []storage.CheckpointKey{
		{Partition: p.ID, Name: "", SchemaVersion: 1},
		{Partition: p.ID, Name: "has space", SchemaVersion: 1},
		{Partition: p.ID, Name: "comma,name", SchemaVersion: 1},
		{Partition: p.ID, Name: string(make([]byte, storage.MaxCheckpointNameLen+1)), SchemaVersion: 1},
		{Partition: p.ID, Name: "ok", SchemaVersion: 0},
		{Partition: "\xff", Name: "ok", SchemaVersion: 1},
		// Not the stored schema version.
		{Partition: p.ID, Name: "ok", SchemaVersion: 2},
	} {
		_, err := s.CheckpointDeclare(ctx, k, gateNow)
		wantCode(t, err, ssp2.CodeStorageInvalidCheckpoint)
	}
	unchanged(t, "refused declarations", before, s, p.ID)

	fresh := e.fresh()
	_, err := fresh.CheckpointDeclare(ctx, storage.CheckpointKey{Partition: "p", Name: "x", SchemaVersion: 1}, gateNow)
	wantCode(t, err, ssp2.CodeStorageInvalidCheckpoint)
}

func testGateClaimRace(t *testing.T, e *env) {
	s, _ := e.store()
	ctx := t.Context()
	p := partition(t, s)
	k := key(p, "race")
	declareCheckpoint(t, s, k, gateNow)
	const n = 8
	epochs := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			cp, err := s.CheckpointClaim(ctx, k, gateNow+int64(i))
			epochs[i], errs[i] = cp.OwnerEpoch, err
			if err == nil && cp.State != storage.CheckpointBackfilling {
				errs[i] = fmt.Errorf("claimed state %s", cp.State)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		check(t, err)
	}
	slices.Sort(epochs)
	for i, ep := range epochs {
		if ep != int64(i+1) {
			t.Fatalf("racing claims got epochs %v, want 1..%d each once", epochs, n)
		}
	}
	if cp := only(t, s, p.ID); cp.OwnerEpoch != n || cp.State != storage.CheckpointBackfilling {
		t.Fatalf("after the race: %+v, want owner epoch %d, backfilling", cp, n)
	}
}

func testGateClaimRefusals(t *testing.T, e *env) {
	s, sc := e.store()
	ctx := t.Context()
	p := partition(t, s)
	_, err := s.CheckpointClaim(ctx, key(p, "absent"), gateNow)
	wantCode(t, err, ssp2.CodeStorageCheckpointNotDeclared)
	_, err = s.CheckpointClaim(ctx, key(p, "bad name!"), gateNow)
	wantCode(t, err, ssp2.CodeStorageInvalidCheckpoint)

	k := key(p, "done")
	seq := appendTask(t, s, sc, p.ID, "t1")
	declareCheckpoint(t, s, k, gateNow)
	activateAs(t, s, "activate", storage.CheckpointActivateParams{CheckpointKey: k, Watermark: seq, Sources: []string{"tasks"}, NowMs: gateNow}, storage.ActivateActivated)
	before := snapshot(t, s, p.ID)
	_, err = s.CheckpointClaim(ctx, k, gateNow+1)
	wantCode(t, err, ssp2.CodeStorageCheckpointNotDeclared)
	unchanged(t, "claiming an activated checkpoint", before, s, p.ID)
}

func testGateAdvance(t *testing.T, e *env) {
	s, _ := e.store()
	ctx := t.Context()
	p := partition(t, s)
	k := key(p, "adv")
	declareCheckpoint(t, s, k, gateNow)
	// A declared (unclaimed) row has no owner to advance it.
	if ok, err := s.CheckpointAdvance(ctx, storage.CheckpointAdvanceParams{CheckpointKey: k, OwnerEpoch: 0, Watermark: 1, NowMs: gateNow}); err != nil || ok {
		t.Fatalf("advance of an unclaimed checkpoint = %v, %v; want false", ok, err)
	}
	stale := claimCheckpoint(t, s, k, gateNow+1)
	owner := claimCheckpoint(t, s, k, gateNow+2)
	if owner.OwnerEpoch != stale.OwnerEpoch+1 {
		t.Fatalf("second claim epoch %d after %d", owner.OwnerEpoch, stale.OwnerEpoch)
	}
	before := only(t, s, p.ID)
	ok, err := s.CheckpointAdvance(ctx, storage.CheckpointAdvanceParams{CheckpointKey: k, OwnerEpoch: stale.OwnerEpoch, Watermark: 9, ObservedRows: 3, NowMs: gateNow + 3})
	if err != nil || ok {
		t.Fatalf("superseded advance = %v, %v; want false, no error", ok, err)
	}
	if got := only(t, s, p.ID); got != before {
		t.Fatalf("superseded advance changed the row: %+v → %+v", before, got)
	}
	ok, err = s.CheckpointAdvance(ctx, storage.CheckpointAdvanceParams{CheckpointKey: k, OwnerEpoch: owner.OwnerEpoch, Watermark: 9, ObservedRows: 3, NowMs: gateNow + 4})
	if err != nil || !ok {
		t.Fatalf("owner's advance = %v, %v; want true", ok, err)
	}
	want := before
	want.Watermark, want.ObservedRows, want.UpdatedAtMs = 9, 3, gateNow+4
	if got := only(t, s, p.ID); got != want {
		t.Fatalf("after advance = %+v, want %+v", got, want)
	}
	// Unknown names advance nothing and are no error.
	if ok, err := s.CheckpointAdvance(ctx, storage.CheckpointAdvanceParams{CheckpointKey: key(p, "absent"), OwnerEpoch: 1, NowMs: gateNow}); err != nil || ok {
		t.Fatalf("advance of an absent checkpoint = %v, %v; want false", ok, err)
	}
	_, err = s.CheckpointAdvance(ctx, storage.CheckpointAdvanceParams{CheckpointKey: k, OwnerEpoch: owner.OwnerEpoch, Watermark: -1, NowMs: gateNow})
	wantCode(t, err, ssp2.CodeStorageInvalidCheckpoint)
}

// testGateAdvanceInTx: a backfill batch's rows and its progress commit or
// roll back together; a superseded batch lands nothing.
func testGateAdvanceInTx(t *testing.T, e *env) {
	s, sc := e.store()
	ctx := t.Context()
	p := partition(t, s)
	k := key(p, "batch")
	declareCheckpoint(t, s, k, gateNow)
	stale := claimCheckpoint(t, s, k, gateNow)
	owner := claimCheckpoint(t, s, k, gateNow)

	batch := func(epoch int64, rowID string) (bool, error) {
		var advanced bool
		err := s.WriteTx(ctx, p.ID, func(tx storage.Tx) error {
			ok, err := tx.CheckpointAdvance(ctx, storage.CheckpointAdvanceParams{CheckpointKey: k, OwnerEpoch: epoch, Watermark: tx.Locked().MaxCommitSeq, ObservedRows: 1, NowMs: gateNow})
			if err != nil {
				return err
			}
			if advanced = ok; !ok {
				return errSuperseded
			}
			rw := task(t, sc, rowID, "p1", 1, nil)
			v, err := tx.RowUpsert(ctx, "tasks", rw)
			if err != nil {
				return err
			}
			_, err = tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: gateNow, ActorID: "backfill", ClientID: "backfill",
				ClientCommitID: rowID, SchemaVersion: 1, Changes: []storage.Change{change(rw, "tasks", v)}})
			return err
		})
		return advanced, err
	}
	if ok, err := batch(stale.OwnerEpoch, "proj-stale"); ok || err != errSuperseded {
		t.Fatalf("superseded batch = %v, %v; want rolled back", ok, err)
	}
	rowExists := func(id string) bool {
		var found bool
		check(t, s.ReadTx(ctx, func(rtx storage.ReadTx) (err error) {
			_, found, err = rtx.RowGet(ctx, p.ID, "tasks", id)
			return err
		}))
		return found
	}
	if rowExists("proj-stale") {
		t.Fatal("a superseded batch's row landed")
	}
	if cp := only(t, s, p.ID); cp.ObservedRows != 0 {
		t.Fatalf("a superseded batch advanced the checkpoint: %+v", cp)
	}
	if ok, err := batch(owner.OwnerEpoch, "proj-1"); !ok || err != nil {
		t.Fatalf("owner's batch = %v, %v", ok, err)
	}
	if !rowExists("proj-1") || only(t, s, p.ID).ObservedRows != 1 {
		t.Fatal("the owner's batch did not land with its progress")
	}
	// A batch that fails after advancing rolls the advance back too.
	err := s.WriteTx(ctx, p.ID, func(tx storage.Tx) error {
		if _, err := tx.CheckpointAdvance(ctx, storage.CheckpointAdvanceParams{CheckpointKey: k, OwnerEpoch: owner.OwnerEpoch, Watermark: 0, ObservedRows: 99, NowMs: gateNow}); err != nil {
			return err
		}
		return errSuperseded
	})
	if err != errSuperseded || only(t, s, p.ID).ObservedRows != 1 {
		t.Fatalf("a failed batch kept its progress: %v, %+v", err, only(t, s, p.ID))
	}
}

var errSuperseded = fmt.Errorf("superseded")

func testGateActivate(t *testing.T, e *env) {
	s, sc := e.store()
	ctx := t.Context()
	p := partition(t, s)
	k := key(p, "one-way")
	seq := appendTask(t, s, sc, p.ID, "t1")
	declareCheckpoint(t, s, k, gateNow)
	claimed := claimCheckpoint(t, s, k, gateNow)
	activateAs(t, s, "activate", storage.CheckpointActivateParams{CheckpointKey: k, OwnerEpoch: claimed.OwnerEpoch,
		Watermark: seq, Sources: []string{"tasks"}, NowMs: gateNow + 1}, storage.ActivateActivated)
	activated := only(t, s, p.ID)
	want := storage.Checkpoint{CheckpointKey: k, State: storage.CheckpointActivated, Watermark: seq, OwnerEpoch: claimed.OwnerEpoch, UpdatedAtMs: gateNow + 1}
	if activated != want {
		t.Fatalf("activated row = %+v, want %+v", activated, want)
	}
	before := snapshot(t, s, p.ID)
	// Re-activation and re-claiming are refused; re-declaring returns it.
	_, err := s.CheckpointActivate(ctx, storage.CheckpointActivateParams{CheckpointKey: k, OwnerEpoch: claimed.OwnerEpoch, Watermark: seq, Sources: []string{"tasks"}, NowMs: gateNow + 2})
	wantCode(t, err, ssp2.CodeStorageCheckpointNotDeclared)
	_, err = s.CheckpointClaim(ctx, k, gateNow+2)
	wantCode(t, err, ssp2.CodeStorageCheckpointNotDeclared)
	again := declareCheckpoint(t, s, k, gateNow+2)
	if again != activated {
		t.Fatalf("declare over activated = %+v, want %+v", again, activated)
	}
	unchanged(t, "operations on an activated checkpoint", before, s, p.ID)

	// A declared, never claimed checkpoint activates with owner epoch 0
	// (an operator marking a projection complete).
	k2 := key(p, "unclaimed")
	declareCheckpoint(t, s, k2, gateNow)
	activateAs(t, s, "activate unclaimed", storage.CheckpointActivateParams{CheckpointKey: k2, Watermark: seq, Sources: []string{"tasks"}, NowMs: gateNow}, storage.ActivateActivated)
}

func testGateActivateStale(t *testing.T, e *env) {
	s, sc := e.store()
	ctx := t.Context()
	p := partition(t, s)
	k := key(p, "stale")
	seq := appendTask(t, s, sc, p.ID, "t1")
	declareCheckpoint(t, s, k, gateNow)
	claimed := claimCheckpoint(t, s, k, gateNow)
	// A write to a table that is not a source never makes it stale.
	appendNote(t, s, sc, p.ID, 1)
	// A source write racing the backfill (from another goroutine, as from
	// another client) lands above the watermark.
	done := make(chan int64)
	go func() { done <- appendTask(t, s, sc, p.ID, "t2") }()
	raced := <-done
	before := snapshot(t, s, p.ID)
	act := storage.CheckpointActivateParams{CheckpointKey: k, OwnerEpoch: claimed.OwnerEpoch, Watermark: seq, Sources: []string{"tasks"}, NowMs: gateNow + 5}
	activateAs(t, s, "activate after a source write", act, storage.ActivateStale)
	unchanged(t, "a stale activation", before, s, p.ID)
	// The backfill's own writes to a source table (a new column of the
	// table it is computed from) do not count; another client's do.
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		rw := task(t, sc, "t1", "p1", 1, "projected")
		_, err := tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: gateNow, ActorID: "backfill", ClientID: "backfill-client",
			ClientCommitID: "batch-1", SchemaVersion: 1, Changes: []storage.Change{change(rw, "tasks", 2)}})
		return err
	})
	act.Watermark, act.OwnClientID = raced, "backfill-client"
	before = snapshot(t, s, p.ID)
	act.Watermark = seq
	activateAs(t, s, "activate below another client's write, own writes excluded", act, storage.ActivateStale)
	unchanged(t, "a stale activation", before, s, p.ID)
	// With the watermark at the racing write, it activates; the own
	// commit above it is not a source change.
	act.Watermark = raced
	activateAs(t, s, "activate at the new watermark", act, storage.ActivateActivated)
}

func testGateActivateUnverifiable(t *testing.T, e *env) {
	s, sc := e.store()
	ctx := t.Context()
	p := partition(t, s)
	k := key(p, "pruned")
	first := appendTask(t, s, sc, p.ID, "t1")
	appendTask(t, s, sc, p.ID, "t2")
	appendTask(t, s, sc, p.ID, "t3")
	declareCheckpoint(t, s, k, gateNow)
	claimed := claimCheckpoint(t, s, k, gateNow)
	p, err := s.PartitionGet(ctx, p.ID)
	check(t, err)
	res := prune(t, s, storage.PruneParams{Partition: p.ID, LogEpoch: p.LogEpoch, ThroughSeq: first + 1, NowMs: gateNow, MinRetainedCommits: 1})
	if res.HorizonSeq != first+1 {
		t.Fatalf("horizon = %d, want %d", res.HorizonSeq, first+1)
	}
	before := snapshot(t, s, p.ID)
	activateAs(t, s, "activate below the horizon", storage.CheckpointActivateParams{CheckpointKey: k, OwnerEpoch: claimed.OwnerEpoch, Watermark: first, Sources: []string{"tasks"}, NowMs: gateNow}, storage.ActivateUnverifiable)
	unchanged(t, "an unverifiable activation", before, s, p.ID)
	// Even without any source change in the retained log: pruned is never clean.
	activateAs(t, s, "activate below the horizon for another source", storage.CheckpointActivateParams{CheckpointKey: k, OwnerEpoch: claimed.OwnerEpoch, Watermark: first, Sources: []string{"notes"}, NowMs: gateNow}, storage.ActivateUnverifiable)
}

func testGateActivateFenceMissing(t *testing.T, e *env) {
	s, _ := e.store()
	ctx := t.Context()
	p := partition(t, s)
	k := key(p, "unfenced")
	h := gateHooks(t, s)
	// A declared checkpoint without its fence is an inconsistent database
	// (written by hand or by an older tool).
	check(t, h.HookRawCheckpoint(ctx, storage.Checkpoint{CheckpointKey: k, State: storage.CheckpointDeclared, UpdatedAtMs: gateNow}))
	claimed := claimCheckpoint(t, s, k, gateNow)
	act := storage.CheckpointActivateParams{CheckpointKey: k, OwnerEpoch: claimed.OwnerEpoch, Sources: []string{"tasks"}, NowMs: gateNow}
	before := snapshot(t, s, p.ID)
	_, err := s.CheckpointActivate(ctx, act)
	wantCode(t, err, ssp2.CodeStorageCheckpointFenceMissing)
	unchanged(t, "an unfenced activation", before, s, p.ID)

	k2 := storage.CheckpointKey{Partition: p.ID, Name: "v2", SchemaVersion: 2}
	check(t, h.HookRawCheckpoint(ctx, storage.Checkpoint{CheckpointKey: k2, State: storage.CheckpointDeclared, UpdatedAtMs: gateNow}))
	check(t, h.HookSetFence(ctx, p.ID, 1))
	_, err = s.CheckpointActivate(ctx, storage.CheckpointActivateParams{CheckpointKey: k2, NowMs: gateNow})
	wantCode(t, err, ssp2.CodeStorageCheckpointFenceMissing)
	// The fence at the checkpoint's version lets it activate.
	activateAs(t, s, "activate once fenced", act, storage.ActivateActivated)
}

func testGateActivateRefusals(t *testing.T, e *env) {
	s, sc := e.store()
	ctx := t.Context()
	p := partition(t, s)
	k := key(p, "refusals")
	seq := appendTask(t, s, sc, p.ID, "t1")
	declareCheckpoint(t, s, k, gateNow)
	stale := claimCheckpoint(t, s, k, gateNow)
	owner := claimCheckpoint(t, s, k, gateNow)
	good := storage.CheckpointActivateParams{CheckpointKey: k, OwnerEpoch: owner.OwnerEpoch, Watermark: seq, Sources: []string{"tasks"}, NowMs: gateNow}
	before := snapshot(t, s, p.ID)
	for _, tc := range []struct {
		name string
		edit func(*storage.CheckpointActivateParams)
		code ssp2.Code
	}{
		{"stale owner epoch", func(a *storage.CheckpointActivateParams) { a.OwnerEpoch = stale.OwnerEpoch }, ssp2.CodeStorageCheckpointSuperseded},
		{"future owner epoch", func(a *storage.CheckpointActivateParams) { a.OwnerEpoch = owner.OwnerEpoch + 1 }, ssp2.CodeStorageCheckpointSuperseded},
		{"unknown name", func(a *storage.CheckpointActivateParams) { a.Name = "nope" }, ssp2.CodeStorageCheckpointNotDeclared},
		{"unknown version", func(a *storage.CheckpointActivateParams) { a.SchemaVersion = 3 }, ssp2.CodeStorageCheckpointNotDeclared},
		{"bad name", func(a *storage.CheckpointActivateParams) { a.Name = "a b" }, ssp2.CodeStorageInvalidCheckpoint},
		{"negative watermark", func(a *storage.CheckpointActivateParams) { a.Watermark = -1 }, ssp2.CodeStorageInvalidCheckpoint},
		{"watermark past the log", func(a *storage.CheckpointActivateParams) { a.Watermark = seq + 1 }, ssp2.CodeStorageInvalidCheckpoint},
		{"unknown source", func(a *storage.CheckpointActivateParams) { a.Sources = []string{"tasks", "nope"} }, ssp2.CodeStorageInvalidCheckpoint},
	} {
		a := good
		tc.edit(&a)
		_, err := s.CheckpointActivate(ctx, a)
		if e := ssp2.CodeOf(err); e != tc.code {
			t.Errorf("%s: error %v, want %s", tc.name, err, tc.code)
		}
	}
	unchanged(t, "refused activations", before, s, p.ID)
	activateAs(t, s, "the owner's activation", good, storage.ActivateActivated)
}

func testGateWriterFence(t *testing.T, e *env) {
	s, sc := e.store()
	ctx := t.Context()
	p := partition(t, s)
	h := gateHooks(t, s)
	// No fence row: no barrier, even for a writer that records no version.
	check(t, h.HookRawCommit(ctx, p.ID, 1, nil))
	v1 := int32(1)
	check(t, h.HookSetFence(ctx, p.ID, 1))
	check(t, h.HookRawCommit(ctx, p.ID, 2, &v1))
	// An explicit NULL is refused while a fence exists.
	wantCode(t, h.HookRawCommit(ctx, p.ID, 3, nil), ssp2.CodeStorageWriterFenceRejected)

	// Through the Store: the append records the writer version …
	seq := appendTask(t, s, sc, p.ID, "t1")
	if wv, err := h.HookWriterVersion(ctx, p.ID, seq); err != nil || wv == nil || *wv != 1 {
		t.Fatalf("recorded writer version = %v, %v; want 1", wv, err)
	}
	// … and a newer build's declaration locks the older writer out at
	// once: the next append of a version-1 writer is refused, and the
	// transaction is aborted.
	check(t, h.HookSetFence(ctx, p.ID, 2))
	rw := task(t, sc, "t2", "p1", 1, nil)
	var appendErr error
	err := s.WriteTx(ctx, p.ID, func(tx storage.Tx) error {
		_, appendErr = tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: gateNow, ActorID: "a", ClientID: "c", ClientCommitID: "old",
			SchemaVersion: 1, Changes: []storage.Change{change(rw, "tasks", 1)}})
		return nil
	})
	if appendErr != nil {
		wantCode(t, appendErr, ssp2.CodeStorageWriterFenceRejected)
	} else {
		// A store may send the append with the commit (pgstore does).
		wantCode(t, err, ssp2.CodeStorageWriterFenceRejected)
	}
	maxSeq, err := s.CommitMaxSeq(ctx, p.ID)
	check(t, err)
	if maxSeq != seq {
		t.Fatalf("max seq after the refused append = %d, want %d", maxSeq, seq)
	}
	// A writer at the fence's version passes.
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		_, err := tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: gateNow, ActorID: "a", ClientID: "c", ClientCommitID: "new",
			SchemaVersion: 1, WriterVersion: 2, Changes: []storage.Change{change(rw, "tasks", 1)}})
		return err
	})
	if wv, err := h.HookWriterVersion(ctx, p.ID, seq+1); err != nil || wv == nil || *wv != 2 {
		t.Fatalf("recorded writer version = %v, %v; want 2", wv, err)
	}
	// Other partitions are unaffected.
	other := partition(t, s)
	check(t, h.HookRawCommit(ctx, other.ID, 1, nil))
}

func testGateSourceCoverage(t *testing.T, e *env) {
	s, sc := e.store()
	ctx := t.Context()
	p := partition(t, s)
	cov := func(tables ...string) int64 {
		t.Helper()
		n, err := s.SourceCoverage(ctx, p.ID, tables)
		check(t, err)
		return n
	}
	above := func(seq int64, tables ...string) storage.SourceChange {
		t.Helper()
		c, err := s.SourceChangesAbove(ctx, p.ID, tables, seq)
		check(t, err)
		return c
	}
	if cov("tasks") != 0 || above(0, "tasks") != storage.SourceClean {
		t.Fatal("an empty log has coverage or changes")
	}
	taskSeq := appendTask(t, s, sc, p.ID, "t1")
	noteSeq := appendNote(t, s, sc, p.ID, 1)
	if got := cov("tasks"); got != taskSeq {
		t.Fatalf("coverage(tasks) = %d, want %d", got, taskSeq)
	}
	if got := cov("notes"); got != noteSeq {
		t.Fatalf("coverage(notes) = %d, want %d", got, noteSeq)
	}
	if got := cov("tasks", "notes"); got != noteSeq {
		t.Fatalf("coverage(tasks, notes) = %d, want %d", got, noteSeq)
	}
	if got := cov(); got != 0 {
		t.Fatalf("coverage() = %d, want 0", got)
	}
	appendNote(t, s, sc, p.ID, 2)
	for _, tc := range []struct {
		seq    int64
		tables []string
		want   storage.SourceChange
	}{
		{taskSeq, []string{"tasks"}, storage.SourceClean},
		{taskSeq, []string{"notes"}, storage.SourceChanged},
		{noteSeq, []string{"tasks"}, storage.SourceClean},
		{0, []string{"tasks"}, storage.SourceChanged},
		{0, nil, storage.SourceClean},
	} {
		if got := above(tc.seq, tc.tables...); got != tc.want {
			t.Errorf("changes above %d in %v = %s, want %s", tc.seq, tc.tables, got, tc.want)
		}
	}
	p, err := s.PartitionGet(ctx, p.ID)
	check(t, err)
	prune(t, s, storage.PruneParams{Partition: p.ID, LogEpoch: p.LogEpoch, ThroughSeq: taskSeq, NowMs: gateNow, MinRetainedCommits: 1})
	if got := above(0, "tasks"); got != storage.SourceUnverifiable {
		t.Fatalf("changes above a pruned seq = %s, want unverifiable", got)
	}
	// At the horizon, the window above is intact.
	if got := above(taskSeq, "tasks"); got != storage.SourceClean {
		t.Fatalf("changes above the horizon = %s, want clean", got)
	}
	// Another partition's log is not read.
	if c, err := s.SourceChangesAbove(ctx, "other", []string{"tasks"}, 0); err != nil || c != storage.SourceClean {
		t.Fatalf("changes in an unknown partition = %s, %v", c, err)
	}
}

// readGate returns the gate read outside a transaction, in a ReadTx and in
// a WriteTx, failing unless all three agree.
func readGate(t *testing.T, s storage.Store, partition string, running int32) storage.GateState {
	t.Helper()
	ctx := t.Context()
	out, err := s.GateRead(ctx, partition, running)
	check(t, err)
	var inRead, inWrite storage.GateState
	check(t, s.ReadTx(ctx, func(tx storage.ReadTx) (err error) {
		inRead, err = tx.GateRead(ctx, partition, running)
		return err
	}))
	if !reflect.DeepEqual(out, inRead) {
		t.Fatalf("GateRead differs in a ReadTx:\n%+v\n%+v", out, inRead)
	}
	if out.Registered {
		// After the partition row, in the same snapshot (a store may
		// answer from what it read with the row).
		check(t, s.ReadTx(ctx, func(tx storage.ReadTx) error {
			if _, err := tx.Partition(ctx, partition); err != nil {
				return err
			}
			var err error
			inRead, err = tx.GateRead(ctx, partition, running)
			return err
		}))
		if !reflect.DeepEqual(out, inRead) {
			t.Fatalf("GateRead differs after Partition in a ReadTx:\n%+v\n%+v", out, inRead)
		}
	}
	if out.Registered {
		writeTx(t, s, partition, func(tx storage.Tx) (err error) {
			inWrite, err = tx.GateRead(ctx, partition, running)
			return err
		})
		if !reflect.DeepEqual(out, inWrite) {
			t.Fatalf("GateRead differs in a WriteTx:\n%+v\n%+v", out, inWrite)
		}
	}
	return out
}

func testGateRead(t *testing.T, e *env) {
	ctx := t.Context()
	fresh := e.fresh()
	g, err := fresh.GateRead(ctx, "p", 1)
	check(t, err)
	if !reflect.DeepEqual(g, storage.GateState{}) {
		t.Fatalf("gate read of a fresh store = %+v, want zero", g)
	}

	s, _ := e.store()
	p := partition(t, s)
	g = readGate(t, s, p.ID, 1)
	if !g.HasMarker || g.SchemaVersion != 1 || !g.Registered || g.LogEpoch != p.LogEpoch || len(g.Pending) != 0 {
		t.Fatalf("gate read = %+v", g)
	}
	declareCheckpoint(t, s, key(p, "b"), gateNow)
	declareCheckpoint(t, s, key(p, "a"), gateNow)
	claimCheckpoint(t, s, key(p, "b"), gateNow)
	// Another partition's checkpoint is not this partition's business.
	other := partition(t, s)
	declareCheckpoint(t, s, key(other, "c"), gateNow)
	g = readGate(t, s, p.ID, 1)
	want := []storage.PendingCheckpoint{{Name: "a", State: storage.CheckpointDeclared}, {Name: "b", State: storage.CheckpointBackfilling}}
	if !reflect.DeepEqual(g.Pending, want) {
		t.Fatalf("pending = %+v, want %+v", g.Pending, want)
	}
	// Only the running version's checkpoints are pending.
	if g2 := readGate(t, s, p.ID, 2); len(g2.Pending) != 0 {
		t.Fatalf("pending at version 2 = %+v", g2.Pending)
	}
	activateAs(t, s, "activate a", storage.CheckpointActivateParams{CheckpointKey: key(p, "a"), NowMs: gateNow}, storage.ActivateActivated)
	if g = readGate(t, s, p.ID, 1); len(g.Pending) != 1 || g.Pending[0].Name != "b" {
		t.Fatalf("pending after activating a = %+v", g.Pending)
	}
	// An unregistered partition reads with its pending checkpoints.
	declareCheckpoint(t, s, storage.CheckpointKey{Partition: "later", Name: "x", SchemaVersion: 1}, gateNow)
	g = readGate(t, s, "later", 1)
	if g.Registered || g.LogEpoch != "" || len(g.Pending) != 1 {
		t.Fatalf("gate read of an unregistered partition = %+v", g)
	}
}

// testGateRevisions: every change of the token moves a revision, so a
// reader comparing revisions sees a change even when the values return.
func testGateRevisions(t *testing.T, e *env) {
	s, sc := e.store()
	ctx := t.Context()
	p := partition(t, s)
	g0 := readGate(t, s, p.ID, 1)
	step := func(what string, prev storage.GateState, schemaMoved bool) storage.GateState {
		t.Helper()
		g := readGate(t, s, p.ID, 1)
		if g.SameToken(prev) {
			t.Fatalf("%s: token unchanged: %+v", what, g)
		}
		if schemaMoved != (g.SchemaRevision > prev.SchemaRevision) || g.Revision < prev.Revision {
			t.Fatalf("%s: revisions %d/%d → %d/%d", what, prev.SchemaRevision, prev.Revision, g.SchemaRevision, g.Revision)
		}
		return g
	}
	declareCheckpoint(t, s, key(p, "r"), gateNow)
	g1 := step("declare", g0, false)
	// Claims and progress do not change whether the partition is served.
	claimed := claimCheckpoint(t, s, key(p, "r"), gateNow)
	if _, err := s.CheckpointAdvance(ctx, storage.CheckpointAdvanceParams{CheckpointKey: key(p, "r"), OwnerEpoch: claimed.OwnerEpoch, NowMs: gateNow}); err != nil {
		t.Fatal(err)
	}
	if g := readGate(t, s, p.ID, 1); !g.SameToken(g1) {
		t.Fatalf("claim/advance moved the token: %+v → %+v", g1, g)
	}
	activateAs(t, s, "activate r", storage.CheckpointActivateParams{CheckpointKey: key(p, "r"), OwnerEpoch: claimed.OwnerEpoch, NowMs: gateNow}, storage.ActivateActivated)
	g2 := step("activate", g1, false)
	if len(g2.Pending) != len(g0.Pending) {
		t.Fatalf("pending after activation = %+v", g2.Pending)
	}
	// The pending set is back where it started, the revision is not.
	if g2.Revision == g0.Revision {
		t.Fatal("declare then activate left the revision where it was")
	}
	rotated, err := s.PartitionRotateEpoch(ctx, p.ID, gateNow)
	check(t, err)
	g3 := step("rotate epoch", g2, false)
	if g3.LogEpoch != rotated.LogEpoch {
		t.Fatalf("epoch after rotation = %q, want %q", g3.LogEpoch, rotated.LogEpoch)
	}
	// Touches and pushes leave the token alone.
	appendTask(t, s, sc, p.ID, "t1")
	if _, err := s.PartitionTouch(ctx, p.ID, gateNow+storage.TouchGranularityMs*10); err != nil {
		t.Fatal(err)
	}
	if g := readGate(t, s, p.ID, 1); !g.SameToken(g3) {
		t.Fatalf("a push or touch moved the token: %+v → %+v", g3, g)
	}
	check(t, s.EnsureSchema(ctx, mustParse(t, withVersion(schemaV1, 2))))
	g4 := readGate(t, s, p.ID, 2)
	if g4.SchemaVersion != 2 || g4.SchemaRevision <= g3.SchemaRevision {
		t.Fatalf("after a schema bump: %+v (before %+v)", g4, g3)
	}
}

func testGateEnsureDeclares(t *testing.T, e *env) {
	s, sc := e.store()
	ctx := t.Context()
	p := partition(t, s)
	other := partition(t, s)
	appendTask(t, s, sc, p.ID, "t1")
	v2 := mustParse(t, withVersion(schemaV1, 2))
	decls := []storage.CheckpointKey{
		{Partition: p.ID, Name: "tasks-projection", SchemaVersion: 2},
		{Partition: "unregistered", Name: "tasks-projection", SchemaVersion: 2},
	}
	check(t, s.EnsureSchemaWithCheckpoints(ctx, v2, decls))
	m, _, err := s.SchemaMarker(ctx)
	check(t, err)
	if m.Version != 2 {
		t.Fatalf("marker = %d, want 2", m.Version)
	}
	for _, d := range decls {
		cps, err := s.Checkpoints(ctx, d.Partition)
		check(t, err)
		if len(cps) != 1 || cps[0].CheckpointKey != d || cps[0].State != storage.CheckpointDeclared {
			t.Fatalf("checkpoints of %q = %+v", d.Partition, cps)
		}
	}
	// The migration raised every registered partition's fence, and the
	// declarations theirs.
	for _, id := range []string{p.ID, other.ID, "unregistered"} {
		if v, ok, err := s.WriterFence(ctx, id); err != nil || !ok || v != 2 {
			t.Fatalf("fence of %q = %d, %v, %v; want 2", id, v, ok, err)
		}
	}
	// An older writer is locked out of the migrated partitions.
	one := int32(1)
	wantCode(t, gateHooks(t, s).HookRawCommit(ctx, other.ID, 1, &one), ssp2.CodeStorageWriterFenceRejected)

	// A restart with the same declarations is a no-op: ownership and
	// progress survive.
	claimed := claimCheckpoint(t, s, decls[0], gateNow)
	before := snapshot(t, s, p.ID, other.ID)
	check(t, s.EnsureSchemaWithCheckpoints(ctx, mustParse(t, withVersion(schemaV1, 2)), decls))
	unchanged(t, "a restart with the same declarations", before, s, p.ID, other.ID)
	if cp := only(t, s, p.ID); cp.OwnerEpoch != claimed.OwnerEpoch || cp.State != storage.CheckpointBackfilling {
		t.Fatalf("after restart = %+v", cp)
	}
	// Once activated, a build need declare nothing.
	for _, d := range decls {
		cp := only(t, s, d.Partition)
		activateAs(t, s, "activate "+d.Partition, storage.CheckpointActivateParams{CheckpointKey: d, OwnerEpoch: cp.OwnerEpoch, NowMs: gateNow}, storage.ActivateActivated)
	}
	check(t, s.EnsureSchema(ctx, mustParse(t, withVersion(schemaV1, 2))))
}

func testGateEnsureIncomplete(t *testing.T, e *env) {
	s, _ := e.store()
	ctx := t.Context()
	p := partition(t, s)
	a, b := key(p, "set-a"), key(p, "set-b")
	declareCheckpoint(t, s, a, gateNow)
	declareCheckpoint(t, s, b, gateNow)
	before := snapshot(t, s, p.ID)
	for _, decls := range [][]storage.CheckpointKey{nil, {b}} {
		err := s.EnsureSchemaWithCheckpoints(ctx, mustParse(t, schemaV1), decls)
		e := wantCode(t, err, ssp2.CodeStorageCheckpointIncomplete)
		var d storage.IncompleteDetails
		if jerr := json.Unmarshal(e.Details, &d); jerr != nil || len(d.Missing) == 0 || d.Missing[0].Name != "set-a" {
			t.Fatalf("details %s (%v), want set-a missing", e.Details, jerr)
		}
		unchanged(t, "a refused EnsureSchema", before, s, p.ID)
	}
	check(t, s.EnsureSchemaWithCheckpoints(ctx, mustParse(t, schemaV1), []storage.CheckpointKey{a, b}))
	// A declaration of another checkpoint, next to the pending ones, is
	// still incomplete — and its row rolls back with the refusal.
	err := s.EnsureSchemaWithCheckpoints(ctx, mustParse(t, schemaV1), []storage.CheckpointKey{a, key(p, "set-c")})
	wantCode(t, err, ssp2.CodeStorageCheckpointIncomplete)
	unchanged(t, "a refused EnsureSchema with a new declaration", before, s, p.ID)
}

func testGateEnsureRefusals(t *testing.T, e *env) {
	s, _ := e.store()
	ctx := t.Context()
	p := partition(t, s)
	check(t, s.EnsureSchema(ctx, mustParse(t, withVersion(schemaV1, 2))))
	// A version-3 checkpoint nobody will declare (left by another build).
	check(t, gateHooks(t, s).HookRawCheckpoint(ctx, storage.Checkpoint{
		CheckpointKey: storage.CheckpointKey{Partition: "elsewhere", Name: "theirs", SchemaVersion: 3},
		State:         storage.CheckpointDeclared, UpdatedAtMs: gateNow,
	}))
	before := snapshot(t, s, p.ID)
	catalog, err := hooks(t, s).HookCatalog(ctx)
	check(t, err)
	for _, tc := range []struct {
		name  string
		doc   string
		decls []storage.CheckpointKey
		code  ssp2.Code
	}{
		// A schema file older than the database.
		{"older schema", schemaV1, []storage.CheckpointKey{{Partition: p.ID, Name: "x", SchemaVersion: 1}}, ssp2.CodeStorageSchemaVersionNewer},
		// A bump whose declarations are malformed rolls the bump back.
		{"bad declaration", withVersion(schemaV1, 3), []storage.CheckpointKey{{Partition: p.ID, Name: "ok", SchemaVersion: 3}, {Partition: p.ID, Name: "", SchemaVersion: 3}}, ssp2.CodeStorageInvalidCheckpoint},
		{"declaration at another version", withVersion(schemaV1, 3), []storage.CheckpointKey{{Partition: p.ID, Name: "ok", SchemaVersion: 2}}, ssp2.CodeStorageInvalidCheckpoint},
		// The bump, its declared row and its raised fences are written,
		// then refused: an undeclared checkpoint at the new version. All
		// of it rolls back.
		{"bump with an undeclared checkpoint", withVersion(schemaV1, 3), []storage.CheckpointKey{{Partition: p.ID, Name: "mine", SchemaVersion: 3}}, ssp2.CodeStorageCheckpointIncomplete},
	} {
		err := s.EnsureSchemaWithCheckpoints(ctx, mustParse(t, tc.doc), tc.decls)
		if ssp2.CodeOf(err) != tc.code {
			t.Errorf("%s: error %v, want %s", tc.name, err, tc.code)
		}
		unchanged(t, tc.name, before, s, p.ID)
		after, err := hooks(t, s).HookCatalog(ctx)
		check(t, err)
		if after != catalog {
			t.Fatalf("%s changed the catalog", tc.name)
		}
	}
}
