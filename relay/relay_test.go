package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cejs "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
)

// A core-NATS subscriber (what `nats sub 'sync.>'` does) receives a
// multi-table commit as one CloudEvent per table with correct headers and
// body, and the SDK decodes it.
func TestRelayCoreSubscriberMultiTableCommit(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	nc, err := nats.Connect(e.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("sync.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r := e.relay(Config{Node: "node-7"})
	e.start(r)
	seq := e.commit("acme", "todos", "projects", "todos")
	r.Notify("acme")

	part, _ := e.store.PartitionGet(e.ctx, "acme")
	for _, table := range []string{"todos", "projects"} {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != "sync.acme.commit."+table {
			t.Fatalf("subject %q, want table %s", m.Subject, table)
		}
		id := fmt.Sprintf("acme:%s:%d:%s", part.LogEpoch, seq, table)
		want := map[string]string{
			"ce-specversion": "1.0", "ce-id": id, "ce-type": bus.EventTypeCommit, "ce-source": "syncnode://node-7",
			"ce-subject": "acme/" + table, "ce-partition": "acme", "ce-logepoch": part.LogEpoch,
			"ce-commitseq": fmt.Sprint(seq), "ce-table": table, "content-type": "application/json",
			"Nats-Msg-Id": id,
		}
		for k, v := range want {
			if got := m.Header.Get(k); got != v {
				t.Errorf("%s: header %s = %q, want %q", table, k, got, v)
			}
		}
		ev, err := binding.ToEvent(e.ctx, cejs.NewMessage(m))
		if err != nil || ev.Validate() != nil {
			t.Fatalf("sdk: %v", err)
		}
		var body bus.CommitBody
		if err := ev.DataAs(&body); err != nil {
			t.Fatal(err)
		}
		wantChanges := 1
		if table == "todos" {
			wantChanges = 2
		}
		if body.Partition != "acme" || body.CommitSeq != seq || body.Table != table || len(body.Changes) != wantChanges ||
			body.ActorID != "actor" || body.ClientID != "client" || body.SchemaVersion != 3 || body.LogEpoch != part.LogEpoch {
			t.Errorf("%s body = %+v", table, body)
		}
		for _, ch := range body.Changes {
			var row map[string]any
			if err := json.Unmarshal(ch.Row, &row); err != nil || row["id"] != ch.RowID || ch.Op != bus.OpUpsert || ch.RowVersion != 1 {
				t.Errorf("%s change = %+v (%v)", table, ch, err)
			}
		}
	}
	if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("unexpected extra message %s", m.Subject)
	}
}

// TestRelayExampleEvent prints a real event for docs/bus.md:
// go test ./bus -run TestRelayExampleEvent -v
func TestRelayExampleEvent(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	nc, err := nats.Connect(e.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, _ := nc.SubscribeSync("sync.>")
	_ = nc.Flush()
	r := e.relay(Config{Node: "node-1"})
	e.start(r)
	e.commit("acme", "todos")
	r.Notify("acme")
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[#1] Received on %q\n", m.Subject)
	keys := make([]string, 0, len(m.Header))
	for k := range m.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, m.Header.Get(k))
	}
	var pretty strings.Builder
	var v any
	_ = json.Unmarshal(m.Data, &v)
	out, _ := json.MarshalIndent(v, "", "  ")
	pretty.Write(out)
	t.Logf("captured event:\n%s\n%s\n\nbody on the wire (%d bytes):\n%s", b.String(), pretty.String(), len(m.Data), m.Data)
}

// A JetStream consumer sees each commit exactly once and in order, many
// partitions and commits, relayed concurrently with the writes.
func TestRelayExactlyOnceInOrder(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	r := e.relay(Config{BatchMessages: 7, CommitsPerRead: 5})
	e.start(r)

	var mu sync.Mutex
	got := map[string][]eventKey{}
	f, err := bus.Follow(e.ctx, e.js, prod, bus.FollowParams{StartSeq: 1}, func(ev bus.Event) {
		mu.Lock()
		got[ev.Partition.ID()] = append(got[ev.Partition.ID()], eventKey{ev.CommitSeq, ev.Table})
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer mustStop(t, f)

	parts := []string{"p1", "p.2", "", strings.Repeat("long/", 20)}
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Go(func() {
			for i := range 40 {
				tables := []string{"todos"}
				if i%3 == 0 {
					tables = []string{"projects", "todos"}
				}
				e.commit(p, tables...)
				r.Notify(p)
			}
		})
	}
	wg.Wait()
	e.flush(r)
	for _, p := range parts {
		evs := e.checkLogInStream(p)
		waitFor(t, 10*time.Second, "the follower saw every event of "+p, func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(got[p]) != len(evs) {
				return fmt.Errorf("%d of %d", len(got[p]), len(evs))
			}
			return nil
		})
		mu.Lock()
		for i, ev := range evs {
			if got[p][i] != (eventKey{ev.CommitSeq, ev.Table}) {
				t.Fatalf("follower order differs at %d: %v vs %v", i, got[p][i], ev)
			}
		}
		mu.Unlock()
	}
	if st := r.Stats(); st.Events != int64(len(e.streamEvents())) {
		t.Errorf("stats %+v", st)
	}
}

// Commits made while no relay runs are published when one starts.
func TestRelayCatchUpOnStart(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	r1 := e.relay(Config{})
	e.start(r1)
	e.commit("a", "todos")
	r1.Notify("a")
	e.flush(r1)
	if err := r1.Stop(e.ctx); err != nil {
		t.Fatal(err)
	}
	for range 25 {
		e.commit("a", "todos", "projects")
		e.commit("b", "projects")
	}
	r2 := e.relay(Config{})
	e.start(r2)
	e.flush(r2) // no Notify: the start-up sweep finds the gaps
	e.checkLogInStream("a")
	e.checkLogInStream("b")
}

// A relay that "crashes" after the stream acknowledged a batch but before
// it recorded the ack retries with a stale compare-and-set and must not
// duplicate: inside the duplicate window (10071 or duplicate) and after it
// (only the compare-and-set protects).
func TestRelayForgottenAck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		batch       int
		afterWindow bool
	}{
		{"batch inside window", 0, false},
		{"single inside window", 1, false},
		{"batch after window", 0, true},
		{"single after window", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newRelayEnv(t)
			window := bus.DefaultCommitsDuplicates // the default must keep it exactly-once
			r := e.relay(Config{BatchMessages: tc.batch, Streams: bus.StreamsConfig{Commits: bus.StreamConfig{Duplicates: window}}})
			var forgot atomic.Int32
			r.testHookAfterAck = func(context.Context) error {
				if forgot.Add(1) != 1 {
					return nil
				}
				if tc.afterWindow {
					e.waitDedupWindowPassed(window)
				}
				return errors.New("crash after ack")
			}
			e.start(r)
			for range 5 {
				e.commit("p", "todos", "projects")
			}
			r.Notify("p")
			e.flush(r)
			e.checkLogInStream("p")
			if st := r.Stats(); st.Conflicts == 0 || st.Failures == 0 {
				t.Errorf("stats %+v: the stale retry was not rejected", st)
			}
		})
	}
}

