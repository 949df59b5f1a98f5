package pgstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/storage"
)

// TestLock: one holder per name across the stores of one schema, none
// across schemas; a waiter gets the lock when the holder releases it, and
// when the server terminates the holder's session (whose Lost closes).
func TestLock(t *testing.T) {
	ctx := context.Background()
	a := openTB(t, 4)
	b, err := Open(ctx, a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	other := openTB(t, 4)
	const name = "edge-replica:shop1"

	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	lo, err := other.Lock(ctx, name)
	if err != nil {
		t.Fatalf("another schema's store contends: %v", err)
	}
	defer lo.Release(ctx)
	lb2, err := b.Lock(ctx, "edge-replica:shop2")
	if err != nil {
		t.Fatalf("another name: %v", err)
	}
	defer lb2.Release(ctx)

	// A waiter with a deadline gives up with the context's error.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = b.Lock(short, name)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock while held elsewhere: %v, want the deadline", err)
	}

	got := make(chan storage.Lock, 1)
	go func() {
		l, err := b.Lock(ctx, name)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	// The waiter's session is queued on the lock in the server.
	poll.Until(t, 30*time.Second, "the waiter queued", func() bool {
		var n int
		err := a.pool.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = hashtext(current_schema())::oid").Scan(&n)
		return err == nil && n == 1
	})
	select {
	case <-got:
		t.Fatal("a second holder in the same schema")
	default:
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Lost():
	default:
		t.Fatal("Lost not closed after Release")
	}
	lb := <-got

	// The server ends the holder's session: the lock is lost here and
	// granted to the waiter there.
	got2 := make(chan storage.Lock, 1)
	go func() {
		l, err := a.Lock(ctx, name)
		if err != nil {
			t.Error(err)
		}
		got2 <- l
	}()
	pid := lb.(*pgLock).conn.PgConn().PID()
	if _, err := a.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	<-lb.Lost()
	la2 := <-got2
	if err := la2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = lb.Release(ctx)
}
