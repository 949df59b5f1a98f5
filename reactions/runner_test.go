package reactions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/storage"
)

const wait = 20 * time.Second

func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// The runner only learns of the commit through its commit event on the
// bus (its sweep is an hour away), runs the handler with the reaction,
// completes it and publishes enqueued-to-completed events.
func TestHandlerRunsOnCommitEvent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		ev := e.events()
		got := make(chan storage.Reaction, 1)
		r := e.runner(Config{Node: "n1", Handlers: map[string]Handler{"email.send": func(_ context.Context, rx storage.Reaction) error {
			got <- rx
			return nil
		}}})
		keys := e.commit("acme", plan{key: "mail", typ: "email.send", payload: `{"to":"a@b"}`, maxAttempts: 3})
		var rx storage.Reaction
		select {
		case rx = <-got:
		case <-time.After(wait):
			t.Fatal("the handler never ran")
		}
		if rx.ReactionKey != keys[0] || rx.Type != "email.send" || string(rx.Payload) != `{"to":"a@b"}` || rx.Attempts != 1 ||
			rx.MaxAttempts != 3 || rx.SourceClientID != "client" || rx.Status != storage.ReactionLeased || !strings.HasPrefix(rx.LeaseOwner, "n1:") {
			t.Fatalf("handler got %+v", rx)
		}
		poll.Until(t, wait, "completed", func() bool { return e.status(keys[0]) == storage.ReactionCompleted })
		poll.Until(t, wait, "completed event", func() bool { return len(ev.of(bus.ReactionCompleted, keys[0])) == 1 })
		c := ev.of(bus.ReactionCompleted, keys[0])[0]
		if c.header.Get(bus.HeaderType) != "dev.syncnode.reaction.completed.v1" || c.body.Attempt != 1 || c.body.Type != "email.send" || c.body.Partition != "acme" {
			t.Fatalf("completed event %+v", c)
		}
		if st := r.Stats(); st.Completed.Load() != 1 || st.Claimed.Load() != 1 || st.LostLeases.Load() != 0 {
			t.Fatalf("stats claimed %d completed %d lost %d", st.Claimed.Load(), st.Completed.Load(), st.LostLeases.Load())
		}
	})
}

// Work left in the table (a previous process died after COMMIT) runs when
// a runner starts, without a new commit.
// Commits one after the other, each made as soon as the previous
// reaction's handler started (so its event tends to arrive while the
// claim that found the previous one is still finishing): every reaction
// runs on its commit event, none waits for the sweep (an hour away).
func TestNoLostWakeups(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		started := make(chan string, 1)
		e.runner(Config{Handlers: map[string]Handler{"t": func(_ context.Context, r storage.Reaction) error {
			started <- r.IdempotencyKey
			return nil
		}}})
		for i := range 300 {
			k := e.commit("p", plan{key: "k", typ: "t"})[0]
			select {
			case got := <-started:
				if got != k.IdempotencyKey {
					t.Fatalf("commit %d: handler ran %s, want %s", i, got, k.IdempotencyKey)
				}
			case <-time.After(wait):
				t.Fatalf("commit %d: its reaction never ran (a lost wake-up)", i)
			}
		}
	})
}

func TestStartRunsBacklog(t *testing.T) {
	e := newEnv(t, backends[0])
	keys := e.commit("p", plan{key: "a", typ: "t"}, plan{key: "b", typ: "t"})
	var n atomic.Int64
	e.runner(Config{Handlers: map[string]Handler{"t": func(context.Context, storage.Reaction) error { n.Add(1); return nil }}})
	for _, k := range keys {
		poll.Until(t, wait, "backlog completed", func() bool { return e.status(k) == storage.ReactionCompleted })
	}
	if n.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", n.Load())
	}
}

