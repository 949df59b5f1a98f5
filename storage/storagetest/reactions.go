package storagetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

var reactionTests = []test{
	{"EnqueueAndGet", testReactionEnqueueGet},
	{"EnqueueRollsBackWithCommit", testReactionEnqueueRollback},
	{"EnqueueRefusals", testReactionEnqueueRefusals},
	{"EnqueueKeepsExistingKey", testReactionEnqueueExisting},
	{"ClaimDueOnly", testReactionClaimDue},
	{"ClaimFilters", testReactionClaimFilters},
	{"RacingClaimsDisjoint", testReactionClaimsDisjoint},
	{"StaleOwnerLocked", testReactionStaleOwner},
	{"ExtendKeepsLease", testReactionExtend},
	{"OverlappingBatchesDoNotDeadlock", testReactionOverlappingBatches},
	{"FailRetriesThenDeadLetters", testReactionFail},
	{"FinalAttemptExpiryDeadLetters", testReactionFinalExpiry},
	{"OperatorRetry", testReactionRetry},
	{"PruneOnlyAgedTerminal", testReactionPrune},
	{"ListFilters", testReactionList},
	{"Counts", testReactionCounts},
	{"SurviveCommitPruning", testReactionSurvivePrune},
	{"Refusals", testReactionRefusals},
}

const (
	rxNow   = int64(1_000_000)
	rxLease = int64(30_000)
)

// rxNew is a valid reaction of type typ with key k of a commit.
func rxNew(partition, commit, k, typ string, maxAttempts int32) storage.ReactionNew {
	return storage.ReactionNew{
		IdempotencyKey: storage.ReactionIdempotencyKey(partition, "client", commit, k),
		Type:           typ, Version: 1, Payload: json.RawMessage(`{"k":"` + k + `","n":[1,2]}`), MaxAttempts: maxAttempts,
	}
}

// enqueue writes rs in one push transaction of p as commit `commit`
// created at createdAt.
func enqueue(t *testing.T, s storage.Store, p, commit string, createdAt int64, rs ...storage.ReactionNew) {
	t.Helper()
	writeTx(t, s, p, func(tx storage.Tx) error {
		return tx.ReactionEnqueue(t.Context(), storage.ReactionEnqueueParams{
			SourceClientID: "client", SourceClientCommitID: commit, SourceCommitSeq: 7, CreatedAtMs: createdAt, Reactions: rs,
		})
	})
}

// seedReactions enqueues n reactions of type typ in partition p, one
// commit each, created at rxNow.
func seedReactions(t *testing.T, s storage.Store, p string, n int, typ string) []storage.ReactionKey {
	t.Helper()
	keys := make([]storage.ReactionKey, n)
	writeTx(t, s, p, func(tx storage.Tx) error {
		for i := range n {
			commit := fmt.Sprintf("%s-c%d", typ, i)
			r := rxNew(p, commit, "k", typ, 3)
			keys[i] = storage.ReactionKey{Partition: p, IdempotencyKey: r.IdempotencyKey}
			if err := tx.ReactionEnqueue(t.Context(), storage.ReactionEnqueueParams{SourceClientID: "client",
				SourceClientCommitID: commit, SourceCommitSeq: int64(i + 1), CreatedAtMs: rxNow, Reactions: []storage.ReactionNew{r}}); err != nil {
				return err
			}
		}
		return nil
	})
	return keys
}

func claim(t *testing.T, s storage.Store, p storage.ReactionClaimParams) storage.ReactionClaimResult {
	t.Helper()
	if p.LeaseMs == 0 {
		p.LeaseMs = rxLease
	}
	if p.Limit == 0 {
		p.Limit = storage.MaxReactionBatch
	}
	res, err := s.ReactionClaim(t.Context(), p)
	if err != nil {
		t.Fatalf("ReactionClaim(%+v): %v", p, err)
	}
	return res
}

func getReaction(t *testing.T, s storage.Store, k storage.ReactionKey) storage.Reaction {
	t.Helper()
	r, ok, err := s.ReactionGet(t.Context(), k)
	check(t, err)
	if !ok {
		t.Fatalf("reaction %v is absent", k)
	}
	return r
}

func keysOf(rs []storage.Reaction) []storage.ReactionKey {
	out := make([]storage.ReactionKey, len(rs))
	for i, r := range rs {
		out[i] = r.ReactionKey
	}
	return out
}

func lease(r storage.Reaction) storage.ReactionLease {
	return storage.ReactionLease{ReactionKey: r.ReactionKey, Owner: r.LeaseOwner}
}

