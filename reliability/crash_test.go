package reliability

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// childEnv makes this test binary a node process instead of a test run:
// it holds the JSON childSpec.
const childEnv = "SYNCNODE_RELIABILITY_CHILD"

// childSpec is the store a child node runs on, and the cluster it joins.
type childSpec struct {
	DataDir, PGURL, PGSchema string
	Cluster                  *clusterSpec
	Hub                      *hubSpec
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	code := m.Run()
	if fuzzTarget.stop != nil {
		fuzzTarget.stop()
	}
	os.Exit(code)
}

// runChild runs a node until SIGTERM, like `syncnode serve`: it writes the
// node's URL to fd 3 once serving, and on SIGTERM stops the node within a
// shutdown timeout and exits 0.
func runChild(raw string) int {
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "child spec:", err)
		return 2
	}
	cfg, err := nodeConfig(store{dataDir: spec.DataDir, pgURL: spec.PGURL, pgSchema: spec.PGSchema})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if spec.Hub != nil {
		spec.Hub.apply(&cfg)
	}
	if spec.Cluster != nil {
		spec.Cluster.apply(&cfg)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	n, err := runNode(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		return 1
	}
	ready := os.NewFile(3, "ready")
	fmt.Fprintln(ready, n.URL(), n.NATS.ClientURL(), n.NATS.LeafURL())
	ready.Close()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n.Stop(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "stop:", err)
		return 1
	}
	return 0
}

// child is a running child node.
type child struct {
	cmd     *exec.Cmd
	url     string // HTTP
	natsURL string // its embedded NATS server's client listener
	leafURL string // its leaf listener (a hub's), or ""
	out     *bytes.Buffer
}

func startChild(t *testing.T, st store) *child {
	t.Helper()
	c, err := spawnChild(childSpec{DataDir: st.dataDir, PGURL: st.pgURL, PGSchema: st.pgSchema})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// spawnChild starts a child node and waits until it serves.
func spawnChild(spec childSpec) (*child, error) {
	raw, _ := json.Marshal(spec)
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	c := &child{cmd: exec.Command(os.Args[0], "-test.run=^$"), out: &bytes.Buffer{}}
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	c.cmd.ExtraFiles = []*os.File{w}
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	if err := c.cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	w.Close()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		return nil, fmt.Errorf("child did not start (%v):\n%s", err, c.out)
	}
	f := strings.Fields(line)
	c.url = f[0]
	if len(f) > 1 {
		c.natsURL = f[1]
	}
	if len(f) > 2 {
		c.leafURL = f[2]
	}
	return c, nil
}

// opSpec and commitSpec are what a pusher sent, to compare with the log.
type opSpec struct {
	table, rowID string
	row          []byte
}

type commitSpec struct {
	clientID, ccid string
	ops            []opSpec
}

func (c *commitSpec) frame() *ssp2.PushCommit {
	pc := &ssp2.PushCommit{ClientCommitID: c.ccid}
	for _, o := range c.ops {
		pc.Operations = append(pc.Operations, ssp2.Operation{Table: o.table, RowID: o.rowID, Op: ssp2.OpUpsert, Payload: o.row})
	}
	return pc
}

// storm is a push storm against whichever child is up: pushers with a
// client id each, their commits and what was acknowledged.
type storm struct {
	t       *testing.T
	tok     string
	epoch   string
	pushers []*pusher
	rnd     *rand.Rand

	mu    sync.Mutex
	sent  map[string]*commitSpec // by clientId/ccid
	acked map[string]int64       // by clientId/ccid: the acknowledged seq
}

type pusher struct {
	clientID string
	n        int
	pending  *commitSpec // sent, outcome unknown: replayed first next time
}

func newStorm(t *testing.T, pushers int) *storm {
	s := &storm{t: t, tok: token(t, "pusher", "storm", "p1"), rnd: newRand(t),
		sent: map[string]*commitSpec{}, acked: map[string]int64{}}
	for i := range pushers {
		s.pushers = append(s.pushers, &pusher{clientID: fmt.Sprint("pusher-", i)})
	}
	return s
}

