package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/ssp2"
)

// leaseInstance creates an instance with auth leases of ttlMs.
func (h *harness) leaseInstance(ttlMs int64) string {
	h.t.Helper()
	body := map[string]any{"schema": json.RawMessage(conformanceSchema), "partition": "acme", "nowMs": startMs, "leases": map[string]any{"ttlMs": ttlMs}}
	var out struct{ ID string }
	mustCall(h.t, "POST", h.s.url+"/__test/instances", body, &out)
	return out.ID
}

func wantCode(t *testing.T, err error, code ssp2.Code) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != code {
		t.Fatalf("sync error = %v, want %s", err, code)
	}
}

// TestLeasesThroughServe: over `serve --test-control`, a resolved round
// issues a lease and slides the same id; during a resolver outage the
// lease authorizes pushes and pulls with its scopes until it expires, and
// then every round fails with sync.auth_lease_required; a revoked lease
// fails with sync.auth_lease_revoked and is not refreshed when the
// resolver is back.
func TestLeasesThroughServe(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	const ttl = 60_000
	id := h.leaseInstance(ttl)
	h.grant(id, "alice", map[string][]string{"project_id": {"p1"}})
	c := h.client(id, "alice", 3)
	if err := c.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
		t.Fatal(err)
	}
	if rj := push(t, c, task("t1", "p1", "before")); rj != nil {
		t.Fatalf("push: %+v", rj)
	}
	first, ok := c.Lease()
	if !ok || first.ID == "" || first.ExpiresAtMs != startMs+ttl {
		t.Fatalf("lease after a resolved round = %+v, %v", first, ok)
	}
	// A later resolved round slides the same lease.
	mustCall(t, "POST", h.ctl(id, "/clock/advance"), map[string]int64{"ms": 10_000}, nil)
	if _, err := c.SyncUntilIdle(ctx); err != nil {
		t.Fatal(err)
	}
	slid, _ := c.Lease()
	if slid.ID != first.ID || slid.ExpiresAtMs != startMs+10_000+ttl {
		t.Fatalf("slid lease = %+v, want id %s expiring at %d", slid, first.ID, startMs+10_000+ttl)
	}

	// The outage: served with the lease's scopes, without a refresh.
	mustCall(t, "POST", h.ctl(id, "/resolver"), map[string]bool{"outage": true}, nil)
	mustCall(t, "POST", h.ctl(id, "/clock/advance"), map[string]int64{"ms": ttl - 1}, nil)
	if rj := push(t, c, task("t2", "p1", "during the outage")); rj != nil {
		t.Fatalf("push during the outage: %+v", rj)
	}
	wantRejected(t, push(t, c, task("t3", "p2", "outside the lease")), string(ssp2.CodeForbidden))
	if got, _ := c.Lease(); got != slid {
		t.Fatalf("lease during the outage = %+v, want the unrefreshed %+v", got, slid)
	}
	if c.Count("tasks") != 2 {
		t.Fatalf("client holds %d rows, want 2", c.Count("tasks"))
	}
	// Expired: every round stops with the request-level code.
	mustCall(t, "POST", h.ctl(id, "/clock/advance"), map[string]int64{"ms": 1}, nil)
	_, err := c.SyncUntilIdle(ctx)
	wantCode(t, err, ssp2.CodeAuthLeaseRequired)
	// A client that never held a lease has none to use.
	fresh := h.client(id, "alice", 3)
	_, err = fresh.SyncUntilIdle(ctx)
	wantCode(t, err, ssp2.CodeAuthLeaseRequired)

	// The resolver is back: a new window on the same id; then revoke it.
	mustCall(t, "POST", h.ctl(id, "/resolver"), map[string]bool{"outage": false}, nil)
	if _, err := c.SyncUntilIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Lease(); got.ID != first.ID {
		t.Fatalf("lease after the outage = %+v, want id %s", got, first.ID)
	}
	mustCall(t, "POST", h.ctl(id, "/leases/revoke"), map[string]string{"leaseId": first.ID}, nil)
	if st := call(t, "POST", h.ctl(id, "/leases/revoke"), map[string]string{"leaseId": "nope"}, nil); st != http.StatusNotFound {
		t.Fatalf("revoke of an unknown lease: %d", st)
	}
	mustCall(t, "POST", h.ctl(id, "/resolver"), map[string]bool{"outage": true}, nil)
	_, err = c.SyncUntilIdle(ctx)
	wantCode(t, err, ssp2.CodeAuthLeaseRevoked)
	// A live round is served but never resurrects the revoked lease.
	mustCall(t, "POST", h.ctl(id, "/resolver"), map[string]bool{"outage": false}, nil)
	if _, err := c.SyncUntilIdle(ctx); err != nil {
		t.Fatal(err)
	}
	mustCall(t, "POST", h.ctl(id, "/resolver"), map[string]bool{"outage": true}, nil)
	_, err = c.SyncUntilIdle(ctx)
	wantCode(t, err, ssp2.CodeAuthLeaseRevoked)

	// Without leases an outage fails closed, as before.
	plain := h.instance("acme", nil)
	h.grant(plain, "alice", map[string][]string{"project_id": {"p1"}})
	pc := h.client(plain, "alice", 3)
	mustCall(t, "POST", h.ctl(plain, "/resolver"), map[string]bool{"outage": true}, nil)
	wantRejected(t, push(t, pc, task("t9", "p1", "x")), string(ssp2.CodeForbidden))
	if _, ok := pc.Lease(); ok {
		t.Fatal("an instance without leases issued one")
	}
}

