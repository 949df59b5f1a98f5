package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

func v2(c *Config) { c.WireVersion = 2 }

// TestV2AndV3ClientsConverge: clients of both wire versions write one
// partition — inserts, full upserts, patches, deletes — and converge with
// each other and the server through pushes and pulls; fresh clients of
// both versions bootstrap the same rows.
func TestV2AndV3ClientsConverge(t *testing.T) { bothStores(t, testV2AndV3ClientsConverge) }

func testV2AndV3ClientsConverge(t *testing.T) {
	srv := newServer(t, nil)
	a := srv.client("alice", []string{"p1"}, nil)
	b := srv.client("bob", []string{"p1"}, v2)
	rng := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()
	applied := map[uint16]int{}
	count := func(c *Client, res Result) {
		for _, p := range res.Pushed {
			if p.Status == ssp2.PushApplied {
				applied[c.cfg.WireVersion]++
			}
		}
	}
	for round := range 30 {
		for _, c := range []*Client{a, b} {
			var ops []Op
			for range 1 + rng.IntN(3) {
				id := fmt.Sprintf("t%02d", rng.IntN(12))
				_, held := c.Row("tasks", id)
				switch k := rng.IntN(6); {
				case k == 0:
					ops = append(ops, Delete("tasks", id))
				case k == 1 && held:
					ops = append(ops, Patch("tasks", map[string]any{"id": id, "priority": rng.IntN(9)}).IfUnchanged())
				case k == 2 && held:
					ops = append(ops, Patch("tasks", map[string]any{"id": id, "done": rng.IntN(2) == 0}))
				default:
					row := task(id, "p1", fmt.Sprintf("%s by %s in %d", id, c.ClientID(), round))
					row["priority"] = rng.IntN(9)
					ops = append(ops, Upsert("tasks", row).WithBaseVersion(c.Version("tasks", id)))
				}
			}
			// A v2 patch needs the row; one queued delete away it is refused.
			if _, err := c.Commit(ctx, ops...); err != nil && !errors.Is(err, errPatchNeedsRow) {
				t.Fatal(err)
			}
			if rng.IntN(2) == 0 {
				res, err := c.Sync(ctx)
				if err != nil {
					t.Fatal(err)
				}
				count(c, res)
			}
		}
	}
	count(a, mustSync(t, a))
	count(b, mustSync(t, b))
	count(a, mustSync(t, a))
	if applied[2] < 10 || applied[3] < 10 {
		t.Fatalf("applied commits by wire version = %v: too few to show convergence", applied)
	}
	want := srv.serverRows("p1")
	if len(want) == 0 {
		t.Fatal("no rows on the server")
	}
	sameRows(t, "v3 alice", replicaRows(a), want)
	sameRows(t, "v2 bob", replicaRows(b), want)
	for _, mod := range []func(*Config){nil, v2} {
		fresh := srv.client("carol", []string{"p1"}, mod)
		mustSync(t, fresh)
		sameRows(t, fmt.Sprintf("fresh wire %d", fresh.cfg.WireVersion), replicaRows(fresh), want)
	}
}

// TestV3DisjointColumnEdits: two v3 clients edit different columns of one
// row from the same base with a full Upsert: each sends only the column it
// changed, so both apply. Two v2 clients doing the same conflict.
func TestV3DisjointColumnEdits(t *testing.T) { bothStores(t, testV3DisjointColumnEdits) }