func TestRetryThenDeadLetter(t *testing.T) {
	e := newEnv(t, backends[0])
	ev := e.events()
	var calls atomic.Int64
	r := e.runner(Config{InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Handlers: map[string]Handler{"t": func(context.Context, storage.Reaction) error {
			calls.Add(1)
			return Retry("smtp.unavailable", 0, map[string]int{"status": 503})
		}}})
	k := e.commit("p", plan{key: "k", typ: "t", maxAttempts: 3})[0]
	poll.Until(t, wait, "dead letter", func() bool { return e.status(k) == storage.ReactionDeadLetter })
	got := e.get(k)
	if got.Attempts != 3 || calls.Load() != 3 || got.Failure == nil || got.Failure.Code != "smtp.unavailable" || string(got.Failure.Details) != `{"status":503}` {
		t.Fatalf("dead letter %+v (failure %+v) after %d calls", got, got.Failure, calls.Load())
	}
	poll.Until(t, wait, "events", func() bool {
		return len(ev.of(bus.ReactionFailed, k)) == 2 && len(ev.of(bus.ReactionDeadLettered, k)) == 1
	})
	for i, f := range ev.of(bus.ReactionFailed, k) {
		if f.body.Code != "smtp.unavailable" || f.body.RetryAtMs <= f.body.AtMs {
			t.Fatalf("failed event %d: %+v", i, f.body)
		}
	}
	if st := r.Stats(); st.Failed.Load() != 2 || st.DeadLettered.Load() != 1 {
		t.Fatalf("stats failed %d dead %d", st.Failed.Load(), st.DeadLettered.Load())
	}
}

func TestFailureKinds(t *testing.T) {
	e := newEnv(t, backends[0])
	e.runner(Config{InitialBackoff: time.Hour, MaxBackoff: time.Hour, Handlers: map[string]Handler{
		"permanent": func(context.Context, storage.Reaction) error { return Permanent("bad.version", nil) },
		"plain":     func(context.Context, storage.Reaction) error { return errors.New("connection refused: secret=hunter2") },
		"panics":    func(context.Context, storage.Reaction) error { panic("boom") },
		"baddetail": func(context.Context, storage.Reaction) error { return Retry("x", 0, []int{1}) },
		"badcode":   func(context.Context, storage.Reaction) error { return Retry("no spaces", 0, nil) },
		"later":     func(context.Context, storage.Reaction) error { return Retry("busy", 90*time.Minute, nil) },
	}})
	keys := e.commit("p", plan{key: "a", typ: "permanent"}, plan{key: "b", typ: "plain"}, plan{key: "c", typ: "panics"},
		plan{key: "d", typ: "baddetail"}, plan{key: "e", typ: "badcode"}, plan{key: "f", typ: "later"})
	want := []struct {
		status storage.ReactionStatus
		code   string
	}{
		{storage.ReactionDeadLetter, "bad.version"},
		{storage.ReactionPending, CodeHandlerFailed},
		{storage.ReactionPending, CodeHandlerPanicked},
		{storage.ReactionPending, CodeInvalidFailure},
		{storage.ReactionPending, CodeInvalidFailure},
		{storage.ReactionPending, "busy"},
	}
	for i, k := range keys {
		poll.Until(t, wait, "failure recorded", func() bool { return e.get(k).Failure != nil })
		got := e.get(k)
		if got.Status != want[i].status || got.Failure.Code != want[i].code || got.Failure.Details != nil {
			t.Errorf("%s: %s with failure %+v, want %s with %s", k.IdempotencyKey, got.Status, got.Failure, want[i].status, want[i].code)
		}
		delay := time.Duration(got.AvailableAtMs-got.Failure.AtMs) * time.Millisecond
		if i == 5 && delay != 90*time.Minute || i > 0 && i < 5 && delay != time.Hour {
			t.Errorf("%s: retry after %s", k.IdempotencyKey, delay)
		}
	}
}

func TestBackoff(t *testing.T) {
	for attempt, want := range map[int32]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 9: 256 * time.Second, 10: 5 * time.Minute, 60: 5 * time.Minute} {
		if got := Backoff(time.Second, 5*time.Minute, attempt); got != want {
			t.Errorf("Backoff(attempt %d) = %s, want %s", attempt, got, want)
		}
	}
}

