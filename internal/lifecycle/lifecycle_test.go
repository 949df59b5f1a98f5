package lifecycle

import (
	"errors"
	"testing"
)

func TestOnce(t *testing.T) {
	var o Once
	stops := 0
	stop := func() error { stops++; return errors.New("stop failed") }
	if err := o.Start(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := o.Start(func() error { t.Fatal("started twice"); return nil }); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start = %v", err)
	}
	for range 2 {
		if err := o.Stop(stop); err == nil || err.Error() != "stop failed" {
			t.Fatalf("Stop = %v, want the first stop's error", err)
		}
	}
	if stops != 1 {
		t.Fatalf("stop ran %d times", stops)
	}

	var never Once
	if err := never.Stop(stop); err != nil || stops != 1 {
		t.Fatalf("Stop before Start = %v (stops %d)", err, stops)
	}
	var failed Once
	if err := failed.Start(func() error { return errors.New("boom") }); err == nil {
		t.Fatal("a failed start succeeded")
	}
	if err := failed.Stop(stop); err != nil || stops != 1 {
		t.Fatalf("Stop after a failed Start = %v (stops %d)", err, stops)
	}
	if err := failed.Start(func() error { return nil }); !errors.Is(err, ErrStarted) {
		t.Fatalf("Start after a failed Start = %v", err)
	}
}