func testReactionEnqueueGet(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s).ID
	a, b := rxNew(p, "cc1", "email", "email.send", 5), rxNew(p, "cc1", "charge", "charge_card", 0)
	b.MaxAttempts = 1
	enqueue(t, s, p, "cc1", rxNow, a, b)
	got := getReaction(t, s, storage.ReactionKey{Partition: p, IdempotencyKey: a.IdempotencyKey})
	want := storage.Reaction{
		ReactionKey: storage.ReactionKey{Partition: p, IdempotencyKey: `["` + p + `","client","cc1","email"]`},
		Type:        "email.send", Version: 1, Payload: a.Payload,
		SourceClientID: "client", SourceClientCommitID: "cc1", SourceCommitSeq: 7,
		CreatedAtMs: rxNow, AvailableAtMs: rxNow, Status: storage.ReactionPending, MaxAttempts: 5,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ReactionGet:\n got %+v\nwant %+v", got, want)
	}
	if _, ok, err := s.ReactionGet(t.Context(), storage.ReactionKey{Partition: "other", IdempotencyKey: a.IdempotencyKey}); err != nil || ok {
		t.Fatalf("ReactionGet in another partition = %v, %v; want absent", ok, err)
	}
	list, err := s.ReactionList(t.Context(), storage.ReactionListParams{Partition: p, Limit: 10})
	check(t, err)
	if len(list) != 2 {
		t.Fatalf("listed %d reactions, want 2", len(list))
	}
}

func testReactionEnqueueRollback(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s).ID
	ctx := t.Context()
	boom := errors.New("rejected")
	err := s.WriteTx(ctx, p, func(tx storage.Tx) error {
		if err := tx.ReactionEnqueue(ctx, storage.ReactionEnqueueParams{SourceClientID: "client", SourceClientCommitID: "gone",
			CreatedAtMs: rxNow, Reactions: []storage.ReactionNew{rxNew(p, "gone", "k", "t", 3)}}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WriteTx = %v, want the callback's error", err)
	}
	// A savepoint rolled back (a rejected commit) takes its reactions too,
	// while a later commit in the same transaction keeps its own.
	writeTx(t, s, p, func(tx storage.Tx) error {
		sp, err := tx.Savepoint(ctx)
		if err != nil {
			return err
		}
		if err := tx.ReactionEnqueue(ctx, storage.ReactionEnqueueParams{SourceClientID: "client", SourceClientCommitID: "rejected",
			CreatedAtMs: rxNow, Reactions: []storage.ReactionNew{rxNew(p, "rejected", "k", "t", 3)}}); err != nil {
			return err
		}
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
		return tx.ReactionEnqueue(ctx, storage.ReactionEnqueueParams{SourceClientID: "client", SourceClientCommitID: "kept",
			CreatedAtMs: rxNow, Reactions: []storage.ReactionNew{rxNew(p, "kept", "k", "t", 3)}})
	})
	list, err := s.ReactionList(ctx, storage.ReactionListParams{Partition: p, Limit: 10})
	check(t, err)
	if len(list) != 1 || list[0].SourceClientCommitID != "kept" {
		t.Fatalf("after rollbacks the partition holds %+v, want only commit kept's reaction", list)
	}
}

func testReactionEnqueueRefusals(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s).ID
	ctx := t.Context()
	deep := "1"
	for range storage.MaxReactionJSONDepth + 1 {
		deep = "[" + deep + "]"
	}
	big := make([]byte, storage.MaxReactionPayloadBytes-1)
	for i := range big {
		big[i] = 'x'
	}
	cases := []struct {
		name   string
		edit   func(*storage.ReactionNew)
		reason string
	}{
		{"empty key", func(r *storage.ReactionNew) { r.IdempotencyKey = "" }, storage.ReasonReactionKey},
		{"empty type", func(r *storage.ReactionNew) { r.Type = "" }, storage.ReasonReactionType},
		{"type with a wildcard", func(r *storage.ReactionNew) { r.Type = "email.*" }, storage.ReasonReactionType},
		{"type with an empty token", func(r *storage.ReactionNew) { r.Type = "email..send" }, storage.ReasonReactionType},
		{"type starting with a digit", func(r *storage.ReactionNew) { r.Type = "1email" }, storage.ReasonReactionType},
		{"long type", func(r *storage.ReactionNew) { r.Type = "t" + string(big[:storage.MaxReactionTypeBytes]) }, storage.ReasonReactionType},
		{"version 0", func(r *storage.ReactionNew) { r.Version = 0 }, storage.ReasonReactionVersion},
		{"max attempts 0", func(r *storage.ReactionNew) { r.MaxAttempts = 0 }, storage.ReasonReactionAttempts},
		{"max attempts 101", func(r *storage.ReactionNew) { r.MaxAttempts = 101 }, storage.ReasonReactionAttempts},
		{"payload not JSON", func(r *storage.ReactionNew) { r.Payload = json.RawMessage(`{"a":`) }, storage.ReasonReactionPayload},
		{"payload too deep", func(r *storage.ReactionNew) { r.Payload = json.RawMessage(deep) }, storage.ReasonReactionDepth},
		{"payload too large", func(r *storage.ReactionNew) { r.Payload = json.RawMessage(`"` + string(big) + `"`) }, storage.ReasonReactionPayloadSize},
	}
	for _, tc := range cases {
		r := rxNew(p, "cc", "k", "t", 3)
		tc.edit(&r)
		writeTx(t, s, p, func(tx storage.Tx) error {
			err := tx.ReactionEnqueue(ctx, storage.ReactionEnqueueParams{SourceClientID: "client", SourceClientCommitID: "cc",
				CreatedAtMs: rxNow, Reactions: []storage.ReactionNew{r}})
			wantCode(t, err, ssp2.CodeStorageInvalidReaction)
			if got := storage.ReactionErrorReason(err); got != tc.reason {
				t.Errorf("%s: reason %q, want %q", tc.name, got, tc.reason)
			}
			// The refusal never reached the database: the transaction
			// goes on.
			_, err = tx.Partition(ctx, p)
			return err
		})
	}
	// Too many in one commit, and a key twice.
	var many []storage.ReactionNew
	for i := range storage.MaxReactionsPerCommit + 1 {
		many = append(many, rxNew(p, "cc", fmt.Sprint(i), "t", 3))
	}
	for name, rs := range map[string][]storage.ReactionNew{
		"too many":  many,
		"duplicate": {rxNew(p, "cc", "k", "t", 3), rxNew(p, "cc", "k", "t", 3)},
	} {
		writeTx(t, s, p, func(tx storage.Tx) error {
			err := tx.ReactionEnqueue(ctx, storage.ReactionEnqueueParams{SourceClientID: "client", SourceClientCommitID: "cc",
				CreatedAtMs: rxNow, Reactions: rs})
			if storage.ReactionErrorReason(err) == "" {
				t.Errorf("%s: ReactionEnqueue = %v, want an invalid-reaction refusal", name, err)
			}
			return nil
		})
	}
	// Exactly the limits pass.
	edge := rxNew(p, "edge", "k", "t"+string(big[:storage.MaxReactionTypeBytes-1]), storage.MaxReactionAttempts)
	edge.Payload = json.RawMessage(`"` + string(big[:storage.MaxReactionPayloadBytes-2]) + `"`)
	enqueue(t, s, p, "edge", rxNow, edge)
	counts, err := s.ReactionCounts(ctx)
	check(t, err)
	if counts.Pending != 1 {
		t.Fatalf("pending = %d after refusals and one valid enqueue, want 1", counts.Pending)
	}
}

