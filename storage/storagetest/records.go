package storagetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

var idempotencyTests = []test{
	{"PutGetExactBytes", testIdempotencyPutGet},
	{"FirstWriterWinsUnderRace", testIdempotencyRace},
	{"KeepsActor", testIdempotencyActor},
}

var clientTests = []test{
	{"PutGet", testClientPutGet},
	{"PutKeepsBinding", testClientPutKeepsBinding},
	{"BindFirstWins", testClientBind},
	{"Ack", testClientAck},
	{"TouchWithClient", testPartitionTouchClient},
	{"RequestStart", testRequestStart},
	{"RequestStartCurrent", testRequestStartCurrent},
	{"Advance", testClientAdvance},
}

var constraintTests = []test{
	{"Classified", testConstraintClassified},
	{"OtherErrorsUnclassified", testConstraintUnclassified},
}

func testIdempotencyPutGet(t *testing.T, e *env) {
	s, _ := e.store()
	p, q := partition(t, s), partition(t, s)
	ctx := t.Context()
	if _, ok, err := s.IdempotencyGet(ctx, p.ID, "c", "1"); err != nil || ok {
		t.Fatalf("IdempotencyGet on empty = %v, %v", ok, err)
	}
	result := []byte{0, 1, 2, 0xff, 'x', 0}
	applied := storage.PushRecord{ClientID: "c", ClientCommitID: "1", Status: storage.PushApplied, CommitSeq: 7, Result: result, CreatedAtMs: 99}
	rejected := storage.PushRecord{ClientID: "c", ClientCommitID: "2", Status: storage.PushRejected, Result: []byte("rejected"), CreatedAtMs: 100}
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		if _, ok, err := tx.IdempotencyGet(ctx, "c", "1"); err != nil || ok {
			t.Fatalf("locked get on empty = %v, %v", ok, err)
		}
		for _, r := range []storage.PushRecord{applied, rejected} {
			got, err := tx.IdempotencyPut(ctx, r)
			if err != nil {
				return err
			}
			assertRecord(t, "IdempotencyPut", got, r)
		}
		// Reads its own write.
		got, ok, err := tx.IdempotencyGet(ctx, "c", "1")
		if err != nil || !ok {
			t.Fatalf("locked get after put = %v, %v", ok, err)
		}
		assertRecord(t, "locked get", got, applied)
		// A second put keeps the first record.
		again := applied
		again.Result, again.CommitSeq = []byte("second"), 8
		got, err = tx.IdempotencyPut(ctx, again)
		if err != nil {
			return err
		}
		assertRecord(t, "second put", got, applied)
		return nil
	})
	for _, want := range []storage.PushRecord{applied, rejected} {
		got, ok, err := s.IdempotencyGet(ctx, p.ID, want.ClientID, want.ClientCommitID)
		if err != nil || !ok {
			t.Fatalf("IdempotencyGet = %v, %v", ok, err)
		}
		assertRecord(t, "IdempotencyGet", got, want)
	}
	if _, ok, err := s.IdempotencyGet(ctx, q.ID, "c", "1"); err != nil || ok {
		t.Fatalf("other partition sees the record: %v, %v", ok, err)
	}
}

// testIdempotencyActor: a record keeps the actor it was stored with, and
// one stored without an actor reads back without one.
func testIdempotencyActor(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s)
	ctx := t.Context()
	recs := []storage.PushRecord{
		{ClientID: "c", ClientCommitID: "1", ActorID: "alice", Status: storage.PushApplied, CommitSeq: 1, Result: []byte("a"), CreatedAtMs: 1},
		{ClientID: "c", ClientCommitID: "2", ActorID: "alice", Status: storage.PushRejected, Result: []byte("r"), CreatedAtMs: 2},
		{ClientID: "c", ClientCommitID: "3", Status: storage.PushRejected, Result: []byte("n"), CreatedAtMs: 3},
	}
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		for _, r := range recs {
			if _, err := tx.IdempotencyPut(ctx, r); err != nil {
				return err
			}
		}
		return nil
	})
	for _, want := range recs {
		got, ok, err := s.IdempotencyGet(ctx, p.ID, want.ClientID, want.ClientCommitID)
		if err != nil || !ok {
			t.Fatalf("IdempotencyGet = %v, %v", ok, err)
		}
		assertRecord(t, "IdempotencyGet", got, want)
	}
}

