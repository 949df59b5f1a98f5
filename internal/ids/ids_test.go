package ids

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		s  string
		ok bool
	}{
		{"", true},
		{"acme", true},
		{"äöü-日本", true},
		{strings.Repeat("x", MaxBytes), true},
		{strings.Repeat("x", MaxBytes+1), false},
		{"a\x00b", false},
		{"\xff", false},
	} {
		err := Check("the id", tc.s)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("Check(%.20q) = %v, want ok=%v", tc.s, err, tc.ok)
		}
	}
	if !Storable([]byte("abc")) || Storable([]byte{'a', 0}) || !Storable("") {
		t.Fatal("Storable misjudges NUL")
	}
}