func testReactionEnqueueExisting(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s).ID
	r := rxNew(p, "cc", "k", "first", 3)
	enqueue(t, s, p, "cc", rxNow, r)
	again := r
	again.Type = "second"
	enqueue(t, s, p, "cc", rxNow+5, again)
	got := getReaction(t, s, storage.ReactionKey{Partition: p, IdempotencyKey: r.IdempotencyKey})
	if got.Type != "first" || got.CreatedAtMs != rxNow {
		t.Fatalf("the second enqueue of a key replaced the row: %+v", got)
	}
}

func testReactionClaimDue(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s).ID
	enqueue(t, s, p, "old", rxNow-10, rxNew(p, "old", "k", "t", 3))
	enqueue(t, s, p, "new", rxNow, rxNew(p, "new", "k", "t", 3))
	enqueue(t, s, p, "later", rxNow+1, rxNew(p, "later", "k", "t", 3))
	res := claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "o1", NowMs: rxNow, Limit: 1})
	if len(res.Claimed) != 1 || res.Claimed[0].SourceClientCommitID != "old" {
		t.Fatalf("first claim = %+v, want the oldest due reaction", res.Claimed)
	}
	c := res.Claimed[0]
	if c.Status != storage.ReactionLeased || c.Attempts != 1 || c.LeaseOwner != "o1" || c.LeaseExpiresAtMs != rxNow+rxLease {
		t.Fatalf("claimed row = %+v, want leased to o1 until now+lease with attempt 1", c)
	}
	if stored := getReaction(t, s, c.ReactionKey); !reflect.DeepEqual(stored, c) {
		t.Fatalf("claim returned %+v but stored %+v", c, stored)
	}
	res = claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "o2", NowMs: rxNow})
	if len(res.Claimed) != 1 || res.Claimed[0].SourceClientCommitID != "new" {
		t.Fatalf("second claim = %+v, want only the due one (the leased and the future one stay)", res.Claimed)
	}
	if res = claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "o3", NowMs: rxNow}); len(res.Claimed) != 0 {
		t.Fatalf("third claim = %+v, want nothing", res.Claimed)
	}
	if res = claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "o4", NowMs: rxNow + 1}); len(res.Claimed) != 1 {
		t.Fatalf("claim once due = %+v, want the later reaction", res.Claimed)
	}
}

func testReactionClaimFilters(t *testing.T, e *env) {
	s, _ := e.store()
	p1, p2 := partition(t, s).ID, partition(t, s).ID
	seedReactions(t, s, p1, 2, "a")
	seedReactions(t, s, p1, 2, "b.x")
	seedReactions(t, s, p2, 3, "a")
	res := claim(t, s, storage.ReactionClaimParams{Partition: p1, Types: []string{"b.x"}, Owner: "o", NowMs: rxNow})
	if len(res.Claimed) != 2 {
		t.Fatalf("claim p1 type b.x got %d, want 2", len(res.Claimed))
	}
	for _, r := range res.Claimed {
		if r.Partition != p1 || r.Type != "b.x" {
			t.Fatalf("claim p1 type b.x returned %+v", r)
		}
	}
	res = claim(t, s, storage.ReactionClaimParams{Partition: p2, Owner: "o", NowMs: rxNow})
	if len(res.Claimed) != 3 {
		t.Fatalf("claim p2 got %d, want 3", len(res.Claimed))
	}
	res = claim(t, s, storage.ReactionClaimParams{AllPartitions: true, Owner: "o", NowMs: rxNow})
	if len(res.Claimed) != 2 || res.Claimed[0].Partition != p1 || res.Claimed[0].Type != "a" {
		t.Fatalf("claim all got %+v, want p1's two type-a reactions", res.Claimed)
	}
}

