package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/signedurl"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

const blobE2ESchema = `{"version":1,"tables":[{"name":"files","columns":[
	{"name":"id","type":"string"},
	{"name":"project_id","type":"string"},
	{"name":"att","type":"blob_ref","nullable":true}],
	"primaryKey":"id","scopes":["project:{project_id}"]}]}`

// blobNode is a `syncnode serve` serving blobE2ESchema with a small blob
// cap and the given orphan grace period, plus extraConf (whole tables).
type blobNode struct {
	t      *testing.T
	base   string // the protocol routes' base URL
	sc     *schema.Schema
	secret []byte
	// authHeader is the header who (a token, or a test-control actor) is
	// sent in.
	authHeader func(who string) (string, string)
	epoch      string
	n          int
	// What restart needs: the running serve and how it was configured.
	srv                *served
	confDir, extraConf string
}

func startBlobNode(t *testing.T, postgres bool, grace, extraConf string) *blobNode {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "schema.json"), []byte(blobE2ESchema), 0o644); err != nil {
		t.Fatal(err)
	}
	if postgres {
		url, sch := pgtest.Schema(t)
		extraConf += fmt.Sprintf("[storage]\npostgres_url = %q\npostgres_schema = %q\n", url, sch)
	}
	b := &blobNode{t: t, confDir: dir, extraConf: extraConf,
		authHeader: func(tok string) (string, string) { return "Authorization", "Bearer " + tok }}
	b.srv = startServe(t, "--config", b.writeConf(grace))
	secret, _, err := auth.DevSecret(b.srv.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := schema.Parse([]byte(blobE2ESchema))
	if err != nil {
		t.Fatal(err)
	}
	b.base, b.sc, b.secret = b.srv.url, sc, secret
	return b
}

// writeConf writes the node's config with the given orphan grace period
// and returns its path.
func (b *blobNode) writeConf(grace string) string {
	b.t.Helper()
	conf := fmt.Sprintf("schema = %q\n[blobs]\nmax_bytes = 2097152\norphan_grace = %q\nsweep_interval = \"1s\"\n",
		filepath.Join(b.confDir, "schema.json"), grace) + b.extraConf
	path := filepath.Join(b.confDir, "syncnode.toml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		b.t.Fatal(err)
	}
	return path
}

// restart stops the node and serves the same data (SQL, the blob bucket)
// again with another orphan grace period, as an operator changing it
// does.
func (b *blobNode) restart(grace string) {
	b.t.Helper()
	if err := b.srv.stop(); err != nil {
		b.t.Fatalf("stop: %v\n%s", err, b.srv.stderr.String())
	}
	b.srv = startServeIn(b.t, b.srv.dataDir, "--config", b.writeConf(grace))
	b.base = b.srv.url
}

// token is a bearer token of actor in partition acme holding projects.
func (b *blobNode) token(actor string, projects ...string) string {
	b.t.Helper()
	tok, err := auth.Mint(b.secret, auth.Principal{ActorID: actor, Partition: "acme", Scopes: map[string][]string{"project_id": projects}}, time.Hour, time.Now())
	if err != nil {
		b.t.Fatal(err)
	}
	return tok
}

// do sends one HTTP request to a path of the node (or an absolute URL)
// and returns the response with its body read.
func (b *blobNode) do(method, path, tok string, body io.Reader, hdr ...string) (*http.Response, []byte) {
	b.t.Helper()
	target := path
	if strings.HasPrefix(path, "/") {
		target = b.base + path
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set(b.authHeader(tok))
	}
	req.Header.Set("Accept-Encoding", "identity")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return resp, got
}

// wantError asserts an SSP2 JSON error of status and code.
func wantError(t *testing.T, what string, resp *http.Response, body []byte, status int, code ssp2.Code) {
	t.Helper()
	var e struct{ Code string }
	if resp.StatusCode != status || json.Unmarshal(body, &e) != nil || e.Code != string(code) {
		t.Fatalf("%s: %d %s, want %d %s", what, resp.StatusCode, body, status, code)
	}
}

func blobIDOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (b *blobNode) upload(tok string, data []byte) {
	b.t.Helper()
	resp, body := b.do(http.MethodPut, "/blobs/"+blobIDOf(data), tok, bytes.NewReader(data), "Content-Type", "image/png")
	if resp.StatusCode != http.StatusOK || len(body) != 0 {
		b.t.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
}

// sync sends one wire version 2 request as tok and decodes the answer.
func (b *blobNode) sync(tok string, frames ...ssp2.Frame) *ssp2.Message {
	b.t.Helper()
	body, err := (&ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest, Frames: frames}).AppendEncode(nil)
	if err != nil {
		b.t.Fatal(err)
	}
	resp, out := b.do(http.MethodPost, "/sync", tok, bytes.NewReader(body), "Content-Type", "application/vnd.syncular.sync.v2")
	if resp.StatusCode != http.StatusOK {
		b.t.Fatalf("sync: %d %s", resp.StatusCode, out)
	}
	m, err := ssp2.DecodeMessage(out)
	if err != nil {
		b.t.Fatalf("sync response: %v", err)
	}
	return m
}

// push upserts a files row whose att references data (nil: NULL) and
// returns the commit's result.
func (b *blobNode) push(tok, rowID string, data []byte) *ssp2.PushResult {
	b.t.Helper()
	if b.epoch == "" {
		m := b.sync(tok, &ssp2.ReqHeader{ClientID: "blob-e2e", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 3})
		b.epoch = m.Frames[0].(*ssp2.RespHeader).LogEpoch
	}
	t, _ := b.sc.Table("files")
	att := ssp2.Value{Null: true}
	if data != nil {
		att = ssp2.Value{Bytes: fmt.Appendf(nil, `{"blobId":"%s","byteLength":%d,"mediaType":"image/png"}`, blobIDOf(data), len(data))}
	}
	payload, err := t.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte(rowID)}, {Bytes: []byte("p1")}, att})
	if err != nil {
		b.t.Fatal(err)
	}
	b.n++
	ep := b.epoch
	m := b.sync(tok, &ssp2.ReqHeader{ClientID: "blob-e2e", SchemaVersion: 1, LogEpoch: &ep},
		&ssp2.PushCommit{ClientCommitID: fmt.Sprintf("c%d", b.n), Operations: []ssp2.Operation{{Table: "files", RowID: rowID, Op: ssp2.OpUpsert, Payload: payload}}})
	for _, f := range m.Frames {
		if r, ok := f.(*ssp2.PushResult); ok {
			return r
		}
	}
	b.t.Fatalf("no push result in %+v", m.Frames)
	return nil
}

// Blobs end to end through serve over HTTP, on both stores (SPEC.md §5.9):
// upload, the push-time existence check, download authorized by the
// referencing row, ETag/304, refusals with the spec's codes, the upload
// grant, and the orphan sweep.
func TestBlobsEndToEnd(t *testing.T) {
	for _, pg := range []bool{false, true} {
		name := map[bool]string{false: "sqlite", true: "postgres"}[pg]
		t.Run(name, func(t *testing.T) { testBlobsEndToEnd(t, pg) })
	}
}