func assertRecord(t *testing.T, what string, got, want storage.PushRecord) {
	t.Helper()
	if got.ClientID != want.ClientID || got.ClientCommitID != want.ClientCommitID || got.ActorID != want.ActorID || got.Status != want.Status ||
		got.CommitSeq != want.CommitSeq || got.CreatedAtMs != want.CreatedAtMs || !bytes.Equal(got.Result, want.Result) {
		t.Fatalf("%s = %+v, want %+v", what, got, want)
	}
}

// testIdempotencyRace: concurrent deliveries of one commit each try to
// store their own result; every one gets back the same, first record.
func testIdempotencyRace(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s)
	ctx := t.Context()
	const n = 8
	var (
		got  [n]storage.PushRecord
		errs [n]error
	)
	race(n, func(i int) {
		errs[i] = s.WriteTx(ctx, p.ID, func(tx storage.Tx) (err error) {
			got[i], err = tx.IdempotencyPut(ctx, storage.PushRecord{ClientID: "c", ClientCommitID: "same",
				Status: storage.PushApplied, CommitSeq: int64(i + 1), Result: []byte(fmt.Sprint("writer-", i)), CreatedAtMs: int64(i)})
			return err
		})
	})
	stored, ok, err := s.IdempotencyGet(ctx, p.ID, "c", "same")
	if err != nil || !ok {
		t.Fatalf("IdempotencyGet = %v, %v", ok, err)
	}
	winners := 0
	for i := range n {
		check(t, errs[i])
		assertRecord(t, fmt.Sprint("writer ", i), got[i], stored)
		if string(stored.Result) == fmt.Sprint("writer-", i) {
			winners++
		}
	}
	if winners != 1 {
		t.Fatalf("stored result %q is no single writer's", stored.Result)
	}
}

func testClientPutGet(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s)
	ctx := t.Context()
	if _, ok, err := s.ClientGet(ctx, p.ID, "c1"); err != nil || ok {
		t.Fatalf("ClientGet on empty = %v, %v", ok, err)
	}
	c := storage.Client{Partition: p.ID, ClientID: "c1", ActorID: "alice", WireVersion: 2, Cursor: 12, UpdatedAtMs: 500,
		Subscriptions: json.RawMessage(`[{"id":"s1","table":"tasks","scopes":{"project":["p1"]}}]`)}
	check(t, s.ClientPut(ctx, c))
	got, ok, err := s.ClientGet(ctx, p.ID, "c1")
	if err != nil || !ok {
		t.Fatalf("ClientGet = %v, %v", ok, err)
	}
	assertClient(t, got, c)
	// Put replaces, including with no subscription list.
	c2 := storage.Client{Partition: p.ID, ClientID: "c1", ActorID: "alice", WireVersion: 1, Cursor: 3, UpdatedAtMs: 600}
	check(t, s.ClientPut(ctx, c2))
	got, _, err = s.ClientGet(ctx, p.ID, "c1")
	check(t, err)
	assertClient(t, got, c2)
}

