package storagetest

import (
	"regexp"
	"sync"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

var partitionTests = []test{
	{"TouchCreatesAndRefreshes", testPartitionTouch},
	{"ConcurrentFirstTouch", testPartitionConcurrentTouch},
	{"GetAndList", testPartitionGetList},
	{"RotateEpoch", testPartitionRotate},
	{"Adopt", testPartitionAdopt},
}

var storeTests = []test{
	{"CloseIdempotent", testCloseIdempotent},
}

func testCloseIdempotent(t *testing.T, e *env) {
	s := e.fresh()
	check(t, s.Close())
	check(t, s.Close())
}

var epochRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

func testPartitionTouch(t *testing.T, e *env) {
	ctx := t.Context()
	s := e.fresh()
	const t0 = 5_000_000
	p, err := s.PartitionTouch(ctx, "alpha", t0)
	check(t, err)
	if p.ID != "alpha" || !epochRE.MatchString(p.LogEpoch) || p.EpochRequired ||
		p.CreatedAtMs != t0 || p.LastSeenMs != t0 || p.MaxCommitSeq != 0 || p.HorizonSeq != 0 {
		t.Fatalf("first touch = %+v", p)
	}
	// Within the granularity, last-seen stays.
	p2, err := s.PartitionTouch(ctx, "alpha", t0+storage.TouchGranularityMs)
	check(t, err)
	if p2 != p {
		t.Fatalf("touch within granularity = %+v, want %+v", p2, p)
	}
	// Past it, last-seen moves and nothing else does.
	p3, err := s.PartitionTouch(ctx, "alpha", t0+storage.TouchGranularityMs+1)
	check(t, err)
	want := p
	want.LastSeenMs = t0 + storage.TouchGranularityMs + 1
	if p3 != want {
		t.Fatalf("touch past granularity = %+v, want %+v", p3, want)
	}
	// An older clock never moves it back.
	p4, err := s.PartitionTouch(ctx, "alpha", t0)
	check(t, err)
	if p4 != want {
		t.Fatalf("touch with an older clock = %+v, want %+v", p4, want)
	}
	other, err := s.PartitionTouch(ctx, "beta", t0)
	check(t, err)
	if other.LogEpoch == p.LogEpoch {
		t.Fatalf("two partitions share the epoch %s", p.LogEpoch)
	}
}

func testPartitionConcurrentTouch(t *testing.T, e *env) {
	s := e.fresh()
	const n = 8
	var (
		wg     sync.WaitGroup
		epochs [n]string
		errs   [n]error
	)
	for i := range n {
		wg.Go(func() {
			p, err := s.PartitionTouch(t.Context(), "shared", 1000)
			epochs[i], errs[i] = p.LogEpoch, err
		})
	}
	wg.Wait()
	for i := range n {
		check(t, errs[i])
		if epochs[i] != epochs[0] {
			t.Fatalf("concurrent first touches saw epochs %q and %q", epochs[0], epochs[i])
		}
	}
}

func testPartitionGetList(t *testing.T, e *env) {
	ctx := t.Context()
	s := e.fresh()
	_, err := s.PartitionGet(ctx, "nope")
	wantCode(t, err, ssp2.CodeStoragePartitionUnregistered)
	ids := []string{"b", "a", "B", "é", "aa"}
	for _, id := range ids {
		_, err := s.PartitionTouch(ctx, id, 1)
		check(t, err)
	}
	got, err := s.PartitionGet(ctx, "a")
	check(t, err)
	if got.ID != "a" {
		t.Fatalf("PartitionGet(a) = %+v", got)
	}
	list, err := s.Partitions(ctx)
	check(t, err)
	var order []string
	for _, p := range list {
		order = append(order, p.ID)
	}
	// Bytewise order.
	want := []string{"B", "a", "aa", "b", "é"}
	if len(order) != len(want) {
		t.Fatalf("Partitions = %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("Partitions = %v, want %v", order, want)
		}
	}
}

func testPartitionRotate(t *testing.T, e *env) {
	ctx := t.Context()
	s, sc := e.store()
	p := partition(t, s)
	q := partition(t, s)
	for _, part := range []string{p.ID, q.ID} {
		check(t, s.ClientPut(ctx, storage.Client{Partition: part, ClientID: "c1", ActorID: "a", WireVersion: 2, Cursor: 3, UpdatedAtMs: 1}))
	}
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		rw := task(t, sc, "t1", "p1", 1, nil)
		_, err := tx.CommitAppend(ctx, storage.CommitParams{ActorID: "a", ClientID: "c1", ClientCommitID: "1",
			SchemaVersion: 1, Changes: []storage.Change{change(rw, "tasks", 1)}})
		return err
	})
	r, err := s.PartitionRotateEpoch(ctx, p.ID, 2_000_000)
	check(t, err)
	if r.LogEpoch == p.LogEpoch || !epochRE.MatchString(r.LogEpoch) || !r.EpochRequired || r.MaxCommitSeq != 1 {
		t.Fatalf("rotated = %+v (was %+v)", r, p)
	}
	got, err := s.PartitionGet(ctx, p.ID)
	check(t, err)
	if got != r {
		t.Fatalf("PartitionGet after rotation = %+v, want %+v", got, r)
	}
	if _, ok, err := s.ClientGet(ctx, p.ID, "c1"); err != nil || ok {
		t.Fatalf("client record after rotation: ok %v err %v; want deleted", ok, err)
	}
	if _, ok, err := s.ClientGet(ctx, q.ID, "c1"); err != nil || !ok {
		t.Fatalf("other partition's client record: ok %v err %v; want kept", ok, err)
	}
	_, err = s.PartitionRotateEpoch(ctx, "unregistered", 1)
	wantCode(t, err, ssp2.CodeStoragePartitionUnregistered)
}

// testPartitionAdopt: a replica partition takes the epoch it is given;
// an existing row is returned unchanged; a bad epoch changes nothing.
func testPartitionAdopt(t *testing.T, e *env) {
	ctx := t.Context()
	s := e.fresh()
	p, err := s.PartitionAdopt(ctx, "replica", "edge-epoch-1", 7_000)
	check(t, err)
	want := storage.Partition{ID: "replica", LogEpoch: "edge-epoch-1", CreatedAtMs: 7_000, LastSeenMs: 7_000}
	if p != want {
		t.Fatalf("adopted = %+v, want %+v", p, want)
	}
	again, err := s.PartitionAdopt(ctx, "replica", "another-epoch", 8_000)
	check(t, err)
	if again != want {
		t.Fatalf("second adopt = %+v, want the first row %+v", again, want)
	}
	touched, err := s.PartitionTouch(ctx, "replica", 7_000)
	check(t, err)
	if touched.LogEpoch != "edge-epoch-1" {
		t.Fatalf("touch after adopt: epoch %q, want the adopted one", touched.LogEpoch)
	}
	for _, bad := range []string{"", "a\x00b"} {
		_, err := s.PartitionAdopt(ctx, "bad", bad, 1)
		wantCode(t, err, ssp2.CodeInvalidRequest)
	}
	if _, err := s.PartitionGet(ctx, "bad"); ssp2.CodeOf(err) != ssp2.CodeStoragePartitionUnregistered {
		t.Fatalf("a refused adopt registered the partition: %v", err)
	}
}