func testBlobsEndToEnd(t *testing.T, postgres bool) {
	// A grace period no slow machine reaches between upload and push; the
	// sweep is tested after a restart that ends it (below).
	b := startBlobNode(t, postgres, "1h", "")
	alice, bob := b.token("alice", "p1"), b.token("bob", "p2")
	photo := bytes.Repeat([]byte("photo bytes "), 100_000) // 1.2 MB
	orphan := []byte("never referenced")

	// A push referencing a blob not uploaded yet is refused whole.
	if r := b.push(alice, "f1", photo); r.Status != ssp2.PushRejected || r.Results[0].Code != string(ssp2.CodeBlobNotFound) {
		t.Fatalf("push before upload = %+v", r)
	}

	// Bad uploads are refused, storing nothing.
	resp, body := b.do(http.MethodPut, "/blobs/"+blobIDOf(photo[1:]), alice, bytes.NewReader(photo))
	wantError(t, "hash mismatch", resp, body, http.StatusBadRequest, ssp2.CodeBlobHashMismatch)
	big := make([]byte, 2<<20+1)
	resp, body = b.do(http.MethodPut, "/blobs/"+blobIDOf(big), alice, bytes.NewReader(big))
	wantError(t, "over the cap", resp, body, http.StatusRequestEntityTooLarge, ssp2.CodeBlobTooLarge)
	resp, body = b.do(http.MethodPut, "/blobs/"+blobIDOf(photo), "", bytes.NewReader(photo))
	wantError(t, "no token", resp, body, http.StatusUnauthorized, ssp2.CodeAuthRequired)

	// The upload grant: the cap up front, {} before the upload (no
	// presign: upload through PUT), present after.
	resp, body = b.do(http.MethodPost, "/blobs/"+blobIDOf(big)+"/upload-grant", alice, strings.NewReader(`{"byteLength":2097153}`))
	wantError(t, "grant over the cap", resp, body, http.StatusRequestEntityTooLarge, ssp2.CodeBlobTooLarge)
	grant := fmt.Sprintf(`{"byteLength":%d,"mediaType":"image/png"}`, len(photo))
	if resp, body = b.do(http.MethodPost, "/blobs/"+blobIDOf(photo)+"/upload-grant", alice, strings.NewReader(grant)); resp.StatusCode != 200 || strings.TrimSpace(string(body)) != "{}" {
		t.Fatalf("grant before upload: %d %s", resp.StatusCode, body)
	}

	b.upload(alice, photo)
	b.upload(bob, photo) // existing: 200 again
	b.upload(alice, orphan)
	if resp, body = b.do(http.MethodPost, "/blobs/"+blobIDOf(photo)+"/upload-grant", alice, strings.NewReader(grant)); resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `{"present":true}` {
		t.Fatalf("grant after upload: %d %s", resp.StatusCode, body)
	}

	// Uploaded but not referenced: nobody may download it.
	resp, body = b.do(http.MethodGet, "/blobs/"+blobIDOf(photo), alice, nil)
	wantError(t, "before the reference", resp, body, http.StatusForbidden, ssp2.CodeBlobForbidden)

	if r := b.push(alice, "f1", photo); r.Status != ssp2.PushApplied {
		t.Fatalf("push after upload = %+v", r)
	}
	resp, body = b.do(http.MethodGet, "/blobs/"+blobIDOf(photo), alice, nil)
	if resp.StatusCode != 200 || !bytes.Equal(body, photo) {
		t.Fatalf("download: %d, %d bytes", resp.StatusCode, len(body))
	}
	for k, want := range map[string]string{"ETag": `"` + blobIDOf(photo) + `"`, "Cache-Control": "private, max-age=0",
		"Vary": "Authorization, Accept-Encoding", "Content-Type": "image/png", "Content-Length": fmt.Sprint(len(photo))} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("download header %s = %q, want %q", k, got, want)
		}
	}
	if resp, body = b.do(http.MethodHead, "/blobs/"+blobIDOf(photo), alice, nil); resp.StatusCode != 200 || len(body) != 0 ||
		resp.ContentLength != int64(len(photo)) {
		t.Fatalf("HEAD: %d, length %d, %d body bytes", resp.StatusCode, resp.ContentLength, len(body))
	}
	resp, body = b.do(http.MethodGet, "/blobs/"+blobIDOf(photo), alice, nil, "If-None-Match", `"`+blobIDOf(photo)+`"`)
	if resp.StatusCode != http.StatusNotModified || len(body) != 0 {
		t.Fatalf("If-None-Match: %d, %d bytes", resp.StatusCode, len(body))
	}
	resp, body = b.do(http.MethodGet, "/blobs/"+blobIDOf(photo), bob, nil)
	wantError(t, "another scope", resp, body, http.StatusForbidden, ssp2.CodeBlobForbidden)
	resp, body = b.do(http.MethodGet, "/blobs/"+blobIDOf([]byte("unknown")), alice, nil)
	wantError(t, "unknown blob", resp, body, http.StatusNotFound, ssp2.CodeBlobNotFound)

	// Within its grace period the unreferenced blob is kept (forbidden,
	// not gone).
	resp, body = b.do(http.MethodGet, "/blobs/"+blobIDOf(orphan), alice, nil)
	wantError(t, "the orphan within its grace", resp, body, http.StatusForbidden, ssp2.CodeBlobForbidden)
	// Upload counters are the process's: read them before the restart.
	_, metrics := b.do(http.MethodGet, "/metrics", "", nil)
	for _, want := range []string{`syncnode_blob_uploads_total{outcome="stored"} 2`, `syncnode_blob_uploads_total{outcome="existing"} 1`,
		`syncnode_blob_uploads_total{outcome="refused"} 2`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	// With the grace period ended (0: every unreferenced blob is due) the
	// sweep deletes the unreferenced blob, and never the referenced one,
	// as old: only its reference keeps it.
	b.restart("0s")
	poll.Until(t, 30*time.Second, "the orphan is swept", func() bool {
		resp, _ := b.do(http.MethodGet, "/blobs/"+blobIDOf(orphan), alice, nil)
		return resp.StatusCode == http.StatusNotFound
	})
	if resp, body = b.do(http.MethodGet, "/blobs/"+blobIDOf(photo), alice, nil); resp.StatusCode != 200 || !bytes.Equal(body, photo) {
		t.Fatalf("the referenced blob after the sweep: %d, %d bytes", resp.StatusCode, len(body))
	}
	// Dropping the reference makes it an orphan too.
	if r := b.push(alice, "f1", nil); r.Status != ssp2.PushApplied {
		t.Fatalf("push dropping the reference = %+v", r)
	}
	poll.Until(t, 30*time.Second, "the unreferenced photo is swept", func() bool {
		resp, _ := b.do(http.MethodGet, "/blobs/"+blobIDOf(photo), alice, nil)
		return resp.StatusCode == http.StatusNotFound
	})
	// The sweep counts a pass's deletions when the pass ends.
	poll.Until(t, 10*time.Second, "the sweep is counted", func() bool {
		_, metrics := b.do(http.MethodGet, "/metrics", "", nil)
		return strings.Contains(string(metrics), "syncnode_blob_swept_total 2")
	})
}

