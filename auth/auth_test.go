package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/syncnode/syncnode/internal/clock"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

func TestVerifyHS256(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clk := clock.NewManual(now)
	v, err := NewVerifier(Config{Secret: secret, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	want := Principal{ActorID: "alice", Partition: "acme", Scopes: map[string][]string{"project_id": {"p1", "p2"}, "org_id": {"*"}}}
	tok, err := Mint(secret, want, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.VerifyHeader("Bearer " + tok)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("principal = %+v, want %+v", got, want)
	}
}

func TestVerifyRefusals(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clk := clock.NewManual(now)
	v, err := NewVerifier(Config{Secret: secret, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	p := Principal{ActorID: "alice", Partition: "acme"}
	good, _ := Mint(secret, p, time.Hour, now)
	expired, _ := Mint(secret, p, time.Hour, now.Add(-2*time.Hour))
	forged, _ := Mint([]byte("another-secret-another-secret-xx"), p, time.Hour, now)
	noPart, _ := Mint(secret, Principal{ActorID: "alice"}, time.Hour, now)
	noSub, _ := Mint(secret, Principal{Partition: "acme"}, time.Hour, now)
	noExp, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "a", "partition": "p"}).SignedString(secret)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "a", "partition": "p", "exp": now.Add(time.Hour).Unix()}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	badScopes, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "a", "partition": "p", "exp": now.Add(time.Hour).Unix(), "scopes": map[string]any{"x": 3}}).SignedString(secret)
	tampered := good[:len(good)-3] + "abc"
	for name, h := range map[string]string{
		"missing":       "",
		"not bearer":    "Basic " + good,
		"garbage":       "Bearer not.a.token",
		"expired":       "Bearer " + expired,
		"forged":        "Bearer " + forged,
		"tampered":      "Bearer " + tampered,
		"no partition":  "Bearer " + noPart,
		"no sub":        "Bearer " + noSub,
		"no exp":        "Bearer " + noExp,
		"alg none":      "Bearer " + none,
		"scopes shaped": "Bearer " + badScopes,
	} {
		if _, err := v.VerifyHeader(h); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: err = %v, want ErrUnauthenticated", name, err)
		}
	}
}

func TestVerifyPublicKeys(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clk := clock.NewManual(now)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	edPub, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	v, err := NewVerifier(Config{PublicKeys: []crypto.PublicKey{ec.Public(), edPub}, Issuer: "idp", Audience: "syncnode", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	body := jwt.MapClaims{"sub": "bob", "partition": "acme", "iss": "idp", "aud": "syncnode", "exp": now.Add(time.Hour).Unix(), "scopes": map[string]any{"project_id": "*"}}
	for name, sign := range map[string]func() (string, error){
		"ES256": func() (string, error) { return jwt.NewWithClaims(jwt.SigningMethodES256, body).SignedString(ec) },
		"EdDSA": func() (string, error) { return jwt.NewWithClaims(jwt.SigningMethodEdDSA, body).SignedString(edPriv) },
	} {
		tok, err := sign()
		if err != nil {
			t.Fatal(err)
		}
		p, err := v.Verify(tok)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.ActorID != "bob" || !reflect.DeepEqual(p.Scopes["project_id"], []string{"*"}) {
			t.Fatalf("%s: principal %+v", name, p)
		}
	}
	wrongAud := jwt.MapClaims{"sub": "bob", "partition": "acme", "iss": "idp", "aud": "other", "exp": now.Add(time.Hour).Unix()}
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodES256, wrongAud).SignedString(ec)
	if _, err := v.Verify(tok); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("wrong audience accepted: %v", err)
	}
	// An HS256 token signed with the public key bytes must not verify
	// (algorithm confusion).
	hs, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, body).SignedString([]byte(strings.Repeat("k", 32)))
	if _, err := v.Verify(hs); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("HS256 accepted by a public-key verifier: %v", err)
	}
}

func TestNewVerifierRefusesBadConfig(t *testing.T) {
	if _, err := NewVerifier(Config{}); err == nil {
		t.Fatal("empty config accepted")
	}
	if _, err := NewVerifier(Config{Secret: []byte("short")}); err == nil {
		t.Fatal("short secret accepted")
	}
}

func TestDevSecret(t *testing.T) {
	dir := t.TempDir()
	s1, created, err := DevSecret(dir)
	if err != nil || !created || len(s1) < 32 {
		t.Fatalf("first DevSecret = %q, %v, %v", s1, created, err)
	}
	s2, created, err := DevSecret(dir)
	if err != nil || created || string(s1) != string(s2) {
		t.Fatalf("second DevSecret = %q, %v, %v; want the same secret", s2, created, err)
	}
	st, err := os.Stat(filepath.Join(dir, "dev-jwt-secret"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("secret file mode = %v, %v; want 0600", st.Mode(), err)
	}
}

func TestVerifyCacheHonoursExpiry(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clk := clock.NewManual(now)
	v, err := NewVerifier(Config{Secret: secret, Leeway: time.Nanosecond, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := Mint(secret, Principal{ActorID: "a", Partition: "p"}, time.Minute, now)
	for range 2 { // the second call is served from the cache
		if _, err := v.Verify(tok); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Minute)
	if _, err := v.Verify(tok); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("expired token accepted from the cache: %v", err)
	}
}
