package engine

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

func TestPushApplyReplayAndPull(t *testing.T) {
	h := newHarness(t, nil)
	alice := id("alice", "p1")
	ep := h.epoch(alice)

	m := h.sync(alice, 2, hdr("c1", ep),
		commit("k1", upsert("t1", h.row("t1", "p1", "first")), upsert("t2", h.row("t2", "p1", ""))),
		&ssp2.PullHeader{Accept: 3}, sub("s", 0, "p1"))
	rh := m.Frames[0].(*ssp2.RespHeader)
	if rh.LogEpoch != ep || rh.ResetRequired || rh.LatestSchemaVersion == nil || *rh.LatestSchemaVersion != 1 {
		t.Fatalf("header = %+v", rh)
	}
	res := frames[*ssp2.PushResult](m)
	if len(res) != 1 || res[0].Status != ssp2.PushApplied || res[0].CommitSeq == nil || *res[0].CommitSeq != 1 || len(res[0].Results) != 2 {
		t.Fatalf("push result = %+v", res)
	}
	if h.commits != 1 {
		t.Fatalf("OnCommit called %d times, want 1", h.commits)
	}
	cs := frames[*ssp2.Commit](m)
	if len(cs) != 1 || len(cs[0].Changes) != 2 || cs[0].ActorID != "alice" || cs[0].CreatedAtMs != h.now {
		t.Fatalf("pull commits = %+v", cs)
	}
	ch := cs[0].Changes[0]
	if ch.RowID != "t1" || *ch.RowVersion != 1 || ch.Scopes["project_id"] != "p1" || string(h.decodeRow(ch.Row)[2].Bytes) != "first" {
		t.Fatalf("change = %+v", ch)
	}
	end := frames[*ssp2.SubEnd](m)
	if len(end) != 1 || end[0].NextCursor != 1 {
		t.Fatalf("sub end = %+v", end)
	}

	// The same commit again: cached, same seq and results, no new commit.
	m = h.sync(alice, 2, hdr("c1", ep), commit("k1", upsert("t1", h.row("t1", "p1", "changed"))))
	res = frames[*ssp2.PushResult](m)
	if len(res) != 1 || res[0].Status != ssp2.PushCached || *res[0].CommitSeq != 1 || len(res[0].Results) != 2 {
		t.Fatalf("replay = %+v", res)
	}
	if h.commits != 1 {
		t.Fatal("a replay signalled a commit")
	}
	if seq, _ := h.store.CommitMaxSeq(context.Background(), "p"); seq != 1 {
		t.Fatalf("max seq after replay = %d, want 1", seq)
	}

	// A repeat within one request runs once and replays.
	m = h.sync(alice, 2, hdr("c1", ep), commit("k2", upsert("t3", h.row("t3", "p1", "x"))), commit("k2", upsert("t3", h.row("t3", "p1", "x"))))
	res = frames[*ssp2.PushResult](m)
	if len(res) != 2 || res[0].Status != ssp2.PushApplied || res[1].Status != ssp2.PushCached || *res[0].CommitSeq != *res[1].CommitSeq {
		t.Fatalf("in-request repeat = %+v", res)
	}

	// Incremental pull from cursor 1 sees only the new commit.
	m = h.sync(alice, 2, hdr("c1", ep), &ssp2.PullHeader{Accept: 3}, sub("s", 1, "p1"))
	if cs := frames[*ssp2.Commit](m); len(cs) != 1 || cs[0].CommitSeq != 2 {
		t.Fatalf("incremental = %+v", cs)
	}
}

