package node

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/ssp2"
)

// errorLog records the messages of ERROR records.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelError }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }

func (l *errorLog) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

// seedBig writes rows rows of about 64 KiB each into p1, so a bootstrap
// response is tens of megabytes: far more than socket buffers hold.
func seedBig(t *testing.T, n *Node, tok, ep string, rows int) {
	t.Helper()
	tbl, _ := n.cfg.Schema.Table("tasks")
	title := strings.Repeat("x", 64<<10)
	for b := 0; b*100 < rows; b++ {
		var ops []ssp2.Operation
		for i := b * 100; i < min(rows, (b+1)*100); i++ {
			id := fmt.Sprintf("big%05d", i)
			row, err := tbl.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte("p1")}, {Bytes: []byte(title)}})
			if err != nil {
				t.Fatal(err)
			}
			ops = append(ops, ssp2.Operation{Table: "tasks", RowID: id, Op: ssp2.OpUpsert, Payload: row})
		}
		if r := frame[*ssp2.PushResult](syncV2(t, n, tok, ep, &ssp2.PushCommit{ClientCommitID: fmt.Sprint("big-", b), Operations: ops})); r.Status != ssp2.PushApplied {
			t.Fatalf("seed: %+v", r)
		}
	}
}

// rawSync starts a POST /sync of body on a raw connection and returns it
// with the response, once its headers arrived.
func rawSync(t *testing.T, n *Node, tok string, body []byte) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /sync HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nAccept-Encoding: identity\r\nContent-Length: %d\r\n\r\n",
		tok, httpapi.ContentType, len(body))
	if _, err := c.Write(body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return c, resp
}

// metric reads one counter from /metrics (0 when absent).
func metric(t *testing.T, n *Node, name string) float64 {
	t.Helper()
	resp, err := http.Get(n.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		var v float64
		if strings.HasPrefix(line, name+" ") {
			fmt.Sscan(strings.TrimPrefix(line, name+" "), &v)
			return v
		}
	}
	return 0
}

func bootstrapRequest(t *testing.T, ep string, accept uint8) []byte {
	t.Helper()
	b, err := (&ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "reader", SchemaVersion: 1, LogEpoch: &ep},
		&ssp2.PullHeader{Accept: accept, LimitSnapshotRows: 1000},
		&ssp2.Subscription{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: -1},
	}}).AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestClientGoneMidResponse: a client that hangs up in the middle of a
// large response is counted as gone, and nothing is logged at ERROR.
func TestClientGoneMidResponse(t *testing.T) {
	log := &errorLog{}
	n := startNode(t, taskSchema, func(_ *testing.T, c *Config) { c.Logger = slog.New(log) })
	tok := token(t, "alice", "acme", map[string][]string{"project_id": {"p1"}})
	ep := acquireEpoch(t, n, tok)
	seedBig(t, n, tok, ep, 300)

	c, resp := rawSync(t, n, tok, bootstrapRequest(t, ep, ssp2.AcceptInlineRows))
	if _, err := io.ReadFull(resp.Body, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	poll.Until(t, 20*time.Second, "the server to notice the client went away", func() bool {
		return metric(t, n, "syncnode_sync_clients_gone_total") >= 1
	})
	if got := metric(t, n, "syncnode_sync_request_errors_total"); got != 0 {
		t.Fatalf("request errors = %v, want 0", got)
	}
	if msgs := log.messages(); len(msgs) > 0 {
		t.Fatalf("logged at ERROR: %q", msgs)
	}
}
