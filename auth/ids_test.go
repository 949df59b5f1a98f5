package auth

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/internal/ids"
)

// A partition or actor id the stores cannot hold or the bus cannot carry
// is refused when a token is minted and when one is verified: its commits
// would be acknowledged and then never published.
func TestUnusableIDsAreRefused(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	v, err := NewVerifier(Config{Secret: secret, Clock: clock.NewManual(now)})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("p", ids.MaxBytes+1)
	for name, p := range map[string]Principal{
		"partition too long": {ActorID: "alice", Partition: long},
		"partition with NUL": {ActorID: "alice", Partition: "ac\x00me"},
		"actor too long":     {ActorID: long, Partition: "acme"},
		"actor with NUL":     {ActorID: "al\x00ice", Partition: "acme"},
	} {
		if _, err := Mint(secret, p, time.Hour, now); !errors.Is(err, ids.ErrInvalid) {
			t.Errorf("%s: Mint = %v, want %v", name, err, ids.ErrInvalid)
		}
		// A token minted elsewhere.
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims{
			RegisteredClaims: jwt.RegisteredClaims{Subject: p.ActorID, ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))},
			Partition:        p.Partition,
		}).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(tok); !errors.Is(err, ids.ErrInvalid) || errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: Verify = %v, want %v (a valid token naming an unusable id)", name, err, ids.ErrInvalid)
		}
	}
	ok := Principal{ActorID: "alice", Partition: strings.Repeat("p", ids.MaxBytes)}
	if _, err := Mint(secret, ok, time.Hour, now); err != nil {
		t.Fatalf("Mint at the limit: %v", err)
	}
}