// A handler slower than its lease keeps the lease by heartbeats: another
// runner that sweeps all the time never gets the reaction, and it runs
// once, in one attempt.
func TestHeartbeatKeepsLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		release := make(chan struct{})
		started := make(chan struct{}, 1)
		var runs atomic.Int64
		a := e.runner(Config{Node: "a", Lease: 300 * time.Millisecond, Heartbeat: 50 * time.Millisecond,
			Handlers: map[string]Handler{"t": func(ctx context.Context, _ storage.Reaction) error {
				runs.Add(1)
				started <- struct{}{}
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}}})
		k := e.commit("p", plan{key: "k", typ: "t"})[0]
		<-started
		var stolen atomic.Int64
		thief := e.runner(Config{Node: "b", Conn: e.conn(), SweepInterval: 20 * time.Millisecond,
			Handlers: map[string]Handler{"t": func(context.Context, storage.Reaction) error { stolen.Add(1); return nil }}})
		// Watch the lease move forward past several lease lengths.
		first := e.get(k).LeaseExpiresAtMs
		poll.Until(t, wait, "the lease extended past 4 lease lengths", func() bool {
			return e.get(k).LeaseExpiresAtMs > first+4*300
		})
		close(release)
		poll.Until(t, wait, "completed", func() bool { return e.status(k) == storage.ReactionCompleted })
		if stolen.Load() != 0 || thief.Stats().Claimed.Load() != 0 || a.Stats().LostLeases.Load() != 0 || runs.Load() != 1 || e.get(k).Attempts != 1 {
			t.Fatalf("the heartbeated reaction was taken: stolen %d, b claimed %d, a lost %d, ran %d times, attempts %d",
				stolen.Load(), thief.Stats().Claimed.Load(), a.Stats().LostLeases.Load(), runs.Load(), e.get(k).Attempts)
		}
	})
}

// slowCompletions is a real store whose completions wait for release.
type slowCompletions struct {
	storage.Store
	entered chan struct{}
	release chan struct{}
}

func (s *slowCompletions) ReactionComplete(ctx context.Context, p storage.ReactionCompleteParams) ([]bool, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	return s.Store.ReactionComplete(ctx, p)
}

// After the handler succeeded, the lease is still heartbeated until the
// completion is recorded: a completion held up by a slow store longer
// than the lease does not let another runner run the reaction again.
func TestHeartbeatUntilCompletionRecorded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		st := &slowCompletions{Store: e.store, entered: make(chan struct{}, 1), release: make(chan struct{})}
		var runs atomic.Int64
		h := func(context.Context, storage.Reaction) error { runs.Add(1); return nil }
		a := e.runner(Config{Node: "a", Store: st, Lease: 300 * time.Millisecond, Heartbeat: 50 * time.Millisecond, Handlers: map[string]Handler{"t": h}})
		var once sync.Once
		open := func() { once.Do(func() { close(st.release) }) }
		t.Cleanup(open) // before the runner's Stop, which waits for the completion
		k := e.commit("p", plan{key: "k", typ: "t"})[0]
		select {
		case <-st.entered:
		case <-time.After(wait):
			t.Fatal("the completion was never recorded")
		}
		thief := e.runner(Config{Node: "b", Conn: e.conn(), SweepInterval: 20 * time.Millisecond, Handlers: map[string]Handler{"t": h}})
		first := e.get(k).LeaseExpiresAtMs
		poll.Until(t, wait, "the lease extended past 4 lease lengths while the completion waits", func() bool {
			return e.get(k).LeaseExpiresAtMs > first+4*300
		})
		open()
		poll.Until(t, wait, "completed", func() bool { return a.Stats().Completed.Load() == 1 })
		if e.status(k) != storage.ReactionCompleted || runs.Load() != 1 || thief.Stats().Claimed.Load() != 0 || a.Stats().LostLeases.Load() != 0 || a.Stats().Completed.Load() != 1 {
			t.Fatalf("ran %d times, b claimed %d, a lost %d, a completed %d", runs.Load(), thief.Stats().Claimed.Load(),
				a.Stats().LostLeases.Load(), a.Stats().Completed.Load())
		}
	})
}

// When the lease is gone (another owner reclaimed it), the heartbeat
// cancels the handler and its outcome is not recorded.
func TestLostLeaseCancelsHandler(t *testing.T) {
	e := newEnv(t, backends[0])
	started := make(chan storage.Reaction, 1)
	cancelled := make(chan struct{})
	r := e.runner(Config{Lease: 10 * time.Second, Heartbeat: 30 * time.Millisecond,
		Handlers: map[string]Handler{"t": func(ctx context.Context, rx storage.Reaction) error {
			started <- rx
			<-ctx.Done()
			close(cancelled)
			return nil // a late success must not count
		}}})
	k := e.commit("p", plan{key: "k", typ: "t"})[0]
	<-started
	// The thief claims at a time past any expiry the runner's heartbeats
	// can have set by now (each extends to its own now + Lease): a claim at
	// the first expiry loses the race to a heartbeat on a loaded machine.
	res, err := e.store.ReactionClaim(e.ctx, storage.ReactionClaimParams{Partition: "p", Owner: "thief", NowMs: time.Now().Add(time.Hour).UnixMilli(), LeaseMs: 60_000, Limit: 1})
	if err != nil || len(res.Claimed) != 1 {
		t.Fatalf("steal: %+v, %v", res, err)
	}
	select {
	case <-cancelled:
	case <-time.After(wait):
		t.Fatal("the handler was not cancelled")
	}
	poll.Until(t, wait, "lost lease counted", func() bool { return r.Stats().LostLeases.Load() == 1 })
	if got := e.get(k); got.Status != storage.ReactionLeased || got.LeaseOwner != "thief" || r.Stats().Completed.Load() != 0 {
		t.Fatalf("after losing the lease: %+v, completed %d", got, r.Stats().Completed.Load())
	}
}

