package clock

import (
	"testing"
	"time"
)

func TestManual(t *testing.T) {
	t0 := time.UnixMilli(1_767_225_600_000)
	m := NewManual(t0)
	if got := m.Now(); !got.Equal(t0) {
		t.Fatalf("Now = %v, want %v", got, t0)
	}
	select {
	case <-m.After(0):
	default:
		t.Fatal("After(0) did not deliver at once")
	}
	short, long := m.After(time.Second), m.After(time.Minute)
	if n := m.Waiters(); n != 2 {
		t.Fatalf("Waiters = %d, want 2", n)
	}
	m.Advance(999 * time.Millisecond)
	select {
	case <-short:
		t.Fatal("fired before its time")
	default:
	}
	if got := m.Advance(time.Millisecond); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("Advance = %v", got)
	}
	select {
	case at := <-short:
		if !at.Equal(t0.Add(time.Second)) {
			t.Fatalf("fired with %v", at)
		}
	default:
		t.Fatal("did not fire at its time")
	}
	if n := m.Waiters(); n != 1 {
		t.Fatalf("Waiters = %d, want 1", n)
	}
	m.Advance(-time.Hour)
	if got := m.Now(); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("a negative Advance moved the clock to %v", got)
	}
	m.Set(t0.Add(2 * time.Minute))
	select {
	case <-long:
	default:
		t.Fatal("Set past the wait did not fire it")
	}
	m.Set(t0)
	if got := m.Now(); !got.Equal(t0) {
		t.Fatalf("Set back: Now = %v", got)
	}
}

func TestOr(t *testing.T) {
	if Or(nil) != System {
		t.Fatal("Or(nil) is not System")
	}
	m := NewManual(time.Time{})
	if Or(m) != Clock(m) {
		t.Fatal("Or(m) is not m")
	}
	if d := time.Since(System.Now()); d < 0 || d > time.Minute {
		t.Fatalf("System.Now is %v off", d)
	}
}
