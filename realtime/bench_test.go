package realtime_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// reportPercentiles reports p50 and p95 of ds in milliseconds.
func reportPercentiles(b *testing.B, prefix string, ds []time.Duration) {
	b.Helper()
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		i := min(int(q*float64(len(ds))), len(ds)-1)
		return float64(ds[i].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), prefix+"p50-ms")
	b.ReportMetric(at(0.95), prefix+"p95-ms")
}

// cpuTime is this process's user + system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time since start per op: server
// and clients together, as both run in this process. On a shared machine
// it moves far less with the load than latencies do.
func reportCPU(b *testing.B, start time.Duration, ops int, unit string) {
	b.ReportMetric(float64((cpuTime(b)-start).Microseconds())/1000/float64(ops), "cpu-ms/"+unit)
}

// propagation measures client A's push until client B applied its delta.
func propagation(b *testing.B, push, listen *node.Node) {
	a := newPusher(b, push.URL(), "alice", "p1")
	c := mustDial(b, listen.URL(), token(b, "bob", "p1"), "bob-1")
	c.subscribe("tasks", "p1")
	c.sync()
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		seq := a.push([2]string{"r" + strconv.Itoa(i%100), "p1"})
		if got := deltaSeq(b, c.applyDelta(i)); got != seq {
			b.Fatalf("delta %d carries %d, want %d", i, got, seq)
		}
		ds = append(ds, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, "", ds)
}

// BenchmarkPropagation: push over HTTP → delta applied by a client on the
// same node, real WebSocket.
func BenchmarkPropagation(b *testing.B) {
	n := startNode(b)
	propagation(b, n, n)
}

// BenchmarkPropagationTwoNodes: push on node A → delta on node B (one
// PostgreSQL, one NATS server).
func BenchmarkPropagationTwoNodes(b *testing.B) {
	d := startDeployment(b, 2)
	propagation(b, d.nodes[0], d.nodes[1])
}

// benchSocket is a light client for many-socket benchmarks: it reads and
// counts deltas, nothing else.
type benchSocket struct {
	conn   *websocket.Conn
	deltas atomic.Int64
	onSeq  func(seq int64)
	done   chan struct{}
}

func openBenchSocket(ctx context.Context, base, tok, clientID string, onSeq func(int64)) (*benchSocket, error) {
	url := "ws" + strings.TrimPrefix(base, "http") + "/realtime?clientId=" + clientID
	conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}, HTTPClient: httpClient})
	if err != nil {
		return nil, err
	}
	conn.SetReadLimit(1 << 20)
	if typ, msg, err := conn.Read(ctx); err != nil || typ != websocket.MessageText || !strings.Contains(string(msg), `"hello"`) {
		conn.CloseNow()
		return nil, fmt.Errorf("hello: %s %v", msg, err)
	}
	s := &benchSocket{conn: conn, onSeq: onSeq, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			typ, msg, err := conn.Read(context.Background())
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary && len(msg) > 0 && msg[0] == 0x00 && s.onSeq != nil {
				m, err := ssp2.DecodeMessage(msg[1:])
				if err == nil {
					if cs := framesOf[*ssp2.Commit](m); len(cs) > 0 {
						s.deltas.Add(1)
						s.onSeq(cs[0].CommitSeq)
					}
				}
			}
		}
	}()
	return s, nil
}

func (s *benchSocket) close() {
	s.conn.CloseNow()
	<-s.done
}

