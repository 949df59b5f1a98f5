package node

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/testvectors"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// prod is the production bus namespace.
var prod bus.Names

// vectorSchema serves the tables and scope variables the golden request
// vectors use: notes (the 8-column table of segment/rows-two-blocks) and
// tasks, with variables project and team.
const vectorSchema = `{"version":1,"tables":[
 {"name":"notes","columns":[
  {"name":"id","type":"string"},{"name":"title","type":"string","nullable":true},
  {"name":"body","type":"string"},{"name":"count","type":"integer","nullable":true},
  {"name":"score","type":"float"},{"name":"done","type":"boolean"},
  {"name":"meta","type":"json","nullable":true},{"name":"blob","type":"bytes","nullable":true}],
  "primaryKey":"id","scopes":[{"pattern":"project:{project}","column":"body"},{"pattern":"team:{team}","column":"title"}]},
 {"name":"tasks","columns":[{"name":"id","type":"string"},{"name":"project","type":"string"}],
  "primaryKey":"id","scopes":["project:{project}"]}]}`

var testSecret = []byte("node-test-secret-node-test-secret-0123")

type backend struct {
	name string
	cfg  func(t *testing.T, c *Config)
}

// backends runs a test on SQLite and, when configured, PostgreSQL.
var backends = []backend{
	{"sqlite", func(*testing.T, *Config) {}},
	{"postgres", func(t *testing.T, c *Config) { c.Store.Postgres.URL, c.Store.Postgres.Schema = pgtest.Schema(t) }},
}

// startNode starts a real node (store, embedded NATS on a random port,
// relay, segments, engine, HTTP on a random port) and stops it at cleanup.
func startNode(t *testing.T, sch string, mod func(*testing.T, *Config)) *Node {
	t.Helper()
	s, err := schema.Parse([]byte(sch))
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(auth.Config{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		DataDir: t.TempDir(),
		Schema:  s,
		Name:    "test-node",
		HTTP:    HTTPConfig{Listen: "127.0.0.1:0"},
		NATS:    embedded.Config{Port: embedded.RandomPort},
		API:     httpapi.Config{Auth: httpapi.BearerAuth(v)},
	}
	if mod != nil {
		mod(t, &cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return n
}

func token(t *testing.T, actor, partition string, scopes map[string][]string) string {
	t.Helper()
	tok, err := auth.Mint(testSecret, auth.Principal{ActorID: actor, Partition: partition, Scopes: scopes}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func post(t *testing.T, url, tok, contentType string, body []byte, hdr map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept-Encoding", "identity")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, b}
}

// jsonError decodes an SSP2 JSON error body and checks its shape.
func jsonError(t *testing.T, r response, status int, code ssp2.Code) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d (%s), want %d", r.status, r.body, status)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type = %q, want application/json", ct)
	}
	var e struct {
		Code              string `json:"code"`
		Category          string `json:"category"`
		Retryable         *bool  `json:"retryable"`
		RecommendedAction string `json:"recommendedAction"`
		Message           string `json:"message"`
	}
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	info, _ := code.Info()
	if e.Code != string(code) || e.Category != info.Category || e.Retryable == nil || *e.Retryable != info.Retryable || e.RecommendedAction != info.Action || e.Message == "" {
		t.Fatalf("error = %+v, want code %s with its catalog fields", e, code)
	}
}

// TestGoldenRequestVectors sends every golden request vector as-is: each
// valid one gets a well-formed SSP2 response, each invalid one its
// decode error as JSON.
func TestGoldenRequestVectors(t *testing.T) {
	dir := filepath.Join(testvectors.Dir(t), "request")
	var manifest struct {
		Cases   []struct{ Name, Bin string } `json:"cases"`
		Invalid []struct{ Name, Bin, Error string }
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			n := startNode(t, vectorSchema, b.cfg)
			tok := token(t, "actor-1", "vectors", map[string][]string{"project": {"*"}, "team": {"*"}})
			for _, c := range manifest.Cases {
				body, err := os.ReadFile(filepath.Join(dir, c.Bin))
				if err != nil {
					t.Fatal(err)
				}
				r := post(t, n.URL()+"/sync", tok, httpapi.ContentType, body, nil)
				if r.status != http.StatusOK || r.header.Get("Content-Type") != httpapi.ContentType {
					t.Fatalf("%s: status %d %q: %s", c.Name, r.status, r.header.Get("Content-Type"), r.body)
				}
				m, err := ssp2.DecodeMessage(r.body)
				if err != nil {
					t.Fatalf("%s: response does not decode: %v", c.Name, err)
				}
				if m.Kind != ssp2.KindResponse || m.WireVersion != binary16(body[4:6]) {
					t.Fatalf("%s: response kind %v version %d", c.Name, m.Kind, m.WireVersion)
				}
				if _, ok := m.Frames[0].(*ssp2.RespHeader); !ok {
					t.Fatalf("%s: first frame %T", c.Name, m.Frames[0])
				}
			}
			for _, c := range manifest.Invalid {
				body, err := os.ReadFile(filepath.Join(dir, c.Bin))
				if err != nil {
					t.Fatal(err)
				}
				r := post(t, n.URL()+"/sync", tok, httpapi.ContentType, body, nil)
				jsonError(t, r, http.StatusBadRequest, ssp2.Code(c.Error))
			}
		})
	}
}