// A relay stopped between publish and ack, restarted (as a new process)
// only after the duplicate window: nothing is duplicated.
func TestRelayRestartAfterDuplicateWindow(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	window := bus.DefaultCommitsDuplicates
	cfg := Config{Streams: bus.StreamsConfig{Commits: bus.StreamConfig{Duplicates: window}}}
	r1 := e.relay(cfg)
	acked := make(chan struct{})
	var once sync.Once
	r1.testHookAfterAck = func(ctx context.Context) error {
		once.Do(func() { close(acked) })
		<-ctx.Done() // dead until the process is stopped
		return ctx.Err()
	}
	e.start(r1)
	for range 3 {
		e.commit("p", "todos")
	}
	r1.Notify("p")
	<-acked
	stopDead(t, r1)
	e.commit("p", "projects")
	e.waitDedupWindowPassed(window)

	r2 := e.relay(cfg)
	e.start(r2)
	e.flush(r2)
	e.checkLogInStream("p")
}

// A batch abandoned mid-way (published messages, no commit) leaves nothing
// behind: a later relay publishes everything once.
func TestRelayAbandonedBatch(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	if err := bus.EnsureStreams(e.ctx, e.js, prod, bus.StreamsConfig{}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		e.commit("p", "todos", "projects")
	}
	// Encode the log as the relay would and publish half a batch.
	part, _ := e.store.PartitionGet(e.ctx, "p")
	commits, _ := e.store.CommitRange(e.ctx, "p", 0, 100)
	enc := bus.NewEncoder(prod, "node-1", e.schema, 0)
	var evs []bus.CommitMsg
	for _, c := range commits {
		evs = enc.AppendCommit(evs, mustPartition(t, "p"), part.LogEpoch, c)
	}
	bp, err := jetstreamext.NewBatchPublisher(e.js)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs[:3] {
		if err := bp.AddMsg(ev.Msg); err != nil {
			t.Fatal(err)
		}
	}
	// ... and never commit it.

	r := e.relay(Config{})
	e.start(r)
	e.flush(r)
	e.checkLogInStream("p")
}

// With one-by-one publishing a commit touching several tables is several
// publishes; a crash between them resumes inside the commit.
func TestRelayResumesInsideCommit(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	e.commit("p", "todos")
	e.commit("p", "projects", "todos")
	e.commit("p", "todos")
	r1 := e.relay(Config{BatchMessages: 1})
	var n atomic.Int32
	crashed := make(chan struct{})
	r1.testHookAfterAck = func(ctx context.Context) error {
		if n.Add(1) == 2 { // after commit 2's first table
			close(crashed)
			<-ctx.Done() // dead until the process is stopped
			return ctx.Err()
		}
		return nil
	}
	e.start(r1)
	<-crashed
	stopDead(t, r1)
	got := e.streamEvents()
	if len(got) != 2 || got[1].Table != "projects" {
		t.Fatalf("after the crash the stream holds %d events", len(got))
	}
	r2 := e.relay(Config{BatchMessages: 1})
	e.start(r2)
	e.flush(r2)
	e.checkLogInStream("p")
}