// testPartitionTouchClient: the touch that reads a client record returns
// the partition row PartitionTouch does and the record ClientGet does —
// none for an unknown id or a partition the touch creates — and refreshes
// last-seen by the same rule.
func testPartitionTouchClient(t *testing.T, e *env) {
	s, _ := e.store()
	ctx := t.Context()
	const t0 = 7_000_000
	p, cl, ok, err := s.PartitionTouchClient(ctx, "fresh", "c1", t0)
	check(t, err)
	if ok || p.ID != "fresh" || !epochRE.MatchString(p.LogEpoch) || p.CreatedAtMs != t0 || p.LastSeenMs != t0 {
		t.Fatalf("first touch = %+v, client %+v %v", p, cl, ok)
	}
	c := storage.Client{Partition: "fresh", ClientID: "c1", ActorID: "alice", WireVersion: 2, Cursor: 12, UpdatedAtMs: 500,
		Subscriptions: json.RawMessage(`[{"id":"s1"}]`)}
	check(t, s.ClientPut(ctx, c))
	check(t, s.ClientPut(ctx, storage.Client{Partition: "fresh", ClientID: "c2", ActorID: "bob", WireVersion: 1, Cursor: -1, UpdatedAtMs: 1}))
	p2, cl, ok, err := s.PartitionTouchClient(ctx, "fresh", "c1", t0+1)
	check(t, err)
	if !ok || p2 != p {
		t.Fatalf("touch = %+v, %v; want %+v with the record", p2, ok, p)
	}
	assertClient(t, cl, c)
	// No subscription list, another id.
	_, cl, ok, err = s.PartitionTouchClient(ctx, "fresh", "c2", t0+1)
	check(t, err)
	if !ok || cl.Subscriptions != nil || cl.ActorID != "bob" || cl.Cursor != -1 {
		t.Fatalf("c2 = %+v, %v", cl, ok)
	}
	if _, _, ok, err := s.PartitionTouchClient(ctx, "fresh", "nobody", t0+1); err != nil || ok {
		t.Fatalf("unknown client = %v, %v", ok, err)
	}
	// Past the granularity last-seen moves, and the record still comes.
	p3, cl, ok, err := s.PartitionTouchClient(ctx, "fresh", "c1", t0+storage.TouchGranularityMs+1)
	check(t, err)
	want := p
	want.LastSeenMs = t0 + storage.TouchGranularityMs + 1
	if p3 != want || !ok {
		t.Fatalf("touch past granularity = %+v, %v; want %+v", p3, ok, want)
	}
	assertClient(t, cl, c)
	// Another partition's record of the same id is not this one's.
	if _, _, ok, err := s.PartitionTouchClient(ctx, "other", "c1", t0); err != nil || ok {
		t.Fatalf("other partition = %v, %v", ok, err)
	}
}

