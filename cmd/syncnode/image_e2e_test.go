package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/signedurl"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// segmentTransport records segment requests and, while corrupt is set,
// flips one byte of every segment body (asked uncompressed, so the
// content-address check is what must catch it).
type segmentTransport struct {
	mu      sync.Mutex
	corrupt bool
	reqs    []*http.Request
}

func (s *segmentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.Contains(r.URL.Path, "/segments/") {
		return http.DefaultTransport.RoundTrip(r)
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, r)
	corrupt := s.corrupt
	s.mu.Unlock()
	if corrupt {
		r = r.Clone(r.Context())
		r.Header.Set("Accept-Encoding", "identity")
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || !corrupt || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	b[len(b)/2] ^= 0xff
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	return resp, nil
}

// signingKey is the [signed_urls] key the end-to-end node is given.
var signingKey = strings.Repeat("s", 32)

// TestImageAndSignedURLsEndToEnd runs `syncnode serve` with signed URLs
// on, on SQLite and PostgreSQL, and bootstraps over HTTP through the Go
// client: the image lane's replica equals the rows lane's row for row; an
// image corrupted in transit is detected and the next round recovers; a
// signed URL is fetched without credentials, by any HTTP client, and a
// tampered or expired one is refused.
func TestImageAndSignedURLsEndToEnd(t *testing.T) {
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			dataDir := t.TempDir()
			conf := filepath.Join(dataDir, "syncnode.toml")
			body := "[signed_urls]\nkey = \"" + signingKey + "\"\nttl = \"5m\"\n"
			if store == "postgres" {
				url, schema := pgtest.Schema(t)
				body += fmt.Sprintf("[storage]\npostgres_url = %q\npostgres_schema = %q\n", url, schema)
			}
			if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			args, _ := json.Marshal([]string{"serve", "--config", conf, "--http", "127.0.0.1:0", "--data", dataDir, "--nats-port", "-1"})
			srv, url := startChild(t, []string{childEnv + "=serve", childArgsEnv + "=" + string(args), "SYNCNODE_LOG_LEVEL=warn"}, "syncnode: listening on ")
			defer srv.stop()
			url = strings.TrimSpace(url)
			if !strings.HasPrefix(url, "http") {
				url = "http://" + url
			}

			secret, _, err := auth.DevSecret(dataDir)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := auth.Mint(secret, auth.Principal{ActorID: "alice", Partition: "acme", Scopes: map[string][]string{"project_id": {"p1"}}}, time.Hour, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			sch, err := loadSchema("")
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			newClient := func(accept uint8, rt http.RoundTripper) *client.Client {
				t.Helper()
				c, err := client.New(client.Config{BaseURL: url, Token: tok, Schema: sch, HTTPClient: &http.Client{Transport: rt},
					Pull: client.PullOptions{LimitSnapshotRows: 1000, MaxSnapshotPages: 10, Accept: accept}})
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Subscribe("tasks", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
					t.Fatal(err)
				}
				return c
			}

			seeder := newClient(0, http.DefaultTransport)
			for i := range 3000 {
				if _, err := seeder.Upsert(ctx, "tasks", map[string]any{"id": fmt.Sprintf("t%05d", i), "project_id": "p1", "title": fmt.Sprintf("task %d", i), "done": i%2 == 0}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := seeder.SyncUntilIdle(ctx); err != nil {
				t.Fatal(err)
			}

			const images = ssp2.AcceptInlineRows | ssp2.AcceptExternalRows | ssp2.AcceptSQLite
			rows := newClient(0, http.DefaultTransport)
			if res, err := rows.SyncUntilIdle(ctx); err != nil || res.Images != 0 || rows.Count("tasks") != 3000 {
				t.Fatalf("rows lane: %+v, %v", res, err)
			}

			st := &segmentTransport{corrupt: true}
			img := newClient(images|ssp2.AcceptSignedURLs, st)
			var se *client.SubscriptionError
			if _, err := img.Sync(ctx); !errors.As(err, &se) || img.Count("tasks") != 0 {
				t.Fatalf("corrupted image: %v, %d rows applied", err, img.Count("tasks"))
			}
			st.mu.Lock()
			st.corrupt, st.reqs = false, nil
			st.mu.Unlock()
			res, err := img.SyncUntilIdle(ctx)
			if err != nil || res.Images != 1 || res.SignedDownloads != 1 {
				t.Fatalf("image lane: %+v, %v", res, err)
			}
			if got, want := img.Rows("tasks"), rows.Rows("tasks"); !reflect.DeepEqual(got, want) {
				t.Fatalf("the image lane's %d rows differ from the rows lane's %d", len(got), len(want))
			}

			st.mu.Lock()
			req := st.reqs[0]
			st.mu.Unlock()
			if req.Header.Get("Authorization") != "" || !req.URL.Query().Has("st") {
				t.Fatalf("signed fetch %s: %v", req.URL, req.Header)
			}
			get := func(u string) (int, []byte) {
				t.Helper()
				resp, err := http.Get(u)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, b
			}
			status, b := get(req.URL.String())
			sum := sha256.Sum256(b)
			if status != http.StatusOK || !strings.Contains(req.URL.Path, "sha256:"+hex.EncodeToString(sum[:])) {
				t.Fatalf("bare GET: %d, %d bytes", status, len(b))
			}
			tampered := strings.Replace(req.URL.String(), "st=", "st=x", 1)
			if status, b := get(tampered); status != http.StatusForbidden || !strings.Contains(string(b), string(ssp2.CodeForbidden)) {
				t.Fatalf("tampered url: %d %s", status, b)
			}

			// Expired: a token the node's own key signed, minted long
			// enough ago that its exp plus the 60 s skew has passed, is
			// refused with sync.segment_expired; the same token minted now
			// is served, so only its age differs.
			signer, err := signedurl.New(signedurl.Config{Key: []byte(signingKey), TTL: 5 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			segID := req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]
			digest := ssp2.ScopeDigest(map[string][]string{"project_id": {"p1"}})
			at := func(now time.Time) string {
				tok, _ := signer.Sign(signedurl.Segment, "acme", segID, digest, now)
				u := *req.URL
				u.RawQuery = signedurl.Param + "=" + tok
				return u.String()
			}
			if status, b := get(at(time.Now())); status != http.StatusOK {
				t.Fatalf("a token minted now: %d %s", status, b)
			}
			expired := at(time.Now().Add(-5*time.Minute - signedurl.Skew - time.Minute))
			if status, b := get(expired); status != http.StatusNotFound || !strings.Contains(string(b), string(ssp2.CodeSegmentExpired)) {
				t.Fatalf("expired url: %d %s", status, b)
			}
		})
	}
}