// Presigned blobs end to end through serve over HTTP, on both stores
// (SPEC.md §5.9.3, §5.9.5, tokens of §5.4), configured as an operator
// does: a [signed_urls] key, blobs.presign left at its default. The
// upload grant is a PUT that needs no token; the push referencing the
// upload applies (and one referencing a blob never uploaded is refused);
// an authorized download answers a url that serves the bytes without a
// token, another scope gets no url, and tampered or expired urls are
// refused with blob.forbidden.
func TestBlobsPresignedEndToEnd(t *testing.T) {
	for _, pg := range []bool{false, true} {
		name := map[bool]string{false: "sqlite", true: "postgres"}[pg]
		t.Run(name, func(t *testing.T) { testBlobsPresignedEndToEnd(t, pg) })
	}
}

func testBlobsPresignedEndToEnd(t *testing.T, postgres bool) {
	key := strings.Repeat("presigned-e2e-", 3)
	// A grace period no slow machine reaches between upload and push.
	b := startBlobNode(t, postgres, "1h", fmt.Sprintf("[signed_urls]\nkey = %q\nttl = \"5m\"\n", key))
	alice, bob := b.token("alice", "p1"), b.token("bob", "p2")
	photo := bytes.Repeat([]byte("presigned serve photo "), 60_000) // 1.3 MB, two chunks
	id := blobIDOf(photo)
	var g struct {
		URL            string `json:"url"`
		URLExpiresAtMs int64  `json:"urlExpiresAtMs"`
	}
	grant := fmt.Sprintf(`{"byteLength":%d,"mediaType":"image/png"}`, len(photo))
	resp, body := b.do(http.MethodPost, "/blobs/"+id+"/upload-grant", alice, strings.NewReader(grant))
	if resp.StatusCode != 200 || json.Unmarshal(body, &g) != nil || !strings.HasPrefix(g.URL, b.base+"/blobs/"+id+"?st=") ||
		g.URLExpiresAtMs <= time.Now().UnixMilli() || g.URLExpiresAtMs > time.Now().Add(6*time.Minute).UnixMilli() {
		t.Fatalf("grant: %d %s", resp.StatusCode, body)
	}
	// The grant binds the size and the bytes.
	resp, body = b.do(http.MethodPut, g.URL, "", bytes.NewReader(append(bytes.Clone(photo), '!')))
	wantError(t, "presigned PUT over the granted size", resp, body, http.StatusRequestEntityTooLarge, ssp2.CodeBlobTooLarge)
	resp, body = b.do(http.MethodPut, nodetest.TamperURL(t, g.URL), "", bytes.NewReader(photo))
	wantError(t, "tampered grant", resp, body, http.StatusForbidden, ssp2.CodeBlobForbidden)
	if resp, body = b.do(http.MethodPut, g.URL, "", bytes.NewReader(photo), "Content-Type", "image/png"); resp.StatusCode != 200 || len(body) != 0 {
		t.Fatalf("presigned PUT without a token: %d %s", resp.StatusCode, body)
	}

	if r := b.push(alice, "f0", []byte("never uploaded")); r.Status != ssp2.PushRejected || r.Results[0].Code != string(ssp2.CodeBlobNotFound) {
		t.Fatalf("push referencing a missing blob = %+v", r)
	}
	if r := b.push(alice, "f1", photo); r.Status != ssp2.PushApplied {
		t.Fatalf("push referencing the presigned upload = %+v", r)
	}

	var d struct {
		URL            string `json:"url"`
		URLExpiresAtMs int64  `json:"urlExpiresAtMs"`
	}
	resp, body = b.do(http.MethodGet, "/blobs/"+id, alice, nil)
	if resp.StatusCode != 200 || json.Unmarshal(body, &d) != nil || !strings.HasPrefix(d.URL, b.base+"/blobs/"+id+"?st=") ||
		resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("authorized download: %d %s", resp.StatusCode, body)
	}
	resp, body = b.do(http.MethodGet, d.URL, "", nil)
	if resp.StatusCode != 200 || !bytes.Equal(body, photo) || resp.Header.Get("Content-Type") != "image/png" || resp.Header.Get("ETag") != `"`+id+`"` {
		t.Fatalf("presigned GET without a token: %d, %d bytes", resp.StatusCode, len(body))
	}
	resp, body = b.do(http.MethodGet, "/blobs/"+id, bob, nil)
	wantError(t, "another scope", resp, body, http.StatusForbidden, ssp2.CodeBlobForbidden)
	resp, body = b.do(http.MethodGet, nodetest.TamperURL(t, d.URL), "", nil)
	wantError(t, "tampered download url", resp, body, http.StatusForbidden, ssp2.CodeBlobForbidden)
	signer, err := signedurl.New(signedurl.Config{Key: []byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	old, _ := signer.Sign(signedurl.Blob, "acme", id, "", time.Now().Add(-time.Hour))
	resp, body = b.do(http.MethodGet, "/blobs/"+id+"?st="+old, "", nil)
	wantError(t, "expired download url", resp, body, http.StatusForbidden, ssp2.CodeBlobForbidden)
	stale, _ := signer.SignUpload("acme", id, int64(len(photo)), time.Now().Add(-time.Hour))
	resp, body = b.do(http.MethodPut, "/blobs/"+id+"?st="+stale, "", bytes.NewReader(photo))
	wantError(t, "expired upload url", resp, body, http.StatusForbidden, ssp2.CodeBlobForbidden)
}

// A test-control instance serves blobs under its mount, authorized by the
// instance's live grants (capability "blobs").
func TestTestControlBlobs(t *testing.T) {
	s := startServe(t, "--test-control")
	var out struct{ ID string }
	mustCall(t, "POST", s.url+"/__test/instances", map[string]any{"schema": json.RawMessage(blobE2ESchema), "partition": "p", "nowMs": startMs}, &out)
	sc, err := schema.Parse([]byte(blobE2ESchema))
	if err != nil {
		t.Fatal(err)
	}
	b := &blobNode{t: t, base: s.url + "/i/" + out.ID, sc: sc,
		authHeader: func(actor string) (string, string) { return "X-Syncular-Test-Actor", actor }}
	for actor, projects := range map[string][]string{"alice": {"p1"}, "bob": {"p2"}} {
		mustCall(t, "POST", s.url+"/__test/i/"+out.ID+"/allowed-scopes", map[string]any{"actorId": actor, "allowed": map[string][]string{"project_id": projects}}, nil)
	}
	var caps []string
	mustCall(t, "GET", s.url+"/__test/capabilities", nil, &caps)
	if !slices.Contains(caps, "blobs") {
		t.Fatalf("capabilities %v lack blobs", caps)
	}
	data := []byte("a test-control blob")
	if r := b.push("alice", "f1", data); r.Status != ssp2.PushRejected || r.Results[0].Code != string(ssp2.CodeBlobNotFound) {
		t.Fatalf("push before upload = %+v", r)
	}
	b.upload("alice", data)
	if r := b.push("alice", "f1", data); r.Status != ssp2.PushApplied {
		t.Fatalf("push = %+v", r)
	}
	if resp, body := b.do(http.MethodGet, "/blobs/"+blobIDOf(data), "alice", nil); resp.StatusCode != 200 || !bytes.Equal(body, data) {
		t.Fatalf("download: %d %q", resp.StatusCode, body)
	}
	resp, body := b.do(http.MethodGet, "/blobs/"+blobIDOf(data), "bob", nil)
	wantError(t, "another scope", resp, body, http.StatusForbidden, ssp2.CodeBlobForbidden)
}
