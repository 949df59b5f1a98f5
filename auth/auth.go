// Package auth verifies the bearer tokens that name a request's actor,
// partition and allowed scopes.
//
// A token is a JWT whose "sub" claim is the actor id, whose "partition"
// claim is the partition, and whose "scopes" claim maps scope variables to
// the values the actor may read and write: {"project_id": ["p1", "p2"]},
// with "*" granting any value (a bare "*" string is accepted as ["*"]).
// Tokens are verified with a shared HS256 secret or with public keys
// (RS256/384/512, ES256/384/512, EdDSA); "exp" is required, "nbf", "iss"
// and "aud" are checked when configured.
package auth

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/internal/ids"
)

// Principal is what a verified token says about its bearer.
type Principal struct {
	ActorID   string
	Partition string
	// Scopes is the allowed-scope grant: variable → values, "*" = any.
	Scopes map[string][]string
}

// ErrUnauthenticated is returned (wrapped) for a missing, malformed,
// expired or forged token. Its cause is for logs only.
var ErrUnauthenticated = errors.New("unauthenticated")

// Config selects how tokens are verified.
type Config struct {
	// Secret verifies HS256 tokens; at least 32 bytes.
	Secret []byte
	// PublicKeys verify asymmetric tokens (RSA, ECDSA or Ed25519).
	PublicKeys []crypto.PublicKey
	Issuer     string // required "iss" when set
	Audience   string // required "aud" when set
	// Leeway tolerates clock skew on exp/nbf (default 30 s).
	Leeway time.Duration
	// Clock is the verifier's clock (default clock.System).
	Clock clock.Clock
}

// Verifier checks bearer tokens. Verified tokens are remembered until
// they expire, so a client sending the same token every round pays for
// the signature check once.
type Verifier struct {
	cfg    Config
	parser *jwt.Parser

	mu    sync.Mutex
	cache map[string]verified
}

// verified is a remembered verification.
type verified struct {
	p   Principal
	exp time.Time
}

// maxCachedTokens bounds the verification cache; when full it is cleared.
const maxCachedTokens = 16384

// NewVerifier validates cfg and returns a Verifier.
func NewVerifier(cfg Config) (*Verifier, error) {
	if len(cfg.Secret) == 0 && len(cfg.PublicKeys) == 0 {
		return nil, errors.New("auth: configure a secret or at least one public key")
	}
	if len(cfg.Secret) > 0 && len(cfg.Secret) < 32 {
		return nil, errors.New("auth: the secret must be at least 32 bytes")
	}
	if cfg.Leeway == 0 {
		cfg.Leeway = 30 * time.Second
	}
	cfg.Clock = clock.Or(cfg.Clock)
	var methods []string
	if len(cfg.Secret) > 0 {
		methods = append(methods, "HS256")
	}
	for _, k := range cfg.PublicKeys {
		switch k.(type) {
		case ed25519.PublicKey:
			methods = append(methods, "EdDSA")
		default:
			if _, ok := k.(interface{ Equal(crypto.PublicKey) bool }); !ok {
				return nil, fmt.Errorf("auth: unsupported public key type %T", k)
			}
			methods = append(methods, "RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
		}
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(methods),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(cfg.Leeway),
		jwt.WithTimeFunc(cfg.Clock.Now),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	return &Verifier{cfg: cfg, parser: jwt.NewParser(opts...), cache: make(map[string]verified)}, nil
}

// claims is the token body syncnode reads.
type claims struct {
	jwt.RegisteredClaims
	Partition string      `json:"partition"`
	Scopes    scopesClaim `json:"scopes"`
}

// scopesClaim accepts {"var": ["a","b"]}, {"var": "a"} and {"var": "*"}.
type scopesClaim map[string][]string

func (s *scopesClaim) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("scopes claim must be an object: %w", err)
	}
	out := make(scopesClaim, len(raw))
	for k, v := range raw {
		var list []string
		if err := json.Unmarshal(v, &list); err != nil {
			var one string
			if err := json.Unmarshal(v, &one); err != nil {
				return fmt.Errorf("scopes claim %q must be a string or a list of strings", k)
			}
			list = []string{one}
		}
		out[k] = list
	}
	*s = out
	return nil
}

