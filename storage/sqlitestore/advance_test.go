package sqlitestore

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/syncnode/syncnode/storage"
)

// TestAdvanceAppliedOnClose: a cursor advance still waiting for a write
// when the store closes is written by Close, and the reopened file holds
// it; it cost no write transaction of its own before.
func TestAdvanceAppliedOnClose(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sync.db")
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.PartitionTouch(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ClientPut(ctx, storage.Client{Partition: "p", ClientID: "c", ActorID: "a", WireVersion: 2, Cursor: 3, UpdatedAtMs: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.ClientAdvance(ctx, storage.ClientAckParams{Partition: "p", ClientID: "c", ActorID: "a", LogEpoch: p.LogEpoch, Cursor: 9, NowMs: 2}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, ok, err := s.ClientGet(ctx, "p", "c")
	if err != nil || !ok || c.Cursor != 9 || c.UpdatedAtMs != 2 {
		t.Fatalf("after reopen: %+v, %v, %v; want cursor 9", c, ok, err)
	}
	if err := s.ClientAdvance(ctx, storage.ClientAckParams{Partition: "p", ClientID: "c"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.ClientAdvance(ctx, storage.ClientAckParams{Partition: "p", ClientID: "c"}); err != ErrClosed {
		t.Fatalf("advance after Close = %v, want ErrClosed", err)
	}
}