// worker subscribes a queue-group worker on its own connection that
// answers with reply (nil: no answer).
func (e *env) worker(subject string, reply func(m *nats.Msg) []byte) *nats.Subscription {
	e.t.Helper()
	nc := e.conn()
	sub, err := nc.QueueSubscribe(subject, "workers", func(m *nats.Msg) {
		if b := reply(m); b != nil {
			_ = m.Respond(b)
		}
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	return sub
}

func TestNATSWorker(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		reqs := make(chan *nats.Msg, 10)
		e.worker("syncreact.work.webhook.>", func(m *nats.Msg) []byte {
			reqs <- m
			var w WorkRequest
			if err := json.Unmarshal(m.Data, &w); err != nil {
				return []byte("garbage")
			}
			switch w.Type {
			case "webhook.ok":
				return []byte{}
			case "webhook.fail":
				return []byte(`{"status":"failed","code":"http.502","retryAfterMs":3600000,"details":{"status":502}}`)
			case "webhook.permanent":
				return []byte(`{"status":"failed","code":"http.410","permanent":true}`)
			case "webhook.at":
				return fmt.Appendf(nil, `{"status":"failed","code":"later","retryAtMs":%d}`, w.CreatedAtMs+7_200_000)
			}
			return []byte(`{"status":"done"}`)
		})
		e.runner(Config{Handlers: map[string]Handler{"local": func(context.Context, storage.Reaction) error { return nil }}})
		keys := e.commit("acme", plan{key: "ok", typ: "webhook.ok", payload: `{"url":"https://x"}`}, plan{key: "fail", typ: "webhook.fail"},
			plan{key: "perm", typ: "webhook.permanent"}, plan{key: "at", typ: "webhook.at"}, plan{key: "bad", typ: "webhook.bad"})
		poll.Until(t, wait, "ok completed", func() bool { return e.status(keys[0]) == storage.ReactionCompleted })
		for _, k := range keys[1:] {
			poll.Until(t, wait, "failure recorded", func() bool { return e.get(k).Failure != nil })
		}
		if f := e.get(keys[1]); f.Status != storage.ReactionPending || f.Failure.Code != "http.502" || string(f.Failure.Details) != `{"status":502}` ||
			f.AvailableAtMs-f.Failure.AtMs != 3_600_000 {
			t.Errorf("failed reply: %+v %+v", f, f.Failure)
		}
		if f := e.get(keys[2]); f.Status != storage.ReactionDeadLetter || f.Failure.Code != "http.410" {
			t.Errorf("permanent reply: %+v %+v", f, f.Failure)
		}
		if f := e.get(keys[3]); f.Status != storage.ReactionPending || f.AvailableAtMs != f.CreatedAtMs+7_200_000 {
			t.Errorf("retryAtMs reply: %+v", f)
		}
		if f := e.get(keys[4]); f.Status != storage.ReactionPending || f.Failure.Code != CodeBadReply {
			t.Errorf("bad reply: %+v %+v", f, f.Failure)
		}
		// The request carries the reaction and its idempotency key.
		var m *nats.Msg
		for len(reqs) > 0 {
			if x := <-reqs; strings.HasSuffix(x.Subject, ".ok") {
				m = x
			}
		}
		if m == nil {
			t.Fatal("no request for webhook.ok seen")
		}
		var w WorkRequest
		if err := json.Unmarshal(m.Data, &w); err != nil {
			t.Fatal(err)
		}
		if m.Subject != "syncreact.work.webhook.ok" || m.Header.Get(bus.HeaderIdempotencyKey) != keys[0].IdempotencyKey ||
			m.Header.Get(bus.HeaderReactionAttempt) != "1" || w.IdempotencyKey != keys[0].IdempotencyKey || w.Partition != "acme" ||
			string(w.Payload) != `{"url":"https://x"}` || w.Attempt != 1 || w.DeadlineMs == 0 {
			t.Fatalf("request %s %v %s", m.Subject, m.Header, m.Data)
		}
	})
}