// testRequestStart: a store's one read of a request's start
// (storage.RequestStarter, optional) returns what PartitionTouchClient
// and IdempotencyGet return: the touched row (created on first touch),
// the client record of this partition only, and the stored results of
// the named commits that exist, of this client only.
func testRequestStart(t *testing.T, e *env) {
	s, _ := e.store()
	rs, ok := s.(storage.RequestStarter)
	if !ok {
		t.Skip("the store reads a request's start with PartitionTouchClient and IdempotencyGet")
	}
	ctx := t.Context()
	const t0 = 9_000_000
	st, err := rs.RequestStart(ctx, storage.RequestStartParams{Partition: "fresh", ClientID: "c1", CommitIDs: []string{"a"}, NowMs: t0})
	check(t, err)
	if st.HasClient || st.Pushes != nil || st.Partition.ID != "fresh" || !epochRE.MatchString(st.Partition.LogEpoch) || st.Partition.LastSeenMs != t0 {
		t.Fatalf("first start = %+v", st)
	}
	c := storage.Client{Partition: "fresh", ClientID: "c1", ActorID: "alice", WireVersion: 2, Cursor: 12, UpdatedAtMs: 500,
		Subscriptions: json.RawMessage(`[{"id":"s1"}]`)}
	check(t, s.ClientPut(ctx, c))
	recs := []storage.PushRecord{
		{ClientID: "c1", ClientCommitID: "a", ActorID: "alice", Status: storage.PushApplied, CommitSeq: 1, Result: []byte{1, 0, 2}, CreatedAtMs: 5},
		{ClientID: "c1", ClientCommitID: "b", ActorID: "alice", Status: storage.PushRejected, Result: []byte("no"), CreatedAtMs: 6},
		{ClientID: "c1", ClientCommitID: "d", Status: storage.PushRejected, Result: []byte{}, CreatedAtMs: 7},
		{ClientID: "c2", ClientCommitID: "x", ActorID: "bob", Status: storage.PushRejected, Result: []byte("bob's"), CreatedAtMs: 8},
	}
	writeTx(t, s, "fresh", func(tx storage.Tx) error {
		for _, r := range recs {
			if _, err := tx.IdempotencyPut(ctx, r); err != nil {
				return err
			}
		}
		return nil
	})
	for _, ids := range [][]string{nil, {"a"}, {"zz"}, {"b", "a", "zz", "d", "x"}, {"zz", "b"}} {
		st, err := rs.RequestStart(ctx, storage.RequestStartParams{Partition: "fresh", ClientID: "c1", CommitIDs: ids, NowMs: t0 + 1, Fresh: true})
		check(t, err)
		p, cl, ok, err := s.PartitionTouchClient(ctx, "fresh", "c1", t0+1)
		check(t, err)
		if st.Partition != p || st.HasClient != ok || !ok || st.Cached {
			t.Fatalf("%v: start = %+v, %v; touch = %+v, %v", ids, st.Partition, st.HasClient, p, ok)
		}
		assertClient(t, st.Client, cl)
		want := 0
		for _, id := range ids {
			r, ok, err := s.IdempotencyGet(ctx, "fresh", "c1", id)
			check(t, err)
			got, found := st.Pushes[id]
			if found != ok {
				t.Fatalf("%v: result of %q found = %v, IdempotencyGet %v", ids, id, found, ok)
			}
			if ok {
				want++
				assertRecord(t, "RequestStart", got, r)
			}
		}
		if len(st.Pushes) != want {
			t.Fatalf("%v: %d results, want %d: %+v", ids, len(st.Pushes), want, st.Pushes)
		}
	}
	// Another client's id and another partition hold nothing of c1's.
	st, err = rs.RequestStart(ctx, storage.RequestStartParams{Partition: "fresh", ClientID: "c2", CommitIDs: []string{"a", "x"}, NowMs: t0 + 1})
	check(t, err)
	if st.HasClient || len(st.Pushes) != 1 || st.Pushes["x"].ActorID != "bob" {
		t.Fatalf("c2 start = %+v", st)
	}
	// A server command's start: its caller's client record, the results
	// of its own key's client id (PushClientID), none of the caller's.
	for _, ids := range [][]string{{"x"}, {"a", "x"}, {"x", "b", "a"}} {
		st, err = rs.RequestStart(ctx, storage.RequestStartParams{Partition: "fresh", ClientID: "c1", PushClientID: "c2", CommitIDs: ids, NowMs: t0 + 1, Fresh: true})
		check(t, err)
		if !st.HasClient || st.Client.ActorID != "alice" || len(st.Pushes) != 1 {
			t.Fatalf("%v: command start = %+v", ids, st)
		}
		assertRecord(t, "command start", st.Pushes["x"], recs[3])
	}
	st, err = rs.RequestStart(ctx, storage.RequestStartParams{Partition: "other", ClientID: "c1", CommitIDs: []string{"a", "b"}, NowMs: t0})
	check(t, err)
	if st.HasClient || st.Pushes != nil {
		t.Fatalf("other partition start = %+v", st)
	}
	// Past the granularity last-seen moves, as with the touch.
	st, err = rs.RequestStart(ctx, storage.RequestStartParams{Partition: "fresh", ClientID: "c1", CommitIDs: []string{"a"}, NowMs: t0 + storage.TouchGranularityMs + 1})
	check(t, err)
	if st.Partition.LastSeenMs != t0+storage.TouchGranularityMs+1 || !st.HasClient || (st.Pushes["a"].CommitSeq != 1) != st.Cached {
		t.Fatalf("start past granularity = %+v", st)
	}
	// A start a cache answers holds no results; what it holds is current.
	for range 2 {
		st, err = rs.RequestStart(ctx, storage.RequestStartParams{Partition: "fresh", ClientID: "c1", CommitIDs: []string{"a"}, NowMs: t0 + storage.TouchGranularityMs + 2})
		check(t, err)
		if st.Cached && st.Pushes != nil {
			t.Fatalf("cached start with results: %+v", st)
		}
		startIsCurrent(t, s, st, "fresh", "c1", t0+storage.TouchGranularityMs+2)
	}
}

// startIsCurrent checks a RequestStart against what the store reads now:
// the partition row (but for MaxCommitSeq and HorizonSeq when the start
// was cached) and the client record.
func startIsCurrent(t *testing.T, s storage.Store, st storage.RequestStart, partition, clientID string, nowMs int64) {
	t.Helper()
	p, cl, ok, err := s.PartitionTouchClient(t.Context(), partition, clientID, nowMs)
	check(t, err)
	got := st.Partition
	if st.Cached {
		got.MaxCommitSeq, got.HorizonSeq = p.MaxCommitSeq, p.HorizonSeq
	}
	if got != p || st.HasClient != ok {
		t.Fatalf("start = %+v (client %v, cached %v); the store reads %+v (client %v)", st.Partition, st.HasClient, st.Cached, p, ok)
	}
	if ok {
		assertClient(t, st.Client, cl)
	}
}

