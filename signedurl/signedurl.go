// Package signedurl mints and verifies the native signed-URL tokens of
// SPEC.md §5.4 (segments) and §5.9.5 (blobs): the `st` query parameter
// that lets any HTTP client fetch one immutable object until the token
// expires, without host authentication.
//
// A token is base64url(payload) + "." + base64url(HMAC-SHA256(key,
// payload)), both without padding. The payload is a JSON object: for a
// segment {"v":1,"seg":id,"sd":scopeDigest,"aud":audience,"exp":seconds},
// for a blob {"v":1,"blob":id,"aud":audience,"exp":seconds}. The audience
// is a keyed derivation of the partition id (Audience), stable per
// partition and meaningless to clients, so no partition id reaches the
// wire. Verification checks the MAC first, then the shape, the kind, the
// object id and the expiry (with the spec's 60 s skew allowance); binding
// the scope digest and the audience to a stored grant is the caller's
// job, since only it knows the grants.
package signedurl

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/syncnode/syncnode/ssp2"
)

// Kind is what a token grants: a segment or a blob.
type Kind uint8

const (
	Segment Kind = iota + 1
	Blob
)

func (k Kind) String() string {
	switch k {
	case Segment:
		return "segment"
	case Blob:
		return "blob"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Param is the query parameter that carries a token.
const Param = "st"

// Skew is how far past its exp a token is still accepted (SPEC.md §5.4:
// at most 60 s, for clock error between hosts).
const Skew = 60 * time.Second

// MinKeyBytes is the shortest accepted signing key.
const MinKeyBytes = 32

// MaxTokenBytes bounds a token before it is decoded: a segment token is
// about 300 bytes, so anything near this is not one of ours.
const MaxTokenBytes = 2048

// Claims is a token's payload.
type Claims struct {
	Kind Kind
	// ID is the segment or blob id the token grants.
	ID string
	// ScopeDigest is the digest of the effective scopes authorized at
	// issuance (segments only).
	ScopeDigest string
	// Audience is the partition's audience (Signer.Audience).
	Audience string
	// Exp is the expiry in unix seconds.
	Exp int64
}

// ExpiresAtMs is the expiry in milliseconds, for urlExpiresAtMs.
func (c Claims) ExpiresAtMs() int64 { return c.Exp * 1000 }

// Reason says why a token was refused.
type Reason string

const (
	ReasonMalformed Reason = "malformed" // not a token of this format
	ReasonSignature Reason = "signature" // the MAC does not match: tampered or another key
	ReasonKind      Reason = "kind"      // a segment token for a blob or the reverse
	ReasonID        Reason = "id"        // minted for another object
	ReasonExpired   Reason = "expired"   // past exp plus the skew
)

// Refusal is a refused token. Code is the SSP2 code the download answers
// with: an expired segment token is sync.segment_expired (re-pulling mints
// a fresh one), every other segment refusal sync.forbidden; a blob refusal
// is blob.forbidden.
type Refusal struct {
	Kind   Kind
	Reason Reason
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("signed url: %s token refused: %s", r.Kind, r.Reason)
}

// Code is the SSP2 error code of the refusal.
func (r *Refusal) Code() ssp2.Code {
	switch {
	case r.Kind == Blob:
		return ssp2.CodeBlobForbidden
	case r.Reason == ReasonExpired:
		return ssp2.CodeSegmentExpired
	}
	return ssp2.CodeForbidden
}

// SSP2 returns the refusal as an SSP2 error carrying its code.
func (r *Refusal) SSP2() error {
	return ssp2.Errorf(r.Code(), "signed url refused (%s)", r.Reason)
}

// Config configures a Signer.
type Config struct {
	// Key is the HMAC key, at least MinKeyBytes long. Every node serving
	// one deployment must share it.
	Key []byte
	// TTL is how long a minted URL stays valid (default DefaultTTL; the
	// spec asks for at most 15 minutes, MaxTTL). Zero means the default;
	// a Signer's SetTTL may set zero, for tokens that expire at issuance.
	TTL time.Duration
}

const (
	DefaultTTL = 5 * time.Minute
	MaxTTL     = 15 * time.Minute
)

// WithDefaults returns c with a zero TTL replaced by DefaultTTL.
func (c Config) WithDefaults() Config {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	return c
}

// Validate reports every bad setting.
func (c Config) Validate() error {
	var errs []error
	if len(c.Key) < MinKeyBytes {
		errs = append(errs, fmt.Errorf("signed urls config: Key has %d bytes, at least %d are required", len(c.Key), MinKeyBytes))
	}
	if c.TTL < 0 || c.TTL > MaxTTL {
		errs = append(errs, fmt.Errorf("signed urls config: TTL %v must be between 0 and %v (SPEC.md §5.4)", c.TTL, MaxTTL))
	}
	if c.TTL%time.Second != 0 {
		errs = append(errs, fmt.Errorf("signed urls config: TTL %v must be whole seconds (exp is in seconds)", c.TTL))
	}
	return errors.Join(errs...)
}

// Signer mints and verifies tokens under one key. It is safe for
// concurrent use; SetTTL changes the TTL of tokens minted afterwards.
type Signer struct {
	key []byte
	ttl atomic.Int64 // nanoseconds
}

// New validates cfg and returns a Signer.
func New(cfg Config) (*Signer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Signer{key: bytes.Clone(cfg.Key)}
	s.ttl.Store(int64(cfg.TTL))
	return s, nil
}

// TTL is the lifetime of the tokens minted now.
func (s *Signer) TTL() time.Duration { return time.Duration(s.ttl.Load()) }

// SetTTL sets the lifetime of tokens minted from now on; 0 mints tokens
// that expire at issuance (still accepted within the skew). A negative
// TTL is an error.
func (s *Signer) SetTTL(ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("signed urls: TTL %v must not be negative", ttl)
	}
	s.ttl.Store(int64(ttl))
	return nil
}

// Audience is the partition's audience: a keyed derivation, stable per
// partition, from which no partition id can be recovered.
func (s *Signer) Audience(partition string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("syncnode signed-url audience\x00"))
	m.Write([]byte(partition))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:18])
}