func TestParseReply(t *testing.T) {
	at := time.UnixMilli(1000)
	for body, want := range map[string]string{
		``:                                 "",
		` `:                                "",
		`{"status":"completed"}`:           "",
		`{"status":"failed","code":"a.b"}`: "a.b",
		`{"status":"failed","code":"a b"}`: CodeInvalidFailure,
		`{"status":"failed","code":"a","details":[1]}`:                  CodeInvalidFailure,
		`{"status":"failed","code":"a","retryAfterMs":1,"retryAtMs":2}`: CodeBadReply,
		`{"status":"failed","code":"a","retryAfterMs":-1}`:              CodeBadReply,
		`{"status":"completed","code":"a"}`:                             CodeBadReply,
		`{"status":"ok"}`:                                               CodeBadReply,
		`{"status":"completed","extra":1}`:                              CodeBadReply,
		`{"status":"completed"} {}`:                                     CodeBadReply,
		`ok`:                                                            CodeBadReply,
	} {
		completed, o := parseReply([]byte(body), at)
		if got := o.failure.Code; completed != (want == "") || got != want {
			t.Errorf("reply %q: completed %v code %q, want code %q", body, completed, got, want)
		}
	}
}

func TestNoWorker(t *testing.T) {
	e := newEnv(t, backends[0])
	e.runner(Config{InitialBackoff: time.Hour, MaxBackoff: time.Hour})
	k := e.commit("p", plan{key: "k", typ: "nobody.listens"})[0]
	poll.Until(t, wait, "failure recorded", func() bool { return e.get(k).Failure != nil })
	if f := e.get(k); f.Status != storage.ReactionPending || f.Failure.Code != CodeNoWorker || f.Attempts != 1 {
		t.Fatalf("no worker: %+v %+v", f, f.Failure)
	}
}

// A worker that takes the request and dies before replying: the attempt
// times out at the lease end, and the retry goes to another worker.
func TestWorkerCrashRetriedByAnother(t *testing.T) {
	e := newEnv(t, backends[0])
	var crashed *nats.Subscription
	var first atomic.Int64
	crashed = e.worker("syncreact.work.job", func(*nats.Msg) []byte {
		first.Add(1)
		_ = crashed.Unsubscribe() // gone without a word
		return nil
	})
	e.runner(Config{Lease: 500 * time.Millisecond, Heartbeat: 100 * time.Millisecond, InitialBackoff: 10 * time.Millisecond})
	k := e.commit("p", plan{key: "k", typ: "job"})[0]
	poll.Until(t, wait, "the first worker took it", func() bool { return first.Load() == 1 })
	var second atomic.Int64
	e.worker("syncreact.work.job", func(*nats.Msg) []byte { second.Add(1); return []byte(`{"status":"completed"}`) })
	poll.Until(t, wait, "completed", func() bool { return e.status(k) == storage.ReactionCompleted })
	got := e.get(k)
	if got.Attempts != 2 || got.Failure == nil || got.Failure.Code != CodeWorkerTimeout || first.Load() != 1 || second.Load() != 1 {
		t.Fatalf("after the crash: %+v (failure %+v), first %d second %d", got, got.Failure, first.Load(), second.Load())
	}
}