// testRequestStartCurrent: a store that answers starts from a cache
// answers what every write before the call left, whichever store (or
// node, or process) on the same database made it: bindings, records,
// acks and advances, epoch rotations, wipes, rebases, adoptions and
// prunes. Twice each, so a start that fills a cache is followed by one
// it may answer from it.
func testRequestStartCurrent(t *testing.T, e *env) {
	s, _ := e.store()
	rs, ok := s.(storage.RequestStarter)
	if !ok {
		t.Skip("the store reads a request's start with PartitionTouchClient and IdempotencyGet")
	}
	stores := []storage.Store{s}
	if tw, ok := s.(Twinner); ok {
		if twin := tw.HookTwin(t); twin != nil {
			stores = append(stores, twin)
		}
	}
	ctx := t.Context()
	const part, now = "cur", 7_000_000
	start := func(what string) storage.RequestStart {
		t.Helper()
		var st storage.RequestStart
		for i := range 2 {
			var err error
			st, err = rs.RequestStart(ctx, storage.RequestStartParams{Partition: part, ClientID: "c1", CommitIDs: []string{"k"}, NowMs: now})
			if err != nil {
				t.Fatalf("%s: start %d: %v", what, i, err)
			}
			startIsCurrent(t, s, st, part, "c1", now)
		}
		return st
	}
	subs := func(n int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`[{"id":"s%d"}]`, n)) }
	for i, w := range stores {
		name := fmt.Sprintf("store %d: ", i)
		st := start(name + "first")
		if _, err := w.ClientBind(ctx, storage.Client{Partition: part, ClientID: "c1", ActorID: "alice", WireVersion: 2, Cursor: -1, UpdatedAtMs: now}); err != nil {
			t.Fatal(err)
		}
		if st = start(name + "bind"); !st.HasClient || st.Client.ActorID != "alice" {
			t.Fatalf("%sbind: %+v", name, st)
		}
		check(t, w.ClientPut(ctx, storage.Client{Partition: part, ClientID: "c1", ActorID: "alice", WireVersion: 3, Cursor: 4, UpdatedAtMs: now, Subscriptions: subs(i)}))
		if st = start(name + "put"); !bytes.Equal(st.Client.Subscriptions, subs(i)) || st.Client.Cursor != 4 {
			t.Fatalf("%sput: %+v", name, st.Client)
		}
		if ok, err := w.ClientAck(ctx, storage.ClientAckParams{Partition: part, ClientID: "c1", ActorID: "alice", LogEpoch: st.Partition.LogEpoch, Cursor: 6, NowMs: now}); err != nil || !ok {
			t.Fatalf("%sack: %v, %v", name, ok, err)
		}
		if st = start(name + "ack"); st.Client.Cursor != 6 {
			t.Fatalf("%sack: %+v", name, st.Client)
		}
		check(t, w.ClientAdvance(ctx, storage.ClientAckParams{Partition: part, ClientID: "c1", ActorID: "alice", LogEpoch: st.Partition.LogEpoch, Cursor: 8, NowMs: now}))
		if i == 0 {
			// An advance may wait to be written (storage.ClientAdvanceDelay);
			// a cache holds it at once.
			for range 2 {
				st, err := rs.RequestStart(ctx, storage.RequestStartParams{Partition: part, ClientID: "c1", NowMs: now})
				check(t, err)
				if c := st.Client.Cursor; c != 8 && (st.Cached || c != 6) {
					t.Fatalf("%sadvance: %+v (cached %v)", name, st.Client, st.Cached)
				}
			}
		}
		old := st.Partition.LogEpoch
		if _, err := w.PartitionRotateEpoch(ctx, part, now); err != nil {
			t.Fatal(err)
		}
		if st = start(name + "rotate"); st.Partition.LogEpoch == old || !st.Partition.EpochRequired || st.HasClient {
			t.Fatalf("%srotate: %+v", name, st)
		}
		if _, err := w.ClientBind(ctx, storage.Client{Partition: part, ClientID: "c1", ActorID: "bob", WireVersion: 2, Cursor: -1, UpdatedAtMs: now}); err != nil {
			t.Fatal(err)
		}
		if st = start(name + "rebind"); st.Client.ActorID != "bob" {
			t.Fatalf("%srebind: %+v", name, st.Client)
		}
		if _, err := w.PartitionRebase(ctx, part, st.Partition.LogEpoch, "0123456789abcdef0123456789abcdef", 0); err != nil {
			t.Fatal(err)
		}
		if st = start(name + "rebase"); st.Partition.LogEpoch != "0123456789abcdef0123456789abcdef" {
			t.Fatalf("%srebase: %+v", name, st.Partition)
		}
		if _, err := w.Prune(ctx, storage.PruneParams{Partition: part, LogEpoch: st.Partition.LogEpoch, NowMs: now}); err != nil {
			t.Fatal(err)
		}
		start(name + "prune")
		if a, ok := w.(storage.Admin); ok {
			check(t, a.PartitionWipe(ctx, part))
			if st = start(name + "wipe"); st.HasClient || st.Partition.LogEpoch == "0123456789abcdef0123456789abcdef" {
				t.Fatalf("%swipe: %+v", name, st)
			}
			check(t, a.PartitionWipe(ctx, part))
			if _, err := w.PartitionAdopt(ctx, part, "fedcba9876543210fedcba9876543210", now); err != nil {
				t.Fatal(err)
			}
			if st = start(name + "adopt"); st.Partition.LogEpoch != "fedcba9876543210fedcba9876543210" {
				t.Fatalf("%sadopt: %+v", name, st.Partition)
			}
		}
		// The next store starts from a partition with a client bound again.
		check(t, w.ClientPut(ctx, storage.Client{Partition: part, ClientID: "c1", ActorID: "alice", WireVersion: 2, Cursor: 1, UpdatedAtMs: now}))
	}
}

