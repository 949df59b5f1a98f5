package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/signedurl"
	"github.com/syncnode/syncnode/ssp2"
)

var signingKey = []byte("image-test-signing-key-0123456789")

// recordingTransport remembers every segment request: its URL and
// whether it carried credentials.
type recordingTransport struct {
	base http.RoundTripper
	mu   sync.Mutex
	reqs []*http.Request
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.Contains(r.URL.Path, "/segments/") {
		rt.mu.Lock()
		rt.reqs = append(rt.reqs, r)
		rt.mu.Unlock()
	}
	return rt.base.RoundTrip(r)
}

func (rt *recordingTransport) segmentRequests() []*http.Request {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]*http.Request(nil), rt.reqs...)
}

const imageAccept = ssp2.AcceptInlineRows | ssp2.AcceptExternalRows | ssp2.AcceptSQLite

// TestNodeImageBootstrap bootstraps through a whole node on the image
// lane (SPEC.md §5.3), on both stores: the image client's replica equals
// the rows-lane client's and the server's row for row, versions
// included; a second client reuses the stored image; a table that fits
// one page stays on the rows lane; an image corrupted in transit fails
// the subscription without advancing it and the next round recovers;
// edits after an image bootstrap arrive as commits.
func TestNodeImageBootstrap(t *testing.T) {
	bothStores(t, func(t *testing.T) {
		srv, n := startNode(t, 256<<10)
		seed(t, srv, 5000, "p1")
		seed(t, srv, 300, "p2")
		pull := PullOptions{LimitSnapshotRows: 1000, Accept: imageAccept}

		img := srv.client("alice", []string{"p1"}, func(cfg *Config) { cfg.Pull = pull })
		res := mustSync(t, img)
		if res.Images != 1 || res.Downloads != 1 || res.SegmentRows != 5000 {
			t.Fatalf("image bootstrap: %d images, %d downloads, %d rows", res.Images, res.Downloads, res.SegmentRows)
		}
		rows := srv.client("rob", []string{"p1"}, func(cfg *Config) { cfg.Pull.LimitSnapshotRows = 1000 })
		if res := mustSync(t, rows); res.Images != 0 {
			t.Fatalf("a client without accept bit 2 got %d images", res.Images)
		}
		sameRows(t, "image vs server", replicaRows(img), srv.serverRows("p1"))
		sameRows(t, "image vs rows lane", replicaRows(img), replicaRows(rows))

		m := n.Engine.Metrics()
		if m.ImagesBuilt.Load() != 1 {
			t.Fatalf("%d images built, want 1", m.ImagesBuilt.Load())
		}
		b := srv.client("bob", []string{"p1"}, func(cfg *Config) { cfg.Pull = pull })
		if res := mustSync(t, b); res.Images != 1 {
			t.Fatalf("second image client: %d images", res.Images)
		}
		if m.ImagesBuilt.Load() != 1 || m.ImagesReused.Load() < 1 {
			t.Fatalf("second client: %d built, %d reused; want the stored image reused", m.ImagesBuilt.Load(), m.ImagesReused.Load())
		}
		sameRows(t, "bob", replicaRows(b), srv.serverRows("p1"))

		small := srv.client("sam", []string{"p2"}, func(cfg *Config) { cfg.Pull = pull })
		if res := mustSync(t, small); res.Images != 0 || res.SegmentRows != 300 {
			t.Fatalf("one-page table: %d images, %d rows; want the rows lane", res.Images, res.SegmentRows)
		}

		ft := newFaultTransport()
		ft.corruptSegment = true
		c := srv.client("carol", []string{"p1"}, func(cfg *Config) {
			cfg.Pull = pull
			cfg.HTTPClient = &http.Client{Transport: ft}
		})
		var se *SubscriptionError
		if _, err := c.Sync(context.Background()); !errors.As(err, &se) {
			t.Fatalf("corrupted image: %v", err)
		}
		if s := c.Subscriptions()[0]; s.Cursor != -1 || c.Count("tasks") != 0 {
			t.Fatalf("a corrupted image advanced the subscription (%+v) or applied %d rows", s, c.Count("tasks"))
		}
		ft.corruptSegment = false
		if res := mustSync(t, c); res.Images != 1 {
			t.Fatalf("recovery: %d images", res.Images)
		}
		sameRows(t, "carol", replicaRows(c), srv.serverRows("p1"))

		mustCommit(t, img, Upsert("tasks", task("p1-0000007", "p1", "edited")), Delete("tasks", "p1-0000008"))
		mustSync(t, img)
		mustSync(t, b)
		sameRows(t, "bob after edits", replicaRows(b), srv.serverRows("p1"))
	})
}

