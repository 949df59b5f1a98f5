package storagetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/syncnode/syncnode/internal/rusage"
	"github.com/syncnode/syncnode/storage"
)

// Benchmark measures a store on the paths that matter: single-change and
// 100-change pushes (each a full push transaction under the partition
// lock: locked idempotency re-check, row reads, upserts, commit append,
// result), pull windows, and bootstrap keyset scans. open returns a fresh
// store owned by b.
func Benchmark(b *testing.B, open func(b *testing.B) storage.Store) {
	b.Run("PushSingleChange", func(b *testing.B) { benchPush(b, open, 1) })
	b.Run("PushHundredChanges", func(b *testing.B) { benchPush(b, open, 100) })
	b.Run("PushSingleChangeParallel", func(b *testing.B) { benchPushParallel(b, open) })
	b.Run("CommitWindow", func(b *testing.B) { benchWindow(b, open) })
	b.Run("PushPullRound", func(b *testing.B) { benchRound(b, open) })
	b.Run("RowScan", func(b *testing.B) { benchScan(b, open) })
}

func benchStore(b *testing.B, open func(b *testing.B) storage.Store) storage.Store {
	b.Helper()
	s := open(b)
	if err := s.EnsureSchema(b.Context(), mustParse(b, schemaV1)); err != nil {
		b.Fatal(err)
	}
	return s
}

// benchRows builds n distinct task rows in project p1, owners 0..9.
func benchRows(b *testing.B, n int, prefix string) []storage.RowWrite {
	sc := mustParse(b, schemaV1)
	out := make([]storage.RowWrite, n)
	for i := range out {
		out[i] = task(b, sc, fmt.Sprintf("%s%06d", prefix, i), "p1", int64(i%10), "a title of some length")
	}
	return out
}

// pushTx is one push of rows as one commit.
func pushTx(ctx context.Context, s storage.Store, partition string, rows []storage.RowWrite, ccid string, changes []storage.Change) error {
	return s.WriteTx(ctx, partition, func(tx storage.Tx) error {
		if _, ok, err := tx.IdempotencyGet(ctx, "bench", ccid); err != nil || ok {
			return fmt.Errorf("re-check: %v %v", ok, err)
		}
		changes = changes[:0]
		for _, rw := range rows {
			if _, _, err := tx.RowGet(ctx, partition, "tasks", rw.RowID); err != nil {
				return err
			}
			v, err := tx.RowUpsert(ctx, "tasks", rw)
			if err != nil {
				return err
			}
			changes = append(changes, change(rw, "tasks", v))
		}
		seq, err := tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: 1, ActorID: "bench", ClientID: "bench",
			ClientCommitID: ccid, SchemaVersion: 1, Changes: changes})
		if err != nil {
			return err
		}
		_, err = tx.IdempotencyPut(ctx, storage.PushRecord{ClientID: "bench", ClientCommitID: ccid, Status: storage.PushApplied,
			CommitSeq: seq, Result: []byte("result-bytes-of-a-push"), CreatedAtMs: 1})
		return err
	})
}

func benchPush(b *testing.B, open func(b *testing.B) storage.Store, size int) {
	s := benchStore(b, open)
	p := partition(b, s)
	ctx := b.Context()
	rows := benchRows(b, 1000*size, "r")
	changes := make([]storage.Change, 0, size)
	i := 0
	for b.Loop() {
		start := (i * size) % len(rows)
		if err := pushTx(ctx, s, p.ID, rows[start:start+size], fmt.Sprint(i), changes); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
	b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "changes/s")
}

// benchPushParallel pushes single-change commits from several goroutines,
// each to its own partition.
func benchPushParallel(b *testing.B, open func(b *testing.B) storage.Store) {
	s := benchStore(b, open)
	rows := benchRows(b, 1000, "r")
	var next atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		p := partition(b, s)
		changes := make([]storage.Change, 0, 1)
		for i := 0; pb.Next(); i++ {
			n := next.Add(1)
			if err := pushTx(b.Context(), s, p.ID, rows[i%len(rows):i%len(rows)+1], fmt.Sprint(n), changes); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

func benchWindow(b *testing.B, open func(b *testing.B) storage.Store) {
	s := benchStore(b, open)
	p := partition(b, s)
	ctx := b.Context()
	// 2,000 commits of 10 changes each.
	rows := benchRows(b, 20_000, "w")
	if err := s.WriteTx(ctx, p.ID, func(tx storage.Tx) error {
		for c := range 2000 {
			changes := make([]storage.Change, 10)
			for j := range changes {
				changes[j] = change(rows[c*10+j], "tasks", 1)
			}
			if _, err := tx.CommitAppend(ctx, storage.CommitParams{Changes: changes, ActorID: "a", ClientID: "c", ClientCommitID: fmt.Sprint(c)}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	params := storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1"}}, Limit: 1000}
	total := 0
	i := 0
	for b.Loop() {
		params.AfterSeq = int64((i * 100) % 1900)
		i++
		if err := s.ReadTx(ctx, func(tx storage.ReadTx) error {
			w, err := tx.CommitWindow(ctx, params)
			for _, c := range w.Commits {
				total += len(c.Changes)
			}
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "changes/s")
}

// benchRound is one client's steady sync round as the store sees it: a
// single-change push, then the pull window after the previous round's
// commit (the one just pushed is its only match). cpu-ns/op is the
// process's CPU per round, which a shared machine's load disturbs less
// than the wall time.
func benchRound(b *testing.B, open func(b *testing.B) storage.Store) {
	s := benchStore(b, open)
	p := partition(b, s)
	ctx := b.Context()
	rows := benchRows(b, 1000, "r")
	changes := make([]storage.Change, 0, 1)
	params := storage.WindowParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1"}}, Limit: 100}
	var got int
	cpu := rusage.Self().CPU
	i := 0
	for b.Loop() {
		if err := pushTx(ctx, s, p.ID, rows[i%len(rows):i%len(rows)+1], fmt.Sprint(i), changes); err != nil {
			b.Fatal(err)
		}
		i++
		if err := s.ReadTx(ctx, func(tx storage.ReadTx) error {
			w, err := tx.CommitWindow(ctx, params)
			got += len(w.Commits)
			if len(w.Commits) > 0 {
				params.AfterSeq = w.Commits[len(w.Commits)-1].CommitSeq
			}
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((rusage.Self().CPU-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
	if got != b.N {
		b.Fatalf("pulled %d commits in %d rounds", got, b.N)
	}
}

func benchScan(b *testing.B, open func(b *testing.B) storage.Store) {
	s := benchStore(b, open)
	p := partition(b, s)
	ctx := b.Context()
	const n = 50_000
	rows := benchRows(b, n, "s")
	for start := 0; start < n; start += 5000 {
		if err := s.WriteTx(ctx, p.ID, func(tx storage.Tx) error {
			for _, rw := range rows[start : start+5000] {
				if _, err := tx.RowUpsert(ctx, "tasks", rw); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	params := storage.ScanParams{Partition: p.ID, Table: "tasks", Scopes: map[string][]string{"project": {"p1"}}, Limit: 1000}
	total := 0
	for b.Loop() {
		if err := s.ReadTx(ctx, func(tx storage.ReadTx) error {
			got, err := tx.RowScan(ctx, params)
			total += len(got)
			if len(got) < params.Limit {
				params.AfterRowID = ""
			} else {
				params.AfterRowID = got[len(got)-1].RowID
			}
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "rows/s")
}