// testClientAdvance: an advance raises the cursor like ClientAck, never
// lowers it, changes nothing for another actor or an old epoch; it is
// stored once a later write of the store returned, or within
// ClientAdvanceDelay without one; a ClientPut supersedes a pending one.
func testClientAdvance(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s)
	ctx := t.Context()
	subs := json.RawMessage(`[{"id":"s1"}]`)
	rec := storage.Client{Partition: p.ID, ClientID: "c1", ActorID: "alice", WireVersion: 2, Cursor: 10, UpdatedAtMs: 1, Subscriptions: subs}
	check(t, s.ClientPut(ctx, rec))
	get := func() storage.Client {
		t.Helper()
		c, ok, err := s.ClientGet(ctx, p.ID, "c1")
		if err != nil || !ok {
			t.Fatalf("ClientGet = %v, %v", ok, err)
		}
		return c
	}
	// A write of the store carries what is pending.
	aWrite := func() {
		t.Helper()
		check(t, s.ClientPut(ctx, storage.Client{Partition: p.ID, ClientID: "other", ActorID: "bob", WireVersion: 2, Cursor: 1, UpdatedAtMs: 1}))
	}
	adv := func(cursor, now int64, actor, epoch string) {
		t.Helper()
		check(t, s.ClientAdvance(ctx, storage.ClientAckParams{Partition: p.ID, ClientID: "c1", ActorID: actor, LogEpoch: epoch, Cursor: cursor, NowMs: now}))
	}
	adv(15, 2, "alice", p.LogEpoch)
	adv(12, 3, "alice", p.LogEpoch) // a lower cursor never lowers it
	aWrite()
	want := rec
	want.Cursor, want.UpdatedAtMs = 15, 3
	assertClient(t, get(), want)

	adv(30, 4, "mallory", p.LogEpoch)
	adv(31, 5, "alice", "0123456789abcdef0123456789abcdef")
	aWrite()
	assertClient(t, get(), want)

	// Without another write it is stored within the delay (the deadline
	// leaves room for a loaded machine).
	adv(20, 6, "alice", p.LogEpoch)
	want.Cursor, want.UpdatedAtMs = 20, 6
	poll.Until(t, storage.ClientAdvanceDelay+10*time.Second, "the advance stored without another write", func() bool { return get().Cursor == 20 })
	assertClient(t, get(), want)

	// A put after an advance wins, even with a lower cursor.
	adv(40, 7, "alice", p.LogEpoch)
	reset := storage.Client{Partition: p.ID, ClientID: "c1", ActorID: "alice", WireVersion: 2, Cursor: -1, UpdatedAtMs: 8, Subscriptions: subs}
	check(t, s.ClientPut(ctx, reset))
	aWrite()
	assertClient(t, get(), reset)
}