// TestNodeSignedURLs: with signed URLs on, a client that accepts them
// (accept bit 3) fetches its segments — image and rows pages — from the
// descriptor's url with no credential; the url works for any HTTP
// client until it expires; tampered, expired and other-partition urls
// are refused with the spec's codes; a client without bit 3 gets none.
func TestNodeSignedURLs(t *testing.T) {
	bothStores(t, func(t *testing.T) {
		clk := clock.NewManual(time.Now())
		srv, n := startNode(t, 1024, func(cfg *node.Config) {
			cfg.Clock = clk
			cfg.SignedURLs = node.SignedURLsConfig{Key: signingKey, TTL: time.Minute}
		})
		seed(t, srv, 3000, "p1")
		rec := &recordingTransport{base: defaultTransport}
		signed := srv.client("alice", []string{"p1"}, func(cfg *Config) {
			cfg.Pull = PullOptions{LimitSnapshotRows: 1000, Accept: imageAccept | ssp2.AcceptSignedURLs}
			cfg.HTTPClient = &http.Client{Transport: rec}
			cfg.NowFunc = clk.Now
		})
		res := mustSync(t, signed)
		if res.Images != 1 || res.SignedDownloads != 1 {
			t.Fatalf("signed bootstrap: %d images, %d signed downloads", res.Images, res.SignedDownloads)
		}
		sameRows(t, "signed", replicaRows(signed), srv.serverRows("p1"))
		reqs := rec.segmentRequests()
		if len(reqs) != 1 {
			t.Fatalf("%d segment requests", len(reqs))
		}
		if reqs[0].Header.Get("Authorization") != "" || reqs[0].Header.Get("X-Syncular-Scopes") != "" || !reqs[0].URL.Query().Has("st") {
			t.Fatalf("signed fetch %s carried credentials or no token: %v", reqs[0].URL, reqs[0].Header)
		}
		url := reqs[0].URL.String()
		segID := reqs[0].URL.Path[strings.LastIndex(reqs[0].URL.Path, "/")+1:]

		// Any HTTP client, no token: the bytes, matching the address.
		get := func(u string) (int, string, []byte) {
			t.Helper()
			resp, err := http.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var e struct{ Code string }
			if resp.StatusCode != http.StatusOK {
				_ = json.Unmarshal(b, &e)
			}
			return resp.StatusCode, e.Code, b
		}
		status, _, body := get(url)
		sum := sha256.Sum256(body)
		if status != http.StatusOK || "sha256:"+hex.EncodeToString(sum[:]) != segID {
			t.Fatalf("bare GET of the signed url: %d, %d bytes", status, len(body))
		}

		// A rows-lane client with bit 3 gets signed rows pages too.
		rows := srv.client("rita", []string{"p1"}, func(cfg *Config) {
			cfg.Pull = PullOptions{LimitSnapshotRows: 1000, Accept: ssp2.AcceptExternalRows | ssp2.AcceptSignedURLs}
			cfg.NowFunc = clk.Now
		})
		if res := mustSync(t, rows); res.SignedDownloads != 3 || res.Images != 0 {
			t.Fatalf("signed rows pages: %d signed downloads, %d images", res.SignedDownloads, res.Images)
		}
		plain := srv.client("pat", []string{"p1"}, func(cfg *Config) { cfg.Pull = PullOptions{LimitSnapshotRows: 1000, Accept: imageAccept} })
		if res := mustSync(t, plain); res.SignedDownloads != 0 || res.Images != 1 {
			t.Fatalf("a client without bit 3: %d signed downloads", res.SignedDownloads)
		}

		// Tampered: one character of the token changed.
		i := strings.Index(url, "st=") + 5
		flip := byte('A')
		if url[i] == 'A' {
			flip = 'B'
		}
		if status, code, _ := get(url[:i] + string(flip) + url[i+1:]); status != http.StatusForbidden || code != string(ssp2.CodeForbidden) {
			t.Fatalf("tampered url: %d %s", status, code)
		}
		base := url[:strings.Index(url, "?")]
		digest := ssp2.ScopeDigest(map[string][]string{"project_id": {"p1"}})
		// Well signed, for another partition: that partition never
		// published the segment.
		tok, _ := n.SignedURLs.Sign(signedurl.Segment, "other-partition", segID, digest, clk.Now())
		if status, code, _ := get(base + "?st=" + tok); status != http.StatusNotFound || code != string(ssp2.CodeNotFound) {
			t.Fatalf("other-partition url: %d %s", status, code)
		}
		// Well signed, for a digest the partition never published it under.
		tok, _ = n.SignedURLs.Sign(signedurl.Segment, partition, segID, "not-a-digest", clk.Now())
		if status, code, _ := get(base + "?st=" + tok); status != http.StatusForbidden || code != string(ssp2.CodeForbidden) {
			t.Fatalf("foreign-digest url: %d %s", status, code)
		}
		// Another segment's id under this token.
		if status, code, _ := get(strings.Replace(url, segID, "sha256:"+strings.Repeat("0", 64), 1)); status != http.StatusForbidden || code != string(ssp2.CodeForbidden) {
			t.Fatalf("url moved to another segment: %d %s", status, code)
		}

		// Past its expiry (TTL + the 60 s skew) the url is refused, and a
		// client never starts a fetch past urlExpiresAtMs.
		clk.Advance(time.Minute + signedurl.Skew + time.Second)
		if status, code, _ := get(url); status != http.StatusNotFound || code != string(ssp2.CodeSegmentExpired) {
			t.Fatalf("expired url: %d %s", status, code)
		}
		late := srv.client("lee", []string{"p1"}, func(cfg *Config) {
			cfg.Pull = PullOptions{LimitSnapshotRows: 1000, Accept: imageAccept | ssp2.AcceptSignedURLs}
			cfg.NowFunc = func() time.Time { return clk.Now().Add(time.Hour) }
		})
		if _, err := late.Sync(context.Background()); !errors.Is(err, &Error{Code: ssp2.CodeSegmentExpired}) {
			t.Fatalf("fetch past urlExpiresAtMs: %v", err)
		}
		late.cfg.NowFunc = clk.Now
		mustSync(t, late) // recovery: the next pull mints fresh urls
		sameRows(t, "late", replicaRows(late), srv.serverRows("p1"))
	})
}

