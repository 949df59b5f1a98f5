package storagetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

var adminTests = []test{
	{"RowListReadsEveryRowWithScopes", testRowList},
	{"RowListRefusals", testRowListRefusals},
	{"RowSeed", testRowSeed},
	{"RowSeedAllOrNothing", testRowSeedAllOrNothing},
	{"PartitionWipe", testPartitionWipe},
	{"PartitionWipeFromFenced", testPartitionWipeFrom},
	{"PruneLiteralZeros", testPruneLiteral},
	{"ClientListPages", testClientList},
}

func testClientList(t *testing.T, e *env) {
	s, _ := e.store()
	p, other := partition(t, s), partition(t, s)
	ctx := t.Context()
	ids := []string{"c2", "C1", "c10", "c1", "é"}
	for i, id := range ids {
		check(t, s.ClientPut(ctx, storage.Client{Partition: p.ID, ClientID: id, ActorID: "a" + id, WireVersion: 2, Cursor: int64(i), UpdatedAtMs: int64(100 + i),
			Subscriptions: json.RawMessage(`[{"id":"s"}]`)}))
	}
	check(t, s.ClientPut(ctx, storage.Client{Partition: other.ID, ClientID: "c0", ActorID: "x", WireVersion: 1}))
	want := slices.Clone(ids)
	slices.Sort(want) // bytewise
	for _, page := range []int{1, 2, 100} {
		var got []string
		after := ""
		for {
			cs, err := s.ClientList(ctx, storage.ClientListParams{Partition: p.ID, AfterClientID: after, Limit: page})
			check(t, err)
			for _, c := range cs {
				got = append(got, c.ClientID)
				if c.Partition != p.ID || c.ActorID != "a"+c.ClientID || string(c.Subscriptions) != `[{"id":"s"}]` || c.WireVersion != 2 {
					t.Fatalf("listed client %+v", c)
				}
			}
			if len(cs) < page {
				break
			}
			after = cs[len(cs)-1].ClientID
		}
		if !slices.Equal(got, want) {
			t.Fatalf("page %d: clients %q, want %q", page, got, want)
		}
	}
	cs, err := s.ClientList(ctx, storage.ClientListParams{Partition: "never-registered", Limit: 10})
	if err != nil || len(cs) != 0 {
		t.Fatalf("unregistered partition: %v, %v", cs, err)
	}
	for _, limit := range []int{0, -1, storage.MaxClientListLimit + 1} {
		_, err := s.ClientList(ctx, storage.ClientListParams{Partition: p.ID, Limit: limit})
		wantCode(t, err, ssp2.CodeStorageInvalidLimit)
	}
}

func listAll(t *testing.T, s storage.Store, partition, table string, page int) []storage.Row {
	t.Helper()
	var out []storage.Row
	after := ""
	for {
		rows, err := s.RowList(t.Context(), storage.RowListParams{Partition: partition, Table: table, AfterRowID: after, Limit: page})
		check(t, err)
		out = append(out, rows...)
		if len(rows) < page {
			return out
		}
		after = rows[len(rows)-1].RowID
	}
}

func testRowList(t *testing.T, e *env) {
	s, sc := e.store()
	p, other := partition(t, s), partition(t, s)
	ctx := t.Context()
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		for i, proj := range []string{"p2", "p1", "p3", "p1"} {
			if _, err := tx.RowUpsert(ctx, "tasks", task(t, sc, fmt.Sprintf("t%d", 4-i), proj, int64(i), "x")); err != nil {
				return err
			}
		}
		// A second write raises t4's version.
		_, err := tx.RowUpsert(ctx, "tasks", task(t, sc, "t4", "p2", 0, "y"))
		return err
	})
	writeTx(t, s, other.ID, func(tx storage.Tx) error {
		_, err := tx.RowUpsert(ctx, "tasks", task(t, sc, "t0", "p1", 9, "other"))
		return err
	})

	for _, page := range []int{1, 3, 100} {
		rows := listAll(t, s, p.ID, "tasks", page)
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.RowID)
		}
		if want := []string{"t1", "t2", "t3", "t4"}; !slices.Equal(ids, want) {
			t.Fatalf("page %d: ids = %v, want %v (ordered, no scope filter, one partition)", page, ids, want)
		}
		got := rows[3]
		if got.ServerVersion != 2 || got.Scopes["project"] != "p2" || got.Scopes["owner"] != "0" {
			t.Fatalf("page %d: t4 = version %d scopes %v", page, got.ServerVersion, got.Scopes)
		}
		vals, err := table(t, sc, "tasks").Codec.DecodeRow(got.Payload, nil)
		check(t, err)
		if string(vals[3].Bytes) != "y" {
			t.Fatalf("page %d: t4 payload title = %q", page, vals[3].Bytes)
		}
	}
	if rows := listAll(t, s, "nobody", "tasks", 10); len(rows) != 0 {
		t.Fatalf("unknown partition listed %d rows", len(rows))
	}
}

