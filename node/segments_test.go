package node

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/ssp2"
)

const taskSchema = `{"version":1,"tables":[{"name":"tasks","columns":[
 {"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"title","type":"string"}],
 "primaryKey":"id","scopes":["project:{project_id}"]}]}`

// TestSegmentDownload bootstraps through SEGMENT_REFs and downloads them:
// re-authorized on every call, content-addressed, cacheable by ETag, and
// refused for other scopes, other partitions and after expiry.
func TestSegmentDownload(t *testing.T) {
	type variant struct {
		backend
		streamAbove int64
	}
	variants := []variant{{backends[0], 0}, {backends[0], 1}, {backends[1], 0}}
	for _, b := range variants {
		name := b.name
		if b.streamAbove > 0 {
			name += "/streamed"
		}
		t.Run(name, func(t *testing.T) {
			now := clock.NewManual(time.UnixMilli(1_800_000_000_000))
			n := startNode(t, taskSchema, func(t *testing.T, c *Config) {
				b.cfg(t, c)
				c.Clock = now
				c.API.StreamSegmentsAbove = b.streamAbove
			})
			tok := token(t, "alice", "acme", map[string][]string{"project_id": {"p1", "p2"}})

			// Seed 2,500 rows in p1 with v2 requests.
			ep := acquireEpoch(t, n, tok)
			for batch := range 5 {
				var ops []ssp2.Operation
				for i := range 500 {
					id := fmt.Sprintf("r%05d", batch*500+i)
					ops = append(ops, ssp2.Operation{Table: "tasks", RowID: id, Op: ssp2.OpUpsert, Payload: taskRow(t, n, id, "p1")})
				}
				m := syncV2(t, n, tok, ep, &ssp2.PushCommit{ClientCommitID: fmt.Sprint("seed-", batch), Operations: ops})
				if r := frame[*ssp2.PushResult](m); r.Status != ssp2.PushApplied {
					t.Fatalf("seed: %+v", r)
				}
			}

			// Accept only referenced rows segments: every page is a ref.
			scopes := map[string][]string{"project_id": {"p1"}}
			m := syncV2(t, n, tok, ep, &ssp2.PullHeader{LimitSnapshotRows: 1000, MaxSnapshotPages: 5, Accept: ssp2.AcceptExternalRows},
				&ssp2.Subscription{ID: "s", Table: "tasks", Scopes: scopes, Cursor: -1})
			var refs []*ssp2.SegmentRef
			for _, f := range m.Frames {
				if r, ok := f.(*ssp2.SegmentRef); ok {
					refs = append(refs, r)
				}
			}
			if len(refs) != 3 || refs[0].RowCursor != nil || refs[2].NextRowCursor != nil || *refs[0].NextRowCursor != *refs[1].RowCursor {
				t.Fatalf("refs = %+v", refs)
			}
			digest := ssp2.ScopeDigest(scopes)
			total := int64(0)
			header := string(ssp2.CanonicalScopes(scopes))
			for _, ref := range refs {
				if ref.ScopeDigest != digest || ref.AsOfCommitSeq != 5 || ref.MediaType != ssp2.MediaRows || ref.URL != nil {
					t.Fatalf("ref = %+v", ref)
				}
				resp := get(t, n.URL()+"/segments/"+ref.SegmentID, tok, header, "")
				if resp.status != http.StatusOK || resp.header.Get("ETag") != `"`+ref.SegmentID+`"` ||
					resp.header.Get("Cache-Control") != "private, max-age=0" ||
					resp.header.Get("Vary") != "Authorization, X-Syncular-Scopes, Accept-Encoding" ||
					resp.header.Get("Content-Type") != "application/octet-stream" {
					t.Fatalf("download: %d %v", resp.status, resp.header)
				}
				sum := sha256.Sum256(resp.body)
				if "sha256:"+hex.EncodeToString(sum[:]) != ref.SegmentID || int64(len(resp.body)) != ref.ByteLength {
					t.Fatal("downloaded bytes do not match the content address")
				}
				if err := ssp2.ValidateSegment(resp.body); err != nil {
					t.Fatal(err)
				}
				total += ref.RowCount
				if r := get(t, n.URL()+"/segments/"+ref.SegmentID, tok, header, `"`+ref.SegmentID+`"`); r.status != http.StatusNotModified {
					t.Fatalf("If-None-Match: %d", r.status)
				}
			}
			if total != 2500 {
				t.Fatalf("rows in refs = %d, want 2500", total)
			}
			id := refs[0].SegmentID
			// Another client with the same scopes reuses the same segments.
			m = syncV2(t, n, tok, ep, &ssp2.PullHeader{LimitSnapshotRows: 1000, MaxSnapshotPages: 1, Accept: ssp2.AcceptExternalRows},
				&ssp2.Subscription{ID: "s2", Table: "tasks", Scopes: scopes, Cursor: -1})
			if r := frame[*ssp2.SegmentRef](m); r.SegmentID != id {
				t.Fatalf("second bootstrap built %s, want reuse of %s", r.SegmentID, id)
			}
			// Re-authorization: other scopes, no scopes, another partition,
			// an unknown id, a revoked actor.
			jsonError(t, get(t, n.URL()+"/segments/"+id, tok, `{"project_id":["p2"]}`, ""), http.StatusForbidden, ssp2.CodeForbidden)
			jsonError(t, get(t, n.URL()+"/segments/"+id, tok, "", ""), http.StatusBadRequest, ssp2.CodeInvalidRequest)
			other := token(t, "alice", "other-partition", map[string][]string{"project_id": {"p1"}})
			jsonError(t, get(t, n.URL()+"/segments/"+id, other, header, ""), http.StatusNotFound, ssp2.CodeNotFound)
			jsonError(t, get(t, n.URL()+"/segments/sha256:"+fmt.Sprintf("%064d", 0), tok, header, ""), http.StatusNotFound, ssp2.CodeNotFound)
			revoked := token(t, "alice", "acme", map[string][]string{"project_id": {"p2"}})
			jsonError(t, get(t, n.URL()+"/segments/"+id, revoked, header, ""), http.StatusForbidden, ssp2.CodeForbidden)
			jsonError(t, get(t, n.URL()+"/segments/"+id, "", header, ""), http.StatusUnauthorized, ssp2.CodeAuthRequired)
			// After the TTL the grant expires.
			now.Advance(25 * time.Hour)
			jsonError(t, get(t, n.URL()+"/segments/"+id, tok, header, ""), http.StatusNotFound, ssp2.CodeSegmentExpired)
		})
	}
}

