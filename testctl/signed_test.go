package testctl

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

// TestSignedURLs: an instance created with signedUrls mints a url on a
// SEGMENT_REF for a pull with accept bit 3 (and none without); the url
// is fetched with no actor, a tampered one is refused with
// sync.forbidden, and one minted with signed-url-ttl 0 is refused with
// sync.segment_expired once the instance's clock passes the 60 s skew.
func TestSignedURLs(t *testing.T) {
	c := newControl(t)
	st, b := c.do("GET", "/__test/capabilities", nil, "")
	var caps []string
	if st != http.StatusOK || json.Unmarshal(b, &caps) != nil || !slices.Contains(caps, "signed-urls") {
		t.Fatalf("capabilities: %d %s", st, b)
	}
	for _, bad := range []string{`{"ttlSeconds": 0}`, `{"ttlSeconds": 901}`, `"yes"`, `{"key": "k"}`} {
		body := `{"schema": ` + tasksSchema + `, "partition": "acme", "nowMs": 1, "signedUrls": ` + bad + `}`
		if st, b := c.do("POST", "/__test/instances", []byte(body), ""); st != http.StatusBadRequest {
			t.Errorf("signedUrls %s: %d %s", bad, st, b)
		}
	}
	plain := c.instance()
	if st, b := c.do("POST", "/__test/i/"+plain+"/signed-url-ttl", []byte(`{"ttlSeconds": 5}`), ""); st != http.StatusBadRequest {
		t.Errorf("signed-url-ttl without signedUrls: %d %s", st, b)
	}

	body := `{"schema": ` + tasksSchema + `, "partition": "acme", "nowMs": 1750000000000, "signedUrls": {"ttlSeconds": 60}, "limits": {"inlineSegmentMaxBytes": 0}}`
	st, b = c.do("POST", "/__test/instances", []byte(body), "")
	var out struct{ ID string }
	if st != http.StatusOK || json.Unmarshal(b, &out) != nil {
		t.Fatalf("create: %d %s", st, b)
	}
	id := out.ID
	grant, _ := json.Marshal(map[string]any{"actorId": "u1", "allowed": map[string][]string{"project_id": {"p1"}}})
	if st, b := c.do("POST", "/__test/i/"+id+"/allowed-scopes", grant, ""); st != http.StatusOK {
		t.Fatalf("grant: %d %s", st, b)
	}
	epoch := c.epoch(id)
	if st, b := c.sync(id, &epoch, &ssp2.PushCommit{ClientCommitID: "c1",
		Operations: []ssp2.Operation{{Table: "tasks", RowID: "t1", Op: ssp2.OpUpsert, Payload: taskRow(t, c, id, "t1")}}}); !served(t, st, b) {
		t.Fatalf("push: %d %s", st, b)
	}
	ref := func(accept uint8) *ssp2.SegmentRef {
		t.Helper()
		st, b := c.sync(id, &epoch, &ssp2.PullHeader{Accept: accept},
			&ssp2.Subscription{ID: "s1", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: -1})
		if !served(t, st, b) {
			t.Fatalf("pull: %d %s", st, b)
		}
		m, _ := ssp2.DecodeMessage(b)
		for _, f := range m.Frames {
			if r, ok := f.(*ssp2.SegmentRef); ok {
				return r
			}
		}
		t.Fatal("no SEGMENT_REF")
		return nil
	}
	if r := ref(ssp2.AcceptExternalRows); r.URL != nil {
		t.Fatalf("a url without accept bit 3: %s", *r.URL)
	}
	r := ref(ssp2.AcceptExternalRows | ssp2.AcceptSignedURLs)
	if r.URL == nil || !strings.HasPrefix(*r.URL, c.url+"/i/"+id+"/segments/"+r.SegmentID+"?st=") ||
		*r.URLExpiresAtMs != 1750000000000+60_000 {
		t.Fatalf("descriptor url %v, expiry %v", r.URL, r.URLExpiresAtMs)
	}
	path := strings.TrimPrefix(*r.URL, c.url)
	st, b = c.do("GET", path, nil, "")
	sum := sha256.Sum256(b)
	if st != http.StatusOK || "sha256:"+hex.EncodeToString(sum[:]) != r.SegmentID {
		t.Fatalf("fetch without an actor: %d, %d bytes", st, len(b))
	}
	code := func(b []byte) string {
		var e struct{ Code string }
		_ = json.Unmarshal(b, &e)
		return e.Code
	}
	if st, b := c.do("GET", strings.Replace(path, "?st=", "?st=A", 1), nil, ""); st != http.StatusForbidden || code(b) != string(ssp2.CodeForbidden) {
		t.Fatalf("tampered: %d %s", st, b)
	}

	if st, b := c.do("POST", "/__test/i/"+id+"/signed-url-ttl", []byte(`{"ttlSeconds": 0}`), ""); st != http.StatusOK {
		t.Fatalf("signed-url-ttl: %d %s", st, b)
	}
	r = ref(ssp2.AcceptExternalRows | ssp2.AcceptSignedURLs)
	if *r.URLExpiresAtMs != 1750000000000 {
		t.Fatalf("ttl 0: expiry %d", *r.URLExpiresAtMs)
	}
	path = strings.TrimPrefix(*r.URL, c.url)
	if st, b := c.do("GET", path, nil, ""); st != http.StatusOK {
		t.Fatalf("within the skew: %d %s", st, b)
	}
	if st, b := c.do("POST", "/__test/i/"+id+"/clock/advance", []byte(`{"ms": 61000}`), ""); st != http.StatusOK {
		t.Fatalf("advance: %d %s", st, b)
	}
	if st, b := c.do("GET", path, nil, ""); st != http.StatusNotFound || code(b) != string(ssp2.CodeSegmentExpired) {
		t.Fatalf("expired: %d %s", st, b)
	}
}