func testReactionClaimsDisjoint(t *testing.T, e *env) {
	s, _ := e.store()
	var parts []string
	var all []storage.ReactionKey
	for range 3 {
		p := partition(t, s).ID
		parts = append(parts, p)
		all = append(all, seedReactions(t, s, p, 40, "t")...)
	}
	const claimers = 6
	var (
		mu   sync.Mutex
		seen = map[storage.ReactionKey]string{}
		wg   sync.WaitGroup
		errs = make(chan error, claimers)
	)
	for i := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			all := i%2 == 0 // odd claimers drain one partition, then all
			for round := 0; ; round++ {
				p := storage.ReactionClaimParams{Owner: fmt.Sprintf("o%d-%d", i, round), NowMs: rxNow, LeaseMs: rxLease, Limit: 7,
					Partition: parts[i%len(parts)], AllPartitions: all}
				res, err := s.ReactionClaim(context.Background(), p)
				if err != nil {
					errs <- err
					return
				}
				if len(res.Claimed) == 0 {
					if all {
						return
					}
					all = true
					continue
				}
				mu.Lock()
				for _, r := range res.Claimed {
					if prev, dup := seen[r.ReactionKey]; dup {
						errs <- fmt.Errorf("%v claimed by %s and %s", r.ReactionKey, prev, p.Owner)
					}
					seen[r.ReactionKey] = p.Owner
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != len(all) {
		t.Fatalf("claimed %d distinct reactions of %d", len(seen), len(all))
	}
	counts, err := s.ReactionCounts(t.Context())
	check(t, err)
	if counts.Leased != int64(len(all)) || counts.Pending != 0 {
		t.Fatalf("counts after claiming everything = %+v", counts)
	}
}

func testReactionStaleOwner(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s).ID
	ctx := t.Context()
	seedReactions(t, s, p, 1, "t")
	a := claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "A", NowMs: rxNow}).Claimed[0]
	// Before the lease ends nobody else gets it; at its end B does.
	if got := claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "B", NowMs: rxNow + rxLease - 1}).Claimed; len(got) != 0 {
		t.Fatalf("a live lease was reclaimed: %+v", got)
	}
	b := claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "B", NowMs: rxNow + rxLease}).Claimed
	if len(b) != 1 || b[0].LeaseOwner != "B" || b[0].Attempts != 2 {
		t.Fatalf("expired lease reclaimed as %+v, want owner B, attempt 2", b)
	}
	stale := lease(a)
	if ok, err := s.ReactionComplete(ctx, storage.ReactionCompleteParams{Leases: []storage.ReactionLease{stale}, NowMs: rxNow + rxLease + 1}); err != nil || ok[0] {
		t.Fatalf("stale complete = %v, %v; want refused", ok, err)
	}
	if ok, err := s.ReactionExtend(ctx, storage.ReactionExtendParams{Leases: []storage.ReactionLease{stale}, UntilMs: rxNow + 10*rxLease}); err != nil || ok[0] {
		t.Fatalf("stale extend = %v, %v; want refused", ok, err)
	}
	if _, ok, err := s.ReactionFail(ctx, storage.ReactionFailParams{ReactionLease: stale, Failure: storage.ReactionFailure{Code: "x", AtMs: rxNow}, DeadLetter: true}); err != nil || ok {
		t.Fatalf("stale fail = %v, %v; want refused", ok, err)
	}
	if got := getReaction(t, s, a.ReactionKey); !reflect.DeepEqual(got, b[0]) {
		t.Fatalf("the stale owner changed the row: %+v, want %+v", got, b[0])
	}
	done, err := s.ReactionComplete(ctx, storage.ReactionCompleteParams{Leases: []storage.ReactionLease{stale, lease(b[0])}, NowMs: rxNow + rxLease + 2})
	check(t, err)
	if !reflect.DeepEqual(done, []bool{false, true}) {
		t.Fatalf("complete [stale, current] = %v, want [false true]", done)
	}
	got := getReaction(t, s, a.ReactionKey)
	if got.Status != storage.ReactionCompleted || got.CompletedAtMs != rxNow+rxLease+2 || got.LeaseOwner != "" || got.LeaseExpiresAtMs != 0 {
		t.Fatalf("completed row = %+v", got)
	}
	// A completed row is no longer leased: even its owner cannot touch it.
	if ok, err := s.ReactionComplete(ctx, storage.ReactionCompleteParams{Leases: []storage.ReactionLease{lease(b[0])}, NowMs: rxNow}); err != nil || ok[0] {
		t.Fatalf("second complete = %v, %v; want refused", ok, err)
	}
}

