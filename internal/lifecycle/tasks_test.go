package lifecycle

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// TestTasksWaitRefusesLateWork: work accepted before Wait has finished
// when Wait returns, and work offered after it is refused, not run.
func TestTasksWaitRefusesLateWork(t *testing.T) {
	var ts Tasks
	if !ts.Enter() {
		t.Fatal("Enter before Wait was refused")
	}
	ts.Done()
	release := make(chan struct{})
	var ran atomic.Int64
	if !ts.Go(func() { <-release; ran.Add(1) }) {
		t.Fatal("Go before Wait was refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ts.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with running work and an ended ctx = %v, want context.Canceled", err)
	}
	if ts.Go(func() { ran.Add(100) }) {
		t.Fatal("Go after Wait was accepted")
	}
	if ts.Enter() {
		t.Fatal("Enter after Wait was accepted")
	}
	close(release)
	if err := ts.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("ran %d, want only the accepted work (1)", n)
	}
}

// TestTasksGoRacesWait offers work from many goroutines while Wait runs,
// as message handlers do while their owner stops: under -race this must
// report nothing, and every accepted task must have run when Wait
// returns.
func TestTasksGoRacesWait(t *testing.T) {
	for range 50 {
		var ts Tasks
		var accepted, ran atomic.Int64
		var offer sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			offer.Go(func() {
				<-start
				for range 20 {
					if ts.Go(func() { ran.Add(1) }) {
						accepted.Add(1)
					}
				}
			})
		}
		close(start)
		if err := ts.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		done := ran.Load()
		offer.Wait()
		if a := accepted.Load(); done != a {
			t.Fatalf("Wait returned with %d of %d accepted tasks run", done, a)
		}
	}
}