func testV3DisjointColumnEdits(t *testing.T) {
	srv := newServer(t, nil)
	for _, wire := range []uint16{3, 2} {
		mod := func(c *Config) { c.WireVersion = wire }
		a := srv.client("alice", []string{"p1"}, mod)
		b := srv.client("bob", []string{"p1"}, mod)
		id := fmt.Sprint("w", wire)
		mustCommit(t, a, Upsert("tasks", task(id, "p1", "first")))
		mustSync(t, a)
		mustSync(t, b)
		ra, rb := task(id, "p1", "renamed by alice"), task(id, "p1", "first")
		rb["done"] = true
		mustCommit(t, a, Upsert("tasks", ra).IfUnchanged())
		mustCommit(t, b, Upsert("tasks", rb).IfUnchanged())
		mustSync(t, a)
		res := mustSync(t, b)
		if wire == 3 {
			if len(res.Rejected) != 0 {
				t.Fatalf("v3: %v", res.Rejected[0])
			}
			row := srv.serverRows("p1")[id]
			vals := decodeRow(t, srv, row.data)
			if row.version != 3 || vals["title"] != "renamed by alice" || vals["done"] != true {
				t.Fatalf("v3 row = v%d %v, want both edits at version 3", row.version, vals)
			}
			continue
		}
		if len(res.Rejected) != 1 || res.Rejected[0].Code != ssp2.CodeVersionConflict || res.Rejected[0].Conflict.Columns != nil {
			t.Fatalf("v2 rejections = %v, want one row-level conflict without columns", res.Rejected)
		}
	}
}

