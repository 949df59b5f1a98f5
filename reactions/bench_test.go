package reactions

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/storage"
)

// seed enqueues n reactions of type typ in partition p, 100 per
// transaction, without commit events (a runner started afterwards finds
// them with its first sweep).
func (e *env) seed(p, typ string, n int) {
	e.t.Helper()
	if _, err := e.store.PartitionTouch(e.ctx, p, time.Now().UnixMilli()); err != nil {
		e.t.Fatal(err)
	}
	for done := 0; done < n; {
		batch := min(n-done, storage.MaxReactionsPerCommit)
		ccid := fmt.Sprint("seed-", e.seq.Add(1))
		rs := make([]storage.ReactionNew, batch)
		for i := range rs {
			rs[i] = storage.ReactionNew{IdempotencyKey: storage.ReactionIdempotencyKey(p, "bench", ccid, fmt.Sprint(i)),
				Type: typ, Version: 1, Payload: json.RawMessage(`{"order":"o-1","amount":1250}`), MaxAttempts: 10}
		}
		err := e.store.WriteTx(e.ctx, p, func(tx storage.Tx) error {
			return tx.ReactionEnqueue(e.ctx, storage.ReactionEnqueueParams{SourceClientID: "bench", SourceClientCommitID: ccid,
				SourceCommitSeq: 1, CreatedAtMs: time.Now().UnixMilli(), Reactions: rs})
		})
		if err != nil {
			e.t.Fatal(err)
		}
		done += batch
	}
}

// runAll starts a runner with cfg on b.N seeded reactions of type typ and
// reports how fast it completes them.
func runAll(b *testing.B, e *env, typ string, cfg Config) {
	b.Helper()
	e.seed("bench", typ, b.N)
	b.ResetTimer()
	start := time.Now()
	r := e.runner(cfg)
	waitCompleted(b, r, b.N)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reactions/s")
}

// waitCompleted waits until the runner completed n reactions.
func waitCompleted(b *testing.B, r *Runner, n int) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for r.Stats().Completed.Load() < int64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("completed %d of %d", r.Stats().Completed.Load(), n)
		}
		<-t.C
	}
}

// BenchmarkClaimComplete is claim + complete with a Go handler that does
// nothing: what the runner and the store cost per reaction. Claims and
// completions go in batches.
func BenchmarkClaimComplete(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			runAll(b, newEnv(b, be), "noop", Config{Concurrency: 512, ClaimBatch: 256,
				Handlers: map[string]Handler{"noop": func(context.Context, storage.Reaction) error { return nil }}})
		})
	}
}

// BenchmarkNATSWorker runs reactions through 4 worker connections in one
// queue group, each answering at once.
func BenchmarkNATSWorker(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			e := newEnv(b, be)
			for range 4 {
				nc := e.conn()
				if _, err := nc.QueueSubscribe("syncreact.work.webhook", "workers", func(m *nats.Msg) {
					_ = m.Respond([]byte(`{"status":"completed"}`))
				}); err != nil {
					b.Fatal(err)
				}
				if err := nc.Flush(); err != nil {
					b.Fatal(err)
				}
			}
			runAll(b, e, "webhook", Config{Concurrency: 512, ClaimBatch: 256})
		})
	}
}

// BenchmarkCommitToHandler is the time from a push transaction's COMMIT
// to its reaction's handler starting, one commit at a time: the relay
// publishes the commit event, the runner's subscription wakes it, it
// claims and starts the handler.
func BenchmarkCommitToHandler(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			e := newEnv(b, be)
			started := make(chan time.Time, 1)
			e.runner(Config{Handlers: map[string]Handler{"t": func(context.Context, storage.Reaction) error {
				started <- time.Now()
				return nil
			}}})
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				e.commit("bench", plan{key: "k", typ: "t"})
				lat = append(lat, (<-started).Sub(e.committed))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