// Sign mints a token for one object of partition, expiring TTL after now
// (rounded up to a whole second). scopeDigest is the effective scopes'
// digest for a segment and ignored for a blob. It returns the token and
// its expiry in milliseconds.
func (s *Signer) Sign(kind Kind, partition, id, scopeDigest string, now time.Time) (token string, expiresAtMs int64) {
	exp := now.Add(s.TTL())
	secs := exp.Unix()
	if exp.Nanosecond() != 0 {
		secs++
	}
	c := Claims{Kind: kind, ID: id, ScopeDigest: scopeDigest, Audience: s.Audience(partition), Exp: secs}
	payload := c.appendJSON(nil)
	out := make([]byte, 0, base64.RawURLEncoding.EncodedLen(len(payload))+1+43)
	out = base64.RawURLEncoding.AppendEncode(out, payload)
	out = append(out, '.')
	out = base64.RawURLEncoding.AppendEncode(out, s.mac(payload))
	return string(out), c.ExpiresAtMs()
}

// Verify checks a token for the object (kind, id) at now: the MAC, the
// payload's shape, its kind and id, and its expiry with Skew. A refused
// token is a *Refusal. The caller still binds Claims.Audience and
// Claims.ScopeDigest to a stored grant.
func (s *Signer) Verify(token string, kind Kind, id string, now time.Time) (Claims, error) {
	refuse := func(r Reason) (Claims, error) { return Claims{}, &Refusal{Kind: kind, Reason: r} }
	if len(token) > MaxTokenBytes {
		return refuse(ReasonMalformed)
	}
	dot := bytes.IndexByte([]byte(token), '.')
	if dot < 0 {
		return refuse(ReasonMalformed)
	}
	payload, err := base64.RawURLEncoding.DecodeString(token[:dot])
	if err != nil {
		return refuse(ReasonMalformed)
	}
	sig, err := base64.RawURLEncoding.DecodeString(token[dot+1:])
	if err != nil || len(sig) != sha256.Size {
		return refuse(ReasonMalformed)
	}
	if !hmac.Equal(sig, s.mac(payload)) {
		return refuse(ReasonSignature)
	}
	c, ok := parseClaims(payload)
	if !ok {
		return refuse(ReasonMalformed)
	}
	if c.Kind != kind {
		return refuse(ReasonKind)
	}
	if c.ID != id {
		return refuse(ReasonID)
	}
	if now.Unix() > c.Exp+int64(Skew/time.Second) || (now.Unix() == c.Exp+int64(Skew/time.Second) && now.Nanosecond() > 0) {
		return refuse(ReasonExpired)
	}
	return c, nil
}

func (s *Signer) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write(payload)
	return m.Sum(nil)
}

// appendJSON renders the payload in the spec's key order.
func (c Claims) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"v":1,`...)
	if c.Kind == Blob {
		dst = append(dst, `"blob":`...)
		dst = appendString(dst, c.ID)
	} else {
		dst = append(dst, `"seg":`...)
		dst = appendString(dst, c.ID)
		dst = append(dst, `,"sd":`...)
		dst = appendString(dst, c.ScopeDigest)
	}
	dst = append(dst, `,"aud":`...)
	dst = appendString(dst, c.Audience)
	dst = append(dst, `,"exp":`...)
	dst = strconv.AppendInt(dst, c.Exp, 10)
	return append(dst, '}')
}

// appendString appends s as a JSON string.
func appendString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}

// parseClaims reads a payload this package minted: exactly the keys of
// one kind, v = 1, string ids, an integer exp.
func parseClaims(payload []byte) (Claims, bool) {
	var raw struct {
		V    *int    `json:"v"`
		Seg  *string `json:"seg"`
		SD   *string `json:"sd"`
		Blob *string `json:"blob"`
		Aud  *string `json:"aud"`
		Exp  *int64  `json:"exp"`
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil || dec.More() {
		return Claims{}, false
	}
	if raw.V == nil || *raw.V != 1 || raw.Aud == nil || raw.Exp == nil {
		return Claims{}, false
	}
	c := Claims{Audience: *raw.Aud, Exp: *raw.Exp}
	switch {
	case raw.Seg != nil && raw.SD != nil && raw.Blob == nil:
		c.Kind, c.ID, c.ScopeDigest = Segment, *raw.Seg, *raw.SD
	case raw.Blob != nil && raw.Seg == nil && raw.SD == nil:
		c.Kind, c.ID = Blob, *raw.Blob
	default:
		return Claims{}, false
	}
	return c, true
}