// next is p's pending commit, or a new one of one to three rows over one
// or both tables.
func (s *storm) next(p *pusher) *commitSpec {
	if p.pending != nil {
		return p.pending
	}
	p.n++
	c := &commitSpec{clientID: p.clientID, ccid: fmt.Sprintf("%s-c%d", p.clientID, p.n)}
	sch := mustSchema(s.t)
	s.mu.Lock()
	k := 1 + s.rnd.IntN(3)
	twoTables := s.rnd.IntN(2) == 0
	s.mu.Unlock()
	for i := range k {
		table := "items"
		if twoTables && i%2 == 1 {
			table = "notes"
		}
		tb, _ := sch.Table(table)
		id := fmt.Sprintf("%s-r%d", c.ccid, i)
		vals := []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte("p1")}, {Bytes: []byte(strings.Repeat("b", 64+i))}}
		if table == "items" {
			vals = append(vals, ssp2.Value{Int: int64(p.n)}, ssp2.Value{Float: float64(i) / 3}, ssp2.Value{Float: 1})
		}
		row, err := tb.Codec.AppendRow(nil, vals)
		if err != nil {
			s.t.Fatal(err)
		}
		c.ops = append(c.ops, opSpec{table: table, rowID: id, row: row})
	}
	s.mu.Lock()
	s.sent[c.clientID+"/"+c.ccid] = c
	s.mu.Unlock()
	p.pending = c
	return c
}

// run pushes until stop is closed or the node dies; it counts acks.
func (s *storm) run(url string, stop <-chan struct{}, acks *atomic.Int64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-stop; cancel() }()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	for _, p := range s.pushers {
		wg.Go(func() {
			for ctx.Err() == nil {
				c := s.next(p)
				e := s.epoch
				r, err := post(ctx, client, url, s.tok, encode(s.t, 2, &ssp2.ReqHeader{ClientID: p.clientID, SchemaVersion: 1, LogEpoch: &e}, c.frame()), nil)
				if err != nil {
					return // the node died (or the storm ended) mid-request
				}
				if r.status != http.StatusOK {
					s.t.Errorf("push %s: %d %s", c.ccid, r.status, r.body)
					return
				}
				res := frames[*ssp2.PushResult](r.msg)
				if len(res) != 1 || res[0].CommitSeq == nil || res[0].Status == ssp2.PushRejected {
					s.t.Errorf("push %s: %+v", c.ccid, res)
					return
				}
				s.mu.Lock()
				if prev, ok := s.acked[c.clientID+"/"+c.ccid]; ok && prev != *res[0].CommitSeq {
					s.t.Errorf("commit %s acknowledged at seq %d, then replayed at %d", c.ccid, prev, *res[0].CommitSeq)
				}
				s.acked[c.clientID+"/"+c.ccid] = *res[0].CommitSeq
				s.mu.Unlock()
				p.pending = nil
				acks.Add(1)
			}
		})
	}
	wg.Wait()
}

// until runs the storm against c until at least min (plus a random
// number of) commits were acknowledged, and returns with the storm still
// running; end stops it, once c went away.
func (s *storm) until(c *child, trial, min int) (end func()) {
	t := s.t
	t.Helper()
	if s.epoch == "" {
		s.epoch = epoch(t, c.url, s.tok)
	}
	var acks atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { s.run(c.url, stop, &acks); close(done) }()
	s.mu.Lock()
	target := int64(min + s.rnd.IntN(pick(20, 60)))
	s.mu.Unlock()
	deadline := time.After(30 * time.Second)
	for acks.Load() < target {
		select {
		case <-done:
			t.Fatalf("trial %d: the storm ended by itself:\n%s", trial, c.out)
		case <-deadline:
			t.Fatalf("trial %d: %d of %d acks in 30 s:\n%s", trial, acks.Load(), target, c.out)
		case <-time.After(time.Millisecond):
		}
	}
	return func() { close(stop); <-done }
}

// killTrials is how many times a node is killed mid-storm.
func killTrials(sqlite bool) int {
	if s := os.Getenv("SYNCNODE_KILL_TRIALS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	if sqlite {
		return pick(3, 200)
	}
	return pick(2, 50)
}