// registerClients writes client records registered on p1 at cursor: a
// fixture, so a thousand sockets need no thousand rounds.
func registerClients(b testing.TB, st storage.Store, actor string, n int, cursor int64) {
	b.Helper()
	subs := json.RawMessage(`[{"id":"tasks","table":"tasks","scopes":{"project_id":["p1"]}}]`)
	for i := range n {
		if err := st.ClientPut(context.Background(), storage.Client{Partition: partition, ClientID: fmt.Sprintf("fan-%d", i), ActorID: actor,
			WireVersion: 2, Cursor: cursor, UpdatedAtMs: time.Now().UnixMilli(), Subscriptions: subs}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFanout1000: one commit to 1,000 subscribed sockets; the time
// until the last one got its delta.
func BenchmarkFanout1000(b *testing.B) {
	const sockets = 1000
	n := startNode(b)
	a := newPusher(b, n.URL(), "alice", "p1")
	seq0 := a.push([2]string{"r0", "p1"})
	registerClients(b, n.Store, "bob", sockets, seq0)
	tok := token(b, "bob", "p1")
	var mu sync.Mutex
	var want int64
	var got int
	all := make(chan struct{}, 1)
	onSeq := func(seq int64) {
		mu.Lock()
		defer mu.Unlock()
		if seq == want {
			if got++; got == sockets {
				all <- struct{}{}
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conns := make([]*benchSocket, sockets)
	for i := range conns {
		s, err := openBenchSocket(ctx, n.URL(), tok, fmt.Sprintf("fan-%d", i), onSeq)
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = s
	}
	defer func() {
		for _, s := range conns {
			s.close()
		}
	}()
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	cpu0 := cpuTime(b)
	enc0 := n.Realtime.Metrics().DeltaEncodes.Load()
	for i := range b.N {
		mu.Lock()
		want, got = seq0+int64(i)+1, 0
		mu.Unlock()
		start := time.Now()
		if seq := a.push([2]string{"r" + strconv.Itoa(i%100), "p1"}); seq != want {
			b.Fatalf("pushed %d, want %d", seq, want)
		}
		select {
		case <-all:
		case <-ctx.Done():
			b.Fatalf("commit %d reached %d of %d sockets", want, got, sockets)
		}
		ds = append(ds, time.Since(start))
	}
	b.StopTimer()
	reportCPU(b, cpu0, b.N, "commit")
	// One encoding per commit: the 1,000 sockets share one registration set.
	b.ReportMetric(float64(n.Realtime.Metrics().DeltaEncodes.Load()-enc0)/float64(b.N), "encodes/commit")
	reportPercentiles(b, "last-delta-", ds)
}

// raiseFileLimit lifts the soft open-file limit to the hard one.
func raiseFileLimit(tb testing.TB, need uint64) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		tb.Fatal(err)
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	if l.Cur < need {
		tb.Skipf("open-file limit %d is below the %d this needs", l.Cur, need)
	}
}

// Child-process mode of the idle-socket benchmark: the sockets' client
// side runs in another process, so the server's memory is measured alone.
const (
	envIdleURL   = "REALTIME_IDLE_SOCKETS_URL"
	envIdleToken = "REALTIME_IDLE_SOCKETS_TOKEN"
	envIdleCount = "REALTIME_IDLE_SOCKETS_COUNT"
)

// TestIdleSocketsChild is the client side of BenchmarkIdleSockets; it
// does nothing unless started by it.
func TestIdleSocketsChild(t *testing.T) {
	url := os.Getenv(envIdleURL)
	if url == "" {
		t.Skip("the client process of BenchmarkIdleSockets")
	}
	count, _ := strconv.Atoi(os.Getenv(envIdleCount))
	raiseFileLimit(t, uint64(count)+100)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var conns []*websocket.Conn
	for i := range count {
		u := "ws" + strings.TrimPrefix(url, "http") + "/realtime?clientId=idle-" + strconv.Itoa(i)
		c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + os.Getenv(envIdleToken)}}})
		if err != nil {
			t.Fatalf("socket %d: %v", i, err)
		}
		if _, _, err := c.Read(ctx); err != nil {
			t.Fatalf("socket %d hello: %v", i, err)
		}
		// Keep reading (heartbeats), as an idle client does.
		go func() {
			for {
				if _, _, err := c.Read(context.Background()); err != nil {
					return
				}
			}
		}()
		conns = append(conns, c)
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	for _, c := range conns {
		c.CloseNow()
	}
}

// heapNow is the live heap and stacks after a collection.
func heapNow() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// BenchmarkIdleSockets: 10,000 idle authenticated sockets on one node,
// opened from a child process; memory per socket on the server side.
func BenchmarkIdleSockets(b *testing.B) {
	const sockets = 10_000
	raiseFileLimit(b, sockets+500)
	n := startNode(b, func(c *node.Config) { c.Realtime.Hub.MaxConnections = sockets + 10 })
	before := heapNow()
	rssBefore := rss()
	b.ResetTimer()
	for range b.N {
		cmd := exec.Command(os.Args[0], "-test.run=^TestIdleSocketsChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), envIdleURL+"="+n.URL(), envIdleToken+"="+token(b, "bob", "p1"), envIdleCount+"="+strconv.Itoa(sockets))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "ready" {
			b.Fatalf("client process: %q %v", line, err)
		}
		if open := n.Realtime.Metrics().Open(); open != sockets {
			b.Fatalf("%d sockets open, want %d", open, sockets)
		}
		after := heapNow()
		rssAfter := rss()
		b.ReportMetric(float64(after-before)/sockets/1024, "heap-KiB/socket")
		b.ReportMetric(float64(rssAfter-rssBefore)/sockets/1024, "rss-KiB/socket")
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
	}
}

// rss is this process's resident set size in bytes (0 where /proc is
// missing).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// BenchmarkReconnectStorm: 40 clients reconnect in a loop over a
// 2,000-row scope while commits land; each reconnect is dial → hello,
// then a catch-up round (a bootstrap of the scope) and its ack.
func BenchmarkReconnectStorm(b *testing.B) {
	const clients, rows = 40, 2000
	n := startNode(b, func(c *node.Config) { c.Engine.MaxOperations = new(rows) })
	a := newPusher(b, n.URL(), "alice", "p1")
	seed := make([][2]string, rows)
	for i := range seed {
		seed[i] = [2]string{fmt.Sprintf("row-%05d", i), "p1"}
	}
	a.push(seed...)
	stop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			a.push([2]string{fmt.Sprintf("row-%05d", i%rows), "p1"})
		}
	})
	tok := token(b, "bob", "p1")
	var mu sync.Mutex
	var reconnects, catchups []time.Duration
	var next atomic.Int64
	b.ResetTimer()
	cpu0 := cpuTime(b)
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			id := fmt.Sprintf("storm-%d", w)
			for next.Add(1) <= int64(b.N) {
				start := time.Now()
				c := mustDial(b, n.URL(), tok, id)
				c.hello()
				dialed := time.Since(start)
				c.subscribe("tasks", "p1")
				c.mu.Lock()
				c.rep.cursors["tasks"] = -1 // bootstrap
				c.mu.Unlock()
				c.catchUp() // it closes next: no confirming round
				caught := time.Since(start) - dialed
				c.close()
				mu.Lock()
				reconnects, catchups = append(reconnects, dialed), append(catchups, caught)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	reportCPU(b, cpu0, b.N, "reconnect")
	close(stop)
	writer.Wait()
	reportPercentiles(b, "reconnect-", reconnects)
	reportPercentiles(b, "catchup-", catchups)
}