// testClientPutKeepsBinding: a put never rebinds a client id to another
// actor.
func testClientPutKeepsBinding(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s)
	ctx := t.Context()
	alice := storage.Client{Partition: p.ID, ClientID: "c1", ActorID: "alice", WireVersion: 2, Cursor: 12, UpdatedAtMs: 500}
	check(t, s.ClientPut(ctx, alice))
	err := s.ClientPut(ctx, storage.Client{Partition: p.ID, ClientID: "c1", ActorID: "mallory", WireVersion: 2, Cursor: 1, UpdatedAtMs: 600})
	if !errors.Is(err, &ssp2.Error{Code: ssp2.CodeInvalidClientID}) {
		t.Fatalf("put for another actor = %v, want %s", err, ssp2.CodeInvalidClientID)
	}
	got, _, err := s.ClientGet(ctx, p.ID, "c1")
	check(t, err)
	assertClient(t, got, alice)
}

// testClientBind: concurrent binds of one new client id create one record;
// every binder reads back that record, and later binds change nothing.
func testClientBind(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s)
	ctx := t.Context()
	const n = 8
	var (
		got  [n]storage.Client
		errs [n]error
	)
	race(n, func(i int) {
		got[i], errs[i] = s.ClientBind(ctx, storage.Client{Partition: p.ID, ClientID: "c", ActorID: fmt.Sprint("actor-", i),
			WireVersion: 2, Cursor: -1, UpdatedAtMs: int64(i)})
	})
	stored, ok, err := s.ClientGet(ctx, p.ID, "c")
	if err != nil || !ok {
		t.Fatalf("ClientGet = %v, %v", ok, err)
	}
	for i := range n {
		check(t, errs[i])
		assertClient(t, got[i], stored)
	}
	// Binding an existing record returns it unchanged, whoever asks.
	again, err := s.ClientBind(ctx, storage.Client{Partition: p.ID, ClientID: "c", ActorID: "late", WireVersion: 1, Cursor: 5, UpdatedAtMs: 99})
	check(t, err)
	assertClient(t, again, stored)
	subs := storage.Client{Partition: p.ID, ClientID: "d", ActorID: "alice", WireVersion: 2, Cursor: -1, UpdatedAtMs: 1,
		Subscriptions: json.RawMessage(`[]`)}
	got0, err := s.ClientBind(ctx, subs)
	check(t, err)
	assertClient(t, got0, subs)
}

func assertClient(t *testing.T, got, want storage.Client) {
	t.Helper()
	if got.Partition != want.Partition || got.ClientID != want.ClientID || got.ActorID != want.ActorID || got.WireVersion != want.WireVersion ||
		got.Cursor != want.Cursor || got.UpdatedAtMs != want.UpdatedAtMs || !bytes.Equal(got.Subscriptions, want.Subscriptions) {
		t.Fatalf("client = %+v, want %+v", got, want)
	}
}