// Several runners on one database share the work without running a
// reaction twice.
func TestRunnersClaimDisjoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		var mu sync.Mutex
		runs := map[string]int{}
		handler := func(_ context.Context, rx storage.Reaction) error {
			mu.Lock()
			runs[rx.IdempotencyKey]++
			mu.Unlock()
			return nil
		}
		var runners []*Runner
		for i := range 3 {
			runners = append(runners, e.runner(Config{Node: fmt.Sprint("n", i), Conn: e.conn(), Concurrency: 8, ClaimBatch: 4,
				Handlers: map[string]Handler{"t": handler}}))
		}
		var keys []storage.ReactionKey
		for i := range 30 {
			var ps []plan
			for j := range 5 {
				ps = append(ps, plan{key: fmt.Sprint(j), typ: "t"})
			}
			keys = append(keys, e.commit(fmt.Sprint("p", i%4), ps...)...)
		}
		poll.Until(t, wait, "all completed", func() bool {
			c, err := e.store.ReactionCounts(e.ctx)
			return err == nil && c.Completed == int64(len(keys))
		})
		mu.Lock()
		defer mu.Unlock()
		if len(runs) != len(keys) {
			t.Fatalf("%d distinct reactions ran, want %d", len(runs), len(keys))
		}
		for k, n := range runs {
			if n != 1 {
				t.Errorf("%s ran %d times", k, n)
			}
		}
		var claimed int64
		for _, r := range runners {
			claimed += r.Stats().Claimed.Load()
		}
		if claimed != int64(len(keys)) {
			t.Fatalf("runners claimed %d in total, want %d", claimed, len(keys))
		}
	})
}

// An operator's retry of a dead letter wakes a runner through the
// requeued event.
func TestRequeueWakesRunner(t *testing.T) {
	e := newEnv(t, backends[0])
	var fail atomic.Bool
	fail.Store(true)
	e.runner(Config{Handlers: map[string]Handler{"t": func(context.Context, storage.Reaction) error {
		if fail.Load() {
			return Permanent("nope", nil)
		}
		return nil
	}}})
	k := e.commit("p", plan{key: "k", typ: "t"})[0]
	poll.Until(t, wait, "dead letter", func() bool { return e.status(k) == storage.ReactionDeadLetter })
	fail.Store(false)
	if ok, err := e.store.ReactionRetry(e.ctx, k, time.Now().UnixMilli()); err != nil || !ok {
		t.Fatalf("retry: %v, %v", ok, err)
	}
	if err := PublishRequeued(e.conn(), bus.Names{}, "ops", e.get(k), time.Now()); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, wait, "completed after the requeue", func() bool { return e.status(k) == storage.ReactionCompleted })
	if got := e.get(k); got.Attempts != 1 {
		t.Fatalf("attempts after an operator retry = %d, want 1", got.Attempts)
	}
}

func TestPruneAgedTerminal(t *testing.T) {
	e := newEnv(t, backends[0])
	k := e.commit("p", plan{key: "k", typ: "t"})[0]
	r := e.runner(Config{CompletedRetention: time.Millisecond, PruneInterval: 10 * time.Millisecond,
		Handlers: map[string]Handler{"t": func(context.Context, storage.Reaction) error { return nil }}})
	poll.Until(t, wait, "pruned", func() bool {
		_, ok, err := e.store.ReactionGet(e.ctx, k)
		return err == nil && !ok && r.Stats().Pruned.Load() == 1
	})
	poll.Until(t, wait, "completion counted", func() bool { return r.Stats().Completed.Load() == 1 })
}

func TestPublishEnqueued(t *testing.T) {
	e := newEnv(t, backends[0])
	ev := e.events()
	p := storage.ReactionEnqueueParams{SourceClientID: "c", SourceClientCommitID: "cc", SourceCommitSeq: 4, CreatedAtMs: 1000,
		Reactions: []storage.ReactionNew{{IdempotencyKey: `["p","c","cc","k"]`, Type: "email.send", Version: 2, MaxAttempts: 5}}}
	PublishEnqueued(e.srv.Conn(), bus.Names{}, "n1", nil, "p", p)
	k := storage.ReactionKey{Partition: "p", IdempotencyKey: `["p","c","cc","k"]`}
	poll.Until(t, wait, "enqueued event", func() bool { return len(ev.of(bus.ReactionEnqueued, k)) == 1 })
	got := ev.of(bus.ReactionEnqueued, k)[0]
	if got.subject != "syncreact.event.p.enqueued.email.send" || got.body.Version != 2 || got.body.MaxAttempts != 5 ||
		got.body.SourceCommitSeq != 4 || got.body.AtMs != 1000 || got.header.Get(bus.HeaderSource) != "syncnode://n1" {
		t.Fatalf("enqueued event %+v", got)
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, backends[0])
	r := e.runner(Config{Handlers: map[string]Handler{"t": func(context.Context, storage.Reaction) error { return nil }}})
	e.commit("p", plan{key: "k", typ: "t"})
	poll.Until(t, wait, "completed", func() bool { return r.Stats().Completed.Load() == 1 })
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		seen[mf.GetName()] = true
		if mf.GetName() == "syncnode_reactions" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "completed" && m.GetGauge().GetValue() != 1 {
					t.Errorf("completed gauge = %v, want 1", m.GetGauge().GetValue())
				}
			}
		}
	}
	for _, name := range []string{"syncnode_reactions", "syncnode_reaction_claim_latency_seconds", "syncnode_reaction_attempts", "syncnode_reaction_outcomes_total", "syncnode_reaction_skipped_wakes_total"} {
		if !seen[name] {
			t.Errorf("metric %s missing", name)
		}
	}
}

