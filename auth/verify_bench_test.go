package auth

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkVerify is one bearer token's check: the same token every
// round (a client's steady state, answered by the verification cache)
// against a token never seen (the full HS256 parse and signature check).
func BenchmarkVerify(b *testing.B) {
	now := time.Now()
	p := Principal{ActorID: "alice", Partition: "acme", Scopes: map[string][]string{"project_id": {"p1", "p2"}}}
	b.Run("cached", func(b *testing.B) {
		v, err := NewVerifier(Config{Secret: secret})
		if err != nil {
			b.Fatal(err)
		}
		tok, err := Mint(secret, p, time.Hour, now)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.Verify(tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("uncached", func(b *testing.B) {
		v, err := NewVerifier(Config{Secret: secret})
		if err != nil {
			b.Fatal(err)
		}
		toks := make([]string, b.N)
		for i := range toks {
			if toks[i], err = Mint(secret, Principal{ActorID: fmt.Sprint("a", i), Partition: p.Partition, Scopes: p.Scopes}, time.Hour, now); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := v.Verify(toks[i]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
