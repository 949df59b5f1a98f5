package storagetest

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

var segmentTests = []test{
	{"PublishUnderManyGrants", testSegmentGrants},
	{"MergeRaisesExpiry", testSegmentMerge},
	{"CollisionRefused", testSegmentCollision},
	{"FindPicksLatestLive", testSegmentFindLatest},
	{"ExpireThenDelete", testSegmentExpire},
	{"Refusals", testSegmentRefusals},
	{"ConcurrentPublish", testSegmentConcurrent},
}

func segID(n int) string { return fmt.Sprintf("sha256:%064x", n) }

// segPub is a publication of segment n valid from 1000 to 1000+ttl.
func segPub(n int, part, epoch, digest string, ttl int64) storage.SegmentPublication {
	return storage.SegmentPublication{
		SegmentID: segID(n),
		SegmentKey: storage.SegmentKey{
			Partition: part, LogEpoch: epoch, Table: "tasks", SchemaVersion: 1, MediaType: ssp2.MediaRows,
			ScopeDigest: digest, AsOfCommitSeq: 42, RowCursor: "", PageRows: 500,
		},
		NextRowCursor: "t0500", RowCount: 500, ByteLength: int64(1000 + n),
		CreatedAtMs: 1000, ExpiresAtMs: 1000 + ttl,
	}
}

func publish(t *testing.T, s storage.Store, p storage.SegmentPublication) storage.SegmentPublication {
	t.Helper()
	got, err := s.SegmentPublish(t.Context(), p)
	if err != nil {
		t.Fatalf("SegmentPublish(%s, %+v): %v", p.SegmentID, p.SegmentKey, err)
	}
	return got
}

func assertPub(t *testing.T, what string, got, want storage.SegmentPublication) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func segStats(t *testing.T, s storage.Store) storage.SegmentStats {
	t.Helper()
	st, err := s.SegmentStats(t.Context())
	check(t, err)
	return st
}

// One address published under two scope digests, two partitions and two
// epochs: each grant is found by its own key only, and the per-partition
// listing holds exactly that partition and epoch's grants.
func testSegmentGrants(t *testing.T, e *env) {
	s := e.fresh()
	ctx := t.Context()
	var all []storage.SegmentPublication
	for _, part := range []string{"pa", "pb"} {
		for _, epoch := range []string{"e1", "e2"} {
			for _, digest := range []string{"d1", "d2"} {
				p := segPub(1, part, epoch, digest, 100)
				assertPub(t, "SegmentPublish", publish(t, s, p), p)
				all = append(all, p)
			}
		}
	}
	for _, p := range all {
		got, ok, err := s.SegmentFind(ctx, p.SegmentKey, 1050)
		if err != nil || !ok {
			t.Fatalf("SegmentFind(%+v) = %v, %v", p.SegmentKey, ok, err)
		}
		assertPub(t, "SegmentFind", got, p)
		if _, ok, err := s.SegmentFind(ctx, p.SegmentKey, p.ExpiresAtMs); err != nil || ok {
			t.Fatalf("SegmentFind at expiry = %v, %v; want none", ok, err)
		}
	}
	other := all[0].SegmentKey
	other.ScopeDigest = "d3"
	if _, ok, err := s.SegmentFind(ctx, other, 1050); err != nil || ok {
		t.Fatalf("SegmentFind(foreign digest) = %v, %v", ok, err)
	}
	other = all[0].SegmentKey
	other.RowCursor = "t0500"
	if _, ok, err := s.SegmentFind(ctx, other, 1050); err != nil || ok {
		t.Fatalf("SegmentFind(other page) = %v, %v", ok, err)
	}

	seg, ok, err := s.SegmentGet(ctx, segID(1))
	if err != nil || !ok {
		t.Fatalf("SegmentGet = %v, %v", ok, err)
	}
	if seg.ID != segID(1) || seg.ByteLength != 1001 || seg.CreatedAtMs != 1000 || len(seg.Publications) != len(all) {
		t.Fatalf("SegmentGet = %+v", seg)
	}
	assertPub(t, "SegmentGet first", seg.Publications[0], all[0])

	pubs, err := s.SegmentPublications(ctx, segID(1), "pb", "e1")
	check(t, err)
	if len(pubs) != 2 || pubs[0].ScopeDigest != "d1" || pubs[1].ScopeDigest != "d2" {
		t.Fatalf("SegmentPublications(pb, e1) = %+v", pubs)
	}
	for _, p := range pubs {
		if p.Partition != "pb" || p.LogEpoch != "e1" {
			t.Fatalf("SegmentPublications(pb, e1) holds %+v", p)
		}
	}
	for _, q := range [][3]string{{segID(1), "pc", "e1"}, {segID(1), "pa", "e3"}, {segID(2), "pa", "e1"}} {
		pubs, err := s.SegmentPublications(ctx, q[0], q[1], q[2])
		if err != nil || len(pubs) != 0 {
			t.Fatalf("SegmentPublications(%v) = %+v, %v; want none", q, pubs, err)
		}
	}
	if _, ok, err := s.SegmentGet(ctx, segID(2)); err != nil || ok {
		t.Fatalf("SegmentGet(unknown) = %v, %v", ok, err)
	}
	if got, want := segStats(t, s), (storage.SegmentStats{Segments: 1, Bytes: 1001, Publications: 8}); got != want {
		t.Fatalf("SegmentStats = %+v, want %+v", got, want)
	}
}

