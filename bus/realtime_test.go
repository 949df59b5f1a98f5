package bus

import "testing"

func TestRealtimeSubjects(t *testing.T) {
	p, err := NewPartition("user@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if got := prod.PresenceSubject(p); got != "syncrt.user=40example=2Ecom.presence" {
		t.Fatalf("PresenceSubject = %q", got)
	}
	// Node-wide subjects are outside the per-partition wildcard, which no
	// partition token can make collide with them.
	for _, s := range []string{prod.PresenceAlive(), prod.PresenceSync()} {
		if got := "syncrt.=node"; s[:len(got)] != got {
			t.Fatalf("%q is not under syncrt.=node", s)
		}
	}
	if _, err := ParseToken("=node"); err == nil {
		t.Fatal(`"=node" parses as a partition token`)
	}
	if EpochToken("abc123") != "abc123" || EpochToken("a:b") != "a=3Ab" {
		t.Fatalf("EpochToken: %q %q", EpochToken("abc123"), EpochToken("a:b"))
	}
}