func TestConflictsAndRowMissing(t *testing.T) {
	h := newHarness(t, nil)
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	h.sync(alice, 2, hdr("c1", ep), commit("k1", upsert("t1", h.row("t1", "p1", "v1"))))

	// Matching baseVersion applies and bumps the version.
	m := h.sync(alice, 2, hdr("c1", ep), commit("k2", upsert("t1", h.row("t1", "p1", "v2"), 1)))
	if r := frames[*ssp2.PushResult](m)[0]; r.Status != ssp2.PushApplied {
		t.Fatalf("clean base = %+v", r)
	}
	// A stale base conflicts with the current version and row; the whole
	// commit, including the sibling insert, rolls back.
	m = h.sync(alice, 2, hdr("c1", ep), commit("k3", upsert("t9", h.row("t9", "p1", "sibling")), upsert("t1", h.row("t1", "p1", "v3"), 1)))
	r := frames[*ssp2.PushResult](m)[0]
	if r.Status != ssp2.PushRejected || r.CommitSeq != nil || len(r.Results) != 1 {
		t.Fatalf("conflict = %+v", r)
	}
	c := r.Results[0]
	if c.Status != ssp2.OpConflict || c.OpIndex != 1 || c.Code != string(ssp2.CodeVersionConflict) || c.ServerVersion != 2 || string(h.decodeRow(c.ServerRow)[2].Bytes) != "v2" {
		t.Fatalf("conflict record = %+v", c)
	}
	var found bool
	_ = h.store.ReadTx(context.Background(), func(tx storage.ReadTx) error {
		_, found, _ = tx.RowGet(context.Background(), "p", "tasks", "t9")
		return nil
	})
	if found {
		t.Fatal("sibling of a conflicted operation was not rolled back")
	}
	// baseVersion 0 on an existing row conflicts too.
	m = h.sync(alice, 2, hdr("c1", ep), commit("k4", upsert("t1", h.row("t1", "p1", "v3"), 0)))
	if r := frames[*ssp2.PushResult](m)[0]; r.Results[0].Status != ssp2.OpConflict {
		t.Fatalf("base 0 on existing = %+v", r)
	}
	// A non-zero base on an absent row is row_missing; 0 inserts.
	m = h.sync(alice, 2, hdr("c1", ep), commit("k5", upsert("t7", h.row("t7", "p1", "x"), 4)))
	if r := frames[*ssp2.PushResult](m)[0]; r.Results[0].Code != string(ssp2.CodeRowMissing) {
		t.Fatalf("row missing = %+v", r)
	}
	m = h.sync(alice, 2, hdr("c1", ep), commit("k6", upsert("t7", h.row("t7", "p1", "x"), 0)))
	if r := frames[*ssp2.PushResult](m)[0]; r.Status != ssp2.PushApplied {
		t.Fatalf("base 0 insert = %+v", r)
	}
	// The rejection is persisted and replays as itself.
	m = h.sync(alice, 2, hdr("c1", ep), commit("k3", upsert("t1", h.row("t1", "p1", "whatever"))))
	if r := frames[*ssp2.PushResult](m)[0]; r.Status != ssp2.PushRejected || r.Results[0].Status != ssp2.OpConflict || r.Results[0].ServerVersion != 2 {
		t.Fatalf("rejection replay = %+v", r)
	}
}

func TestWriteAuthorization(t *testing.T) {
	h := newHarness(t, nil)
	alice, bob := id("alice", "p1"), id("bob", "p2")
	ep := h.epoch(alice)
	h.sync(alice, 2, hdr("ca", ep), commit("k1", upsert("t1", h.row("t1", "p1", "mine"))))

	// Insert outside the grant, update of another scope's row, delete of
	// another scope's row: all forbidden.
	for name, op := range map[string]ssp2.Operation{
		"insert": upsert("t2", h.row("t2", "p1", "x")),
		"update": upsert("t1", h.row("t1", "p2", "stolen")),
		"delete": del("t1"),
	} {
		m := h.sync(bob, 2, hdr("cb", ep), commit("b-"+name, op))
		r := frames[*ssp2.PushResult](m)[0]
		if r.Status != ssp2.PushRejected || r.Results[0].Code != string(ssp2.CodeForbidden) {
			t.Fatalf("%s: %+v", name, r)
		}
	}
	// Deleting an absent row is applied without authorization or change.
	m := h.sync(bob, 2, hdr("cb", ep), commit("b-absent", del("nope")))
	if r := frames[*ssp2.PushResult](m)[0]; r.Status != ssp2.PushApplied {
		t.Fatalf("absent delete = %+v", r)
	}
	// A failing resolver denies every write.
	broken := Identity{Partition: "p", ActorID: "alice", Scopes: ResolverFunc(func(context.Context, string, string) (Allowed, error) {
		return nil, errors.New("directory down")
	})}
	m = h.sync(broken, 2, hdr("ca", ep), commit("k-broken", upsert("t1", h.row("t1", "p1", "x"))), &ssp2.PullHeader{Accept: 3}, sub("s", 0, "p1"))
	if r := frames[*ssp2.PushResult](m)[0]; r.Results[0].Code != string(ssp2.CodeForbidden) {
		t.Fatalf("failed resolver write = %+v", r)
	}
	if ss := frames[*ssp2.SubStart](m); ss[0].Status != ssp2.SubRevoked {
		t.Fatalf("failed resolver pull = %+v", ss[0])
	}
}