// Two relays (two nodes sharing one database) racing on the same
// partitions never duplicate or reorder.
func TestRelayTwoRelaysShareLog(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	nc2, err := e.srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, _ := jetstream.New(nc2)
	r1 := e.relay(Config{Node: "n1", BatchMessages: 3, CommitsPerRead: 2})
	r2 := e.relayOn(js2, Config{Node: "n2", BatchMessages: 3, CommitsPerRead: 2})
	e.start(r1)
	e.start(r2)
	var wg sync.WaitGroup
	for _, p := range []string{"x", "y"} {
		wg.Go(func() {
			for range 60 {
				e.commit(p, "todos", "projects")
				r1.Notify(p)
				r2.Notify(p)
			}
		})
	}
	wg.Wait()
	e.flush(r1)
	e.flush(r2)
	e.checkLogInStream("x")
	e.checkLogInStream("y")
	t.Logf("n1 %+v, n2 %+v", r1.Stats(), r2.Stats())
}

// After an epoch rotation (a restore) the retained log is published again
// under the new epoch, once.
func TestRelayEpochRotation(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	r := e.relay(Config{})
	e.start(r)
	for range 5 {
		e.commit("p", "todos")
	}
	r.Notify("p")
	e.flush(r)
	old := e.checkLogInStream("p")
	if _, err := e.store.PartitionRotateEpoch(e.ctx, "p", e.now.Add(1)); err != nil {
		t.Fatal(err)
	}
	e.commit("p", "projects")
	r.Notify("p")
	e.flush(r)
	fresh := e.checkLogInStream("p")
	if len(fresh) != 6 || fresh[0].LogEpoch == old[0].LogEpoch {
		t.Fatalf("new epoch events: %d, epochs %q / %q", len(fresh), old[0].LogEpoch, fresh[0].LogEpoch)
	}
	if n := len(e.streamEvents()); n != 11 {
		t.Errorf("stream holds %d events, want 5 old + 6 new", n)
	}
}

// A purged or deleted stream is refilled from what the log holds.
func TestRelayStreamWipedOrLost(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	r := e.relay(Config{})
	e.start(r)
	for range 3 {
		e.commit("p", "todos", "projects")
	}
	r.Notify("p")
	e.flush(r)

	s, err := e.js.Stream(e.ctx, prod.CommitStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.commit("p", "todos")
	r.Notify("p")
	e.flush(r)
	e.checkLogInStream("p")

	if err := e.js.DeleteStream(e.ctx, prod.CommitStream()); err != nil {
		t.Fatal(err)
	}
	e.commit("p", "todos")
	r.Notify("p")
	e.flush(r)
	e.checkLogInStream("p")
}

// Bad partition ids and unknown partitions are refused without a crash or
// a retry loop, and do not block other partitions.
func TestRelayBadPartitions(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	r := e.relay(Config{})
	e.start(r)
	r.Notify("bad\xff")
	r.Notify(strings.Repeat("x", bus.MaxPartitionIDBytes+1))
	r.Notify("never-registered")
	e.commit("good", "todos")
	r.Notify("good")
	e.flush(r)
	e.checkLogInStream("good")
	if st := r.Stats(); st.Failures != 3 {
		t.Errorf("stats %+v, want 3 permanent failures", st)
	}
}

// NATS going away (the server restarts) delays publishing; the relay
// retries with backoff and publishes everything once it is back.
func TestRelaySurvivesNATSOutage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port := embeddedtest.FreePort(t)
	startServer := func() *embedded.Server {
		return embeddedtest.Start(t, embeddedtest.WithDataDir(dir), embeddedtest.WithName("outage"), embeddedtest.WithoutCleanup(),
			embeddedtest.WithPort(port))
	}
	srv := startServer()
	e := newRelayEnv(t, embeddedtest.WithDontListen())
	nc, err := nats.Connect(srv.ClientURL(), nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	r := e.relayOn(js, Config{PublishTimeout: 200 * time.Millisecond})
	e.start(r)
	e.commit("p", "todos")
	r.Notify("p")
	e.flush(r)

	if err := srv.Stop(e.ctx); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		e.commit("p", "todos")
		r.Notify("p")
	}
	waitFor(t, 10*time.Second, "the relay reports failures", func() error {
		if r.Stats().Failures == 0 {
			return errors.New("no failure yet")
		}
		return nil
	})
	srv = startServer()
	defer srv.Stop(context.Background())
	e.flush(r)
	streamEvs := streamEventsOf(t, e.ctx, srv.JetStream())
	if len(streamEvs) != 6 {
		t.Fatalf("after the outage the stream holds %d events, want 6", len(streamEvs))
	}
	for i, ev := range streamEvs {
		if ev.CommitSeq != int64(i+1) {
			t.Fatalf("event %d is commit %d", i, ev.CommitSeq)
		}
	}
}

// stopDead stops a relay whose worker hangs like a dead process: the
// already-cancelled context makes Stop cancel it at once.
func stopDead(t *testing.T, r *Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Stop(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("stop = %v, want context.Canceled", err)
	}
}