func testClientAck(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s)
	ctx := t.Context()
	subs := json.RawMessage(`[{"id":"s1","table":"tasks","scopes":{"project_id":["p1"]}}]`)
	check(t, s.ClientPut(ctx, storage.Client{Partition: p.ID, ClientID: "c1", ActorID: "alice", WireVersion: 2, Cursor: 10, UpdatedAtMs: 1, Subscriptions: subs}))
	ack := func(a storage.ClientAckParams) bool {
		t.Helper()
		ok, err := s.ClientAck(ctx, a)
		check(t, err)
		return ok
	}
	base := storage.ClientAckParams{Partition: p.ID, ClientID: "c1", ActorID: "alice", LogEpoch: p.LogEpoch, Cursor: 15, NowMs: 2}
	cursor := func() (int64, int64) {
		c, ok, err := s.ClientGet(ctx, p.ID, "c1")
		if err != nil || !ok {
			t.Fatalf("ClientGet = %v, %v", ok, err)
		}
		return c.Cursor, c.UpdatedAtMs
	}
	if !ack(base) {
		t.Fatal("ack refused")
	}
	if c, u := cursor(); c != 15 || u != 2 {
		t.Fatalf("after ack: cursor %d updated %d; want 15, 2", c, u)
	}
	// An ack keeps what the last round registered.
	got, _, err := s.ClientGet(ctx, p.ID, "c1")
	check(t, err)
	assertClient(t, got, storage.Client{Partition: p.ID, ClientID: "c1", ActorID: "alice", WireVersion: 2, Cursor: 15, UpdatedAtMs: 2, Subscriptions: subs})
	lower := base
	lower.Cursor, lower.NowMs = 5, 3
	if !ack(lower) {
		t.Fatal("lower ack refused")
	}
	if c, u := cursor(); c != 15 || u != 3 {
		t.Fatalf("after a lower ack: cursor %d updated %d; want 15 (never lowered), 3", c, u)
	}
	for name, bad := range map[string]storage.ClientAckParams{
		"wrong actor":     {Partition: p.ID, ClientID: "c1", ActorID: "mallory", LogEpoch: p.LogEpoch, Cursor: 20, NowMs: 4},
		"wrong epoch":     {Partition: p.ID, ClientID: "c1", ActorID: "alice", LogEpoch: "stale", Cursor: 20, NowMs: 4},
		"unknown client":  {Partition: p.ID, ClientID: "c2", ActorID: "alice", LogEpoch: p.LogEpoch, Cursor: 20, NowMs: 4},
		"other partition": {Partition: "nobody", ClientID: "c1", ActorID: "alice", LogEpoch: p.LogEpoch, Cursor: 20, NowMs: 4},
	} {
		if ack(bad) {
			t.Fatalf("ack with %s accepted", name)
		}
	}
	if c, u := cursor(); c != 15 || u != 3 {
		t.Fatalf("refused acks changed the record: cursor %d updated %d", c, u)
	}
	if _, ok, err := s.ClientGet(ctx, p.ID, "c2"); err != nil || ok {
		t.Fatalf("ack created a record: %v, %v", ok, err)
	}
	// After rotation the old epoch is refused, and the record is gone.
	_, err = s.PartitionRotateEpoch(ctx, p.ID, 10)
	check(t, err)
	if ack(base) {
		t.Fatal("ack after rotation accepted")
	}
}

func testConstraintClassified(t *testing.T, e *env) {
	for _, kind := range []storage.ConstraintKind{storage.ConstraintNotNull, storage.ConstraintCheck, storage.ConstraintUnique, storage.ConstraintForeignKey} {
		t.Run(string(kind), func(t *testing.T) {
			s, sc := (&env{t: t, open: e.open}).store()
			p := partition(t, s)
			ctx := t.Context()
			check(t, hooks(t, s).HookConstrain(ctx, "tasks", "title", kind))
			var title any
			switch kind {
			case storage.ConstraintCheck:
				title = CheckForbiddenValue
			case storage.ConstraintUnique:
				title = "dup"
			case storage.ConstraintForeignKey:
				title = "no-such-parent"
			}
			writeTx(t, s, p.ID, func(tx storage.Tx) error {
				if kind == storage.ConstraintUnique {
					if _, err := tx.RowUpsert(ctx, "tasks", task(t, sc, "first", "p1", 1, title)); err != nil {
						return err
					}
				}
				sp, err := tx.Savepoint(ctx)
				if err != nil {
					return err
				}
				_, err = tx.RowUpsert(ctx, "tasks", task(t, sc, "t1", "p1", 1, title))
				var ce *storage.ConstraintError
				if !errors.As(err, &ce) || ce.Kind != kind || ce.Table != "tasks" {
					t.Fatalf("upsert = %v, want a %s constraint error on tasks", err, kind)
				}
				if !errors.Is(err, &ssp2.Error{Code: ssp2.CodeConstraintViolation}) {
					t.Fatalf("constraint error does not match %s", ssp2.CodeConstraintViolation)
				}
				if msg := ce.Error(); msg != fmt.Sprintf("%s constraint violated on table tasks", kind) {
					t.Fatalf("constraint error text %q carries more than kind and table", msg)
				}
				return sp.Rollback(ctx)
			})
		})
	}
}

func testConstraintUnclassified(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	check(t, hooks(t, s).HookTamper(ctx, "tasks", "score", ReasonMissingColumn))
	err := s.WriteTx(ctx, p.ID, func(tx storage.Tx) error {
		_, err := tx.RowUpsert(ctx, "tasks", task(t, sc, "t1", "p1", 1, nil))
		return err
	})
	var ce *storage.ConstraintError
	if err == nil || errors.As(err, &ce) || errors.Is(err, &ssp2.Error{Code: ssp2.CodeConstraintViolation}) {
		t.Fatalf("upsert into a table missing a column = %v, want an unclassified error", err)
	}
}

// race runs f(0) … f(n-1) at once, released together, and waits for all.
func race(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}