func TestScopeColumnsAreImmutable(t *testing.T) {
	h := newHarness(t, nil)
	alice := id("alice", "p1", "p2")
	ep := h.epoch(alice)
	h.sync(alice, 2, hdr("c", ep), commit("k1", upsert("t1", h.row("t1", "p1", "a"))))
	m := h.sync(alice, 2, hdr("c", ep), commit("k2", upsert("t1", h.row("t1", "p2", "moved?"))), &ssp2.PullHeader{Accept: 3}, sub("s", 1, "p1", "p2"))
	if r := frames[*ssp2.PushResult](m)[0]; r.Status != ssp2.PushApplied {
		t.Fatalf("update = %+v", r)
	}
	ch := frames[*ssp2.Commit](m)[0].Changes[0]
	row := h.decodeRow(ch.Row)
	if string(row[1].Bytes) != "p1" || string(row[2].Bytes) != "moved?" || ch.Scopes["project_id"] != "p1" {
		t.Fatalf("scope column changed: row %q/%q scopes %v", row[1].Bytes, row[2].Bytes, ch.Scopes)
	}
}

func TestCommitLevelRejections(t *testing.T) {
	h := newHarness(t, nil)
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	cases := map[string]struct {
		op   ssp2.Operation
		code ssp2.Code
	}{
		"unknown table":  {ssp2.Operation{Table: "nope", RowID: "x", Op: ssp2.OpDelete}, ssp2.CodeUnknownTable},
		"bad payload":    {upsert("t1", []byte{0xff, 1, 2}), ssp2.CodeInvalidRequest},
		"rowId mismatch": {upsert("t1", h.row("t2", "p1", "x")), ssp2.CodeInvalidRequest},
	}
	for name, c := range cases {
		m := h.sync(alice, 2, hdr("c", ep), commit("k-"+name, c.op), commit("ok-"+name, upsert("r-"+name, h.row("r-"+name, "p1", "fine"))))
		res := frames[*ssp2.PushResult](m)
		if res[0].Status != ssp2.PushRejected || res[0].Results[0].Code != string(c.code) || res[1].Status != ssp2.PushApplied {
			t.Fatalf("%s: %+v / %+v", name, res[0], res[1])
		}
	}
}