// Publishing the same address under the same key again raises the expiry
// to the later one and keeps the rest of the stored row.
func testSegmentMerge(t *testing.T, e *env) {
	s := e.fresh()
	p := segPub(1, "pa", "e1", "d1", 100)
	publish(t, s, p)
	later := p
	later.CreatedAtMs, later.ExpiresAtMs, later.NextRowCursor = 2000, 5000, "ignored"
	want := p
	want.ExpiresAtMs = 5000
	assertPub(t, "republish later", publish(t, s, later), want)
	earlier := p
	earlier.CreatedAtMs, earlier.ExpiresAtMs = 3000, 3001
	assertPub(t, "republish earlier", publish(t, s, earlier), want)
	if got := segStats(t, s); got.Publications != 1 || got.Segments != 1 {
		t.Fatalf("SegmentStats = %+v", got)
	}
}

// An address recorded with one byte length refuses another, changing
// nothing.
func testSegmentCollision(t *testing.T, e *env) {
	s := e.fresh()
	p := segPub(1, "pa", "e1", "d1", 100)
	publish(t, s, p)
	bad := segPub(1, "pb", "e1", "d1", 100)
	bad.ByteLength++
	_, err := s.SegmentPublish(t.Context(), bad)
	wantCode(t, err, ssp2.CodeStorageContentCollision)
	if got := segStats(t, s); got != (storage.SegmentStats{Segments: 1, Bytes: 1001, Publications: 1}) {
		t.Fatalf("SegmentStats after collision = %+v", got)
	}
}

// Two addresses under one key (a rebuild after rows changed, or a
// non-deterministic image): Find returns the live one expiring last.
func testSegmentFindLatest(t *testing.T, e *env) {
	s := e.fresh()
	a := segPub(1, "pa", "e1", "d1", 100)
	b := segPub(2, "pa", "e1", "d1", 300)
	c := segPub(3, "pa", "e1", "d1", 200)
	for _, p := range []storage.SegmentPublication{a, b, c} {
		publish(t, s, p)
	}
	got, ok, err := s.SegmentFind(t.Context(), a.SegmentKey, 1000)
	if err != nil || !ok {
		t.Fatalf("SegmentFind = %v, %v", ok, err)
	}
	assertPub(t, "SegmentFind", got, b)
	if _, ok, _ := s.SegmentFind(t.Context(), a.SegmentKey, 1300); ok {
		t.Fatal("SegmentFind after every expiry found one")
	}
}

