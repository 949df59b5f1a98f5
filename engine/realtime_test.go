package engine

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

func TestAttachRefusesBadClientIDs(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	_, err := h.e.Attach(ctx, id("alice", "p1"), "")
	wantCode(t, err, ssp2.CodeInvalidRequest)
	_, err = h.e.Attach(ctx, id("alice", "p1"), `["remote-command","x"]`)
	wantCode(t, err, ssp2.CodeInvalidClientID)
	_, err = h.e.Attach(ctx, id("alice", "p1"), "c\x00")
	wantCode(t, err, ssp2.CodeInvalidClientID)
	_, err = h.e.Attach(ctx, Identity{Partition: "p\x00", ActorID: "alice"}, "c9")
	wantCode(t, err, ssp2.CodeInvalidRequest)

	ep := h.epoch(id("alice", "p1"))
	h.sync(id("alice", "p1"), 2, hdr("c1", ep), &ssp2.PullHeader{Accept: 3}, sub("s1", 0, "p1"))
	_, err = h.e.Attach(ctx, id("mallory", "p1"), "c1")
	wantCode(t, err, ssp2.CodeInvalidClientID)
}

func TestAttachRegistersTheLastPull(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	alice := id("alice", "p1", "p2")
	a, err := h.e.Attach(ctx, alice, "c1")
	if err != nil || a.HasClient || len(a.Registrations) != 0 || a.Partition.LogEpoch == "" {
		t.Fatalf("fresh client: %+v, %v", a, err)
	}
	ep := h.epoch(alice)
	// p3 is not held: the effective scopes drop it. A second subscription
	// on a project the actor lost entirely is revoked and not registered.
	h.sync(alice, 2, hdr("c1", ep), &ssp2.PullHeader{Accept: 3},
		sub("s1", 0, "p1", "p3"), sub("s2", 0, "p2"), sub("s3", 0, "p9"))
	a, err = h.e.Attach(ctx, alice, "c1")
	if err != nil {
		t.Fatal(err)
	}
	want := []Registration{
		{ID: "s1", Table: "tasks", Effective: map[string][]string{"project_id": {"p1"}}},
		{ID: "s2", Table: "tasks", Effective: map[string][]string{"project_id": {"p2"}}},
	}
	if !a.HasClient || a.Client.WireVersion != 2 || !reflect.DeepEqual(a.Registrations, want) {
		t.Fatalf("attachment %+v, want registrations %+v", a, want)
	}

	failing := alice
	failing.Scopes = ResolverFunc(func(context.Context, string, string) (Allowed, error) { return nil, errors.New("down") })
	a, err = h.e.Attach(ctx, failing, "c1")
	if err != nil || !a.HasClient || len(a.Registrations) != 0 {
		t.Fatalf("failing resolver: %+v, %v; want the record and no registrations", a, err)
	}
	undeclared := alice
	undeclared.Scopes = StaticScopes{"nope": {"x"}}
	if a, err = h.e.Attach(ctx, undeclared, "c1"); err != nil || len(a.Registrations) != 0 {
		t.Fatalf("resolver with an undeclared variable: %+v, %v", a, err)
	}
}

func TestAppendDelta(t *testing.T) {
	h := newHarness(t, nil)
	c := &storage.Commit{CommitSeq: 7, CreatedAtMs: 1234, ActorID: "bob", Changes: []storage.Change{
		{Table: "tasks", RowID: "a", Op: storage.OpUpsert, RowVersion: 3, Scopes: map[string]string{"project_id": "p1"}, Row: h.row("a", "p1", "A")},
		{Table: "tasks", RowID: "b", Op: storage.OpDelete, Scopes: map[string]string{"project_id": "p2"}},
		{Table: "tasks", RowID: "c", Op: storage.OpUpsert, RowVersion: 1, Scopes: map[string]string{"project_id": "p1"}, Row: h.row("c", "p1", "")},
	}}
	regs := []Registration{
		{ID: "only-p2", Table: "tasks", Effective: map[string][]string{"project_id": {"p2"}}},
		{ID: "nothing", Table: "tasks", Effective: map[string][]string{"project_id": {"p9"}}},
		{ID: "p1", Table: "tasks", Effective: map[string][]string{"project_id": {"p1", "p3"}}},
	}
	for _, wire := range []uint16{1, 2} {
		b, ok, err := AppendDelta([]byte{0xAA}, wire, "ep", regs, c)
		if err != nil || !ok || b[0] != 0xAA {
			t.Fatalf("v%d: ok %v err %v prefix %x", wire, ok, err, b[:1])
		}
		m, err := ssp2.DecodeMessage(b[1:])
		if err != nil {
			t.Fatalf("v%d: delta does not decode: %v", wire, err)
		}
		rh := m.Frames[0].(*ssp2.RespHeader)
		if m.WireVersion != wire || rh.ResetRequired || (wire >= 2) != (rh.LogEpoch == "ep") {
			t.Fatalf("v%d: header %+v", wire, rh)
		}
		starts, commits, ends := frames[*ssp2.SubStart](m), frames[*ssp2.Commit](m), frames[*ssp2.SubEnd](m)
		if len(starts) != 2 || starts[0].ID != "only-p2" || starts[1].ID != "p1" || starts[1].Bootstrap || starts[1].Status != ssp2.SubActive {
			t.Fatalf("v%d: sections %+v", wire, starts)
		}
		if len(commits[0].Changes) != 1 || commits[0].Changes[0].RowID != "b" || len(commits[1].Changes) != 2 ||
			commits[1].Changes[0].RowID != "a" || *commits[1].Changes[0].RowVersion != 3 || commits[1].CommitSeq != 7 || commits[1].ActorID != "bob" {
			t.Fatalf("v%d: commits %+v", wire, commits)
		}
		if ends[0].NextCursor != 7 || ends[1].NextCursor != 7 {
			t.Fatalf("v%d: ends %+v", wire, ends)
		}
	}
	if b, ok, err := AppendDelta(nil, 2, "ep", regs[1:2], c); ok || err != nil || len(b) != 0 {
		t.Fatalf("no matching registration: %x %v %v", b, ok, err)
	}
}