func binary16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }

// TestHTTPEdges covers the transport rules: content type, auth, body
// limits, compression both ways, and that bad input changes nothing.
func TestHTTPEdges(t *testing.T) {
	n := startNode(t, vectorSchema, func(_ *testing.T, c *Config) { c.API.MaxRequestBytes = 4096 })
	tok := token(t, "actor-1", "edges", map[string][]string{"project": {"*"}, "team": {"*"}})
	req := pullMinimal(t)

	jsonError(t, post(t, n.URL()+"/sync", tok, "application/octet-stream", req, nil), http.StatusUnsupportedMediaType, ssp2.CodeInvalidRequest)
	jsonError(t, post(t, n.URL()+"/sync", "", httpapi.ContentType, req, nil), http.StatusUnauthorized, ssp2.CodeAuthRequired)
	forged, _ := auth.Mint([]byte(strings.Repeat("x", 40)), auth.Principal{ActorID: "a", Partition: "edges"}, time.Hour, time.Now())
	jsonError(t, post(t, n.URL()+"/sync", forged, httpapi.ContentType, req, nil), http.StatusUnauthorized, ssp2.CodeAuthRequired)
	jsonError(t, post(t, n.URL()+"/sync", tok, httpapi.ContentType, bytes.Repeat([]byte{1}, 5000), nil), http.StatusRequestEntityTooLarge, ssp2.CodeInvalidRequest)
	jsonError(t, post(t, n.URL()+"/sync", tok, httpapi.ContentType, []byte("SSP2 garbage bytes"), nil), http.StatusBadRequest, ssp2.CodeInvalidRequest)
	jsonError(t, post(t, n.URL()+"/sync", tok, httpapi.ContentType, []byte("not gzip"), map[string]string{"Content-Encoding": "gzip"}), http.StatusBadRequest, ssp2.CodeInvalidRequest)
	// A gzip bomb is bounded after decompression.
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	_, _ = zw.Write(make([]byte, 1<<20))
	_ = zw.Close()
	jsonError(t, post(t, n.URL()+"/sync", tok, httpapi.ContentType, bomb.Bytes(), map[string]string{"Content-Encoding": "gzip"}), http.StatusRequestEntityTooLarge, ssp2.CodeInvalidRequest)

	// Nothing above touched the log.
	if seq, err := n.Store.CommitMaxSeq(context.Background(), "edges"); err != nil || seq != 0 {
		t.Fatalf("max seq after bad requests = %d, %v", seq, err)
	}

	// A gzip request body is accepted; responses follow Accept-Encoding.
	var gz bytes.Buffer
	zw = gzip.NewWriter(&gz)
	_, _ = zw.Write(req)
	_ = zw.Close()
	for _, enc := range []string{"gzip", "zstd"} {
		r := post(t, n.URL()+"/sync", tok, httpapi.ContentType, gz.Bytes(), map[string]string{"Content-Encoding": "gzip", "Accept-Encoding": enc})
		if r.status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", enc, r.status, r.body)
		}
		body := r.body
		if got := r.header.Get("Content-Encoding"); got == enc {
			body = decompress(t, enc, body)
		} else if got != "" {
			t.Fatalf("Content-Encoding = %q for Accept-Encoding %s", got, enc)
		}
		if _, err := ssp2.DecodeMessage(body); err != nil {
			t.Fatalf("%s response: %v", enc, err)
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(n.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		if path == "/metrics" && !bytes.Contains(b, []byte("syncnode_sync_requests_total")) {
			t.Fatal("metrics lack syncnode_sync_requests_total")
		}
	}
}

func pullMinimal(t *testing.T) []byte {
	t.Helper()
	b, err := (&ssp2.Message{WireVersion: 1, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "edge-client", SchemaVersion: 1},
		&ssp2.PullHeader{Accept: 3},
		&ssp2.Subscription{ID: "s", Table: "tasks", Scopes: map[string][]string{"project": {"p1"}}, Cursor: -1},
	}}).AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decompress(t *testing.T, enc string, b []byte) []byte {
	t.Helper()
	var r io.Reader
	switch enc {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