// Expire deletes only expired publications, in batches of at most limit;
// an address keeps its row until it has no publication left and is
// deleted explicitly; a published address is never deleted.
func testSegmentExpire(t *testing.T, e *env) {
	s := e.fresh()
	ctx := t.Context()
	for i, part := range []string{"p1", "p2", "p3", "p4", "p5"} {
		publish(t, s, segPub(1, part, "e1", "d1", int64(100*(i+1))))
	}
	publish(t, s, segPub(2, "p1", "e1", "d1", 1000))
	// At 1350 the publications of segment 1 expiring at 1100, 1200, 1300
	// are expired.
	n, err := s.SegmentExpire(ctx, 1350, 2)
	if err != nil || n != 2 {
		t.Fatalf("SegmentExpire(limit 2) = %d, %v", n, err)
	}
	n, err = s.SegmentExpire(ctx, 1350, 10)
	if err != nil || n != 1 {
		t.Fatalf("SegmentExpire(rest) = %d, %v", n, err)
	}
	seg, _, err := s.SegmentGet(ctx, segID(1))
	check(t, err)
	if len(seg.Publications) != 2 || seg.Publications[0].Partition != "p4" || seg.Publications[1].Partition != "p5" {
		t.Fatalf("publications left = %+v", seg.Publications)
	}
	if un, err := s.SegmentUnpublished(ctx, 10); err != nil || len(un) != 0 {
		t.Fatalf("SegmentUnpublished = %+v, %v", un, err)
	}
	if ok, err := s.SegmentDelete(ctx, segID(1)); err != nil || ok {
		t.Fatalf("SegmentDelete(published) = %v, %v", ok, err)
	}
	n, err = s.SegmentExpire(ctx, 1600, 10)
	if err != nil || n != 2 {
		t.Fatalf("SegmentExpire(1600) = %d, %v", n, err)
	}
	un, err := s.SegmentUnpublished(ctx, 10)
	check(t, err)
	if len(un) != 1 || un[0].ID != segID(1) || un[0].ByteLength != 1001 || len(un[0].Publications) != 0 {
		t.Fatalf("SegmentUnpublished = %+v", un)
	}
	if ok, err := s.SegmentDelete(ctx, segID(1)); err != nil || !ok {
		t.Fatalf("SegmentDelete(unpublished) = %v, %v", ok, err)
	}
	if ok, err := s.SegmentDelete(ctx, segID(1)); err != nil || ok {
		t.Fatalf("SegmentDelete(again) = %v, %v", ok, err)
	}
	if _, ok, err := s.SegmentGet(ctx, segID(1)); err != nil || ok {
		t.Fatalf("SegmentGet(deleted) = %v, %v", ok, err)
	}
	if got := segStats(t, s); got != (storage.SegmentStats{Segments: 1, Bytes: 1002, Publications: 1}) {
		t.Fatalf("SegmentStats = %+v", got)
	}
	// A deleted address can be published again.
	publish(t, s, segPub(1, "p9", "e1", "d1", 100))
}

func testSegmentRefusals(t *testing.T, e *env) {
	s := e.fresh()
	ctx := t.Context()
	for _, limit := range []int{0, -1, storage.MaxSegmentListLimit + 1} {
		_, err := s.SegmentExpire(ctx, 1, limit)
		wantCode(t, err, ssp2.CodeStorageInvalidLimit)
		_, err = s.SegmentUnpublished(ctx, limit)
		wantCode(t, err, ssp2.CodeStorageInvalidLimit)
	}
	for name, mut := range map[string]func(p *storage.SegmentPublication){
		"empty id":       func(p *storage.SegmentPublication) { p.SegmentID = "" },
		"negative bytes": func(p *storage.SegmentPublication) { p.ByteLength = -1 },
		"expiry":         func(p *storage.SegmentPublication) { p.ExpiresAtMs = p.CreatedAtMs },
	} {
		p := segPub(1, "pa", "e1", "d1", 100)
		mut(&p)
		if _, err := s.SegmentPublish(ctx, p); err == nil || !strings.Contains(err.Error(), "invalid segment publication") {
			t.Errorf("SegmentPublish(%s) = %v", name, err)
		}
	}
	if got := segStats(t, s); got != (storage.SegmentStats{}) {
		t.Fatalf("SegmentStats after refusals = %+v", got)
	}
}

// Concurrent publications of one address under distinct keys all land.
func testSegmentConcurrent(t *testing.T, e *env) {
	s := e.fresh()
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.SegmentPublish(t.Context(), segPub(1, fmt.Sprint("p", i), "e1", "d1", 100))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if got := segStats(t, s); got != (storage.SegmentStats{Segments: 1, Bytes: 1001, Publications: n}) {
		t.Fatalf("SegmentStats = %+v", got)
	}
}
