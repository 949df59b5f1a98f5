package leases

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

func newLeases(t *testing.T) (*Leases, *sqlitestore.Store) {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	l, err := New(Config{TTL: time.Minute, Key: []byte("0123456789abcdef0123456789abcdef"), Store: st})
	if err != nil {
		t.Fatal(err)
	}
	return l, st
}

// TestTamperedRecordRefused: a stored record changed behind the node
// (scopes widened in SQL) fails its signature and authorizes nothing.
func TestTamperedRecordRefused(t *testing.T) {
	ctx := context.Background()
	l, st := newLeases(t)
	lease, ok, err := l.Refresh(ctx, "acme", "c1", "alice", engine.Allowed{"project_id": {"p1"}}, 1000)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if a, err := l.Authorize(ctx, "acme", "c1", "alice", 2000); err != nil || a["project_id"][0] != "p1" {
		t.Fatalf("authorize = %v, %v", a, err)
	}
	if _, err := l.Authorize(ctx, "acme", "c1", "bob", 2000); ssp2.CodeOf(err) != ssp2.CodeAuthLeaseRequired {
		t.Fatalf("another actor: %v", err)
	}
	rec, _, _ := st.LeaseGet(ctx, "acme", "c1")
	rec.Allowed = []byte(`{"project_id":["*"]}`)
	if err := st.LeasePut(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Authorize(ctx, "acme", "c1", "alice", 2000); ssp2.CodeOf(err) != ssp2.CodeAuthLeaseRequired || l.Metrics().BadRecords.Load() != 1 {
		t.Fatalf("tampered record: %v (bad records %d)", err, l.Metrics().BadRecords.Load())
	}
	// A live round replaces a bad record with a fresh lease.
	fresh, ok, err := l.Refresh(ctx, "acme", "c1", "alice", engine.Allowed{"project_id": {"p1"}}, 3000)
	if err != nil || !ok || fresh.LeaseID == lease.LeaseID {
		t.Fatalf("refresh over a bad record = %+v, %v, %v", fresh, ok, err)
	}
	if ok, err := l.Revoke(ctx, "acme", fresh.LeaseID); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, err := l.Authorize(ctx, "acme", "c1", "alice", 3000); ssp2.CodeOf(err) != ssp2.CodeAuthLeaseRevoked {
		t.Fatalf("revoked: %v", err)
	}
	if _, ok, _ := l.Refresh(ctx, "acme", "c1", "alice", engine.Allowed{"project_id": {"p1"}}, 4000); ok {
		t.Fatal("a revoked lease was refreshed")
	}
}
