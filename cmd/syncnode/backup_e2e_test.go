package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/ssp2"
)

// movingTransport sends every request to the node currently serving (a
// restarted node listens on another port).
type movingTransport struct{ base atomic.Pointer[url.URL] }

func (m *movingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	b := m.base.Load()
	r.URL.Scheme, r.URL.Host, r.Host = b.Scheme, b.Host, b.Host
	return http.DefaultTransport.RoundTrip(r)
}

func (m *movingTransport) point(t *testing.T, s *served) {
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	m.base.Store(u)
}

// TestBackupRestoreThroughServe: a backup taken while four writers push
// (syncnode backup on SQLite, pg_dump on PostgreSQL) restores to a
// consistent state — exactly the commits up to some seq, each whole —
// `syncnode restore` rotates the log epoch, and a client that had synced
// past the backup re-bootstraps and converges with a fresh client.
func TestBackupRestoreThroughServe(t *testing.T) {
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			ctx := context.Background()
			const secret = "0123456789abcdef0123456789abcdef"
			dir := t.TempDir()
			writeCfg := func(name, pgURL string) string {
				pg := ""
				if pgURL != "" {
					pg = fmt.Sprintf("postgres_url = %q\n", pgURL)
				}
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, []byte(fmt.Sprintf("[storage]\n%s[auth]\njwt_secret = %q\n", pg, secret)), 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			}
			pgURL := ""
			if store == "postgres" {
				pgURL = freshDatabase(t)
			}
			cfgFile := writeCfg("syncnode.toml", pgURL)
			data := filepath.Join(dir, "data")
			s := startServeIn(t, data, "--config", cfgFile)
			mt := &movingTransport{}
			mt.point(t, s)
			sch, err := loadSchema("")
			if err != nil {
				t.Fatal(err)
			}
			tok, err := auth.Mint([]byte(secret), auth.Principal{ActorID: "alice", Partition: "acme", Scopes: map[string][]string{"project_id": {"p1"}}}, time.Hour, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			newClient := func() *client.Client {
				c, err := client.New(client.Config{BaseURL: s.url, Schema: sch, Token: tok, HTTPClient: &http.Client{Transport: mt}})
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
					t.Fatal(err)
				}
				return c
			}

			// The storm: each writer commits one row per round and
			// records the commitSeq it was applied at.
			var (
				mu      sync.Mutex
				seqOf   = map[string]int64{}
				stop    atomic.Bool
				wg      sync.WaitGroup
				applied atomic.Int64
			)
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := newClient()
					for i := 0; !stop.Load(); i++ {
						id := fmt.Sprintf("w%d-%d", w, i)
						if _, err := c.Upsert(ctx, "tasks", map[string]any{"id": id, "project_id": "p1", "title": id, "done": false}); err != nil {
							t.Error(err)
							return
						}
						res, err := c.Sync(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						for _, p := range res.Pushed {
							if p.Status == ssp2.PushApplied {
								mu.Lock()
								seqOf[id] = p.CommitSeq
								mu.Unlock()
								applied.Add(1)
							}
						}
					}
				}()
			}
			poll.Until(t, 30*time.Second, "the storm to start", func() bool { return applied.Load() >= 40 })
			backup := filepath.Join(dir, "backup.db")
			if store == "sqlite" {
				out := mustCLI(t, "backup", "--config", cfgFile, "--data", data, "--out", backup)
				if !strings.Contains(out, "backup done") {
					t.Fatalf("backup printed %q", out)
				}
			} else if b, err := exec.Command("pg_dump", "-Fc", "-f", backup, pgURL).CombinedOutput(); err != nil {
				t.Fatalf("pg_dump: %v\n%s", err, b)
			}
			atBackup := applied.Load()
			poll.Until(t, 30*time.Second, "pushes after the backup", func() bool { return applied.Load() >= atBackup+40 })
			stop.Store(true)
			wg.Wait()
			ahead := newClient()
			if _, err := ahead.SyncUntilIdle(ctx); err != nil {
				t.Fatal(err)
			}
			if ahead.Count("tasks") != len(seqOf) {
				t.Fatalf("ahead client holds %d rows, %d were applied", ahead.Count("tasks"), len(seqOf))
			}
			if err := s.stop(); err != nil {
				t.Fatal(err)
			}

			restoreArgs := []string{"restore", "--config", cfgFile, "--data", data, "--from", backup}
			if store == "postgres" {
				target := freshDatabase(t)
				if b, err := exec.Command("pg_restore", "--no-owner", "-d", target, backup).CombinedOutput(); err != nil {
					t.Fatalf("pg_restore: %v\n%s", err, b)
				}
				cfgFile = writeCfg("restored.toml", target)
				restoreArgs = []string{"restore", "--config", cfgFile, "--data", data, "--rotate-epochs"}
			}
			out := mustCLI(t, restoreArgs...)
			if !strings.Contains(out, `partition "acme"`) || !strings.Contains(out, "1 partitions rotated") {
				t.Fatalf("restore printed %q", out)
			}

			s2 := startServeIn(t, data, "--config", cfgFile)
			mt.point(t, s2)
			fresh := newClient()
			// The restarted node's gate may still be taking the rotated
			// token in: that refusal is retryable (token_changed).
			var lastErr error
			poll.Until(t, 30*time.Second, "the restored node to serve", func() bool {
				_, lastErr = fresh.SyncUntilIdle(ctx)
				var ce *client.Error
				if errors.As(lastErr, &ce) && ce.Retryable {
					return false
				}
				return true
			})
			if lastErr != nil {
				t.Fatal(lastErr)
			}
			// Consistent: the restored rows are exactly the commits up to
			// the highest restored seq.
			restored := map[string]bool{}
			var top int64
			for _, r := range fresh.Rows("tasks") {
				restored[r.ID] = true
				top = max(top, seqOf[r.ID])
			}
			var missing, extra []string
			for id, seq := range seqOf {
				switch {
				case seq <= top && !restored[id]:
					missing = append(missing, id)
				case seq > top && restored[id]:
					extra = append(extra, id)
				}
			}
			sort.Strings(missing)
			if len(missing) > 0 || len(extra) > 0 || len(restored) == 0 || len(restored) >= len(seqOf) {
				t.Fatalf("restored %d of %d rows up to seq %d: missing %v, beyond %v", len(restored), len(seqOf), top, missing, extra)
			}
			// The client that was ahead is told to reset and converges.
			res, err := ahead.SyncUntilIdle(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !res.EpochReset || ahead.Count("tasks") != len(restored) {
				t.Fatalf("ahead client after the restore: reset %v, %d rows, want %d", res.EpochReset, ahead.Count("tasks"), len(restored))
			}
			for _, r := range ahead.Rows("tasks") {
				if !restored[r.ID] {
					t.Fatalf("ahead client kept %s, which the restore does not hold", r.ID)
				}
			}
			// And both keep syncing on the new epoch.
			if rj := push(t, ahead, map[string]any{"id": "after", "project_id": "p1", "title": "after", "done": false}); rj != nil {
				t.Fatalf("push after the restore: %+v", rj)
			}
			if _, err := fresh.SyncUntilIdle(ctx); err != nil || fresh.Count("tasks") != len(restored)+1 {
				t.Fatalf("fresh client after a new push: %d rows, %v", fresh.Count("tasks"), err)
			}
		})
	}
}
