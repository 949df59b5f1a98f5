package testctl

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

const filesSchema = `{"version":1,"tables":[{"name":"files","columns":[
	{"name":"id","type":"string"},
	{"name":"project_id","type":"string"},
	{"name":"att","type":"blob_ref","nullable":true}],
	"primaryKey":"id","scopes":["project:{project_id}"]}]}`

// TestBlobPresign: blob-presign (capability "blob-presign") turns an
// instance's blobs onto signed URLs: the upload grant is a presigned PUT
// that needs no actor, an authorized download answers {url,
// urlExpiresAtMs}, the url serves the bytes without an actor until the
// instance's clock passes its expiry and the 60 s skew, and turning it
// off streams the bytes again. An instance without signedUrls refuses it.
func TestBlobPresign(t *testing.T) {
	c := newControl(t)
	st, b := c.do("GET", "/__test/capabilities", nil, "")
	var caps []string
	if st != http.StatusOK || json.Unmarshal(b, &caps) != nil || !slices.Contains(caps, "blob-presign") {
		t.Fatalf("capabilities: %d %s", st, b)
	}
	plain := c.instance()
	if st, b := c.do("POST", "/__test/i/"+plain+"/blob-presign", []byte(`{"enabled": true}`), ""); st != http.StatusBadRequest {
		t.Fatalf("blob-presign without signedUrls: %d %s", st, b)
	}
	if st, b := c.do("POST", "/__test/i/"+plain+"/blob-presign", []byte(`{}`), ""); st != http.StatusBadRequest {
		t.Fatalf("blob-presign without enabled: %d %s", st, b)
	}

	const now = 1_750_000_000_000
	body := fmt.Sprintf(`{"schema": %s, "partition": "acme", "nowMs": %d, "signedUrls": {"ttlSeconds": 120}}`, filesSchema, now)
	st, b = c.do("POST", "/__test/instances", []byte(body), "")
	var out struct{ ID string }
	if st != http.StatusOK || json.Unmarshal(b, &out) != nil {
		t.Fatalf("create: %d %s", st, b)
	}
	id := out.ID
	for actor, p := range map[string]string{"u1": "p1", "u2": "p2"} {
		grant, _ := json.Marshal(map[string]any{"actorId": actor, "allowed": map[string][]string{"project_id": {p}}})
		if st, b := c.do("POST", "/__test/i/"+id+"/allowed-scopes", grant, ""); st != http.StatusOK {
			t.Fatalf("grant: %d %s", st, b)
		}
	}
	data := bytes.Repeat([]byte("presigned "), 10_000)
	sum := sha256.Sum256(data)
	blobID := "sha256:" + hex.EncodeToString(sum[:])
	grantBody := fmt.Appendf(nil, `{"byteLength": %d}`, len(data))
	code := func(b []byte) string {
		var e struct{ Code string }
		_ = json.Unmarshal(b, &e)
		return e.Code
	}
	type urlGrant struct {
		URL            string `json:"url"`
		URLExpiresAtMs int64  `json:"urlExpiresAtMs"`
		Present        bool   `json:"present"`
	}
	grant := func() urlGrant {
		t.Helper()
		st, b := c.do("POST", "/i/"+id+"/blobs/"+blobID+"/upload-grant", grantBody, "u1")
		var g urlGrant
		if st != http.StatusOK || json.Unmarshal(b, &g) != nil {
			t.Fatalf("grant: %d %s", st, b)
		}
		return g
	}
	// Off at creation: the grant carries no url.
	if g := grant(); g != (urlGrant{}) {
		t.Fatalf("grant before blob-presign: %+v", g)
	}
	if st, b := c.do("POST", "/__test/i/"+id+"/blob-presign", []byte(`{"enabled": true}`), ""); st != http.StatusOK {
		t.Fatalf("blob-presign: %d %s", st, b)
	}
	g := grant()
	prefix := c.url + "/i/" + id + "/blobs/" + blobID + "?st="
	if !strings.HasPrefix(g.URL, prefix) || g.URLExpiresAtMs != now+120_000 {
		t.Fatalf("presigned grant %+v, want a url under %s expiring at %d", g, prefix, now+120_000)
	}
	put := strings.TrimPrefix(g.URL, c.url)
	if st, b := c.do("PUT", put, data[:len(data)-1], ""); st != http.StatusBadRequest || code(b) != string(ssp2.CodeBlobHashMismatch) {
		t.Fatalf("presigned PUT of other bytes: %d %s", st, b)
	}
	if st, b := c.do("PUT", put, data, ""); st != http.StatusOK || len(b) != 0 {
		t.Fatalf("presigned PUT without an actor: %d %s", st, b)
	}
	if g := grant(); !g.Present || g.URL != "" {
		t.Fatalf("grant after the upload: %+v", g)
	}

	tbl, _ := c.inst(id).schema.Table("files")
	row, err := tbl.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte("f1")}, {Bytes: []byte("p1")},
		{Bytes: fmt.Appendf(nil, `{"blobId":"%s","byteLength":%d}`, blobID, len(data))}})
	if err != nil {
		t.Fatal(err)
	}
	epoch := c.epoch(id)
	if st, b := c.sync(id, &epoch, &ssp2.PushCommit{ClientCommitID: "c1",
		Operations: []ssp2.Operation{{Table: "files", RowID: "f1", Op: ssp2.OpUpsert, Payload: row}}}); !served(t, st, b) {
		t.Fatalf("push: %d %s", st, b)
	}
	st, b = c.do("GET", "/i/"+id+"/blobs/"+blobID, nil, "u1")
	var dl urlGrant
	if st != http.StatusOK || json.Unmarshal(b, &dl) != nil || !strings.HasPrefix(dl.URL, prefix) || dl.URLExpiresAtMs != now+120_000 {
		t.Fatalf("authorized download: %d %s", st, b)
	}
	if st, b := c.do("GET", "/i/"+id+"/blobs/"+blobID, nil, "u2"); st != http.StatusForbidden || code(b) != string(ssp2.CodeBlobForbidden) {
		t.Fatalf("download for another scope: %d %s", st, b)
	}
	get := strings.TrimPrefix(dl.URL, c.url)
	if st, b := c.do("GET", get, nil, ""); st != http.StatusOK || !bytes.Equal(b, data) {
		t.Fatalf("presigned GET without an actor: %d, %d bytes", st, len(b))
	}
	// The upload url is no download url, nor the reverse.
	if st, b := c.do("GET", put, nil, ""); st != http.StatusForbidden || code(b) != string(ssp2.CodeBlobForbidden) {
		t.Fatalf("GET with the upload url: %d %s", st, b)
	}
	if st, b := c.do("PUT", get, data, ""); st != http.StatusForbidden || code(b) != string(ssp2.CodeBlobForbidden) {
		t.Fatalf("PUT with the download url: %d %s", st, b)
	}
	// Within the skew past its expiry, then refused.
	if st, b := c.do("POST", "/__test/i/"+id+"/clock/advance", []byte(`{"ms": 179000}`), ""); st != http.StatusOK {
		t.Fatalf("advance: %d %s", st, b)
	}
	if st, _ := c.do("GET", get, nil, ""); st != http.StatusOK {
		t.Fatalf("within the skew: %d", st)
	}
	if st, b := c.do("POST", "/__test/i/"+id+"/clock/advance", []byte(`{"ms": 2000}`), ""); st != http.StatusOK {
		t.Fatalf("advance: %d %s", st, b)
	}
	if st, b := c.do("GET", get, nil, ""); st != http.StatusForbidden || code(b) != string(ssp2.CodeBlobForbidden) {
		t.Fatalf("expired: %d %s", st, b)
	}
	// signed-url-ttl sets the blob urls' lifetime too.
	if st, b := c.do("POST", "/__test/i/"+id+"/signed-url-ttl", []byte(`{"ttlSeconds": 1}`), ""); st != http.StatusOK {
		t.Fatalf("signed-url-ttl: %d %s", st, b)
	}
	st, b = c.do("GET", "/i/"+id+"/blobs/"+blobID, nil, "u1")
	if st != http.StatusOK || json.Unmarshal(b, &dl) != nil || dl.URLExpiresAtMs != now+181_000+1000 {
		t.Fatalf("download after signed-url-ttl 1: %d %s", st, b)
	}
	// Off again: the bytes stream, and the urls are refused.
	if st, b := c.do("POST", "/__test/i/"+id+"/blob-presign", []byte(`{"enabled": false}`), ""); st != http.StatusOK {
		t.Fatalf("blob-presign off: %d %s", st, b)
	}
	if st, b := c.do("GET", "/i/"+id+"/blobs/"+blobID, nil, "u1"); st != http.StatusOK || !bytes.Equal(b, data) {
		t.Fatalf("download with presign off: %d, %d bytes", st, len(b))
	}
	if st, b := c.do("GET", strings.TrimPrefix(dl.URL, c.url), nil, ""); st != http.StatusForbidden || code(b) != string(ssp2.CodeBlobForbidden) {
		t.Fatalf("a url with presign off: %d %s", st, b)
	}
}