func testReactionExtend(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s).ID
	seedReactions(t, s, p, 2, "t")
	got := claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "A", NowMs: rxNow}).Claimed
	ok, err := s.ReactionExtend(t.Context(), storage.ReactionExtendParams{Leases: []storage.ReactionLease{lease(got[0])}, UntilMs: rxNow + 3*rxLease})
	check(t, err)
	if !ok[0] {
		t.Fatal("extend by the owner was refused")
	}
	res := claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "B", NowMs: rxNow + 2*rxLease})
	if len(res.Claimed) != 1 || res.Claimed[0].ReactionKey != got[1].ReactionKey {
		t.Fatalf("after extending one lease, a claim past the old expiry got %+v, want only the other", keysOf(res.Claimed))
	}
	if r := getReaction(t, s, got[0].ReactionKey); r.LeaseOwner != "A" || r.LeaseExpiresAtMs != rxNow+3*rxLease {
		t.Fatalf("extended row = %+v", r)
	}
}

// A runner extends the leases of its running handlers while it completes
// others: overlapping batches, given in any order, wait for each other
// and never fail (PostgreSQL deadlocked when each locked in its own
// order).
func testReactionOverlappingBatches(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s).ID
	seedReactions(t, s, p, 200, "t")
	got := claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "A", NowMs: rxNow}).Claimed
	leases := make([]storage.ReactionLease, len(got))
	for i, r := range got {
		leases[i] = lease(r)
	}
	reversed := make([]storage.ReactionLease, len(leases))
	for i, l := range leases {
		reversed[len(leases)-1-i] = l
	}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for round := range 20 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := s.ReactionExtend(t.Context(), storage.ReactionExtendParams{Leases: leases, UntilMs: rxNow + rxLease + int64(round)})
			errs <- err
		}()
		go func() {
			defer wg.Done()
			_, err := s.ReactionExtend(t.Context(), storage.ReactionExtendParams{Leases: reversed, UntilMs: rxNow + rxLease + int64(round)})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("overlapping extensions: %v", err)
		}
	}
	var done []bool
	var err error
	wg.Add(2)
	go func() {
		defer wg.Done()
		done, err = s.ReactionComplete(t.Context(), storage.ReactionCompleteParams{Leases: reversed, NowMs: rxNow + 1})
	}()
	var extendErr error
	go func() {
		defer wg.Done()
		_, extendErr = s.ReactionExtend(t.Context(), storage.ReactionExtendParams{Leases: leases, UntilMs: rxNow + 2*rxLease})
	}()
	wg.Wait()
	if err != nil || extendErr != nil {
		t.Fatalf("complete beside an extension: %v, %v", err, extendErr)
	}
	for i, ok := range done {
		if !ok {
			t.Fatalf("lease %d not completed", i)
		}
	}
}

func testReactionFail(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s).ID
	ctx := t.Context()
	key := seedReactions(t, s, p, 1, "t")[0] // maxAttempts 3
	details := json.RawMessage(`{"status":503}`)
	now := rxNow
	for attempt := int32(1); attempt <= 3; attempt++ {
		c := claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: fmt.Sprint("o", attempt), NowMs: now}).Claimed
		if len(c) != 1 || c[0].Attempts != attempt {
			t.Fatalf("attempt %d: claimed %+v", attempt, c)
		}
		st, ok, err := s.ReactionFail(ctx, storage.ReactionFailParams{ReactionLease: lease(c[0]),
			Failure: storage.ReactionFailure{Code: "smtp.unavailable", AtMs: now + 1, Details: details}, RetryAtMs: now + 100})
		check(t, err)
		want := storage.ReactionPending
		if attempt == 3 {
			want = storage.ReactionDeadLetter
		}
		if !ok || st != want {
			t.Fatalf("attempt %d: fail = %s, %v; want %s", attempt, st, ok, want)
		}
		r := getReaction(t, s, key)
		wantFailure := &storage.ReactionFailure{Code: "smtp.unavailable", AtMs: now + 1, Details: details}
		if r.Status != want || r.LeaseOwner != "" || r.LeaseExpiresAtMs != 0 || !reflect.DeepEqual(r.Failure, wantFailure) {
			t.Fatalf("attempt %d: stored %+v (failure %+v)", attempt, r, r.Failure)
		}
		if want == storage.ReactionPending {
			if r.AvailableAtMs != now+100 {
				t.Fatalf("retry due at %d, want %d", r.AvailableAtMs, now+100)
			}
			if got := claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "early", NowMs: now + 99}).Claimed; len(got) != 0 {
				t.Fatalf("a retry was claimed before its time: %+v", got)
			}
		}
		now += 100
	}
	if got := claim(t, s, storage.ReactionClaimParams{AllPartitions: true, Owner: "late", NowMs: now + 1e9}).Claimed; len(got) != 0 {
		t.Fatalf("a dead letter was claimed: %+v", got)
	}
	// A permanent failure dead-letters at the first attempt.
	k2 := seedReactions(t, s, partition(t, s).ID, 1, "t")[0]
	c := claim(t, s, storage.ReactionClaimParams{Partition: k2.Partition, Owner: "o", NowMs: rxNow}).Claimed[0]
	st, ok, err := s.ReactionFail(ctx, storage.ReactionFailParams{ReactionLease: lease(c), Failure: storage.ReactionFailure{Code: "bad.version", AtMs: rxNow}, DeadLetter: true, RetryAtMs: rxNow})
	check(t, err)
	if !ok || st != storage.ReactionDeadLetter {
		t.Fatalf("permanent failure = %s, %v; want dead-letter", st, ok)
	}
	if r := getReaction(t, s, k2); r.Attempts != 1 || r.Failure == nil || r.Failure.Details != nil {
		t.Fatalf("permanent dead letter = %+v", r)
	}
}