// TestKillDuringPushStorm kills a node with SIGKILL in the middle of a
// push storm, trial after trial, each restart replaying the commits whose
// answer was lost. Then every acknowledged commit must be in the log at
// its acknowledged seq, whole; the log dense; and, once a node relayed
// it, every commit on the bus exactly once per table.
func TestKillDuringPushStorm(t *testing.T) {
	onBothStores(t, func(t *testing.T, st store) {
		s := newStorm(t, 4)
		trials := killTrials(st.name == "sqlite")
		for trial := range trials {
			c := startChild(t, st)
			end := s.until(c, trial, 1)
			if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if err := c.cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
				t.Fatalf("trial %d: child exit %v, want killed:\n%s", trial, err, c.out)
			}
			end()
		}
		t.Logf("%d kill trials, %d commits acknowledged", trials, len(s.acked))

		n := startNode(t, st, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := n.Relay.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		commits := s.checkLog(n.Store)
		events := checkBus(t, n.NATS.JetStream(), "storm", commits, true)
		t.Logf("log: %d commits; bus: %d events", len(commits), events)
	})
}

// checkLog compares the log with what was sent and acknowledged, and
// returns it.
func (s *storm) checkLog(st storage.Store) []storage.Commit {
	t := s.t
	t.Helper()
	ctx := context.Background()
	var commits []storage.Commit
	for after := int64(0); ; {
		page, err := st.CommitRange(ctx, "storm", after, storage.MaxCommitRangeLimit)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		commits = append(commits, page...)
		after = page[len(page)-1].CommitSeq
	}
	seen := map[string]int64{}
	for i, c := range commits {
		if c.CommitSeq != int64(i+1) {
			t.Fatalf("log not dense: commit %d has seq %d", i+1, c.CommitSeq)
		}
		key := c.ClientID + "/" + c.ClientCommitID
		spec, ok := s.sent[key]
		if !ok {
			t.Fatalf("seq %d holds commit %s, which nobody sent", c.CommitSeq, key)
		}
		if prev, dup := seen[key]; dup {
			t.Fatalf("commit %s applied twice: seqs %d and %d", key, prev, c.CommitSeq)
		}
		seen[key] = c.CommitSeq
		if len(c.Changes) != len(spec.ops) {
			t.Fatalf("commit %s at seq %d has %d of its %d changes", key, c.CommitSeq, len(c.Changes), len(spec.ops))
		}
		for j, ch := range c.Changes {
			o := spec.ops[j]
			if ch.Table != o.table || ch.RowID != o.rowID || ch.Op != storage.OpUpsert || !bytes.Equal(ch.Row, o.row) {
				t.Fatalf("commit %s change %d = %s/%s, want %s/%s with the row sent", key, j, ch.Table, ch.RowID, o.table, o.rowID)
			}
		}
	}
	for key, seq := range s.acked {
		got, ok := seen[key]
		if !ok {
			t.Fatalf("acknowledged commit %s (seq %d) is not in the log", key, seq)
		}
		if got != seq {
			t.Fatalf("commit %s acknowledged at seq %d is at seq %d", key, seq, got)
		}
	}
	return commits
}

// eventKey names one commit event.
type eventKey struct {
	seq   int64
	table string
}

// checkBus reads the partition's events from SYNC_COMMITS and compares
// them with the log: no duplicates, in order, and — when complete — one
// for every (commit, table).
func checkBus(t *testing.T, js jetstream.JetStream, partition string, commits []storage.Commit, complete bool) (events int) {
	t.Helper()
	ctx := context.Background()
	want := map[eventKey]bool{}
	for _, c := range commits {
		for _, ch := range c.Changes {
			want[eventKey{c.CommitSeq, ch.Table}] = true
		}
	}
	stream, err := js.Stream(ctx, bus.Names{}.CommitStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := bus.NewPartition(partition)
	if err != nil {
		t.Fatal(err)
	}
	got := map[eventKey]int{}
	last := int64(0)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(bus.HeaderPartition) != p.Token() {
			continue
		}
		cs, _ := strconv.ParseInt(m.Header.Get(bus.HeaderCommitSeq), 10, 64)
		k := eventKey{cs, m.Header.Get(bus.HeaderTable)}
		if cs < last {
			t.Fatalf("event of commit %d after one of commit %d", cs, last)
		}
		last = cs
		got[k]++
		if !want[k] {
			t.Fatalf("event %+v has no commit in the log", k)
		}
	}
	missing := 0
	for k := range want {
		switch got[k] {
		case 0:
			missing++
		case 1:
		default:
			t.Fatalf("event %+v published %d times", k, got[k])
		}
	}
	if complete && missing > 0 {
		t.Fatalf("%d of %d commit events are not on the bus", missing, len(want))
	}
	return len(want) - missing
}
