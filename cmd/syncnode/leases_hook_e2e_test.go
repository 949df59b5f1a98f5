package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// freshDatabase creates a PostgreSQL database for one test (serve's
// postgres_url names a database, not a schema) and drops it afterwards.
func freshDatabase(t *testing.T) string {
	t.Helper()
	base := pgtest.URL(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "syncnode_e2e_" + hex.EncodeToString(b[:])
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

var natsURLRE = regexp.MustCompile(`nats=(nats://\S+)`)

// TestLeasesHookOutageThroughServe: `serve` with [leases] and the scopes
// hook, on SQLite and PostgreSQL. While the host answers, rounds carry a
// lease; when it answers {"error":{"code":"outage"}} the lease serves
// (pushes within its scopes apply) until it expires on the wall clock,
// then rounds stop with sync.auth_lease_required; `syncnode leases
// revoke` through the node's admin API makes the next outage round fail
// with sync.auth_lease_revoked, and `syncnode leases clear --offline`
// on the store makes the next live round mint a fresh lease id.
func TestLeasesHookOutageThroughServe(t *testing.T) {
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			ctx := context.Background()
			const secret = "0123456789abcdef0123456789abcdef"
			const key = "fedcba9876543210fedcba9876543210"
			dir := t.TempDir()
			pg := ""
			if store == "postgres" {
				pg = fmt.Sprintf("postgres_url = %q\n", freshDatabase(t))
			}
			cfgFile := filepath.Join(dir, "syncnode.toml")
			if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf(`
[storage]
%s
[auth]
jwt_secret = %q
[hooks.scopes]
enabled = true
cache_ttl = "0s"
timeout = "2s"
[leases]
ttl = "3s"
key = %q
`, pg, secret, key)), 0o600); err != nil {
				t.Fatal(err)
			}
			s := startServe(t, "--config", cfgFile)
			m := natsURLRE.FindStringSubmatch(s.stderr.String())
			if m == nil {
				t.Fatalf("no NATS URL in the log:\n%s", s.stderr.String())
			}
			nc, err := nats.Connect(m[1])
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			var outage atomic.Bool
			sub, err := nc.Subscribe("syncnode.hook.scopes.>", func(msg *nats.Msg) {
				if outage.Load() {
					_ = msg.Respond([]byte(`{"error":{"code":"outage"}}`))
					return
				}
				_ = msg.Respond([]byte(`{"scopes":{"project_id":["p1"]}}`))
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			tok, err := auth.Mint([]byte(secret), auth.Principal{ActorID: "alice", Partition: "acme"}, time.Hour, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			sch, err := loadSchema("")
			if err != nil {
				t.Fatal(err)
			}
			c, err := client.New(client.Config{BaseURL: s.url, Schema: sch, Token: tok})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
				t.Fatal(err)
			}
			row := func(id string) map[string]any {
				return map[string]any{"id": id, "project_id": "p1", "title": id, "done": false}
			}
			if rj := push(t, c, row("t1")); rj != nil {
				t.Fatalf("push: %+v", rj)
			}
			lease, ok := c.Lease()
			if !ok {
				t.Fatal("no lease after a resolved round")
			}
			outage.Store(true)
			if rj := push(t, c, row("t2")); rj != nil {
				t.Fatalf("push during the outage: %+v", rj)
			}
			if got, _ := c.Lease(); got != lease {
				t.Fatalf("lease refreshed during the outage: %+v, was %+v", got, lease)
			}
			// The lease expires on the wall clock: wait for the code.
			var last error
			poll.Until(t, 15*time.Second, "the lease to expire", func() bool {
				_, last = c.SyncUntilIdle(ctx)
				var ce *client.Error
				return errors.As(last, &ce) && ce.Code == ssp2.CodeAuthLeaseRequired
			})
			if time.Now().UnixMilli() < lease.ExpiresAtMs {
				t.Fatalf("refused before the lease's expiry %d", lease.ExpiresAtMs)
			}

			// Live again: the same id slides; an operator revokes it.
			outage.Store(false)
			if _, err := c.SyncUntilIdle(ctx); err != nil {
				t.Fatal(err)
			}
			if got, _ := c.Lease(); got.ID != lease.ID {
				t.Fatalf("lease id changed: %s, was %s", got.ID, lease.ID)
			}
			// Through the running node's admin API, and offline on the
			// store: refusals first, which change nothing.
			online := []string{"--config", cfgFile, "--nats", m[1]}
			offline := []string{"--config", cfgFile, "--data", s.dataDir, "--offline"}
			for _, where := range [][]string{online, offline} {
				if _, err := cli(t, append([]string{"leases", "revoke", "--partition", "acme", "--lease", "nope"}, where...)...); err == nil || !strings.Contains(err.Error(), "no lease nope") {
					t.Fatalf("revoking an unknown lease (%v): %v", where, err)
				}
				if _, err := cli(t, append([]string{"leases", "clear", "--partition", "acme"}, where...)...); err == nil || !strings.Contains(err.Error(), "--lease is required") {
					t.Fatalf("clear without --lease (%v): %v", where, err)
				}
			}
			if _, err := cli(t, "leases", "revoke", "--config", cfgFile, "--nats", "nats://127.0.0.1:1", "--partition", "acme", "--lease", lease.ID); err == nil || !strings.Contains(err.Error(), "--offline") {
				t.Fatalf("revoke without a reachable node: %v", err)
			}
			out := mustCLI(t, append([]string{"leases", "revoke", "--partition", "acme", "--lease", lease.ID}, online...)...)
			if !strings.Contains(out, "revoked") {
				t.Fatalf("leases revoke printed %q", out)
			}
			outage.Store(true)
			_, err = c.SyncUntilIdle(ctx)
			wantCode(t, err, ssp2.CodeAuthLeaseRevoked)
			// Cleared offline, the next live round mints a fresh id.
			mustCLI(t, append([]string{"leases", "clear", "--partition", "acme", "--lease", lease.ID}, offline...)...)
			outage.Store(false)
			if _, err := c.SyncUntilIdle(ctx); err != nil {
				t.Fatal(err)
			}
			if got, ok := c.Lease(); !ok || got.ID == lease.ID {
				t.Fatalf("lease after clear = %+v, want a fresh id", got)
			}
		})
	}
}
