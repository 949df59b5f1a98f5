// Package signedurl mints and verifies the native signed-URL tokens of
// SPEC.md §5.4 (segments) and §5.9.5 (blobs): the `st` query parameter
// that lets any HTTP client fetch one immutable object until the token
// expires, without host authentication.
//
// A token is base64url(payload) + "." + base64url(HMAC-SHA256(key,
// payload)), both without padding. The payload is a JSON object: for a
// segment {"v":1,"seg":id,"sd":scopeDigest,"aud":audience,"exp":seconds},
// for a blob download {"v":1,"blob":id,"aud":audience,"exp":seconds}, for
// a presigned blob upload (§5.9.3; the spec leaves its native form to the
// host) {"v":1,"put":id,"len":byteLength,"aud":audience,"exp":seconds}.
// The audience is the partition id sealed under a key derived from the
// signing key (Audience): deterministic, so stable per partition, and
// opaque to clients, so no partition id reaches the wire; the verifier
// opens it (Partition) to find the partition a grant was minted in, which
// an upload grant needs because nothing of the partition exists yet.
// Verification checks the MAC first, then the shape, the kind, the object
// id and the expiry (with the spec's 60 s skew allowance); binding the
// scope digest and the audience to a stored grant is the caller's job,
// since only it knows the grants.
package signedurl

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
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
	// Blob is a blob download (SPEC.md §5.9.5).
	Blob
	// BlobUpload is a presigned blob upload (SPEC.md §5.9.3): one PUT of
	// at most ByteLength bytes to the blob's address.
	BlobUpload
)

func (k Kind) String() string {
	switch k {
	case Segment:
		return "segment"
	case Blob:
		return "blob"
	case BlobUpload:
		return "blob upload"
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
	// ByteLength is the size an upload grant admits (BlobUpload only).
	ByteLength int64
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
// is blob.forbidden, a download's or an upload's.
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
	case r.Kind == Blob || r.Kind == BlobUpload:
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
	aud cipher.AEAD  // seals partition ids into audiences
	ttl atomic.Int64 // nanoseconds
}

// New validates cfg and returns a Signer.
func New(cfg Config) (*Signer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Signer{key: bytes.Clone(cfg.Key)}
	block, _ := aes.NewCipher(s.derive("syncnode signed-url audience key")) // a 32-byte key always makes a cipher
	s.aud, _ = cipher.NewGCM(block)
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

// Audience is the partition's audience: the partition id sealed (AES-GCM
// under a key derived from the signing key) with a synthetic nonce, the
// keyed hash of the id, so one partition always gets one audience and
// nobody without the key can read the id out of it.
func (s *Signer) Audience(partition string) string {
	nonce := s.audNonce(partition)
	out := make([]byte, 0, len(nonce)+len(partition)+s.aud.Overhead())
	out = s.aud.Seal(append(out, nonce...), nonce, []byte(partition), nil)
	return base64.RawURLEncoding.EncodeToString(out)
}

// Partition opens an audience this signer minted; ok=false for anything
// else. A token's audience is covered by its MAC, so a verified token's
// audience always opens.
func (s *Signer) Partition(audience string) (partition string, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(audience)
	ns := s.aud.NonceSize()
	if err != nil || len(b) < ns+s.aud.Overhead() {
		return "", false
	}
	p, err := s.aud.Open(nil, b[:ns], b[ns:], nil)
	if err != nil || !hmac.Equal(b[:ns], s.audNonce(string(p))) {
		return "", false
	}
	return string(p), true
}

// audNonce is the synthetic nonce of a partition's audience.
func (s *Signer) audNonce(partition string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("syncnode signed-url audience\x00"))
	m.Write([]byte(partition))
	return m.Sum(nil)[:s.aud.NonceSize()]
}

// derive is a 32-byte key for one purpose, derived from the signing key.
func (s *Signer) derive(purpose string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// Sign mints a token for one object of partition, expiring TTL after now
// (rounded up to a whole second). scopeDigest is the effective scopes'
// digest for a segment and ignored for a blob. It returns the token and
// its expiry in milliseconds. Upload grants are minted by SignUpload.
func (s *Signer) Sign(kind Kind, partition, id, scopeDigest string, now time.Time) (token string, expiresAtMs int64) {
	if kind != Segment {
		scopeDigest = ""
	}
	return s.sign(Claims{Kind: kind, ID: id, ScopeDigest: scopeDigest}, partition, now)
}

// SignUpload mints a presigned-upload token for one PUT of at most
// byteLength bytes of blob id into partition.
func (s *Signer) SignUpload(partition, id string, byteLength int64, now time.Time) (token string, expiresAtMs int64) {
	return s.sign(Claims{Kind: BlobUpload, ID: id, ByteLength: byteLength}, partition, now)
}

// sign is the one signing rule: the claims with the partition's audience
// and the expiry, MACed.
func (s *Signer) sign(c Claims, partition string, now time.Time) (string, int64) {
	exp := now.Add(s.TTL())
	c.Exp = exp.Unix()
	if exp.Nanosecond() != 0 {
		c.Exp++
	}
	c.Audience = s.Audience(partition)
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
	switch c.Kind {
	case Blob:
		dst = append(dst, `"blob":`...)
		dst = appendString(dst, c.ID)
	case BlobUpload:
		dst = append(dst, `"put":`...)
		dst = appendString(dst, c.ID)
		dst = append(dst, `,"len":`...)
		dst = strconv.AppendInt(dst, c.ByteLength, 10)
	default:
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
		Put  *string `json:"put"`
		Len  *int64  `json:"len"`
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
	seg, blob, put := raw.Seg != nil || raw.SD != nil, raw.Blob != nil, raw.Put != nil || raw.Len != nil
	switch {
	case seg && !blob && !put && raw.Seg != nil && raw.SD != nil:
		c.Kind, c.ID, c.ScopeDigest = Segment, *raw.Seg, *raw.SD
	case blob && !seg && !put:
		c.Kind, c.ID = Blob, *raw.Blob
	case put && !seg && !blob && raw.Put != nil && raw.Len != nil && *raw.Len >= 0:
		c.Kind, c.ID, c.ByteLength = BlobUpload, *raw.Put, *raw.Len
	default:
		return Claims{}, false
	}
	return c, true
}
