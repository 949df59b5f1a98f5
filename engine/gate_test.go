package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/syncnode/syncnode/gate"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// gated returns a harness whose engine is gated, and another process's
// gate on the same store (it declares the checkpoints).
func gated(t *testing.T) (*harness, *gate.Gate) {
	t.Helper()
	var other *gate.Gate
	h := newHarness(t, func(c *Config) {
		g, err := gate.New(gate.Config{Store: c.Store.(gate.Store), Schema: c.Schema})
		if err != nil {
			t.Fatal(err)
		}
		if other, err = gate.New(gate.Config{Store: c.Store.(gate.Store), Schema: c.Schema}); err != nil {
			t.Fatal(err)
		}
		c.Gate = GateOf(g)
	})
	return h, other
}

// TestGateRefusesBeforeTheResponse: a partition another process is
// backfilling is refused before anything is written (HTTP 503).
func TestGateRefusesBeforeTheResponse(t *testing.T) {
	h, other := gated(t)
	who := id("u1", "p1")
	epoch := h.epoch(who)
	if _, err := other.Declare(context.Background(), "p", "proj"); err != nil {
		t.Fatal(err)
	}
	_, err := h.try(who, 2, hdr("c1", epoch), commit("k1", upsert("r1", h.row("r1", "p1", "a"))))
	wantCode(t, err, ssp2.CodeSchemaNotReady)
	_, err = h.try(who, 2, hdr("c1", epoch), &ssp2.PullHeader{Accept: 3}, sub("s", 0, "p1"))
	wantCode(t, err, ssp2.CodeSchemaNotReady)
	info, _ := ssp2.CodeSchemaNotReady.Info()
	if !info.Retryable {
		t.Fatalf("catalog entry %+v", info)
	}
}

// TestGateRefusesInsideTheTransaction: a declaration between admission
// and the push's write transaction refuses the push in-band, and nothing
// is written.
func TestGateRefusesInsideTheTransaction(t *testing.T) {
	h, other := gated(t)
	ctx := context.Background()
	epoch := h.epoch(id("u1", "p1"))
	var armed atomic.Bool
	armed.Store(true)
	who := Identity{Partition: "p", ActorID: "u1", Scopes: ResolverFunc(func(ctx context.Context, partition, actor string) (Allowed, error) {
		if armed.CompareAndSwap(true, false) {
			if _, err := other.Declare(ctx, partition, "proj"); err != nil {
				return nil, err
			}
		}
		return Allowed{"project_id": {"p1"}}, nil
	})}
	m := h.sync(who, 2, hdr("c1", epoch), commit("k1", upsert("r1", h.row("r1", "p1", "a"))))
	errs := frames[*ssp2.ErrorFrame](m)
	if len(errs) != 1 || errs[0].Code != string(ssp2.CodeSchemaNotReady) || !errs[0].Retryable || len(frames[*ssp2.PushResult](m)) != 0 {
		t.Fatalf("response %+v, want an in-band %s and no push result", m.Frames, ssp2.CodeSchemaNotReady)
	}
	err := h.store.ReadTx(ctx, func(tx storage.ReadTx) error {
		if _, ok, err := tx.RowGet(ctx, "p", "tasks", "r1"); err != nil || ok {
			return errors.Join(err, errors.New("the refused push wrote its row"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := h.store.IdempotencyGet(ctx, "p", "c1", "k1"); err != nil || ok {
		t.Fatalf("the refused push stored a result: %v, %v", ok, err)
	}
}

// TestPushAuthoritative: a server-authoritative write through the push
// pipeline, idempotent, all or nothing, and gated.
func TestPushAuthoritative(t *testing.T) {
	h, other := gated(t)
	ctx := context.Background()
	ops := func(rowID, title string) func(context.Context, storage.Tx) ([]ssp2.Operation, error) {
		return func(context.Context, storage.Tx) ([]ssp2.Operation, error) {
			return []ssp2.Operation{upsert(rowID, h.row(rowID, "p1", title))}, nil
		}
	}
	c := AuthoritativeCommit{Partition: "p", ActorID: "server", ClientID: "srv", ClientCommitID: "k1", Operations: ops("r1", "a")}
	res, err := h.e.PushAuthoritative(ctx, c)
	if err != nil || !res.Applied || res.Replayed || res.CommitSeq != 1 {
		t.Fatalf("first = %+v, %v", res, err)
	}
	res, err = h.e.PushAuthoritative(ctx, c)
	if err != nil || !res.Applied || !res.Replayed || res.CommitSeq != 1 {
		t.Fatalf("replay = %+v, %v", res, err)
	}
	// A rejected operation rolls back the whole transaction, the
	// callback's own writes included, and stores nothing under the key.
	var advanced bool
	rej := AuthoritativeCommit{Partition: "p", ActorID: "server", ClientID: "srv", ClientCommitID: "k2",
		Operations: func(ctx context.Context, tx storage.Tx) ([]ssp2.Operation, error) {
			rw := storage.RowWrite{RowID: "side", Values: h.decodeRow(h.row("side", "p1", "x")), Scopes: map[string]string{"project_id": "p1"}, Payload: h.row("side", "p1", "x")}
			if _, err := tx.RowUpsert(ctx, "tasks", rw); err != nil {
				return nil, err
			}
			advanced = true
			base := int64(99)
			return []ssp2.Operation{upsert("r1", h.row("r1", "p1", "b"), base)}, nil
		}}
	_, err = h.e.PushAuthoritative(ctx, rej)
	var re *RejectedError
	if !errors.As(err, &re) || re.Result.Code != string(ssp2.CodeVersionConflict) || !advanced {
		t.Fatalf("rejected = %v", err)
	}
	err = h.store.ReadTx(ctx, func(tx storage.ReadTx) error {
		_, ok, err := tx.RowGet(ctx, "p", "tasks", "side")
		if err == nil && ok {
			err = errors.New("the callback's write survived the rejection")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := h.store.IdempotencyGet(ctx, "p", "srv", "k2"); ok {
		t.Fatal("a rejected authoritative commit stored its result")
	}
	// No operations: the callback's writes commit, no commit is appended.
	none, err := h.e.PushAuthoritative(ctx, AuthoritativeCommit{Partition: "p", ClientID: "srv", ClientCommitID: "k3",
		Operations: func(context.Context, storage.Tx) ([]ssp2.Operation, error) { return nil, nil }})
	if err != nil || none.Applied {
		t.Fatalf("empty = %+v, %v", none, err)
	}
	// Gated like a push.
	if _, err := other.Declare(ctx, "p", "proj"); err != nil {
		t.Fatal(err)
	}
	_, err = h.e.PushAuthoritative(ctx, AuthoritativeCommit{Partition: "p", ClientID: "srv", ClientCommitID: "k4", Operations: ops("r4", "d")})
	wantCode(t, err, ssp2.CodeSchemaNotReady)
}
