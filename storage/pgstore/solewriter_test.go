package pgstore

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/storagetest"
)

// TestContractSoleWriter runs the contract suite against sole writers,
// whose starts come from the cache (RequestStartCurrent holds it to every
// write of its own).
func TestContractSoleWriter(t *testing.T) {
	testURL(t)
	storagetest.Run(t, func(t *testing.T) storage.Store {
		s := openWith(t, Config{MaxConns: 4, SoleWriter: true}, nil)
		if !s.caching() {
			t.Fatal("a sole writer alone on its schema does not cache")
		}
		return s
	})
}

// openOn opens another store on s's schema, as another node would.
func openOn(s *Store, cfg Config) (*Store, error) {
	cfg.URL, cfg.Schema = s.cfg.URL, s.cfg.Schema
	return open(context.Background(), cfg, nil)
}

// TestSoleWriterKeepsOthersOff: while a sole writer holds its schema no
// other store opens on it, sole writer or not, with ErrSoleWriterHeld;
// once it closed, one does.
func TestSoleWriterKeepsOthersOff(t *testing.T) {
	s := openWith(t, Config{MaxConns: 2, SoleWriter: true}, nil)
	if !s.caching() {
		t.Fatal("the sole writer does not cache")
	}
	for _, sole := range []bool{false, true} {
		o, err := openOn(s, Config{MaxConns: 2, SoleWriter: sole})
		if err == nil {
			o.Close()
			t.Fatalf("a store (sole writer %v) opened on a sole writer's schema", sole)
		}
		if !errors.Is(err, ErrSoleWriterHeld) {
			t.Fatalf("open (sole writer %v): %v, want ErrSoleWriterHeld", sole, err)
		}
	}
	s.Close()
	o, err := openOn(s, Config{MaxConns: 2})
	if err != nil {
		t.Fatalf("open after the sole writer closed: %v", err)
	}
	o.Close()
}

// TestSoleWriterAfterOthers: a sole writer that opens on a schema another
// store holds does not cache, and its starts see the other's writes.
func TestSoleWriterAfterOthers(t *testing.T) {
	other := openTB(t, 2)
	s, err := openOn(other, Config{MaxConns: 2, SoleWriter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.caching() {
		t.Fatal("a sole writer caches beside another store")
	}
	ctx := t.Context()
	if _, err := other.PartitionTouch(ctx, "p", 5); err != nil {
		t.Fatal(err)
	}
	for i, actor := range []string{"alice", "bob"} {
		if i == 1 {
			if _, err := other.PartitionRotateEpoch(ctx, "p", 5); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := other.ClientBind(ctx, storage.Client{Partition: "p", ClientID: "c1", ActorID: actor, WireVersion: 2, Cursor: -1, UpdatedAtMs: 5}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			st, err := s.RequestStart(ctx, storage.RequestStartParams{Partition: "p", ClientID: "c1", NowMs: 5})
			if err != nil {
				t.Fatal(err)
			}
			if st.Cached || !st.HasClient || st.Client.ActorID != actor {
				t.Fatalf("start after the other's bind to %s: %+v", actor, st)
			}
		}
	}
}

// TestSoleWriterLosesGuard: when the guard's session ends the sole writer
// stops caching for good, its connections take the lock shared, and
// another store can open beside it.
func TestSoleWriterLosesGuard(t *testing.T) {
	s := openWith(t, Config{MaxConns: 2, SoleWriter: true}, nil)
	ctx := t.Context()
	start := func() storage.RequestStart {
		t.Helper()
		st, err := s.RequestStart(ctx, storage.RequestStartParams{Partition: "p", ClientID: "c1", NowMs: 5})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if _, err := s.PartitionTouch(ctx, "p", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClientBind(ctx, storage.Client{Partition: "p", ClientID: "c1", ActorID: "alice", WireVersion: 2, Cursor: -1, UpdatedAtMs: 5}); err != nil {
		t.Fatal(err)
	}
	start()
	if !start().Cached {
		t.Fatal("the sole writer's second start was not cached")
	}
	c, err := pgx.Connect(ctx, s.cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var ok bool
	if err := c.QueryRow(ctx, "SELECT pg_terminate_backend($1)", s.sole.guard.PgConn().PID()).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate the guard: %v %v", ok, err)
	}
	<-s.sole.done // the watcher saw the guard fail
	if s.caching() {
		t.Fatal("caching after the guard was lost")
	}
	if st := start(); st.Cached || st.Client.ActorID != "alice" {
		t.Fatalf("start after the guard was lost: %+v", st)
	}
	o, err := openOn(s, Config{MaxConns: 2})
	if err != nil {
		t.Fatalf("open beside a sole writer that lost its guard: %v", err)
	}
	defer o.Close()
	if _, err := o.PartitionRotateEpoch(ctx, "p", 6); err != nil {
		t.Fatal(err)
	}
	if st := start(); st.Cached || st.HasClient {
		t.Fatalf("start after the other's rotation: %+v", st)
	}
}

// TestRoundTripsSoleWriter: a sole writer's steady round starts with no
// round trip, and the rest of the round keeps TestRoundTrips' budget.
func TestRoundTripsSoleWriter(t *testing.T) {
	c := &tripCounter{}
	s, sc := roundTripStoreWith(t, Config{MaxConns: 1, SoleWriter: true}, c.dial, true)
	ctx := t.Context()
	pushPullRound(ctx, t, s, &c.n, sc, 0, "r0", false)
	s.flushAdvances()
	// The pool's one connection: the lock session pings every
	// lockCheckInterval on its own.
	got := pushPullRound(ctx, t, s, connWrites(t, s.pool), sc, 1, "r0", false)
	t.Logf("round trips: %s", got)
	want := roundTrips{start: 0, push: 2, pull: 1, advance: 0, relay: 2}
	if got.push > want.push || got.pull > want.pull || got.advance > want.advance || got.relay > want.relay ||
		got.start > want.start {
		t.Fatalf("round trips:\n got  %s\n want %s (at most)", got, want)
	}
}