// The defaults of issue 14: a 30 s lease heartbeated every 10 s, a retry
// after min(5 min, 1 s·2^(attempt−1)), completed rows kept 30 days and
// dead letters 90.
func TestDefaults(t *testing.T) {
	c := Config{}.WithDefaults()
	if c.Lease != 30*time.Second || c.Heartbeat != 10*time.Second || c.InitialBackoff != time.Second || c.MaxBackoff != 5*time.Minute ||
		c.CompletedRetention != 30*24*time.Hour || c.DeadLetterRetention != 90*24*time.Hour || c.Concurrency != 64 || c.ClaimBatch != 64 {
		t.Fatalf("defaults = %+v", c)
	}
	for attempt := int32(1); attempt <= 100; attempt++ {
		want := 5 * time.Minute
		if attempt < 20 {
			want = min(want, time.Second<<(attempt-1))
		}
		if got := Backoff(c.InitialBackoff, c.MaxBackoff, attempt); got != want {
			t.Errorf("default backoff of attempt %d = %s, want %s", attempt, got, want)
		}
	}
}

// With the default retentions, pruning removes a completed reaction once
// it is 30 days old and a dead letter once it is 90 days old, and never a
// pending one.
func TestRetentionDefaults(t *testing.T) {
	e := newEnv(t, backends[0])
	clk := clock.NewManual(time.Now().Add(time.Minute)) // the commits below are due on it
	r := e.runner(Config{Clock: clk, PruneInterval: -1, Types: []string{"ok", "dead"}, Handlers: map[string]Handler{
		"ok":   func(context.Context, storage.Reaction) error { return nil },
		"dead": func(context.Context, storage.Reaction) error { return Permanent("test.dead", nil) },
	}})
	keys := e.commit("p", plan{key: "a", typ: "ok"}, plan{key: "b", typ: "dead"})
	poll.Until(t, wait, "completed and dead-lettered", func() bool {
		return r.Stats().Completed.Load() == 1 && r.Stats().DeadLettered.Load() == 1
	})
	pending := e.commit("p", plan{key: "c", typ: "elsewhere"})[0] // a type this runner does not run
	exists := func(k storage.ReactionKey) bool {
		_, ok, err := e.store.ReactionGet(e.ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	step := func(d time.Duration, completed, dead bool) {
		t.Helper()
		clk.Advance(d)
		r.prunePasses()
		if exists(keys[0]) != completed || exists(keys[1]) != dead || !exists(pending) {
			t.Fatalf("after %s more: completed kept %v (want %v), dead letter kept %v (want %v), pending kept %v",
				d, exists(keys[0]), completed, exists(keys[1]), dead, exists(pending))
		}
	}
	step(30*24*time.Hour-time.Minute, true, true)
	step(2*time.Minute, false, true)
	step(60*24*time.Hour-2*time.Minute, false, true)
	step(2*time.Minute, false, false)
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Store: backends[0].open(t), Conn: &nats.Conn{}}
	for name, edit := range map[string]func(*Config){
		"no store": func(c *Config) { c.Store = nil },
		"no conn":  func(c *Config) { c.Conn = nil },
		"bad type": func(c *Config) {
			c.Handlers = map[string]Handler{"a b": func(context.Context, storage.Reaction) error { return nil }}
		},
		"nil handler":    func(c *Config) { c.Handlers = map[string]Handler{"a": nil} },
		"concurrency":    func(c *Config) { c.Concurrency = -1 },
		"batch":          func(c *Config) { c.ClaimBatch = storage.MaxReactionBatch + 1 },
		"lease":          func(c *Config) { c.Lease = time.Millisecond },
		"heartbeat":      func(c *Config) { c.Lease, c.Heartbeat = time.Second, time.Second },
		"backoff":        func(c *Config) { c.InitialBackoff, c.MaxBackoff = time.Minute, time.Second },
		"retention":      func(c *Config) { c.CompletedRetention = -1 },
		"prune batch":    func(c *Config) { c.PruneBatch = -1 },
		"restrict types": func(c *Config) { c.Types = []string{"*"} },
	} {
		c := ok
		edit(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := New(ok); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
}

func TestCodes(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Codes {
		f := storage.ReactionFailure{Code: c}
		if err := f.Validate(); err != nil || seen[c] || !strings.HasPrefix(c, "reaction.") {
			t.Errorf("code %q: %v (repeated %v)", c, err, seen[c])
		}
		seen[c] = true
	}
}

// FuzzParseReply: any worker reply is either a completion or a failure
// the store accepts; nothing else comes out.
func FuzzParseReply(f *testing.F) {
	for _, s := range []string{``, `{"status":"completed"}`, `{"status":"failed","code":"a.b","retryAfterMs":5,"details":{"x":[1]}}`,
		`{"status":"failed","code":"a","permanent":true}`, `{"status":"failed","code":"a","retryAtMs":99}`, `ok`, `{"status":"failed"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		completed, o := parseReply(b, time.UnixMilli(1000))
		if completed {
			return
		}
		if err := o.failure.Validate(); err != nil {
			t.Fatalf("reply %q gave an invalid failure %+v: %v", b, o.failure, err)
		}
		if o.retryAfter < 0 {
			t.Fatalf("reply %q gave a negative retry delay", b)
		}
	})
}

// claimCounter counts the claim statements a runner sends to the store.
type claimCounter struct {
	Store
	claims atomic.Int64
}

func (c *claimCounter) ReactionClaim(ctx context.Context, p storage.ReactionClaimParams) (storage.ReactionClaimResult, error) {
	c.claims.Add(1)
	return c.Store.ReactionClaim(ctx, p)
}

// Commits whose events say they enqueued no reactions (what the relay
// publishes for the pushes the engine hands it) cost the runner no claim;
// a commit with a reaction after them still wakes it, and its reaction
// runs without waiting for the sweep (an hour away).
func TestNoClaimForCommitsWithoutReactions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		cc := &claimCounter{Store: e.store}
		ran := make(chan string, 4)
		r := e.runner(Config{Store: cc, Handlers: map[string]Handler{"t": func(_ context.Context, rx storage.Reaction) error {
			ran <- rx.IdempotencyKey
			return nil
		}}})
		await := func(k storage.ReactionKey) {
			t.Helper()
			select {
			case got := <-ran:
				if got != k.IdempotencyKey {
					t.Fatalf("handler ran %s, want %s", got, k.IdempotencyKey)
				}
			case <-time.After(wait):
				t.Fatalf("reaction %s never ran", k.IdempotencyKey)
			}
			poll.Until(t, wait, "completed", func() bool { return e.status(k) == storage.ReactionCompleted })
		}
		// Read back from the log, an event says nothing: the runner claims.
		await(e.commit("p", plan{key: "first", typ: "t"})[0])
		before, skippedBefore := cc.claims.Load(), r.Stats().SkippedWakes.Load()
		const handed = 20
		for range handed {
			e.commitHanded("p")
		}
		poll.Until(t, wait, "a wake-up skipped", func() bool { return r.Stats().SkippedWakes.Load() > skippedBefore })
		k := e.commitHanded("p", plan{key: "after", typ: "t"})[0]
		await(k)
		// A handed commit the relay read back from the log instead (its
		// hand-over came after the relay's read, which a loaded machine
		// makes likely) carries no count and may cost a claim; one whose
		// event says "no reactions" must not.
		skipped := r.Stats().SkippedWakes.Load() - skippedBefore
		if got := cc.claims.Load() - before; got < 1 || got > 1+handed-skipped {
			t.Errorf("%d claims for %d commits without reactions (%d announced so) and one with; want 1 to %d", got, handed, skipped, 1+handed-skipped)
		}
		// The skipped wake-ups are a Prometheus counter.
		reg := prometheus.NewRegistry()
		reg.MustRegister(r.Collector())
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var metric float64 = -1
		for _, mf := range mfs {
			if mf.GetName() == "syncnode_reaction_skipped_wakes_total" {
				metric = mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		if want := r.Stats().SkippedWakes.Load(); metric != float64(want) {
			t.Errorf("syncnode_reaction_skipped_wakes_total = %v, want %d", metric, want)
		}
	})
}
