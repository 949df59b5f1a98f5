package node_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncnode/syncnode/blobs"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/signedurl"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// blobHTTP is a node serving benchBlobSchema, reached over HTTP.
type blobHTTP struct {
	t     *testing.T
	n     *node.Node
	sc    *schema.Schema
	epoch string
	seq   int
}

func startBlobHTTP(t *testing.T, postgres bool, mod func(*node.Config)) *blobHTTP {
	t.Helper()
	sc, err := schema.Parse([]byte(benchBlobSchema))
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, func(c *node.Config) {
		c.Schema = sc
		if postgres {
			u, sch := pgtest.Schema(t)
			c.Store = node.StoreConfig{Postgres: pgstore.Config{URL: u, Schema: sch}}
		}
		if mod != nil {
			mod(c)
		}
	})
	return &blobHTTP{t: t, n: n, sc: sc}
}

// do sends one request to an absolute URL, or a path of the node, with
// tok as the bearer token ("" sends none).
func (h *blobHTTP) do(method, target, tok string, body []byte, hdr ...string) (*http.Response, []byte) {
	h.t.Helper()
	if strings.HasPrefix(target, "/") {
		target = h.n.URL() + target
	}
	req, err := http.NewRequest(method, target, bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	req.Header.Set("Accept-Encoding", "identity")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp, b
}

func (h *blobHTTP) wantCode(what string, resp *http.Response, body []byte, status int, code ssp2.Code) {
	h.t.Helper()
	var e struct{ Code string }
	if resp.StatusCode != status || json.Unmarshal(body, &e) != nil || e.Code != string(code) {
		h.t.Fatalf("%s: %d %s, want %d %s", what, resp.StatusCode, body, status, code)
	}
}

// attRow is a files row of project p1 whose att references data.
func (h *blobHTTP) attRow(rowID, project string, data []byte) []ssp2.Value {
	return []ssp2.Value{{Bytes: []byte(rowID)}, {Bytes: []byte(project)},
		{Bytes: fmt.Appendf(nil, `{"blobId":"%s","byteLength":%d,"mediaType":"image/png"}`, blobIDOf(data), len(data))}}
}

// push upserts a files row of project p1 referencing data over POST /sync.
func (h *blobHTTP) push(tok, rowID string, data []byte) *ssp2.PushResult {
	h.t.Helper()
	send := func(frames ...ssp2.Frame) *ssp2.Message {
		body, err := (&ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest, Frames: frames}).AppendEncode(nil)
		if err != nil {
			h.t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, h.n.URL()+"/sync", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/vnd.syncular.sync.v2")
		req.Header.Set("Accept-Encoding", "identity")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			h.t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		m, err := ssp2.DecodeMessage(out)
		if resp.StatusCode != http.StatusOK || err != nil {
			h.t.Fatalf("sync: %d %s (%v)", resp.StatusCode, out, err)
		}
		return m
	}
	if h.epoch == "" {
		h.epoch = send(&ssp2.ReqHeader{ClientID: "presign", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 3}).Frames[0].(*ssp2.RespHeader).LogEpoch
	}
	tbl, _ := h.sc.Table("files")
	payload, err := tbl.Codec.AppendRow(nil, h.attRow(rowID, "p1", data))
	if err != nil {
		h.t.Fatal(err)
	}
	h.seq++
	ep := h.epoch
	m := send(&ssp2.ReqHeader{ClientID: "presign", SchemaVersion: 1, LogEpoch: &ep},
		&ssp2.PushCommit{ClientCommitID: fmt.Sprint("c", h.seq), Operations: []ssp2.Operation{{Table: "files", RowID: rowID, Op: ssp2.OpUpsert, Payload: payload}}})
	for _, f := range m.Frames {
		if r, ok := f.(*ssp2.PushResult); ok {
			return r
		}
	}
	h.t.Fatalf("no push result in %+v", m.Frames)
	return nil
}

// urlGrant is the answer of a presigned grant or download.
type urlGrant struct {
	URL            string `json:"url"`
	URLExpiresAtMs int64  `json:"urlExpiresAtMs"`
	Present        bool   `json:"present"`
}

// Presigned blob upload and download through a real node over HTTP, on
// both stores (SPEC.md §5.9.3, §5.9.5 with §5.4 tokens): the grant is a
// PUT of at most byteLength bytes that needs no bearer token; an
// authorized download answers {url, urlExpiresAtMs} and the url serves
// the bytes without one; tampered, expired, foreign-kind, other-blob and
// other-partition urls are refused with the spec's codes, and another
// scope gets no url at all.
func TestBlobsPresigned(t *testing.T) {
	for _, pg := range []bool{false, true} {
		t.Run(map[bool]string{false: "sqlite", true: "postgres"}[pg], func(t *testing.T) { testBlobsPresigned(t, pg) })
	}
}

func testBlobsPresigned(t *testing.T, postgres bool) {
	key := bytes.Repeat([]byte("presign-key-"), 3)
	clk := clock.NewManual(time.Now())
	h := startBlobHTTP(t, postgres, func(c *node.Config) {
		c.Clock = clk
		c.SignedURLs = node.SignedURLsConfig{Key: key, TTL: 2 * time.Minute}
		c.Blobs = blobs.Config{MaxBytes: 4 << 20}
	})
	alice := nodetest.Token(t, "alice", "acme", map[string][]string{"project_id": {"p1"}})
	bob := nodetest.Token(t, "bob", "acme", map[string][]string{"project_id": {"p2"}})
	photo := bytes.Repeat([]byte("presigned photo "), 80_000) // 1.28 MB, two chunks
	id := blobIDOf(photo)

	grant := func(tok string, n int) (*http.Response, []byte) {
		return h.do(http.MethodPost, "/blobs/"+id+"/upload-grant", tok, fmt.Appendf(nil, `{"byteLength":%d,"mediaType":"image/png"}`, n))
	}
	resp, body := grant(alice, 4<<20+1)
	h.wantCode("grant over the cap", resp, body, http.StatusRequestEntityTooLarge, ssp2.CodeBlobTooLarge)
	resp, body = grant(alice, len(photo))
	var g urlGrant
	if resp.StatusCode != 200 || json.Unmarshal(body, &g) != nil || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("grant: %d %s", resp.StatusCode, body)
	}
	if !strings.HasPrefix(g.URL, h.n.URL()+"/blobs/"+id+"?st=") || g.URLExpiresAtMs != clk.Now().Add(2*time.Minute).Truncate(time.Second).Add(time.Second).UnixMilli() {
		t.Fatalf("grant %+v at %v", g, clk.Now())
	}
	// The grant binds the size: a longer body is refused, declared or
	// streamed, and so are bytes that are not the blob.
	resp, body = h.do(http.MethodPut, g.URL, "", append(bytes.Clone(photo), 'x'))
	h.wantCode("presigned PUT over the granted size", resp, body, http.StatusRequestEntityTooLarge, ssp2.CodeBlobTooLarge)
	other := bytes.Clone(photo)
	other[0] ^= 1
	resp, body = h.do(http.MethodPut, g.URL, "", other)
	h.wantCode("presigned PUT of other bytes", resp, body, http.StatusBadRequest, ssp2.CodeBlobHashMismatch)
	// A tampered or expired grant uploads nothing.
	resp, body = h.do(http.MethodPut, nodetest.TamperURL(t, g.URL), "", photo)
	h.wantCode("tampered grant", resp, body, http.StatusForbidden, ssp2.CodeBlobForbidden)
	signer, err := signedurl.New(signedurl.Config{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	old, _ := signer.SignUpload("acme", id, int64(len(photo)), clk.Now().Add(-time.Hour))
	resp, body = h.do(http.MethodPut, h.n.URL()+"/blobs/"+id+"?st="+old, "", photo)
	h.wantCode("expired grant", resp, body, http.StatusForbidden, ssp2.CodeBlobForbidden)
	if _, held, _ := h.n.Store.BlobGet(t.Context(), "acme", id); held {
		t.Fatal("a refused presigned PUT stored the blob")
	}

	if resp, body = h.do(http.MethodPut, g.URL, "", photo, "Content-Type", "image/png"); resp.StatusCode != 200 || len(body) != 0 {
		t.Fatalf("presigned PUT without a token: %d %s", resp.StatusCode, body)
	}
	if resp, body = grant(alice, len(photo)); resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `{"present":true}` {
		t.Fatalf("grant after the upload: %d %s", resp.StatusCode, body)
	}
	if r := h.push(alice, "f1", photo); r.Status != ssp2.PushApplied {
		t.Fatalf("push referencing the presigned upload = %+v", r)
	}

	// Download: the authorized endpoint mints a url and sends no bytes.
	resp, body = h.do(http.MethodGet, "/blobs/"+id, alice, nil)
	var d urlGrant
	if resp.StatusCode != 200 || json.Unmarshal(body, &d) != nil || d.URL == "" || d.URLExpiresAtMs != g.URLExpiresAtMs ||
		resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("authorized download: %d %s", resp.StatusCode, body)
	}
	resp, body = h.do(http.MethodGet, "/blobs/"+id, bob, nil)
	h.wantCode("another scope", resp, body, http.StatusForbidden, ssp2.CodeBlobForbidden)
	resp, body = h.do(http.MethodGet, d.URL, "", nil)
	if resp.StatusCode != 200 || !bytes.Equal(body, photo) || resp.Header.Get("Content-Type") != "image/png" || resp.Header.Get("ETag") != `"`+id+`"` {
		t.Fatalf("presigned GET without a token: %d, %d bytes, headers %v", resp.StatusCode, len(body), resp.Header)
	}
	if resp, body = h.do(http.MethodHead, d.URL, "", nil); resp.StatusCode != 200 || len(body) != 0 || resp.ContentLength != int64(len(photo)) {
		t.Fatalf("presigned HEAD: %d, length %d", resp.StatusCode, resp.ContentLength)
	}
	for what, target := range map[string]string{
		"tampered":            nodetest.TamperURL(t, d.URL),
		"the upload url":      g.URL,
		"another blob's path": strings.Replace(d.URL, id, blobIDOf([]byte("x")), 1),
		"expired (minted an hour ago)": func() string {
			tok, _ := signer.Sign(signedurl.Blob, "acme", id, "", clk.Now().Add(-time.Hour))
			return h.n.URL() + "/blobs/" + id + "?st=" + tok
		}(),
	} {
		resp, body := h.do(http.MethodGet, target, "", nil)
		h.wantCode(what, resp, body, http.StatusForbidden, ssp2.CodeBlobForbidden)
	}
	// A valid grant of a partition that does not hold the blob finds
	// nothing there, whoever else holds it.
	foreign, _ := signer.Sign(signedurl.Blob, "globex", id, "", clk.Now())
	resp, body = h.do(http.MethodGet, h.n.URL()+"/blobs/"+id+"?st="+foreign, "", nil)
	h.wantCode("another partition", resp, body, http.StatusNotFound, ssp2.CodeBlobNotFound)
	// Expiry is exp plus the 60 s skew, on the node's clock.
	clk.Advance(2*time.Minute + 59*time.Second)
	if resp, _ := h.do(http.MethodGet, d.URL, "", nil); resp.StatusCode != 200 {
		t.Fatalf("within the skew: %d", resp.StatusCode)
	}
	clk.Advance(2 * time.Second)
	resp, body = h.do(http.MethodGet, d.URL, "", nil)
	h.wantCode("expired", resp, body, http.StatusForbidden, ssp2.CodeBlobForbidden)
	// Recovery is a fresh download request.
	resp, body = h.do(http.MethodGet, "/blobs/"+id, alice, nil)
	if resp.StatusCode != 200 || json.Unmarshal(body, &d) != nil {
		t.Fatalf("fresh download request: %d %s", resp.StatusCode, body)
	}
	if resp, body = h.do(http.MethodGet, d.URL, "", nil); resp.StatusCode != 200 || !bytes.Equal(body, photo) {
		t.Fatalf("fresh url: %d, %d bytes", resp.StatusCode, len(body))
	}
	_, metrics := h.do(http.MethodGet, "/metrics", "", nil)
	for _, want := range []string{"syncnode_signed_blob_urls_total 3", "syncnode_signed_blob_refusals_total 8"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func blobIDOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Rows seeded straight into storage (loadfix's /__load/reset path,
// storage.Admin.RowSeed) reference their blobs like pushed rows: the blob
// is downloadable by an actor who may see a seeded row, and by nobody
// else.
func TestSeededRowsBlobsDownloadable(t *testing.T) {
	for _, pg := range []bool{false, true} {
		t.Run(map[bool]string{false: "sqlite", true: "postgres"}[pg], func(t *testing.T) {
			h := startBlobHTTP(t, pg, nil)
			alice := nodetest.Token(t, "alice", "acme", map[string][]string{"project_id": {"p1"}})
			bob := nodetest.Token(t, "bob", "acme", map[string][]string{"project_id": {"p2"}})
			data := bytes.Repeat([]byte("seeded attachment "), 1000)
			if resp, body := h.do(http.MethodPut, "/blobs/"+blobIDOf(data), alice, data); resp.StatusCode != 200 {
				t.Fatalf("upload: %d %s", resp.StatusCode, body)
			}
			if _, err := h.n.Store.PartitionTouch(t.Context(), "acme", time.Now().UnixMilli()); err != nil {
				t.Fatal(err)
			}
			tbl, _ := h.sc.Table("files")
			err := h.n.Store.RowSeed(t.Context(), storage.SeedParams{Partition: "acme", Table: "files", Count: 3, Row: func(i int, w *storage.RowWrite) error {
				vals := h.attRow(fmt.Sprint("s", i), "p1", data)
				payload, err := tbl.Codec.AppendRow(nil, vals)
				*w = storage.RowWrite{RowID: fmt.Sprint("s", i), Values: vals, Scopes: map[string]string{"project_id": "p1"}, Payload: payload}
				return err
			}})
			if err != nil {
				t.Fatal(err)
			}
			resp, body := h.do(http.MethodGet, "/blobs/"+blobIDOf(data), alice, nil)
			if resp.StatusCode != 200 || !bytes.Equal(body, data) {
				t.Fatalf("download of a seeded row's blob: %d, %d bytes", resp.StatusCode, len(body))
			}
			resp, body = h.do(http.MethodGet, "/blobs/"+blobIDOf(data), bob, nil)
			h.wantCode("another scope", resp, body, http.StatusForbidden, ssp2.CodeBlobForbidden)
		})
	}
}
