package advances

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/syncnode/syncnode/storage"
)

func adv(partition, client string, cursor, now int64) storage.ClientAckParams {
	return storage.ClientAckParams{Partition: partition, ClientID: client, ActorID: "a", LogEpoch: "e", Cursor: cursor, NowMs: now}
}

// TestQueue: a client queued twice keeps its furthest cursor and time,
// Supersede drops it, Take returns key order and empties the queue, and
// FlushFunc is called once a batch has waited.
func TestQueue(t *testing.T) {
	flushed := make(chan struct{}, 1)
	q := &Queue{FlushFunc: func() { flushed <- struct{}{} }}
	for _, p := range []storage.ClientAckParams{adv("p2", "c", 5, 9), adv("p1", "b", 1, 1), adv("p1", "a", 3, 1), adv("p2", "c", 7, 2), adv("p1", "x", 1, 1)} {
		if err := q.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	q.Supersede("p1", "x")
	select {
	case <-flushed:
	case <-time.After(storage.ClientAdvanceDelay + 10*time.Second):
		t.Fatal("FlushFunc not called")
	}
	got := fmt.Sprint(q.Take())
	want := fmt.Sprint([]storage.ClientAckParams{adv("p1", "a", 3, 1), adv("p1", "b", 1, 1), adv("p2", "c", 7, 9)})
	if got != want {
		t.Fatalf("Take = %s, want %s", got, want)
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("Len after Take = %d, want 0", n)
	}
}

// TestQueueBounds: past Max a new client is refused with ErrFull (a queued
// one is still taken), and after Close every Add is refused with
// ErrClosed while the pending ones stay for Take.
func TestQueueBounds(t *testing.T) {
	q := &Queue{FlushFunc: func() {}}
	for i := range Max {
		if err := q.Add(adv("p", fmt.Sprint(i), 1, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Add(adv("p", "new", 1, 1)); !errors.Is(err, ErrFull) {
		t.Fatalf("Add past Max = %v, want ErrFull", err)
	}
	if err := q.Add(adv("p", "0", 2, 2)); err != nil {
		t.Fatalf("Add of a queued client past Max = %v, want nil", err)
	}
	q.Close()
	if err := q.Add(adv("p", "0", 3, 3)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Close = %v, want ErrClosed", err)
	}
	if n := len(q.Take()); n != Max {
		t.Fatalf("Take after Close = %d advances, want %d", n, Max)
	}
}