func testRowListRefusals(t *testing.T, e *env) {
	s, _ := e.store()
	ctx := t.Context()
	for _, limit := range []int{0, -1, storage.MaxScanLimit + 1} {
		_, err := s.RowList(ctx, storage.RowListParams{Partition: "p", Table: "tasks", Limit: limit})
		wantCode(t, err, ssp2.CodeStorageInvalidLimit)
	}
	_, err := s.RowList(ctx, storage.RowListParams{Partition: "p", Table: "nope", Limit: 1})
	wantCode(t, err, ssp2.CodeUnknownTable)
}

func testRowSeed(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	const n = 2500
	err := s.RowSeed(ctx, storage.SeedParams{Partition: p.ID, Table: "tasks", Count: n, Row: func(i int, w *storage.RowWrite) error {
		*w = task(t, sc, fmt.Sprintf("s%05d", i), fmt.Sprintf("p%d", i%3), int64(i), "seeded")
		return nil
	}})
	check(t, err)

	rows := listAll(t, s, p.ID, "tasks", 1000)
	if len(rows) != n {
		t.Fatalf("seeded %d rows, want %d", len(rows), n)
	}
	for i, r := range rows {
		if r.RowID != fmt.Sprintf("s%05d", i) || r.ServerVersion != 1 || r.Scopes["project"] != fmt.Sprintf("p%d", i%3) {
			t.Fatalf("row %d = %s version %d scopes %v", i, r.RowID, r.ServerVersion, r.Scopes)
		}
	}
	// Seeded rows serve scans (typed scope columns) and writes like any
	// other, and no commit was written.
	err = s.ReadTx(ctx, func(tx storage.ReadTx) error {
		got, err := tx.RowScan(ctx, storage.ScanParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1"}}, Limit: n})
		if err == nil && len(got) != n/3 {
			err = fmt.Errorf("scan of p1 found %d rows, want %d", len(got), n/3)
		}
		return err
	})
	check(t, err)
	seq, err := s.CommitMaxSeq(ctx, p.ID)
	check(t, err)
	commits, changes, index, err := hooks(t, s).HookCountLog(ctx, p.ID)
	check(t, err)
	if seq != 0 || commits+changes+index != 0 {
		t.Fatalf("seed wrote the log: max seq %d, %d commits, %d changes, %d index rows", seq, commits, changes, index)
	}
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		v, err := tx.RowUpsert(ctx, "tasks", task(t, sc, "s00007", "p1", 7, "edited"))
		if err == nil && v != 2 {
			err = fmt.Errorf("update of a seeded row got version %d, want 2", v)
		}
		return err
	})

	// Refusals.
	err = s.RowSeed(ctx, storage.SeedParams{Partition: "nobody", Table: "tasks", Count: 1, Row: func(i int, w *storage.RowWrite) error {
		*w = task(t, sc, "x", "p1", 1, nil)
		return nil
	}})
	wantCode(t, err, ssp2.CodeStoragePartitionUnregistered)
	err = s.RowSeed(ctx, storage.SeedParams{Partition: p.ID, Table: "tasks", Count: -1})
	wantCode(t, err, ssp2.CodeStorageInvalidLimit)
	err = s.RowSeed(ctx, storage.SeedParams{Partition: p.ID, Table: "nope", Count: 1})
	wantCode(t, err, ssp2.CodeUnknownTable)
	check(t, s.RowSeed(ctx, storage.SeedParams{Partition: p.ID, Table: "tasks", Count: 0}))
}

func testRowSeedAllOrNothing(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		_, err := tx.RowUpsert(ctx, "tasks", task(t, sc, "b", "p1", 1, "kept"))
		return err
	})
	// "b" exists: the unique violation fails the whole seed.
	err := s.RowSeed(ctx, storage.SeedParams{Partition: p.ID, Table: "tasks", Count: 3, Row: func(i int, w *storage.RowWrite) error {
		*w = task(t, sc, string(rune('a'+i)), "p1", 1, "seeded")
		return nil
	}})
	var ce *storage.ConstraintError
	if !errors.As(err, &ce) || ce.Kind != storage.ConstraintUnique {
		t.Fatalf("seed over an existing row: %v, want a unique *ConstraintError", err)
	}
	// A failing generator fails it too.
	boom := errors.New("generator failed")
	err = s.RowSeed(ctx, storage.SeedParams{Partition: p.ID, Table: "tasks", Count: 3, Row: func(i int, w *storage.RowWrite) error {
		if i == 2 {
			return boom
		}
		*w = task(t, sc, fmt.Sprintf("g%d", i), "p1", 1, nil)
		return nil
	}})
	if !errors.Is(err, boom) {
		t.Fatalf("seed with a failing generator: %v, want %v", err, boom)
	}
	rows := listAll(t, s, p.ID, "tasks", 10)
	if len(rows) != 1 || rows[0].RowID != "b" || rows[0].ServerVersion != 1 {
		t.Fatalf("after failed seeds: %+v, want only b at version 1", rows)
	}
}