// TestIdempotencyFaultThroughServe: faults/idempotency-lookup fails the
// next optimistic lookup: that commit is answered with the retryable
// sync.idempotency_cache_miss and stays queued, and the next round
// applies it once.
func TestIdempotencyFaultThroughServe(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	id := h.instance("acme", nil)
	h.grant(id, "alice", map[string][]string{"project_id": {"p1"}})
	c := h.client(id, "alice", 3)
	if _, err := c.SyncUntilIdle(ctx); err != nil { // acquire the epoch
		t.Fatal(err)
	}
	mustCall(t, "POST", h.ctl(id, "/faults/idempotency-lookup"), nil, nil)
	if _, err := c.Upsert(ctx, "tasks", task("t1", "p1", "once")); err != nil {
		t.Fatal(err)
	}
	res, err := c.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Pushed) != 1 || !res.Pushed[0].Retry || len(c.Pending()) != 1 {
		t.Fatalf("faulted push: %+v, %d pending", res.Pushed, len(c.Pending()))
	}
	if n := h.value(id, "/max-commit-seq"); n != 0 {
		t.Fatalf("the faulted commit was written: max commit seq %d", n)
	}
	if _, err := c.SyncUntilIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if len(c.Pending()) != 0 || h.value(id, "/max-commit-seq") != 1 || len(h.rows(id)) != 1 {
		t.Fatalf("after the retry: %d pending, seq %d, %d rows", len(c.Pending()), h.value(id, "/max-commit-seq"), len(h.rows(id)))
	}
}

// TestBackupControlThroughServe: backup/capture then backup/restore puts
// an instance back to the captured state and rotates its log epoch: a
// client that synced past the capture re-bootstraps and converges.
func TestBackupControlThroughServe(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	id := h.instance("acme", nil)
	h.grant(id, "alice", map[string][]string{"project_id": {"p1"}})
	c := h.client(id, "alice", 3)
	if err := c.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
		t.Fatal(err)
	}
	if rj := push(t, c, task("t1", "p1", "kept")); rj != nil {
		t.Fatal(rj)
	}
	var b struct{ BackupID string }
	mustCall(t, "POST", h.ctl(id, "/backup/capture"), nil, &b)
	if rj := push(t, c, task("t2", "p1", "lost")); rj != nil {
		t.Fatal(rj)
	}
	epoch := c.LogEpoch()
	var out struct{ LogEpoch string }
	mustCall(t, "POST", h.ctl(id, "/backup/restore"), map[string]string{"backupId": b.BackupID}, &out)
	if out.LogEpoch == "" || out.LogEpoch == epoch {
		t.Fatalf("restore answered epoch %q (was %q)", out.LogEpoch, epoch)
	}
	if rows := h.rows(id); len(rows) != 1 || rows[0].RowID != "t1" {
		t.Fatalf("rows after the restore: %+v", rows)
	}
	res, err := c.SyncUntilIdle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.EpochReset || c.Count("tasks") != 1 || c.LogEpoch() != out.LogEpoch {
		t.Fatalf("client after the restore: reset %v, %d rows, epoch %s", res.EpochReset, c.Count("tasks"), c.LogEpoch())
	}
	if st := call(t, "POST", h.ctl(id, "/backup/restore"), map[string]string{"backupId": "9"}, nil); st != http.StatusNotFound {
		t.Fatalf("restore of an unknown backup: %d", st)
	}
}