func TestRequestLevelFailures(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxOperations = new(2) })
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	pull := &ssp2.PullHeader{Accept: 3}
	cases := []struct {
		name   string
		who    Identity
		frames []ssp2.Frame
		code   ssp2.Code
	}{
		{"reserved client id", alice, []ssp2.Frame{hdr(`["remote-command","a"]`, ep), pull}, ssp2.CodeInvalidClientID},
		{"too many operations", alice, []ssp2.Frame{hdr("c", ep), commit("a", del("1"), del("2")), commit("b", del("3"))}, ssp2.CodeTooManyOperations},
		{"duplicate subscription", alice, []ssp2.Frame{hdr("c", ep), pull, sub("s", 0, "p1"), sub("s", 0, "p1")}, ssp2.CodeInvalidSubscription},
		{"unknown table", alice, []ssp2.Frame{hdr("c", ep), pull, &ssp2.Subscription{ID: "s", Table: "nope", Scopes: map[string][]string{"project_id": {"p1"}}}}, ssp2.CodeUnknownTable},
		{"requested wildcard", alice, []ssp2.Frame{hdr("c", ep), pull, sub("s", 0, "*")}, ssp2.CodeInvalidSubscription},
		{"undeclared key", alice, []ssp2.Frame{hdr("c", ep), pull, &ssp2.Subscription{ID: "s", Table: "tasks", Scopes: map[string][]string{"org": {"o"}}}}, ssp2.CodeInvalidSubscription},
		{"no rows lane", alice, []ssp2.Frame{hdr("c", ep), &ssp2.PullHeader{Accept: ssp2.AcceptSQLite}}, ssp2.CodeInvalidRequest},
		{"resolver undeclared key", Identity{Partition: "p", ActorID: "alice", Scopes: StaticScopes{"org": {"o"}}}, []ssp2.Frame{hdr("c", ep), pull}, ssp2.CodeInvalidSubscription},
		{"v2 push without epoch", alice, []ssp2.Frame{&ssp2.ReqHeader{ClientID: "c", SchemaVersion: 1}, commit("a", del("1"))}, ssp2.CodeInvalidRequest},
	}
	for _, c := range cases {
		_, err := h.try(c.who, 2, c.frames...)
		if ssp2.CodeOf(err) != c.code {
			t.Errorf("%s: err = %v, want %s", c.name, err, c.code)
		}
	}
	// A client id bound to alice cannot be used by bob.
	h.sync(alice, 2, hdr("bound", ep), pull, sub("s", 0, "p1"))
	_, err := h.try(id("bob", "p1"), 2, hdr("bound", ep), pull)
	wantCode(t, err, ssp2.CodeInvalidClientID)
	// Garbage is a decode error.
	_, err = h.raw(alice, []byte("SSP2 nonsense"))
	wantCode(t, err, ssp2.CodeInvalidRequest)
}

func TestEpochAndSchemaFloor(t *testing.T) {
	h := newHarness(t, nil)
	alice := id("alice", "p1")
	ep := h.epoch(alice)

	// A wrong epoch is a reset with nothing else processed.
	m := h.sync(alice, 2, hdr("c", "stale-epoch"), commit("k", upsert("t1", h.row("t1", "p1", "x"))))
	if len(m.Frames) != 1 || !m.Frames[0].(*ssp2.RespHeader).ResetRequired || m.Frames[0].(*ssp2.RespHeader).LogEpoch != ep {
		t.Fatalf("reset = %+v", m.Frames)
	}
	if seq, _ := h.store.CommitMaxSeq(context.Background(), "p"); seq != 0 {
		t.Fatal("a reset request applied a push")
	}
	// An unserved schema version answers the floor, with both versions.
	m = h.sync(alice, 2, &ssp2.ReqHeader{ClientID: "c", SchemaVersion: 7, LogEpoch: &ep}, &ssp2.PullHeader{Accept: 3})
	rh := m.Frames[0].(*ssp2.RespHeader)
	if len(m.Frames) != 1 || rh.RequiredSchemaVersion == nil || *rh.RequiredSchemaVersion != 1 || *rh.LatestSchemaVersion != 1 || rh.LogEpoch != ep || rh.ResetRequired {
		t.Fatalf("floor = %+v", rh)
	}
	// v1 works until the epoch rotates, then is refused.
	m = h.sync(alice, 1, &ssp2.ReqHeader{ClientID: "old", SchemaVersion: 1}, commit("v1", upsert("t1", h.row("t1", "p1", "x"))))
	if r := frames[*ssp2.PushResult](m)[0]; r.Status != ssp2.PushApplied {
		t.Fatalf("v1 push = %+v", r)
	}
	part, err := h.store.PartitionRotateEpoch(context.Background(), "p", h.now)
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.try(alice, 1, &ssp2.ReqHeader{ClientID: "old", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 3})
	wantCode(t, err, ssp2.CodeClientWireUnsupported)
	m = h.sync(alice, 2, hdr("c", ep), &ssp2.PullHeader{Accept: 3})
	if rh := m.Frames[0].(*ssp2.RespHeader); !rh.ResetRequired || rh.LogEpoch != part.LogEpoch || part.LogEpoch == ep {
		t.Fatalf("after rotation = %+v", rh)
	}
}

