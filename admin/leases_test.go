package admin_test

import (
	"testing"
	"time"

	"github.com/syncnode/syncnode/admin"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
)

// TestLeases calls leases.revoke and leases.clear as the operator user of
// the documented permissions, over TCP, against a running node with auth
// leases on, on SQLite and PostgreSQL: a revoked lease refuses the next
// outage round and is never refreshed, a cleared one is gone, and bad or
// unknown leases change nothing.
func TestLeases(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			n := startSecured(t, func(c *node.Config) {
				c.Leases = node.LeasesConfig{TTL: time.Minute, Key: []byte("0123456789abcdef0123456789abcdef")}
				if store == "postgres" {
					url, sch := pgtest.Schema(t)
					c.Store.Postgres = pgstore.Config{URL: url, Schema: sch}
				}
			})
			ctx := ctxT(t)
			api := admin.NewClient(connect(t, n, "operator", "operator-secret", nil), 10*time.Second)
			allowed := engine.Allowed{"project_id": {"p1"}}
			now := time.Now().UnixMilli()
			lease, ok, err := n.Leases.Refresh(ctx, "acme", "c1", "alice", allowed, now)
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			other, _, err := n.Leases.Refresh(ctx, "acme", "c2", "alice", allowed, now)
			if err != nil {
				t.Fatal(err)
			}

			for _, req := range []admin.LeaseRequest{{LeaseID: lease.LeaseID}, {Partition: "acme"}, {Partition: "acme\x00", LeaseID: lease.LeaseID}} {
				_, err := api.LeaseRevoke(ctx, req)
				wantCode(t, err, admin.CodeInvalidRequest)
			}
			_, err = api.LeaseRevoke(ctx, admin.LeaseRequest{Partition: "beta", LeaseID: lease.LeaseID})
			wantCode(t, err, admin.CodeNotFound)
			if _, err := n.Leases.Authorize(ctx, "acme", "c1", "alice", now+1); err != nil {
				t.Fatalf("a refused revoke changed the lease: %v", err)
			}

			for range 2 { // revoking twice is a no-op
				res, err := api.LeaseRevoke(ctx, admin.LeaseRequest{Partition: "acme", LeaseID: lease.LeaseID})
				if err != nil || !res.Revoked || res.LeaseID != lease.LeaseID || res.Partition != "acme" {
					t.Fatalf("revoke = %+v, %v", res, err)
				}
			}
			if _, err := n.Leases.Authorize(ctx, "acme", "c1", "alice", now+1); ssp2.CodeOf(err) != ssp2.CodeAuthLeaseRevoked {
				t.Fatalf("outage round after revoke: %v, want %s", err, ssp2.CodeAuthLeaseRevoked)
			}
			if _, ok, err := n.Leases.Refresh(ctx, "acme", "c1", "alice", allowed, now+2); ok || err != nil {
				t.Fatalf("a revoked lease was refreshed (%v)", err)
			}
			if _, err := n.Leases.Authorize(ctx, "acme", "c2", "alice", now+1); err != nil {
				t.Fatalf("the other client's lease: %v", err)
			}

			res, err := api.LeaseClear(ctx, admin.LeaseRequest{Partition: "acme", LeaseID: lease.LeaseID})
			if err != nil || !res.Cleared || res.Revoked {
				t.Fatalf("clear = %+v, %v", res, err)
			}
			if _, ok, err := n.Store.LeaseByID(ctx, "acme", lease.LeaseID); ok || err != nil {
				t.Fatalf("the cleared lease is still stored (%v)", err)
			}
			_, err = api.LeaseClear(ctx, admin.LeaseRequest{Partition: "acme", LeaseID: lease.LeaseID})
			wantCode(t, err, admin.CodeNotFound)
			if _, ok, err := n.Store.LeaseByID(ctx, "acme", other.LeaseID); !ok || err != nil {
				t.Fatalf("clear removed another lease (%v)", err)
			}
			fresh, ok, err := n.Leases.Refresh(ctx, "acme", "c1", "alice", allowed, now+3)
			if err != nil || !ok || fresh.LeaseID == lease.LeaseID {
				t.Fatalf("after clear: %+v, %v, %v; want a fresh lease id", fresh, ok, err)
			}
		})
	}
}

// TestLeasesOff: a node without auth leases says so.
func TestLeasesOff(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nil)
	api := admin.NewClient(connect(t, n, "", "", nil), 10*time.Second)
	for _, op := range []func() (admin.LeaseResponse, error){
		func() (admin.LeaseResponse, error) {
			return api.LeaseRevoke(ctxT(t), admin.LeaseRequest{Partition: "acme", LeaseID: "x"})
		},
		func() (admin.LeaseResponse, error) {
			return api.LeaseClear(ctxT(t), admin.LeaseRequest{Partition: "acme", LeaseID: "x"})
		},
	} {
		_, err := op()
		wantCode(t, err, admin.CodeUnavailable)
	}
}