func testReactionFinalExpiry(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s).ID
	r := rxNew(p, "cc", "k", "t", 1)
	enqueue(t, s, p, "cc", rxNow, r)
	key := storage.ReactionKey{Partition: p, IdempotencyKey: r.IdempotencyKey}
	claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "crashed", NowMs: rxNow})
	res := claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "next", NowMs: rxNow + rxLease})
	if len(res.Claimed) != 0 || len(res.DeadLettered) != 1 || res.DeadLettered[0].ReactionKey != key {
		t.Fatalf("claim after the final attempt's lease expired = %+v", res)
	}
	got := getReaction(t, s, key)
	if got.Status != storage.ReactionDeadLetter || got.Attempts != 1 || got.Failure == nil ||
		got.Failure.Code != storage.ReactionCodeLeaseExpired || got.Failure.AtMs != rxNow+rxLease || got.LeaseOwner != "" {
		t.Fatalf("expired final attempt = %+v (failure %+v)", got, got.Failure)
	}
	if !reflect.DeepEqual(res.DeadLettered[0], got) {
		t.Fatalf("claim reported %+v, stored %+v", res.DeadLettered[0], got)
	}
}

func testReactionRetry(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s).ID
	ctx := t.Context()
	key := seedReactions(t, s, p, 1, "t")[0]
	if ok, err := s.ReactionRetry(ctx, key, rxNow); err != nil || ok {
		t.Fatalf("retry of a pending row = %v, %v; want refused", ok, err)
	}
	c := claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "o", NowMs: rxNow}).Claimed[0]
	if ok, err := s.ReactionRetry(ctx, key, rxNow); err != nil || ok {
		t.Fatalf("retry of a leased row = %v, %v; want refused", ok, err)
	}
	if _, _, err := s.ReactionFail(ctx, storage.ReactionFailParams{ReactionLease: lease(c), Failure: storage.ReactionFailure{Code: "x", AtMs: rxNow}, DeadLetter: true}); err != nil {
		t.Fatal(err)
	}
	ok, err := s.ReactionRetry(ctx, key, rxNow+500)
	check(t, err)
	if !ok {
		t.Fatal("retry of a dead letter was refused")
	}
	got := getReaction(t, s, key)
	if got.Status != storage.ReactionPending || got.Attempts != 0 || got.Failure != nil || got.AvailableAtMs != rxNow+500 {
		t.Fatalf("retried row = %+v", got)
	}
	if res := claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "o2", NowMs: rxNow + 500}); len(res.Claimed) != 1 || res.Claimed[0].Attempts != 1 {
		t.Fatalf("claim after retry = %+v, want attempt 1", res.Claimed)
	}
	if ok, err := s.ReactionRetry(ctx, storage.ReactionKey{Partition: p, IdempotencyKey: "absent"}, rxNow); err != nil || ok {
		t.Fatalf("retry of an absent row = %v, %v", ok, err)
	}
}

// typedReactions enqueues one reaction of each type in partition p, one
// commit each, created at rxNow.
func typedReactions(t *testing.T, s storage.Store, p string, types ...string) []storage.ReactionKey {
	t.Helper()
	var keys []storage.ReactionKey
	for i, typ := range types {
		r := rxNew(p, fmt.Sprint("c", i), "k", typ, 3)
		enqueue(t, s, p, fmt.Sprint("c", i), rxNow, r)
		keys = append(keys, storage.ReactionKey{Partition: p, IdempotencyKey: r.IdempotencyKey})
	}
	return keys
}

// terminal claims the only reaction of type typ in key's partition and
// completes or dead-letters it at atMs.
func terminal(t *testing.T, s storage.Store, key storage.ReactionKey, typ string, status storage.ReactionStatus, atMs int64) {
	t.Helper()
	ctx := t.Context()
	c := claim(t, s, storage.ReactionClaimParams{Partition: key.Partition, Types: []string{typ}, Owner: "t-" + typ, NowMs: atMs - 1})
	if len(c.Claimed) != 1 || c.Claimed[0].ReactionKey != key {
		t.Fatalf("claim of %v = %+v", key, c.Claimed)
	}
	l := lease(c.Claimed[0])
	if status == storage.ReactionCompleted {
		ok, err := s.ReactionComplete(ctx, storage.ReactionCompleteParams{Leases: []storage.ReactionLease{l}, NowMs: atMs})
		check(t, err)
		if !ok[0] {
			t.Fatal("complete refused")
		}
		return
	}
	if _, ok, err := s.ReactionFail(ctx, storage.ReactionFailParams{ReactionLease: l, Failure: storage.ReactionFailure{Code: "x", AtMs: atMs}, DeadLetter: true}); err != nil || !ok {
		t.Fatalf("dead-letter: %v, %v", ok, err)
	}
}

