package realtime_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/realtime"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// The schema every test serves: tasks, scoped by project.
const taskSchema = `{"version":1,"tables":[{"name":"tasks","columns":[
	{"name":"id","type":"string"},
	{"name":"project_id","type":"string"},
	{"name":"title","type":"string","nullable":true}],
	"primaryKey":"id","scopes":["project:{project_id}"]}]}`

const partition = "acme"

var testSecret = []byte("realtime-test-secret-realtime-test-secret")

// wait is the deadline of every poll in these tests.
const wait = 30 * time.Second

type backend struct {
	name string
	cfg  func(t *testing.T, c *node.Config)
}

// backends runs a test on SQLite and, when configured, PostgreSQL.
var backends = []backend{
	{"sqlite", func(*testing.T, *node.Config) {}},
	{"postgres", func(t *testing.T, c *node.Config) { c.Store.Postgres.URL, c.Store.Postgres.Schema = pgtest.Schema(t) }},
}

// on returns the node option that selects the backend.
func (b backend) on(t *testing.T) func(*node.Config) {
	return func(c *node.Config) { b.cfg(t, c) }
}

func eachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

func mustSchema(t testing.TB) *schema.Schema {
	t.Helper()
	s, err := schema.Parse([]byte(taskSchema))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startNode starts a real node (store, NATS, relay, gate, engine,
// realtime hub, HTTP on a random port) and stops it at cleanup.
func startNode(t testing.TB, mods ...func(*node.Config)) *node.Node {
	t.Helper()
	v, err := auth.NewVerifier(auth.Config{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{
		DataDir:  t.TempDir(),
		Schema:   mustSchema(t),
		Name:     "rt-node",
		HTTP:     node.HTTPConfig{Listen: "127.0.0.1:0"},
		NATS:     embedded.Config{Port: embedded.RandomPort, DontListen: true},
		API:      httpapi.Config{Auth: httpapi.BearerAuth(v)},
		Realtime: node.RealtimeConfig{Hub: realtime.Config{HeartbeatInterval: time.Hour}},
	}
	for _, m := range mods {
		m(&cfg)
	}
	n, err := node.New(cfg)
	if err == nil {
		err = n.Start(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Errorf("stop node: %v", err)
		}
	})
	return n
}

func token(t testing.TB, actor string, projects ...string) string {
	t.Helper()
	tok, err := auth.Mint(testSecret, auth.Principal{ActorID: actor, Partition: partition, Scopes: map[string][]string{"project_id": projects}}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// row encodes a tasks row.
func row(t testing.TB, id, project, title string) []byte {
	t.Helper()
	tbl, _ := mustSchema(t).Table("tasks")
	b, err := tbl.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte(project)}, {Bytes: []byte(title)}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func encode(t testing.TB, wire uint16, frames ...ssp2.Frame) []byte {
	t.Helper()
	b, err := (&ssp2.Message{WireVersion: wire, Kind: ssp2.KindRequest, Frames: frames}).AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// postSync sends one request to POST /sync and returns the status and the
// body (identity encoding).
func postSync(t testing.TB, base, tok string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/sync", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", httpapi.ContentType)
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func decode(t testing.TB, b []byte) *ssp2.Message {
	t.Helper()
	m, err := ssp2.DecodeMessage(b)
	if err != nil {
		t.Fatalf("response does not decode: %v (%x)", err, b)
	}
	return m
}

func framesOf[T ssp2.Frame](m *ssp2.Message) []T {
	var out []T
	for _, f := range m.Frames {
		if v, ok := f.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// acquireEpoch asks for the partition's log epoch over HTTP.
func acquireEpoch(t testing.TB, base, tok string) string {
	t.Helper()
	status, b := postSync(t, base, tok, encode(t, 2, &ssp2.ReqHeader{ClientID: "epoch-probe", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 1}))
	if status != http.StatusOK {
		t.Fatalf("epoch probe: %d %s", status, b)
	}
	return decode(t, b).Frames[0].(*ssp2.RespHeader).LogEpoch
}

// pusher writes commits over HTTP as one actor and client.
type pusher struct {
	t      testing.TB
	base   string
	tok    string
	client string
	epoch  string
	n      int
}

func newPusher(t testing.TB, base, actor string, projects ...string) *pusher {
	tok := token(t, actor, projects...)
	return &pusher{t: t, base: base, tok: tok, client: "pusher-" + actor, epoch: acquireEpoch(t, base, tok)}
}

// push writes one commit upserting the rows (id → project) and returns
// its seq.
func (p *pusher) push(rows ...[2]string) int64 {
	p.t.Helper()
	p.n++
	ops := make([]ssp2.Operation, len(rows))
	for i, r := range rows {
		ops[i] = ssp2.Operation{Table: "tasks", RowID: r[0], Op: ssp2.OpUpsert, Payload: row(p.t, r[0], r[1], fmt.Sprintf("v%d", p.n))}
	}
	ep := p.epoch
	status, b := postSync(p.t, p.base, p.tok, encode(p.t, 2, &ssp2.ReqHeader{ClientID: p.client, SchemaVersion: 1, LogEpoch: &ep},
		&ssp2.PushCommit{ClientCommitID: fmt.Sprintf("c%d", p.n), Operations: ops}))
	if status != http.StatusOK {
		p.t.Fatalf("push: %d %s", status, b)
	}
	m := decode(p.t, b)
	res := framesOf[*ssp2.PushResult](m)
	if len(res) != 1 || res[0].Status != ssp2.PushApplied {
		p.t.Fatalf("push answered %+v", m.Frames)
	}
	return *res[0].CommitSeq
}

// wsClient is a test-side realtime client: it dials the socket, collects
// what the server sends, and keeps a replica of the rows it applied.
type wsClient struct {
	t        testing.TB
	conn     *websocket.Conn
	clientID string
	tok      string
	base     string

	mu      sync.Mutex
	cond    *sync.Cond
	events  []ssp2.ControlMessage // hello, sync, heartbeat, presence, unknown (error)
	deltas  [][]byte              // 0x00 payloads, in arrival order
	chunks  [][]byte              // 0x01 payloads not yet taken by a round
	err     error                 // the read loop's end
	readEnd chan struct{}

	rep replica
}

// dial opens the socket; on refusal it returns the HTTP response.
func dial(t testing.TB, base, tok, clientID string) (*wsClient, *http.Response, error) {
	t.Helper()
	url := "ws" + strings.TrimPrefix(base, "http") + "/realtime?clientId=" + clientID
	h := http.Header{}
	if tok != "" {
		h.Set("Authorization", "Bearer "+tok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h, HTTPClient: httpClient})
	if err != nil {
		return nil, resp, err
	}
	conn.SetReadLimit(64 << 20)
	c := &wsClient{t: t, conn: conn, clientID: clientID, tok: tok, base: base, readEnd: make(chan struct{}), rep: newReplica()}
	c.cond = sync.NewCond(&c.mu)
	go c.readLoop()
	t.Cleanup(func() { c.close() })
	return c, resp, nil
}

func mustDial(t testing.TB, base, tok, clientID string) *wsClient {
	t.Helper()
	c, resp, err := dial(t, base, tok, clientID)
	if err != nil {
		t.Fatalf("dial: %v (%+v)", err, resp)
	}
	return c
}

func (c *wsClient) close() {
	_ = c.conn.Close(websocket.StatusNormalClosure, "")
	<-c.readEnd
}

func (c *wsClient) readLoop() {
	defer close(c.readEnd)
	for {
		typ, b, err := c.conn.Read(context.Background())
		c.mu.Lock()
		switch {
		case err != nil:
			c.err = err
		case typ == websocket.MessageText:
			m, perr := ssp2.ParseControlMessage(b)
			if perr != nil {
				c.err = fmt.Errorf("server sent a malformed control message %s: %w", b, perr)
			} else {
				c.events = append(c.events, m)
			}
		case len(b) > 0 && b[0] == 0x00:
			c.deltas = append(c.deltas, b[1:])
		case len(b) > 0 && b[0] == 0x01:
			c.chunks = append(c.chunks, b[1:])
		default:
			c.err = fmt.Errorf("server sent binary message with tag %x", b)
		}
		failed := c.err != nil
		c.cond.Broadcast()
		c.mu.Unlock()
		if failed {
			return
		}
	}
}

// until waits, with the deadline, for cond (called under the lock).
func (c *wsClient) until(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(wait)
	stop := time.AfterFunc(wait, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for !cond() {
		if c.err != nil || time.Now().After(deadline) {
			c.t.Fatalf("waiting for %s: %v", what, c.err)
		}
		c.cond.Wait()
	}
}

// closeStatus waits for the connection to end and returns its close code.
func (c *wsClient) closeStatus() websocket.StatusCode {
	c.t.Helper()
	select {
	case <-c.readEnd:
	case <-time.After(wait):
		c.t.Fatal("the server did not close the connection")
	}
	return websocket.CloseStatus(c.err)
}

// event returns the i-th control message of type T, waiting for it.
func event[T ssp2.ControlMessage](c *wsClient, i int) T {
	c.t.Helper()
	var out T
	c.until(fmt.Sprintf("event %T #%d", out, i), func() bool {
		n := 0
		for _, m := range c.events {
			if v, ok := m.(T); ok {
				if n == i {
					out = v
					return true
				}
				n++
			}
		}
		return false
	})
	return out
}

// count returns how many control messages of type T arrived.
func count[T ssp2.ControlMessage](c *wsClient) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.events {
		if _, ok := m.(T); ok {
			n++
		}
	}
	return n
}

func (c *wsClient) hello() *ssp2.Hello { return event[*ssp2.Hello](c, 0) }

// delta waits for the i-th delta and returns it decoded.
func (c *wsClient) delta(i int) *ssp2.Message {
	c.t.Helper()
	var b []byte
	c.until(fmt.Sprintf("delta #%d", i), func() bool {
		if len(c.deltas) > i {
			b = c.deltas[i]
			return true
		}
		return false
	})
	return decode(c.t, b)
}

func (c *wsClient) numDeltas() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.deltas)
}

func (c *wsClient) sendText(s string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *wsClient) sendBinary(b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return c.conn.Write(ctx, websocket.MessageBinary, b)
}

func (c *wsClient) ack(cursor int64) {
	b, _ := ssp2.MarshalControl(&ssp2.Ack{Cursor: cursor})
	c.sendText(string(b))
}

func (c *wsClient) publish(scopeKey, doc string) {
	c.sendText(fmt.Sprintf(`{"event":"presence","data":{"scopeKey":%q,"doc":%s}}`, scopeKey, doc))
}

// round sends req as 0x01 chunks of chunk bytes and returns the response
// bytes, reassembled.
func (c *wsClient) round(req []byte, chunk int) []byte {
	c.t.Helper()
	for off := 0; off < len(req); off += chunk {
		end := min(off+chunk, len(req))
		if err := c.sendBinary(append([]byte{0x01}, req[off:end]...)); err != nil {
			c.t.Fatalf("send round chunk: %v", err)
		}
	}
	sc := ssp2.NewStreamScanner(ssp2.KindResponse, 64<<20)
	var out []byte
	c.until("the round's END", func() bool {
		for len(c.chunks) > 0 {
			ch := c.chunks[0]
			c.chunks = c.chunks[1:]
			m, excess, done, err := sc.Push(ch)
			if err != nil || (done && excess != 0) || (done && len(c.chunks) > 0) {
				c.t.Errorf("round response framing: err %v excess %d, %d chunks after END", err, excess, len(c.chunks))
				c.err = errors.New("bad round framing")
				return false
			}
			if done {
				out = m
				return true
			}
		}
		return false
	})
	return out
}

// pullRequest is a pull of the replica's subscriptions at their cursors.
func (c *wsClient) pullRequest() []byte {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	frames := []ssp2.Frame{&ssp2.ReqHeader{ClientID: c.clientID, SchemaVersion: 1, LogEpoch: c.rep.epochPtr()}, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}}
	for _, s := range c.rep.subs {
		s := *s
		s.Cursor = c.rep.cursors[s.ID]
		frames = append(frames, &s)
	}
	return encode(c.t, 2, frames...)
}

// catchUp runs pull rounds over the socket until the log is exhausted
// (an epoch reset included), applying them, then acks the cursor floor.
// The ack has no reply: the server may still apply it after a commit made
// once catchUp returns, and answer that commit with a wake-up instead of
// a delta (the session stays suppressed until an ack reaches it).
func (c *wsClient) catchUp() {
	c.t.Helper()
	for range 10 {
		if !c.pullRound() {
			c.ack(c.floor())
			return
		}
	}
	c.t.Fatal("sync: too many rounds")
}

// sync is catchUp, then one more round, which the server answers only
// after it applied the ack (it handles a socket's messages in order): a
// commit made after sync returns meets the ack applied, so it comes as a
// delta. Should that round bring commits (another writer's), sync acks
// and confirms again.
func (c *wsClient) sync() {
	c.t.Helper()
	c.catchUp()
	for range 10 {
		floor := c.floor()
		if !c.pullRound() && c.floor() == floor {
			return
		}
		c.catchUp()
	}
	c.t.Fatal("sync: the log kept moving")
}

// pullRound runs one pull round and applies it; it reports whether
// another round is needed.
func (c *wsClient) pullRound() bool {
	c.t.Helper()
	m := decode(c.t, c.round(c.pullRequest(), 1<<20))
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rep.apply(c.t, m, false)
}

func (c *wsClient) floor() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Min(mapsValues(c.rep.cursors))
}

func mapsValues(m map[string]int64) []int64 {
	out := make([]int64, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// applyDelta applies the i-th delta to the replica and acks it.
func (c *wsClient) applyDelta(i int) *ssp2.Message {
	c.t.Helper()
	m := c.delta(i)
	c.mu.Lock()
	c.rep.apply(c.t, m, true)
	next := framesOf[*ssp2.SubEnd](m)[0].NextCursor
	c.mu.Unlock()
	c.ack(next)
	return m
}

// replica is the rows a test client applied.
type replica struct {
	epoch   string
	subs    []*ssp2.Subscription
	cursors map[string]int64
	rows    map[string]storedRow // rowId → row
	seqs    []int64              // commit seqs applied, in order (deltas and pulls)
}

type storedRow struct {
	version int64
	row     []byte
}

func newReplica() replica {
	return replica{cursors: map[string]int64{}, rows: map[string]storedRow{}}
}

func (r *replica) epochPtr() *string {
	if r.epoch == "" {
		return nil
	}
	e := r.epoch
	return &e
}

// subscribe registers a subscription starting from the log's beginning
// (cursor 0: the commits arrive as COMMIT frames, no bootstrap).
func (c *wsClient) subscribe(id string, projects ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rep.subs = append(c.rep.subs, &ssp2.Subscription{ID: id, Table: "tasks", Scopes: map[string][]string{"project_id": projects}})
	c.rep.cursors[id] = 0
}

// apply applies a response; it reports whether another round is needed
// (an epoch reset, or a section that stopped before the log's end).
func (r *replica) apply(t testing.TB, m *ssp2.Message, isDelta bool) bool {
	t.Helper()
	h := m.Frames[0].(*ssp2.RespHeader)
	if h.ResetRequired {
		r.epoch = h.LogEpoch
		r.rows = map[string]storedRow{}
		for id := range r.cursors {
			r.cursors[id] = 0
		}
		return true
	}
	again, reset := false, false
	var sub string
	var seen map[int64]bool
	for _, f := range m.Frames {
		switch f := f.(type) {
		case *ssp2.ErrorFrame:
			t.Fatalf("response carries ERROR %s: %s", f.Code, f.Message)
		case *ssp2.SubStart:
			sub, seen = f.ID, map[int64]bool{}
			if f.Status == ssp2.SubReset && !isDelta {
				// Re-bootstrap the subscription from scratch (SPEC.md
				// §4.6): a widened scope resets it. The replica's rows
				// are not kept per subscription, so all go.
				r.rows = map[string]storedRow{}
				r.cursors[sub] = -1
				again, reset = true, true
				continue
			}
			if f.Status != ssp2.SubActive {
				t.Fatalf("section %s answered %v %s", f.ID, f.Status, f.ReasonCode)
			}
		case *ssp2.Commit:
			if isDelta && f.CommitSeq <= r.cursors[sub] {
				t.Fatalf("duplicate delta: commit %d for %s at cursor %d", f.CommitSeq, sub, r.cursors[sub])
			}
			if !seen[f.CommitSeq] {
				r.seqs = append(r.seqs, f.CommitSeq)
				seen[f.CommitSeq] = true
			}
			for _, ch := range f.Changes {
				if ch.Op == ssp2.OpDelete {
					delete(r.rows, ch.RowID)
				} else {
					r.rows[ch.RowID] = storedRow{*ch.RowVersion, append([]byte(nil), ch.Row...)}
				}
			}
		case *ssp2.SubEnd:
			if reset {
				reset = false
				continue // the reset section's end: its cursor stays -1
			}
			if !isDelta && f.NextCursor > r.cursors[sub] && len(seen) > 0 {
				again = true
			}
			r.cursors[sub] = max(r.cursors[sub], f.NextCursor)
		}
	}
	return again
}

// assertMatchesServer checks the replica holds exactly the server's rows
// of the projects.
func assertMatchesServer(t testing.TB, st storage.Store, c *wsClient, projects ...string) {
	t.Helper()
	rows, err := st.RowList(context.Background(), storage.RowListParams{Partition: partition, Table: "tasks", Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]storedRow{}
	for _, r := range rows {
		if slices.Contains(projects, r.Scopes["project_id"]) {
			want[r.RowID] = storedRow{r.ServerVersion, r.Payload}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(want) != len(c.rep.rows) {
		t.Fatalf("replica has %d rows, the server %d", len(c.rep.rows), len(want))
	}
	for id, w := range want {
		g, ok := c.rep.rows[id]
		if !ok || g.version != w.version || !bytes.Equal(g.row, w.row) {
			t.Fatalf("row %s: replica %+v, server %+v", id, g, w)
		}
	}
}

// waitMetric polls a hub counter.
func waitMetric(t testing.TB, what string, v func() int64, want int64) {
	t.Helper()
	poll.Until(t, wait, what, func() bool { return v() >= want })
}