// TestNodeImageRowsTakeLaterWrites: rows an image bootstrapped (held in
// the replica's ordered run) take every later write as rows delivered
// any other way do: the client's own optimistic upserts checked against
// the image's versions, patches that need the held row, deletes, new
// rows between and after the image's ids; another client's edits and
// deletes arriving as commits; and a second bootstrap of the same table,
// whose purge and image land over what the first left.
func TestNodeImageRowsTakeLaterWrites(t *testing.T) {
	bothStores(t, func(t *testing.T) {
		srv, _ := startNode(t, 1024)
		seed(t, srv, 5000, "p1")
		pull := PullOptions{LimitSnapshotRows: 1000, Accept: imageAccept}
		img := srv.client("alice", []string{"p1"}, func(cfg *Config) { cfg.Pull = pull })
		if res := mustSync(t, img); res.Images != 1 || img.Count("tasks") != 5000 {
			t.Fatalf("image bootstrap: %d images, %d rows", res.Images, img.Count("tasks"))
		}
		v := img.Version("tasks", "p1-0000010")
		if v < 1 {
			t.Fatalf("image row version %d", v)
		}
		edited := task("p1-0000010", "p1", "edited at the image's version")
		mustCommit(t, img,
			Upsert("tasks", edited).IfUnchanged(),
			Patch("tasks", map[string]any{"id": "p1-0000012", "title": "patched"}).IfUnchanged(),
			Delete("tasks", "p1-0000011"),
			Upsert("tasks", task("p1-0000010a", "p1", "between two image rows")),
			Upsert("tasks", task("p1-9999999", "p1", "after the last image row")))
		if res := mustSync(t, img); len(res.Rejected) != 0 {
			t.Fatalf("writes on image rows rejected: %+v", res.Rejected[0])
		}
		stale := task("p1-0000013", "p1", "at a stale version")
		mustCommit(t, img, Upsert("tasks", stale).WithBaseVersion(img.Version("tasks", "p1-0000013")+1))
		if res := mustSync(t, img); len(res.Rejected) != 1 {
			t.Fatalf("a stale base version against an image row: %d rejections, want 1", len(res.Rejected))
		}

		other := srv.client("bob", []string{"p1"}, nil)
		mustSync(t, other)
		mustCommit(t, other, Upsert("tasks", task("p1-0000020", "p1", "bob's edit")), Delete("tasks", "p1-0000021"))
		mustSync(t, other)
		mustSync(t, img)
		sameRows(t, "after later writes", replicaRows(img), srv.serverRows("p1"))
		if r, ok := img.Row("tasks", "p1-0000020"); !ok || r.Values["title"] != "bob's edit" {
			t.Fatalf("bob's edit on an image row: %+v %v", r, ok)
		}
		for _, id := range []string{"p1-0000011", "p1-0000021"} {
			if _, ok := img.Row("tasks", id); ok {
				t.Fatalf("deleted image row %s still held", id)
			}
		}
		if got := img.Count("tasks"); got != 5000 {
			t.Fatalf("%d rows, want 5000 (two deleted, two added)", got)
		}

		// A second subscription to the same rows bootstraps again: its
		// fresh clear purges the first image's rows and the new image lands.
		if err := img.Subscribe("again", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
			t.Fatal(err)
		}
		if res := mustSync(t, img); res.Images != 1 {
			t.Fatalf("second bootstrap: %d images", res.Images)
		}
		sameRows(t, "after a second image", replicaRows(img), srv.serverRows("p1"))
	})
}