func testReactionPrune(t *testing.T, e *env) {
	s, _ := e.store()
	p, other := partition(t, s).ID, partition(t, s).ID
	ctx := t.Context()
	keys := typedReactions(t, s, p, "t0", "t1", "t2", "t3", "t4", "t5")
	otherKeys := typedReactions(t, s, other, "t0")
	cutoff := rxNow + 1000
	terminal(t, s, keys[0], "t0", storage.ReactionCompleted, cutoff-10) // aged
	terminal(t, s, keys[1], "t1", storage.ReactionCompleted, cutoff)    // not strictly older
	terminal(t, s, keys[2], "t2", storage.ReactionDeadLetter, cutoff-5) // aged
	terminal(t, s, keys[3], "t3", storage.ReactionDeadLetter, cutoff+1) // young
	terminal(t, s, otherKeys[0], "t0", storage.ReactionCompleted, cutoff-10)
	// keys[4] stays pending; keys[5] holds a lease that expired long ago.
	if c := claim(t, s, storage.ReactionClaimParams{Partition: p, Types: []string{"t5"}, Owner: "expired", NowMs: rxNow, LeaseMs: 1}); len(c.Claimed) != 1 {
		t.Fatalf("could not lease t5: %+v", c)
	}
	res, err := s.ReactionPrune(ctx, storage.ReactionPruneParams{Partition: p, CompletedBeforeMs: cutoff, DeadLetterBeforeMs: cutoff, Limit: 1})
	check(t, err)
	if res.Completed+res.DeadLetter != 1 || !res.MayHaveMore {
		t.Fatalf("first pass (limit 1) = %+v", res)
	}
	res, err = s.ReactionPrune(ctx, storage.ReactionPruneParams{Partition: p, CompletedBeforeMs: cutoff, DeadLetterBeforeMs: cutoff, Limit: 10})
	check(t, err)
	if res.Completed+res.DeadLetter != 1 || res.MayHaveMore {
		t.Fatalf("second pass = %+v", res)
	}
	for i, k := range keys {
		_, ok, err := s.ReactionGet(ctx, k)
		check(t, err)
		if gone := i == 0 || i == 2; ok == gone {
			t.Errorf("reaction %d present = %v after pruning", i, ok)
		}
	}
	if _, ok, _ := s.ReactionGet(ctx, otherKeys[0]); !ok {
		t.Fatal("a partition-scoped prune removed another partition's row")
	}
	res, err = s.ReactionPrune(ctx, storage.ReactionPruneParams{AllPartitions: true, CompletedBeforeMs: 1 << 60, DeadLetterBeforeMs: 1 << 60, Limit: 100})
	check(t, err)
	if res.Completed != 2 || res.DeadLetter != 1 {
		t.Fatalf("prune everything terminal = %+v, want 2 completed and 1 dead letter", res)
	}
	counts, err := s.ReactionCounts(ctx)
	check(t, err)
	if (counts != storage.ReactionCounts{Pending: 1, Leased: 1}) {
		t.Fatalf("after pruning all terminal rows: %+v, want the pending and the expired lease untouched", counts)
	}
}

func testReactionList(t *testing.T, e *env) {
	s, _ := e.store()
	p1, p2 := partition(t, s).ID, partition(t, s).ID
	ctx := t.Context()
	for i := range 4 {
		typ := "a"
		if i%2 == 1 {
			typ = "b"
		}
		enqueue(t, s, p1, fmt.Sprint("c", i), rxNow+int64(i), rxNew(p1, fmt.Sprint("c", i), "k", typ, 3))
	}
	enqueue(t, s, p2, "c9", rxNow+9, rxNew(p2, "c9", "k", "a", 3))
	claim(t, s, storage.ReactionClaimParams{Partition: p1, Types: []string{"b"}, Owner: "o", NowMs: rxNow + 10, Limit: 1})
	list := func(p storage.ReactionListParams) []string {
		t.Helper()
		if p.Limit == 0 {
			p.Limit = 100
		}
		rs, err := s.ReactionList(ctx, p)
		check(t, err)
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r.SourceClientCommitID
		}
		return out
	}
	for _, tc := range []struct {
		name string
		p    storage.ReactionListParams
		want []string
	}{
		{"partition, newest first", storage.ReactionListParams{Partition: p1}, []string{"c3", "c2", "c1", "c0"}},
		{"all", storage.ReactionListParams{AllPartitions: true, Limit: 2}, []string{"c9", "c3"}},
		{"type", storage.ReactionListParams{Partition: p1, Types: []string{"a"}}, []string{"c2", "c0"}},
		{"status", storage.ReactionListParams{AllPartitions: true, Statuses: []storage.ReactionStatus{storage.ReactionLeased}}, []string{"c1"}},
		{"status and type", storage.ReactionListParams{Partition: p1, Statuses: []storage.ReactionStatus{storage.ReactionPending}, Types: []string{"b"}}, []string{"c3"}},
		{"none", storage.ReactionListParams{Partition: "nobody"}, []string{}},
	} {
		if got := list(tc.p); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: listed %v, want %v", tc.name, got, tc.want)
		}
	}
}