func get(t *testing.T, url, tok, scopes, ifNoneMatch string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if scopes != "" {
		req.Header.Set("X-Syncular-Scopes", scopes)
	}
	if ifNoneMatch != "" {
		req.Header.Set("If-None-Match", ifNoneMatch)
	}
	req.Header.Set("Accept-Encoding", "identity")
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

func acquireEpoch(t *testing.T, n *Node, tok string) string {
	t.Helper()
	m := send(t, n, tok, 2, &ssp2.ReqHeader{ClientID: "seg-client", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 3})
	return m.Frames[0].(*ssp2.RespHeader).LogEpoch
}

func syncV2(t *testing.T, n *Node, tok, epoch string, frames ...ssp2.Frame) *ssp2.Message {
	t.Helper()
	e := epoch
	return send(t, n, tok, 2, append([]ssp2.Frame{&ssp2.ReqHeader{ClientID: "seg-client", SchemaVersion: 1, LogEpoch: &e}}, frames...)...)
}

func send(t *testing.T, n *Node, tok string, wire uint16, frames ...ssp2.Frame) *ssp2.Message {
	t.Helper()
	body, err := (&ssp2.Message{WireVersion: wire, Kind: ssp2.KindRequest, Frames: frames}).AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := post(t, n.URL()+"/sync", tok, httpapi.ContentType, body, nil)
	if r.status != http.StatusOK {
		t.Fatalf("sync: %d %s", r.status, r.body)
	}
	m, err := ssp2.DecodeMessage(r.body)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func frame[T ssp2.Frame](m *ssp2.Message) T {
	for _, f := range m.Frames {
		if v, ok := f.(T); ok {
			return v
		}
	}
	var zero T
	return zero
}

func taskRow(t *testing.T, n *Node, id, project string) []byte {
	t.Helper()
	tbl, _ := n.cfg.Schema.Table("tasks")
	b, err := tbl.Codec.AppendRow(nil, []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte(project)}, {Bytes: []byte("title of " + id)}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