func decodeRow(t testing.TB, srv *server, data []byte) map[string]any {
	t.Helper()
	tb, _ := srv.schema.Table("tasks")
	m, err := decodeValues(tb, data)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestV3ConflictColumns(t *testing.T) { bothStores(t, testV3ConflictColumns) }

func testV3ConflictColumns(t *testing.T) {
	srv := newServer(t, nil)
	a := srv.client("alice", []string{"p1"}, nil)
	b := srv.client("bob", []string{"p1"}, nil)
	mustCommit(t, a, Upsert("tasks", task("t1", "p1", "first")))
	mustSync(t, a)
	mustSync(t, b)
	mustCommit(t, a, Patch("tasks", map[string]any{"id": "t1", "title": "A", "priority": 1}).IfUnchanged())
	mustSync(t, a)
	mustCommit(t, b, Patch("tasks", map[string]any{"id": "t1", "title": "B", "done": true, "priority": 2}).IfUnchanged())
	res := mustSync(t, b)
	if len(res.Rejected) != 1 || res.Rejected[0].Conflict == nil {
		t.Fatalf("rejections = %v, want one conflict", res.Rejected)
	}
	c := res.Rejected[0].Conflict
	if !slices.Equal(c.Columns, []string{"title", "priority"}) || c.ServerVersion != 2 || c.ServerRow["title"] != "A" {
		t.Fatalf("conflict = %+v, want columns [title priority] at version 2", c)
	}
	var rej *Rejection
	if err := error(res.Rejected[0]); !errors.As(err, &rej) || !errors.Is(err, &Error{Code: ssp2.CodeVersionConflict}) {
		t.Fatalf("rejection %v does not match sync.version_conflict", err)
	}
	// A patch of a row deleted meanwhile: the delete wins.
	mustCommit(t, a, Delete("tasks", "t1"))
	mustSync(t, a)
	mustCommit(t, b, Patch("tasks", map[string]any{"id": "t1", "title": "late"}))
	res = mustSync(t, b)
	if len(res.Rejected) != 1 || res.Rejected[0].Code != ssp2.CodeRowDeleted {
		t.Fatalf("rejections = %v, want sync.row_deleted", res.Rejected)
	}
}

// TestV3SparseEncoding checks what the client queues: an Upsert of a held
// row presents the changed columns against the replica with the queued
// commits applied, a Patch exactly its columns, and a v2 Patch a full row
// filled from the expected row.
func TestV3SparseEncoding(t *testing.T) {
	srv := newServer(t, nil)
	a := srv.client("alice", []string{"p1"}, nil)
	tb, _ := srv.schema.Table("tasks")
	presented := func(c *Client, i int) []string {
		t.Helper()
		p := c.Pending()
		o := p[len(p)-1].Operations[i]
		vals, present, err := decodePending(tb, &o)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for ci, col := range tb.Columns {
			if present.Has(ci) {
				out = append(out, fmt.Sprintf("%s=%v", col.Name, fromValue(col.Type, vals[ci])))
			}
		}
		return out
	}
	mustCommit(t, a, Upsert("tasks", task("t1", "p1", "orig")))
	if got := presented(a, 0); len(got) != len(tb.Columns) {
		t.Fatalf("a row the client does not hold is sent whole, got %v", got)
	}
	mustSync(t, a)
	mustCommit(t, a, Upsert("tasks", task("t1", "p1", "A")))
	if got := presented(a, 0); !slices.Equal(got, []string{"id=t1", "title=A"}) {
		t.Fatalf("changed columns = %v", got)
	}
	// Back to the replica's value: still a change against the queued commit.
	mustCommit(t, a, Upsert("tasks", task("t1", "p1", "orig")), Upsert("tasks", task("t1", "p1", "orig")))
	if got := presented(a, 0); !slices.Equal(got, []string{"id=t1", "title=orig"}) {
		t.Fatalf("against the queued commit = %v", got)
	}
	if got := presented(a, 1); !slices.Equal(got, []string{"id=t1"}) {
		t.Fatalf("against the commit's own earlier write = %v", got)
	}
	mustCommit(t, a, Patch("tasks", map[string]any{"id": "t1", "title": "orig", "priority": nil}))
	if got := presented(a, 0); !slices.Equal(got, []string{"id=t1", "title=orig", "priority=<nil>"}) {
		t.Fatalf("patch = %v", got)
	}
	mustSync(t, a)

	b := srv.client("bob", []string{"p1"}, v2)
	if _, err := b.Commit(context.Background(), Patch("tasks", map[string]any{"id": "t1", "done": true})); !errors.Is(err, errPatchNeedsRow) {
		t.Fatalf("v2 patch of a row the client lacks = %v, want errPatchNeedsRow", err)
	}
	mustSync(t, b)
	mustCommit(t, b, Patch("tasks", map[string]any{"id": "t1", "done": true}))
	if got := presented(b, 0); len(got) != len(tb.Columns) || !slices.Contains(got, "done=true") || !slices.Contains(got, "title=orig") {
		t.Fatalf("v2 patch = %v, want the full expected row with done", got)
	}
	mustSync(t, b)
	mustSync(t, a)
	sameRows(t, "alice", replicaRows(a), srv.serverRows("p1"))
	if r, _ := a.Row("tasks", "t1"); r.Values["done"] != true || r.Values["title"] != "orig" {
		t.Fatalf("row after the v2 patch = %v", r.Values)
	}
}

// TestV3OutboxRefusedAtV2: a stored outbox with v3 patches cannot be sent
// by a client restarted at wire version 2; v2 commits go out at v3.
func TestV3OutboxRefusedAtV2(t *testing.T) {
	srv := newServer(t, nil)
	path := filepath.Join(t.TempDir(), "state.json")
	offline := func(mod func(*Config)) *Client {
		return srv.client("alice", []string{"p1"}, func(c *Config) {
			c.Store = &FileStore{Path: path}
			c.ClientID = "c1"
			if mod != nil {
				mod(c)
			}
		})
	}
	old := offline(v2)
	mustCommit(t, old, Upsert("tasks", task("t1", "p1", "from v2")))
	newer := offline(nil) // the queued full row goes out as a v3 push
	mustSync(t, newer)
	if row, ok := newer.Row("tasks", "t1"); !ok || row.Values["title"] != "from v2" {
		t.Fatalf("row = %+v, %v", row, ok)
	}
	mustCommit(t, newer, Patch("tasks", map[string]any{"id": "t1", "title": "patched"}))
	_, err := New(Config{BaseURL: srv.URL, Schema: srv.schema, Store: &FileStore{Path: path}, WireVersion: 2})
	if err == nil {
		t.Fatal("a wire version 2 client adopted an outbox of v3 patches")
	}
	if _, err := New(Config{BaseURL: srv.URL, Schema: srv.schema, WireVersion: 4}); err == nil {
		t.Fatal("WireVersion 4 accepted")
	}
}