// BenchmarkUnmatchedCommits: commits that none of 30 subscribed sockets
// matches (another project); CPU per commit of the whole node, push
// included. The hub reads nothing for them.
func BenchmarkUnmatchedCommits(b *testing.B) {
	const sockets = 30
	n := startNode(b)
	a := newPusher(b, n.URL(), "alice", "p1", "p2")
	seq0 := a.push([2]string{"r0", "p1"})
	registerClients(b, n.Store, "bob", sockets, seq0)
	tok := token(b, "bob", "p1")
	last := make(chan struct{}, sockets)
	var want atomic.Int64
	onSeq := func(seq int64) {
		if seq == want.Load() {
			last <- struct{}{}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conns := make([]*benchSocket, sockets)
	for i := range conns {
		s, err := openBenchSocket(ctx, n.URL(), tok, fmt.Sprintf("fan-%d", i), onSeq)
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = s
	}
	defer func() {
		for _, s := range conns {
			s.close()
		}
	}()
	want.Store(-1)
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := range b.N {
		a.push([2]string{"x" + strconv.Itoa(i%100), "p2"})
	}
	// One matching commit: when every socket has it, the hub has handled
	// every commit before it.
	want.Store(seq0 + int64(b.N) + 1)
	if seq := a.push([2]string{"r0", "p1"}); seq != want.Load() {
		b.Fatalf("pushed %d, want %d", seq, want.Load())
	}
	for range sockets {
		select {
		case <-last:
		case <-ctx.Done():
			b.Fatal("the matching commit did not reach every socket")
		}
	}
	b.StopTimer()
	reportCPU(b, cpu0, b.N, "commit")
}

// BenchmarkCommitRead: the read of one one-row commit the hub did for
// every commit of a partition with sockets (BenchmarkMayMatch is what an
// unmatched one costs now).
func BenchmarkCommitRead(b *testing.B) {
	n := startNode(b)
	a := newPusher(b, n.URL(), "alice", "p1")
	seq := a.push([2]string{"r0", "p1"})
	ctx := context.Background()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for range b.N {
		cs, err := n.Store.CommitRange(ctx, partition, seq-1, 1)
		if err != nil || len(cs) != 1 {
			b.Fatalf("read %d commits: %v", len(cs), err)
		}
	}
	b.StopTimer()
	reportCPU(b, cpu0, b.N, "read")
}
