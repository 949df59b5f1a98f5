package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// tasksSchema is the tasks table of the bundled example schema.
const tasksSchema = `{"version":1,"tables":[{"name":"tasks","columns":[
	{"name":"id","type":"string"},
	{"name":"project_id","type":"string"},
	{"name":"title","type":"string"},
	{"name":"done","type":"boolean"},
	{"name":"priority","type":"integer","nullable":true},
	{"name":"updated_at_ms","type":"integer","nullable":true}],
	"primaryKey":"id","scopes":["project:{project_id}"]}]}`

const partition = "p"

// server is a real engine over a real SQLite store behind the real HTTP
// handler on a loopback listener.
type server struct {
	t      testing.TB
	URL    string
	store  storage.Store
	engine *engine.Engine
	schema *schema.Schema
	secret []byte
}

// bothStores runs a scenario on SQLite and on PostgreSQL (skipped without
// SYNCNODE_TEST_POSTGRES_URL unless CI requires it).
func bothStores(t *testing.T, f func(t *testing.T)) {
	t.Run("sqlite", f)
	t.Run("postgres", f)
}

// openStore opens the store a test runs on: PostgreSQL in a fresh schema
// for a "postgres" subtest of bothStores, else a SQLite file.
func openStore(t testing.TB) storage.Store {
	t.Helper()
	ctx := context.Background()
	if strings.Contains(t.Name(), "/postgres") {
		url, sch := pgtest.Schema(t)
		st, err := pgstore.Open(ctx, pgstore.Config{URL: url, Schema: sch})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(t.TempDir(), "sync.db")})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func mustSchema(t testing.TB, src string) *schema.Schema {
	t.Helper()
	s, err := schema.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newServer(t testing.TB, mod func(*engine.Config)) *server {
	t.Helper()
	return newServerSchema(t, mustSchema(t, tasksSchema), mod)
}

func newServerSchema(t testing.TB, s *schema.Schema, mod func(*engine.Config)) *server {
	t.Helper()
	ctx := context.Background()
	st := openStore(t)
	t.Cleanup(func() { st.Close() })
	if err := st.EnsureSchema(ctx, s); err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{Schema: s, Store: st}
	if mod != nil {
		mod(&cfg)
	}
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("0123456789abcdef0123456789abcdef")
	v, err := auth.NewVerifier(auth.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	authn := httpapi.AuthenticatorFunc(func(r *http.Request) (engine.Identity, error) {
		p, err := v.VerifyHeader(r.Header.Get("Authorization"))
		if err != nil {
			return engine.Identity{}, err
		}
		return engine.Identity{Partition: p.Partition, ActorID: p.ActorID, Scopes: engine.StaticScopes(p.Scopes)}, nil
	})
	h, err := httpapi.New(httpapi.Config{Engine: e, Auth: authn})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return &server{t: t, URL: hs.URL, store: st, engine: e, schema: s, secret: secret}
}

// token mints a token for actor in the test partition granting projects.
func (s *server) token(actor string, projects ...string) string {
	s.t.Helper()
	tok, err := auth.Mint(s.secret, auth.Principal{ActorID: actor, Partition: partition, Scopes: map[string][]string{"project_id": projects}}, time.Hour, time.Now())
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

// client builds a client for actor granted projects and subscribed to
// each of them ("sub-<project>").
func (s *server) client(actor string, projects []string, mod func(*Config)) *Client {
	s.t.Helper()
	cfg := Config{BaseURL: s.URL, Token: s.token(actor, projects...), Schema: s.schema}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, p := range projects {
		if err := c.Subscribe("sub-"+p, "tasks", map[string][]string{"project_id": {p}}); err != nil {
			s.t.Fatal(err)
		}
	}
	return c
}

// serverRows reads the server's task rows in projects: rowId → version
// and payload.
func (s *server) serverRows(projects ...string) map[string]rowEntry {
	s.t.Helper()
	out := map[string]rowEntry{}
	ctx := context.Background()
	after := ""
	for {
		var rows []storage.Row
		err := s.store.ReadTx(ctx, func(tx storage.ReadTx) error {
			var err error
			rows, err = tx.RowScan(ctx, storage.ScanParams{Partition: partition, Table: "tasks",
				Scopes: map[string][]string{"project_id": projects}, AfterRowID: after, Limit: 50000})
			return err
		})
		if err != nil {
			s.t.Fatal(err)
		}
		for _, r := range rows {
			out[r.RowID] = rowEntry{version: r.ServerVersion, data: bytes.Clone(r.Payload)}
		}
		if len(rows) < 50000 {
			return out
		}
		after = rows[len(rows)-1].RowID
	}
}

// replicaRows is a copy of the client's task rows.
func replicaRows(c *Client) map[string]rowEntry {
	c.rep.mu.RLock()
	defer c.rep.mu.RUnlock()
	tr := c.rep.tables["tasks"]
	out := make(map[string]rowEntry, tr.len())
	tr.each(func(id string, e rowEntry) { out[id] = e })
	return out
}

// sameRows fails t unless got and want hold the same rows, versions and
// bytes.
func sameRows(t testing.TB, what string, got, want map[string]rowEntry) {
	t.Helper()
	var missing, extra, differ []string
	for id, w := range want {
		g, ok := got[id]
		switch {
		case !ok:
			missing = append(missing, id)
		case g.version != w.version || !bytes.Equal(g.data, w.data):
			differ = append(differ, fmt.Sprintf("%s (v%d vs v%d)", id, g.version, w.version))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			extra = append(extra, id)
		}
	}
	if len(missing)+len(extra)+len(differ) > 0 {
		t.Fatalf("%s: %d rows, want %d; missing %d %v, extra %d %v, differing %d %v", what, len(got), len(want),
			len(missing), head(missing), len(extra), head(extra), len(differ), head(differ))
	}
}

func head(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}

func task(id, project, title string) map[string]any {
	return map[string]any{"id": id, "project_id": project, "title": title, "done": false}
}

func mustSync(t testing.TB, c *Client) Result {
	t.Helper()
	res, err := c.SyncUntilIdle(context.Background())
	if err != nil {
		t.Fatalf("sync %s: %v", c.ClientID(), err)
	}
	return res
}

func mustCommit(t testing.TB, c *Client, ops ...Op) string {
	t.Helper()
	id, err := c.Commit(context.Background(), ops...)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

var errOffline = errors.New("network is unreachable")

// faultTransport forwards to the default transport and lets a test break
// chosen /sync exchanges.
type faultTransport struct {
	mu      sync.Mutex
	base    http.RoundTripper
	syncs   int // /sync requests seen
	offline bool
	// loseResponse drops the body of the next /sync response after
	// reading it whole, so the server finished the request.
	loseResponse bool
	// cutAt cuts the body of the cutAt-th /sync response (1-based) after
	// cutBytes bytes.
	cutAt    int
	cutBytes int64
	cuts     atomic.Int32
	// segmentScopes replaces X-Syncular-Scopes on segment downloads;
	// corruptSegment flips a byte of every downloaded segment (fetched
	// uncompressed, so the content-address check is what catches it).
	segmentScopes  string
	corruptSegment bool
}

func newFaultTransport() *faultTransport {
	return &faultTransport{base: defaultTransport}
}

func (f *faultTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	offline := f.offline
	isSync := r.URL.Path == "/sync"
	n := 0
	lose := false
	if isSync && !offline {
		f.syncs++
		n = f.syncs
		lose, f.loseResponse = f.loseResponse, false
	}
	cut := isSync && n == f.cutAt
	isSegment := strings.HasPrefix(r.URL.Path, "/segments/")
	scopes, corrupt := f.segmentScopes, f.corruptSegment
	f.mu.Unlock()
	if offline {
		return nil, errOffline
	}
	if isSegment && (scopes != "" || corrupt) {
		r = r.Clone(r.Context())
		if scopes != "" {
			r.Header.Set("X-Syncular-Scopes", scopes)
		}
		if corrupt {
			r.Header.Set("Accept-Encoding", "identity")
		}
	}
	resp, err := f.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	switch {
	case isSegment && corrupt && resp.StatusCode == http.StatusOK:
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		b[len(b)/2] ^= 0xff
		resp.Body = io.NopCloser(bytes.NewReader(b))
	case lose:
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(&errReader{err: io.ErrUnexpectedEOF})
	case cut:
		f.cuts.Add(1)
		resp.Body = &cutBody{r: io.LimitReader(resp.Body, f.cutBytes), c: resp.Body}
	}
	return resp, nil
}

type errReader struct{ err error }

func (e *errReader) Read([]byte) (int, error) { return 0, e.err }

// cutBody ends a body with a connection error after its limit.
type cutBody struct {
	r io.Reader
	c io.Closer
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if errors.Is(err, io.EOF) {
		err = errors.New("connection reset by peer")
	}
	return n, err
}

func (b *cutBody) Close() error { return b.c.Close() }