func testPartitionWipe(t *testing.T, e *env) {
	s, sc := e.store()
	p, other := partition(t, s), partition(t, s)
	ctx := t.Context()
	fill := func(part storage.Partition) {
		writeTx(t, s, part.ID, func(tx storage.Tx) error {
			rw := task(t, sc, "t1", "p1", 1, "x")
			if _, err := tx.RowUpsert(ctx, "tasks", rw); err != nil {
				return err
			}
			seq, err := tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: 1, ActorID: "a", ClientID: "c", ClientCommitID: "1",
				SchemaVersion: 1, Changes: []storage.Change{change(rw, "tasks", 1)}})
			if err != nil {
				return err
			}
			if _, err = tx.IdempotencyPut(ctx, storage.PushRecord{ClientID: "c", ClientCommitID: "1", Status: storage.PushApplied, CommitSeq: seq, Result: []byte{1}, CreatedAtMs: 1}); err != nil {
				return err
			}
			return tx.ReactionEnqueue(ctx, storage.ReactionEnqueueParams{SourceClientID: "c", SourceClientCommitID: "1", SourceCommitSeq: seq,
				CreatedAtMs: 1, Reactions: []storage.ReactionNew{rxNew(part.ID, "1", "k", "t", 1)}})
		})
		check(t, s.ClientPut(ctx, storage.Client{Partition: part.ID, ClientID: "c", ActorID: "a", WireVersion: 2, Cursor: 1, UpdatedAtMs: 1}))
		publish(t, s, segPub(int(partitionCounter.Load()), part.ID, part.LogEpoch, "d", 1000))
	}
	fill(p)
	fill(other)

	check(t, s.PartitionWipe(ctx, p.ID))
	_, err := s.PartitionGet(ctx, p.ID)
	wantCode(t, err, ssp2.CodeStoragePartitionUnregistered)
	if rows := listAll(t, s, p.ID, "tasks", 10); len(rows) != 0 {
		t.Fatalf("wiped partition still has %d rows", len(rows))
	}
	commits, changes, index, err := hooks(t, s).HookCountLog(ctx, p.ID)
	check(t, err)
	if commits+changes+index != 0 {
		t.Fatalf("wiped partition still has %d commits, %d changes, %d index rows", commits, changes, index)
	}
	if _, ok, err := s.IdempotencyGet(ctx, p.ID, "c", "1"); err != nil || ok {
		t.Fatalf("wiped partition's push result: %v, %v", ok, err)
	}
	if _, ok, err := s.ClientGet(ctx, p.ID, "c"); err != nil || ok {
		t.Fatalf("wiped partition's client record: %v, %v", ok, err)
	}
	if rs, err := s.ReactionList(ctx, storage.ReactionListParams{AllPartitions: true, Limit: 10}); err != nil || len(rs) != 1 || rs[0].Partition != other.ID {
		t.Fatalf("reactions after the wipe = %+v, %v; want only the other partition's", rs, err)
	}
	stats, err := s.SegmentStats(ctx)
	check(t, err)
	if stats.Publications != 1 {
		t.Fatalf("%d publications left, want the other partition's 1", stats.Publications)
	}

	// A fresh touch registers the partition again with a new epoch and an
	// empty log.
	np, err := s.PartitionTouch(ctx, p.ID, 2_000_000)
	check(t, err)
	if np.LogEpoch == p.LogEpoch || np.MaxCommitSeq != 0 || np.HorizonSeq != 0 {
		t.Fatalf("re-registered partition = %+v (old epoch %s)", np, p.LogEpoch)
	}

	// The other partition is untouched.
	if rows := listAll(t, s, other.ID, "tasks", 10); len(rows) != 1 {
		t.Fatalf("other partition has %d rows, want 1", len(rows))
	}
	if seq, err := s.CommitMaxSeq(ctx, other.ID); err != nil || seq != 1 {
		t.Fatalf("other partition max seq = %d, %v", seq, err)
	}
	if _, ok, err := s.ClientGet(ctx, other.ID, "c"); err != nil || !ok {
		t.Fatalf("other partition's client record: %v, %v", ok, err)
	}

	// Wiping an unregistered partition does nothing.
	check(t, s.PartitionWipe(ctx, "nobody"))
}

