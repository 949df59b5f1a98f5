package bus

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

var (
	tokenRE  = regexp.MustCompile(`^[A-Za-z0-9_=-]+$`)
	kvKeyRE  = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`) // nats.go's KV key rule
	hashedRE = regexp.MustCompile(`^h_[A-Z2-7]{26}$`)
)

func TestTokenExamples(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 64)
	tests := []struct {
		id, want string
	}{
		{"acme", "acme"},
		{"", "="},
		{"=", "=3D"},
		{"a.b", "a=2Eb"},
		{"A.b", "A=2Eb"},
		{"a.B", "a=2EB"},
		{"*", "=2A"},
		{">", "=3E"},
		{"a b", "a=20b"},
		{"user@example.com", "user=40example=2Ecom"},
		{"h_x", "=68_x"},
		{"h", "h"},
		{"hx_", "hx_"},
		{"_h_", "_h_"},
		{"é", "=C3=A9"},
		{"tab\tnl\n", "tab=09nl=0A"},
		{long, long},
	}
	for _, tt := range tests {
		got, err := Token(tt.id)
		if err != nil || got != tt.want {
			t.Errorf("Token(%q) = %q, %v; want %q", tt.id, got, err, tt.want)
			continue
		}
		back, err := ParseToken(got)
		if err != nil || back != tt.id {
			t.Errorf("ParseToken(%q) = %q, %v; want %q", got, back, err, tt.id)
		}
	}
}

func TestTokenHashed(t *testing.T) {
	t.Parallel()
	id := strings.Repeat("x", 65)
	p, err := NewPartition(id)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Hashed() || !hashedRE.MatchString(p.Token()) || len(p.Token()) != HashedTokenLen {
		t.Fatalf("token of a 65-byte id = %q (hashed %v), want h_ + 26 base32", p.Token(), p.Hashed())
	}
	if p.Escaped() != id {
		t.Errorf("Escaped = %q", p.Escaped())
	}
	if _, err := ParseToken(p.Token()); !errors.Is(err, ErrHashedToken) {
		t.Errorf("ParseToken(hashed) err = %v, want ErrHashedToken", err)
	}
	// The header restores the id, and must match the hash.
	q, err := PartitionFromToken(p.Token(), p.Escaped())
	if err != nil || q.ID() != id || q.Token() != p.Token() {
		t.Errorf("PartitionFromToken = %+v, %v", q, err)
	}
	if _, err := PartitionFromToken(p.Token(), "other"); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("mismatching header: err = %v, want ErrInvalidToken", err)
	}
	if _, err := PartitionFromToken(p.Token(), ""); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("missing header: err = %v, want ErrInvalidToken", err)
	}
	// 22 escaped bytes (=XX each) make 66 > 64: hashed.
	q, _ = NewPartition(strings.Repeat(".", 22))
	if !q.Hashed() {
		t.Errorf("66-byte escaped id not hashed")
	}
	// An id spelled like a hashed token cannot collide with one.
	r, _ := NewPartition(p.Token())
	if r.Token() == p.Token() {
		t.Errorf("id %q collides with the hashed token of another id", p.Token())
	}
}

func TestInvalidPartitionIDs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		id   string
		kind error
	}{
		{"too long", strings.Repeat("a", MaxPartitionIDBytes+1), ErrPartitionTooLong},
		{"huge", strings.Repeat("a", 1<<20), ErrPartitionTooLong},
		{"not utf-8", "a\xffb", ErrPartitionNotUTF8},
	}
	for _, tt := range tests {
		_, err := NewPartition(tt.id)
		if !errors.Is(err, ErrInvalidPartition) || !errors.Is(err, tt.kind) {
			t.Errorf("%s: err = %v, want ErrInvalidPartition and %v", tt.name, err, tt.kind)
		}
		var pe *PartitionIDError
		if !errors.As(err, &pe) || pe.Len != len(tt.id) {
			t.Errorf("%s: err %T does not carry the length", tt.name, err)
		}
		if len(err.Error()) > 200 {
			t.Errorf("%s: message echoes the id: %d bytes", tt.name, len(err.Error()))
		}
	}
	if _, err := NewPartition(strings.Repeat("a", MaxPartitionIDBytes)); err != nil {
		t.Errorf("id at the cap refused: %v", err)
	}
}

func TestParseTokenRejectsNonCanonical(t *testing.T) {
	t.Parallel()
	for _, tok := range []string{
		"",      // empty
		"=41",   // needless escape of 'A'
		"=2e",   // lowercase hex
		"=2",    // truncated
		"a=",    // truncated
		"=ZZ",   // not hex
		"a.b",   // raw dot
		"a*",    // wildcard
		"=68x",  // 'h' escaped without a following '_'
		"x=68_", // 'h' escaped not at the start
		"=FF",   // not UTF-8
		"h_abc", // hashed
	} {
		if id, err := ParseToken(tok); err == nil {
			t.Errorf("ParseToken(%q) = %q, want an error", tok, id)
		}
	}
}

func FuzzToken(f *testing.F) {
	for _, s := range []string{"", "acme", "a.b", "h_", "h_x", "=", "é", "\x00", strings.Repeat("é", 40), "user@example.com", "h_AAAAAAAAAAAAAAAAAAAAAAAAAA"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		p, err := NewPartition(id)
		if err != nil {
			if !errors.Is(err, ErrInvalidPartition) {
				t.Fatalf("NewPartition(%q): untyped error %v", id, err)
			}
			return
		}
		tok := p.Token()
		if !tokenRE.MatchString(tok) || !kvKeyRE.MatchString(tok) {
			t.Fatalf("token %q of %q is not a safe subject token / KV key", tok, id)
		}
		if len(tok) > MaxTokenLen {
			t.Fatalf("token %q longer than %d", tok, MaxTokenLen)
		}
		if p.Hashed() {
			if !hashedRE.MatchString(tok) || len(p.Escaped()) <= MaxTokenLen {
				t.Fatalf("bad hashed token %q for %q", tok, id)
			}
		} else if strings.HasPrefix(tok, "h_") {
			t.Fatalf("escaped token %q looks hashed", tok)
		}
		back, err := ParseToken(p.Escaped())
		if err != nil || back != id {
			t.Fatalf("ParseToken(%q) = %q, %v; want %q", p.Escaped(), back, err, id)
		}
		q, err := PartitionFromToken(tok, p.Escaped())
		if err != nil || q != p {
			t.Fatalf("PartitionFromToken(%q) = %+v, %v; want %+v", tok, q, err, p)
		}
	})
}

// FuzzParseToken checks that every accepted token is canonical: escaping
// the parsed id gives the token back, so a token names exactly one id.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"=", "acme", "a=2Eb", "=68_x", "=41", "h_x", "=C3=A9", "=FF"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		id, err := ParseToken(tok)
		if err != nil {
			return
		}
		if got := escape(id); got != tok {
			t.Fatalf("ParseToken(%q) = %q, which escapes to %q", tok, id, got)
		}
	})
}