func testReactionCounts(t *testing.T, e *env) {
	s, _ := e.store()
	p := partition(t, s).ID
	keys := typedReactions(t, s, p, "a", "b", "c", "c", "c")
	terminal(t, s, keys[0], "a", storage.ReactionCompleted, rxNow+10)
	terminal(t, s, keys[1], "b", storage.ReactionDeadLetter, rxNow+10)
	claim(t, s, storage.ReactionClaimParams{Partition: p, Owner: "o", NowMs: rxNow + 1e12, Limit: 1})
	got, err := s.ReactionCounts(t.Context())
	check(t, err)
	if want := (storage.ReactionCounts{Pending: 2, Leased: 1, Completed: 1, DeadLetter: 1}); got != want {
		t.Fatalf("counts = %+v, want %+v", got, want)
	}
}

func testReactionSurvivePrune(t *testing.T, e *env) {
	s, sc := e.store()
	p := pruneLog(t, s, sc, 5, recent)
	ctx := t.Context()
	key := seedReactions(t, s, p.ID, 1, "t")[0]
	if r := prune(t, s, storage.PruneParams{Partition: p.ID, LogEpoch: p.LogEpoch, ThroughSeq: 4, Literal: true}); r.RemovedCommits == 0 {
		t.Fatalf("prune removed nothing: %+v", r)
	}
	if _, ok, err := s.ReactionGet(ctx, key); err != nil || !ok {
		t.Fatalf("reaction after commit pruning = %v, %v; want kept", ok, err)
	}
}

func testReactionRefusals(t *testing.T, e *env) {
	s, _ := e.store()
	ctx := t.Context()
	for name, p := range map[string]storage.ReactionClaimParams{
		"limit 0":    {AllPartitions: true, Owner: "o", LeaseMs: 1, Limit: 0},
		"limit 1001": {AllPartitions: true, Owner: "o", LeaseMs: 1, Limit: storage.MaxReactionBatch + 1},
		"lease 0":    {AllPartitions: true, Owner: "o", LeaseMs: 0, Limit: 1},
		"no owner":   {AllPartitions: true, LeaseMs: 1, Limit: 1},
		"bad type":   {AllPartitions: true, Owner: "o", LeaseMs: 1, Limit: 1, Types: []string{"a b"}},
	} {
		if _, err := s.ReactionClaim(ctx, p); ssp2.CodeOf(err) == "" {
			t.Errorf("claim with %s = %v, want a typed refusal", name, err)
		}
	}
	if _, err := s.ReactionList(ctx, storage.ReactionListParams{AllPartitions: true, Limit: 1, Statuses: []storage.ReactionStatus{"done"}}); ssp2.CodeOf(err) == "" {
		t.Errorf("list with an unknown status = %v, want a typed refusal", err)
	}
	if _, err := s.ReactionPrune(ctx, storage.ReactionPruneParams{AllPartitions: true}); ssp2.CodeOf(err) != ssp2.CodeStorageInvalidLimit {
		t.Errorf("prune with limit 0 = %v, want %s", err, ssp2.CodeStorageInvalidLimit)
	}
	l := storage.ReactionLease{ReactionKey: storage.ReactionKey{Partition: "p", IdempotencyKey: "k"}, Owner: "o"}
	for name, f := range map[string]storage.ReactionFailure{
		"empty code":      {AtMs: 1},
		"code with space": {Code: "a b", AtMs: 1},
		"details array":   {Code: "a", AtMs: 1, Details: json.RawMessage(`[1]`)},
		"details invalid": {Code: "a", AtMs: 1, Details: json.RawMessage(`{`)},
		"details large":   {Code: "a", AtMs: 1, Details: json.RawMessage(`{"x":"` + string(make([]byte, storage.MaxReactionFailureDetailsBytes)) + `"}`)},
	} {
		if _, _, err := s.ReactionFail(ctx, storage.ReactionFailParams{ReactionLease: l, Failure: f}); ssp2.CodeOf(err) != ssp2.CodeStorageInvalidReaction {
			t.Errorf("fail with %s = %v, want %s", name, err, ssp2.CodeStorageInvalidReaction)
		}
	}
	many := make([]storage.ReactionLease, storage.MaxReactionBatch+1)
	for i := range many {
		many[i] = l
	}
	if _, err := s.ReactionComplete(ctx, storage.ReactionCompleteParams{Leases: many}); ssp2.CodeOf(err) != ssp2.CodeStorageInvalidLimit {
		t.Errorf("complete of %d leases = %v, want %s", len(many), err, ssp2.CodeStorageInvalidLimit)
	}
}
