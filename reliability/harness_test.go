package reliability

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// testSchema has two tables, so one commit can span two bus events, and
// float columns, nullable and not, for the non-finite numbers of the
// bad-input classes.
const testSchema = `{"version":1,"tables":[
 {"name":"items","columns":[{"name":"id","type":"string"},{"name":"project_id","type":"string"},
  {"name":"body","type":"string","nullable":true},{"name":"n","type":"integer","nullable":true},
  {"name":"score","type":"float","nullable":true},{"name":"weight","type":"float"}],"primaryKey":"id","scopes":["project:{project_id}"]},
 {"name":"notes","columns":[{"name":"id","type":"string"},{"name":"project_id","type":"string"},
  {"name":"text","type":"string","nullable":true}],"primaryKey":"id","scopes":["project:{project_id}"]}]}`

var secret = []byte("reliability-secret-reliability-secret-0123")

// long reports whether the long campaign was asked for.
func long() bool { return os.Getenv("SYNCNODE_LONG") != "" }

// pick is fast in the default run, slow under SYNCNODE_LONG.
func pick[T any](fast, slow T) T {
	if long() {
		return slow
	}
	return fast
}

// newRand returns a seeded source, logging the seed (SYNCNODE_SEED
// replays one).
func newRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SYNCNODE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SYNCNODE_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("seed %d (SYNCNODE_SEED replays it)", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

func mustSchema(t testing.TB) *schema.Schema {
	t.Helper()
	s, err := schema.Parse([]byte(testSchema))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// store is where a node keeps its rows: a data dir (its SQLite file and
// JetStream store) and, for PostgreSQL, a schema of its own.
type store struct {
	name     string
	dataDir  string
	pgURL    string
	pgSchema string
}

// onBothStores runs f with a fresh store on SQLite and on PostgreSQL (the
// latter skipped without SYNCNODE_TEST_POSTGRES_URL unless CI requires it).
func onBothStores(t *testing.T, f func(t *testing.T, st store)) {
	t.Run("sqlite", func(t *testing.T) { f(t, store{name: "sqlite", dataDir: t.TempDir()}) })
	t.Run("postgres", func(t *testing.T) {
		url, sch := pgtest.Schema(t)
		f(t, store{name: "postgres", dataDir: t.TempDir(), pgURL: url, pgSchema: sch})
	})
}

// nodeConfig is the configuration every node of the suite runs with, in
// this process or in a child.
func nodeConfig(st store) (node.Config, error) {
	s, err := schema.Parse([]byte(testSchema))
	if err != nil {
		return node.Config{}, err
	}
	v, err := auth.NewVerifier(auth.Config{Secret: secret})
	if err != nil {
		return node.Config{}, err
	}
	return node.Config{
		DataDir: st.dataDir, Schema: s, Name: "reliability", HTTP: node.HTTPConfig{Listen: "127.0.0.1:0"},
		NATS:  embedded.Config{Port: embedded.RandomPort},
		Store: node.StoreConfig{Postgres: pgstore.Config{URL: st.pgURL, Schema: st.pgSchema}},
		API:   httpapi.Config{Auth: httpapi.BearerAuth(v)},
	}, nil
}

// runNode is node.New then Start.
func runNode(ctx context.Context, cfg node.Config) (*node.Node, error) {
	n, err := node.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := n.Start(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// startNode starts a node on st in this process, stopped at cleanup.
func startNode(t *testing.T, st store, mod func(*node.Config)) *node.Node {
	t.Helper()
	cfg, err := nodeConfig(st)
	if err != nil {
		t.Fatal(err)
	}
	if mod != nil {
		mod(&cfg)
	}
	n, err := runNode(context.Background(), cfg)
	if err != nil {
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

func token(t testing.TB, actor, partition string, projects ...string) string {
	t.Helper()
	tok, err := auth.Mint(secret, auth.Principal{ActorID: actor, Partition: partition, Scopes: map[string][]string{"project_id": projects}}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// response is one /sync exchange.
type response struct {
	status int
	header http.Header
	body   []byte
	msg    *ssp2.Message // the decoded 200 body
}

// post sends body to /sync; a transport error is returned, not fatal.
func post(ctx context.Context, client *http.Client, url, tok string, body []byte, hdr map[string]string) (response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/sync", bytes.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", httpapi.ContentType)
	req.Header.Set("Accept-Encoding", "identity")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	r := response{status: resp.StatusCode, header: resp.Header, body: b}
	if r.status == http.StatusOK {
		if r.msg, err = ssp2.DecodeMessage(b); err != nil {
			return r, err
		}
	}
	return r, nil
}

func encode(t testing.TB, wire uint16, frames ...ssp2.Frame) []byte {
	t.Helper()
	b, err := (&ssp2.Message{WireVersion: wire, Kind: ssp2.KindRequest, Frames: frames}).AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// epoch acquires a partition's log epoch.
func epoch(t testing.TB, url, tok string) string {
	t.Helper()
	r, err := post(context.Background(), http.DefaultClient, url, tok, encode(t, 2, &ssp2.ReqHeader{ClientID: "epoch-probe", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 3}), nil)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("acquire epoch: %v %d %s", err, r.status, r.body)
	}
	return r.msg.Frames[0].(*ssp2.RespHeader).LogEpoch
}

func frames[T ssp2.Frame](m *ssp2.Message) []T {
	var out []T
	if m == nil {
		return nil
	}
	for _, f := range m.Frames {
		if v, ok := f.(T); ok {
			out = append(out, v)
		}
	}
	return out
}