// testPartitionWipeFrom: the fenced wipe refuses a partition whose
// epoch is not the expected one or whose max seq is below the expected,
// leaving everything, and wipes one that passes.
func testPartitionWipeFrom(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	for i := 1; i <= 2; i++ {
		writeTx(t, s, p.ID, func(tx storage.Tx) error {
			rw := task(t, sc, fmt.Sprintf("t%d", i), "p1", 1, "x")
			if _, err := tx.RowUpsert(ctx, "tasks", rw); err != nil {
				return err
			}
			_, err := tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: 1, ActorID: "a", ClientID: "c", ClientCommitID: fmt.Sprint(i),
				SchemaVersion: 1, Changes: []storage.Change{change(rw, "tasks", 1)}})
			return err
		})
	}
	for _, f := range []storage.WipeFence{{Epoch: p.LogEpoch + "x", MinSeq: 0}, {Epoch: p.LogEpoch, MinSeq: 3}, {Epoch: "", MinSeq: 0}} {
		wantCode(t, s.PartitionWipeFrom(ctx, p.ID, f.Epoch, f.MinSeq), ssp2.CodeStoragePruneEpochMismatch)
		got, err := s.PartitionGet(ctx, p.ID)
		check(t, err)
		if got.LogEpoch != p.LogEpoch || got.MaxCommitSeq != 2 {
			t.Fatalf("after a refused wipe from %+v: %+v", f, got)
		}
		if rows := listAll(t, s, p.ID, "tasks", 10); len(rows) != 2 {
			t.Fatalf("after a refused wipe from %+v: %d rows, want 2", f, len(rows))
		}
	}
	check(t, s.PartitionWipeFrom(ctx, p.ID, p.LogEpoch, 2))
	_, err := s.PartitionGet(ctx, p.ID)
	wantCode(t, err, ssp2.CodeStoragePartitionUnregistered)
	if rows := listAll(t, s, p.ID, "tasks", 10); len(rows) != 0 {
		t.Fatalf("wiped partition still has %d rows", len(rows))
	}
	// An unregistered partition is epoch "" at seq 0.
	check(t, s.PartitionWipeFrom(ctx, p.ID, "", 0))
	wantCode(t, s.PartitionWipeFrom(ctx, p.ID, p.LogEpoch, 0), ssp2.CodeStoragePruneEpochMismatch)
}

// testPruneLiteral: with Literal, zero windows and counts are zero, so a
// host can prune the whole log; appends continue the sequence.
func testPruneLiteral(t *testing.T, e *env) {
	s, sc := e.store()
	p := pruneLog(t, s, sc, 5, func(int) int64 { return nowMs - 10 })
	// An active client at cursor 2 holds the horizon without Literal's
	// zero window only if it is active "now"; here it was updated at
	// nowMs-1, outside a zero window.
	putClient(t, s, p.ID, "laggard", 2, nowMs-1)

	r := prune(t, s, storage.PruneParams{Partition: p.ID, LogEpoch: p.LogEpoch, ThroughSeq: 5})
	if r.HorizonSeq != 0 {
		t.Fatalf("zero params without Literal pruned to %d: the defaults keep 1000 commits", r.HorizonSeq)
	}
	r = prune(t, s, storage.PruneParams{Partition: p.ID, LogEpoch: p.LogEpoch, ThroughSeq: 5, Literal: true})
	if r.HorizonSeq != 5 || r.RemovedCommits != 5 {
		t.Fatalf("literal zeros: %+v, want the whole log (horizon 5, 5 removed)", r)
	}
	got, err := s.PartitionGet(t.Context(), p.ID)
	check(t, err)
	if got.MaxCommitSeq != 5 || got.HorizonSeq != 5 {
		t.Fatalf("after pruning everything: max %d horizon %d, want 5 and 5", got.MaxCommitSeq, got.HorizonSeq)
	}
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		rw := task(t, sc, "next", "p1", 1, nil)
		seq, err := tx.CommitAppend(t.Context(), storage.CommitParams{CreatedAtMs: nowMs, ActorID: "a", ClientID: "c",
			ClientCommitID: "next", SchemaVersion: 1, Changes: []storage.Change{change(rw, "tasks", 1)}})
		if err == nil && seq != 6 {
			err = fmt.Errorf("append after a full prune got seq %d, want 6", seq)
		}
		return err
	})

	// A literal zero window still counts a client updated at the prune's
	// own instant as active.
	q := pruneLog(t, s, sc, 4, func(int) int64 { return nowMs - 10 })
	putClient(t, s, q.ID, "now", 1, nowMs)
	r = prune(t, s, storage.PruneParams{Partition: q.ID, LogEpoch: q.LogEpoch, ThroughSeq: 4, Literal: true, AgeForceMs: day})
	if r.HorizonSeq != 1 {
		t.Fatalf("client active at now: horizon %d, want its cursor 1", r.HorizonSeq)
	}
}