func TestRevokedAndReset(t *testing.T) {
	h := newHarness(t, nil)
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	for i := range 5 {
		k := string(rune('a' + i))
		h.sync(alice, 2, hdr("c", ep), commit(k, upsert(k, h.row(k, "p1", k))))
	}
	// No grant for the requested project: revoked, cursor echoed.
	m := h.sync(alice, 2, hdr("c", ep), &ssp2.PullHeader{Accept: 3}, sub("s", 3, "p9"))
	ss, se := frames[*ssp2.SubStart](m)[0], frames[*ssp2.SubEnd](m)[0]
	if ss.Status != ssp2.SubRevoked || ss.ReasonCode != string(ssp2.CodeScopeRevoked) || len(ss.EffectiveScopes) != 0 || se.NextCursor != 3 {
		t.Fatalf("revoked = %+v %+v", ss, se)
	}
	// Prune to the horizon, then a cursor behind it resets.
	_, err := h.store.Prune(context.Background(), storage.PruneParams{Partition: "p", LogEpoch: ep, ThroughSeq: 4, NowMs: h.now, MinRetainedCommits: 1, ActiveWindowMs: 1, AgeForceMs: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	m = h.sync(alice, 2, hdr("c", ep), &ssp2.PullHeader{Accept: 3}, sub("s", 2, "p1"), sub("s2", 4, "p1"))
	ss2 := frames[*ssp2.SubStart](m)
	se2 := frames[*ssp2.SubEnd](m)
	if ss2[0].Status != ssp2.SubReset || ss2[0].ReasonCode != string(ssp2.CodeCursorExpired) || se2[0].NextCursor != 2 {
		t.Fatalf("reset = %+v %+v", ss2[0], se2[0])
	}
	// A cursor at the horizon still pulls incrementally.
	if ss2[1].Status != ssp2.SubActive || ss2[1].Bootstrap || se2[1].NextCursor != 5 {
		t.Fatalf("at horizon = %+v %+v", ss2[1], se2[1])
	}
}

func TestBootstrapPagingAndResume(t *testing.T) {
	h := newHarness(t, nil)
	alice := id("alice", "p1", "p2")
	ep := h.epoch(alice)
	var ops []ssp2.Operation
	for i := range 25 {
		k := string(rune('a'+i/10)) + string(rune('0'+i%10))
		ops = append(ops, upsert(k, h.row(k, "p1", k)))
	}
	h.sync(alice, 2, hdr("c", ep), commit("k", ops...), commit("other", upsert("zz", h.row("zz", "p2", "other scope"))))

	pull := &ssp2.PullHeader{LimitSnapshotRows: 10, MaxSnapshotPages: 2, Accept: ssp2.AcceptInlineRows}
	m := h.sync(alice, 2, hdr("c", ep), pull, sub("s", -1, "p1"))
	ss := frames[*ssp2.SubStart](m)[0]
	if !ss.Bootstrap || ss.Status != ssp2.SubActive {
		t.Fatalf("sub start = %+v", ss)
	}
	seen := readInline(t, h, frames[*ssp2.SegmentInline](m))
	end := frames[*ssp2.SubEnd](m)[0]
	if len(seen) != 20 || end.NextCursor != 2 || end.BootstrapState == nil {
		t.Fatalf("first round: %d rows, end %+v", len(seen), end)
	}
	// Resume: the token carries the pin; a commit after the pin does not
	// move it.
	h.sync(alice, 2, hdr("c", ep), commit("later", upsert("a0", h.row("a0", "p1", "after pin"))))
	s := sub("s", end.NextCursor, "p1")
	s.BootstrapState = end.BootstrapState
	m = h.sync(alice, 2, hdr("c", ep), pull, s)
	more := readInline(t, h, frames[*ssp2.SegmentInline](m))
	end = frames[*ssp2.SubEnd](m)[0]
	if len(more) != 5 || end.NextCursor != 2 || end.BootstrapState != nil {
		t.Fatalf("resume: %d rows, end %+v", len(more), end)
	}
	all := append(seen, more...)
	if !slices.IsSorted(all) || len(slices.Compact(all)) != 25 {
		t.Fatalf("bootstrap rows = %v", all)
	}
	// Incremental from the pin delivers the post-pin commit.
	m = h.sync(alice, 2, hdr("c", ep), &ssp2.PullHeader{Accept: 3}, sub("s", end.NextCursor, "p1"))
	if cs := frames[*ssp2.Commit](m); len(cs) != 1 || cs[0].CommitSeq != 3 {
		t.Fatalf("post-pin = %+v", cs)
	}
	// An unusable token restarts silently at a fresh pin.
	s = sub("s", 2, "p1")
	s.BootstrapState = json.RawMessage(`{"asOfCommitSeq":99,"tables":["tasks"],"tableIndex":0,"rowCursor":"b"}`)
	m = h.sync(alice, 2, hdr("c", ep), pull, s)
	if end := frames[*ssp2.SubEnd](m)[0]; end.NextCursor != 3 || len(readInline(t, h, frames[*ssp2.SegmentInline](m))) != 20 {
		t.Fatalf("restart = %+v", end)
	}
	// An empty scope still sends one (empty) first page.
	m = h.sync(alice, 2, hdr("c", ep), pull, sub("e", -1, "p2"))
	if got := readInline(t, h, frames[*ssp2.SegmentInline](m)); len(got) != 1 || got[0] != "zz" {
		t.Fatalf("p2 bootstrap = %v", got)
	}
}

// readInline decodes inline segments and returns their row ids in order.
func readInline(t *testing.T, h *harness, segs []*ssp2.SegmentInline) []string {
	t.Helper()
	var ids []string
	for _, s := range segs {
		if err := ssp2.ValidateSegment(s.Payload); err != nil {
			t.Fatal(err)
		}
		r, err := ssp2.NewSegmentReader(bytesReader(s.Payload))
		if err != nil {
			t.Fatal(err)
		}
		for r.NextBlock() {
			for r.Next() {
				if r.ServerVersion() < 1 {
					t.Fatalf("server version %d", r.ServerVersion())
				}
				ids = append(ids, string(h.decodeRow(r.Row())[0].Bytes))
			}
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// Unset limits take their defaults, zero inline bytes stays zero (never
// inline), and negative values are refused by name.
func TestConfigDefaultsAndValidate(t *testing.T) {
	def := Config{}.WithDefaults()
	if def.MaxOperations == nil || *def.MaxOperations != DefaultMaxOperations || def.InlineSegmentMaxBytes == nil || *def.InlineSegmentMaxBytes != DefaultInlineSegmentMaxBytes {
		t.Fatalf("defaults: MaxOperations %v, InlineSegmentMaxBytes %v", def.MaxOperations, def.InlineSegmentMaxBytes)
	}
	if err := def.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if zero := (Config{InlineSegmentMaxBytes: new(0)}).WithDefaults(); *zero.InlineSegmentMaxBytes != 0 || zero.Validate() != nil {
		t.Fatalf("InlineSegmentMaxBytes 0 became %d (%v)", *zero.InlineSegmentMaxBytes, zero.Validate())
	}
	err := (Config{MaxOperations: new(-1), InlineSegmentMaxBytes: new(-1)}).WithDefaults().Validate()
	for _, field := range []string{"MaxOperations", "InlineSegmentMaxBytes"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate = %v, want an error naming %s", err, field)
		}
	}
	if _, err := New(Config{MaxOperations: new(-1)}); err == nil {
		t.Error("New accepted MaxOperations -1")
	}
}