// Verify parses and verifies a raw token (without the "Bearer " prefix).
func (v *Verifier) Verify(token string) (Principal, error) {
	now := v.cfg.Clock.Now()
	v.mu.Lock()
	hit, ok := v.cache[token]
	v.mu.Unlock()
	if ok && now.Before(hit.exp) {
		return hit.p, nil
	}
	var c claims
	_, err := v.parser.ParseWithClaims(token, &c, v.key)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	if c.Subject == "" {
		return Principal{}, fmt.Errorf("%w: token has no sub (actor) claim", ErrUnauthenticated)
	}
	if c.Partition == "" {
		return Principal{}, fmt.Errorf("%w: token has no partition claim", ErrUnauthenticated)
	}
	p := Principal{ActorID: c.Subject, Partition: c.Partition, Scopes: c.Scopes}
	if err := p.check(); err != nil {
		return Principal{}, err
	}
	v.mu.Lock()
	if len(v.cache) >= maxCachedTokens {
		clear(v.cache)
	}
	v.cache[token] = verified{p: p, exp: c.ExpiresAt.Time}
	v.mu.Unlock()
	return p, nil
}

// check refuses ids the stores cannot hold or the bus cannot carry (an
// error matching ids.ErrInvalid, not ErrUnauthenticated: the token is
// genuine, its issuer named something unusable).
func (p Principal) check() error {
	if err := ids.Check("the token's partition claim", p.Partition); err != nil {
		return err
	}
	return ids.Check("the token's sub (actor) claim", p.ActorID)
}

// VerifyHeader verifies an Authorization header value ("Bearer <token>").
func (v *Verifier) VerifyHeader(h string) (Principal, error) {
	tok, err := BearerToken(h)
	if err != nil {
		return Principal{}, err
	}
	return v.Verify(tok)
}

// BearerToken returns the token of an Authorization header value
// ("Bearer <token>", the scheme case-insensitive), or ErrUnauthenticated.
func BearerToken(h string) (string, error) {
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", fmt.Errorf("%w: missing bearer token", ErrUnauthenticated)
	}
	tok := strings.TrimSpace(h[len(prefix):])
	if tok == "" {
		return "", fmt.Errorf("%w: missing bearer token", ErrUnauthenticated)
	}
	return tok, nil
}

func (v *Verifier) key(t *jwt.Token) (any, error) {
	if _, ok := t.Method.(*jwt.SigningMethodHMAC); ok {
		return v.cfg.Secret, nil
	}
	// Try every configured public key of the token's family; the parser
	// restricts methods to the configured families already.
	var keys []jwt.VerificationKey
	for _, k := range v.cfg.PublicKeys {
		keys = append(keys, k)
	}
	return jwt.VerificationKeySet{Keys: keys}, nil
}

// Mint signs an HS256 token for p that expires after ttl; ids that
// Verify would refuse are refused here already. It is what
// `syncnode client token` and development auth use.
func Mint(secret []byte, p Principal, ttl time.Duration, now time.Time) (string, error) {
	if err := p.check(); err != nil {
		return "", fmt.Errorf("mint: %w", err)
	}
	c := claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   p.ActorID,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
		Partition: p.Partition,
		Scopes:    p.Scopes,
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}

// LoadPublicKey reads a PEM public key (PKIX) from path.
func LoadPublicKey(path string) (crypto.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read public key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("public key %s: no PEM block", path)
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("public key %s: %w", path, err)
	}
	return k, nil
}

// DevSecret returns the development signing secret kept in dataDir,
// generating it (hex, 32 random bytes, mode 0600) on first use. created
// reports whether it was generated now.
func DevSecret(dataDir string) (secret []byte, created bool, err error) {
	path := filepath.Join(dataDir, "dev-jwt-secret")
	b, err := os.ReadFile(path)
	if err == nil {
		s := strings.TrimSpace(string(b))
		if len(s) < 32 {
			return nil, false, fmt.Errorf("dev secret %s is shorter than 32 bytes", path)
		}
		return []byte(s), false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("read dev secret: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, false, fmt.Errorf("generate dev secret: %w", err)
	}
	s := hex.EncodeToString(raw)
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, false, fmt.Errorf("create data dir: %w", err)
	}
	if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		return nil, false, fmt.Errorf("write dev secret: %w", err)
	}
	return []byte(s), true, nil
}
