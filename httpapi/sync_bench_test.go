package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/rusage"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

const benchSchema = `{"version":1,"tables":[{"name":"tasks","columns":[
	{"name":"id","type":"string"},
	{"name":"project_id","type":"string"},
	{"name":"title","type":"string","nullable":true}],
	"primaryKey":"id","scopes":["project:{project_id}"]}]}`

// syncRig is a handler over a real engine on a SQLite file
// (synchronous=NORMAL), authenticating every request as one actor.
type syncRig struct {
	h     http.Handler
	table *schema.Table
}

func newSyncRig(tb testing.TB) *syncRig {
	tb.Helper()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(tb.TempDir(), "sync.db"), Synchronous: sqlitestore.SynchronousNormal})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	s, err := schema.Parse([]byte(benchSchema))
	if err != nil {
		tb.Fatal(err)
	}
	if err := st.EnsureSchema(ctx, s); err != nil {
		tb.Fatal(err)
	}
	e, err := engine.New(engine.Config{Schema: s, Store: st})
	if err != nil {
		tb.Fatal(err)
	}
	who := engine.Identity{Partition: "p", ActorID: "alice", Scopes: engine.StaticScopes{"project_id": {"p1"}}}
	h, err := httpapi.New(httpapi.Config{Engine: e, Auth: httpapi.AuthenticatorFunc(func(*http.Request) (engine.Identity, error) { return who, nil })})
	if err != nil {
		tb.Fatal(err)
	}
	t, _ := s.Table("tasks")
	return &syncRig{h: h, table: t}
}

// round posts one request the way the load suite's clients do (zstd and
// gzip accepted) and returns the decoded response.
func (g *syncRig) round(tb testing.TB, frames ...ssp2.Frame) *ssp2.Message {
	tb.Helper()
	body, err := (&ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest, Frames: frames}).AppendEncode(nil)
	if err != nil {
		tb.Fatal(err)
	}
	rec := httptest.NewRecorder()
	g.serve(rec, body)
	if rec.Code != http.StatusOK {
		tb.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	m, err := ssp2.DecodeMessage(rec.Body.Bytes())
	if err != nil {
		tb.Fatalf("response does not decode: %v", err)
	}
	return m
}

func (g *syncRig) serve(w http.ResponseWriter, body []byte) {
	req := httptest.NewRequest(http.MethodPost, "http://node/sync", bytes.NewReader(body))
	req.Header.Set("Content-Type", httpapi.ContentType)
	req.Header.Set("Accept-Encoding", "zstd, gzip")
	g.h.ServeHTTP(w, req)
}

func (g *syncRig) row(tb testing.TB, id, project, title string) []byte {
	tb.Helper()
	b, err := g.table.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte(project)}, {Bytes: []byte(title)}})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// epoch acquires the partition's log epoch.
func (g *syncRig) epoch(tb testing.TB) string {
	tb.Helper()
	m := g.round(tb, &ssp2.ReqHeader{ClientID: "probe", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 3})
	return m.Frames[0].(*ssp2.RespHeader).LogEpoch
}

func pushPull(epoch, ccid string, payload []byte, cursor int64) []ssp2.Frame {
	return []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c1", SchemaVersion: 1, LogEpoch: &epoch},
		&ssp2.PushCommit{ClientCommitID: ccid, Operations: []ssp2.Operation{{Table: "tasks", RowID: "t1", Op: ssp2.OpUpsert, Payload: payload}}},
		&ssp2.PullHeader{Accept: 3},
		&ssp2.Subscription{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: cursor},
	}
}

// discardWriter is a ResponseWriter that keeps nothing: the benchmark
// measures the handler, not a recorder's buffer.
type discardWriter struct {
	hdr    http.Header
	status int
}

func (d *discardWriter) Header() http.Header         { return d.hdr }
func (d *discardWriter) WriteHeader(code int)        { d.status = code }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkSyncRound is one steady push + pull round of a known client
// (one upsert, one incremental subscription) through the whole POST /sync
// handler: content type, authentication, body read, the engine on a
// SQLite file (synchronous=NORMAL), response framing. cpu-ns/op is the
// process's CPU per round.
func BenchmarkSyncRound(b *testing.B) {
	g := newSyncRig(b)
	ep := g.epoch(b)
	payload := g.row(b, "t1", "p1", "x")
	// The first round binds the client and stores its subscription list.
	g.round(b, pushPull(ep, "warm", payload, 0)...)
	cursor := int64(1)
	w := &discardWriter{hdr: http.Header{}}
	b.ReportAllocs()
	cpu := rusage.Self().CPU
	for i := 0; b.Loop(); i++ {
		body, err := (&ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest, Frames: pushPull(ep, fmt.Sprint(i), payload, cursor)}).AppendEncode(nil)
		if err != nil {
			b.Fatal(err)
		}
		clear(w.hdr)
		w.status = 0
		g.serve(w, body)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
		cursor++
	}
	b.StopTimer()
	b.ReportMetric(float64((rusage.Self().CPU-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
