package signedurl

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/syncnode/syncnode/ssp2"
)

var key = []byte("0123456789abcdef0123456789abcdef")

const seg = "sha256:0000000000000000000000000000000000000000000000000000000000000001"

func newSigner(t testing.TB, ttl time.Duration) *Signer {
	t.Helper()
	s, err := New(Config{Key: key, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func refusal(t *testing.T, err error, want Reason, code ssp2.Code) {
	t.Helper()
	var r *Refusal
	if !errors.As(err, &r) || r.Reason != want {
		t.Fatalf("err = %v, want a %s refusal", err, want)
	}
	if r.Code() != code || ssp2.CodeOf(r.SSP2()) != code {
		t.Fatalf("code = %s, want %s", r.Code(), code)
	}
}

func TestSignVerify(t *testing.T) {
	s := newSigner(t, 10*time.Minute)
	now := time.Unix(1_700_000_000, 500_000_000)
	tok, exp := s.Sign(Segment, "p1", seg, "digest", now)
	if want := (now.Unix() + 601) * 1000; exp != want {
		t.Fatalf("expiresAtMs = %d, want %d (rounded up to a second)", exp, want)
	}
	c, err := s.Verify(tok, Segment, seg, now)
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != seg || c.ScopeDigest != "digest" || c.Audience != s.Audience("p1") || c.ExpiresAtMs() != exp {
		t.Fatalf("claims = %+v", c)
	}
	payload, _ := base64.RawURLEncoding.DecodeString(tok[:strings.IndexByte(tok, '.')])
	if want := `{"v":1,"seg":"` + seg + `","sd":"digest","aud":"` + s.Audience("p1") + `","exp":1700000601}`; string(payload) != want {
		t.Fatalf("payload = %s, want %s", payload, want)
	}
	blob, _ := s.Sign(Blob, "p1", "sha256:ab", "ignored", now)
	if c, err := s.Verify(blob, Blob, "sha256:ab", now); err != nil || c.ScopeDigest != "" {
		t.Fatalf("blob token: %+v, %v", c, err)
	}
	_, err = s.Verify(blob, Segment, "sha256:ab", now)
	refusal(t, err, ReasonKind, ssp2.CodeForbidden)
	_, err = s.Verify(tok, Segment, seg[:len(seg)-1]+"2", now)
	refusal(t, err, ReasonID, ssp2.CodeForbidden)
}

func TestExpiry(t *testing.T) {
	s := newSigner(t, time.Minute)
	now := time.Unix(1_700_000_000, 0)
	tok, _ := s.Sign(Segment, "p1", seg, "d", now)
	// exp = now+60 s; accepted through exp + Skew, refused after.
	if _, err := s.Verify(tok, Segment, seg, now.Add(2*time.Minute)); err != nil {
		t.Fatalf("at exp+skew: %v", err)
	}
	_, err := s.Verify(tok, Segment, seg, now.Add(2*time.Minute+time.Millisecond))
	refusal(t, err, ReasonExpired, ssp2.CodeSegmentExpired)
	blob, _ := s.Sign(Blob, "p1", "b", "", now)
	_, err = s.Verify(blob, Blob, "b", now.Add(time.Hour))
	refusal(t, err, ReasonExpired, ssp2.CodeBlobForbidden)

	if err := s.SetTTL(0); err != nil {
		t.Fatal(err)
	}
	tok, exp := s.Sign(Segment, "p1", seg, "d", now)
	if exp != now.UnixMilli() {
		t.Fatalf("TTL 0: expiresAtMs = %d, want now", exp)
	}
	_, err = s.Verify(tok, Segment, seg, now.Add(Skew+time.Second))
	refusal(t, err, ReasonExpired, ssp2.CodeSegmentExpired)
	if s.SetTTL(-time.Second) == nil {
		t.Fatal("negative TTL accepted")
	}
}

func TestTampered(t *testing.T) {
	s := newSigner(t, time.Minute)
	now := time.Unix(1_700_000_000, 0)
	tok, _ := s.Sign(Segment, "p1", seg, "d", now)
	dot := strings.IndexByte(tok, '.')
	payload, _ := base64.RawURLEncoding.DecodeString(tok[:dot])
	forged := strings.Replace(string(payload), `"sd":"d"`, `"sd":"e"`, 1)
	_, err := s.Verify(base64.RawURLEncoding.EncodeToString([]byte(forged))+tok[dot:], Segment, seg, now)
	refusal(t, err, ReasonSignature, ssp2.CodeForbidden)

	other, _ := New(Config{Key: []byte(strings.Repeat("k", 32))})
	_, err = other.Verify(tok, Segment, seg, now)
	refusal(t, err, ReasonSignature, ssp2.CodeForbidden)
	again, _ := New(Config{Key: key})
	if other.Audience("p1") == s.Audience("p1") || s.Audience("p1") == s.Audience("p2") || again.Audience("p1") != s.Audience("p1") {
		t.Fatal("audience is not a keyed, per-partition, stable derivation")
	}
	for _, bad := range []string{"", ".", "abc", tok[:dot], tok + "x", tok[:dot] + ".%%", strings.Repeat("a", MaxTokenBytes+1)} {
		_, err := s.Verify(bad, Segment, seg, now)
		refusal(t, err, ReasonMalformed, ssp2.CodeForbidden)
	}
	// A correctly signed payload of another shape is malformed.
	for _, p := range []string{`{"v":2,"seg":"x","sd":"d","aud":"a","exp":1}`, `{"v":1,"seg":"x","aud":"a","exp":1}`,
		`{"v":1,"seg":"x","sd":"d","blob":"y","aud":"a","exp":1}`, `{"v":1,"seg":"x","sd":"d","aud":"a","exp":1,"z":0}`, `[]`} {
		forged := base64.RawURLEncoding.EncodeToString([]byte(p)) + "." + base64.RawURLEncoding.EncodeToString(s.mac([]byte(p)))
		_, err := s.Verify(forged, Segment, "x", now)
		refusal(t, err, ReasonMalformed, ssp2.CodeForbidden)
	}
}

// An upload grant carries its length, verifies only as an upload of its
// blob, and is refused as a download (and the reverse) with the blob
// code; shapes mixing kinds are malformed.
func TestUploadGrant(t *testing.T) {
	s := newSigner(t, time.Minute)
	now := time.Unix(1_700_000_000, 0)
	const blob = "sha256:00000000000000000000000000000000000000000000000000000000000000aa"
	tok, exp := s.SignUpload("p1", blob, 1234, now)
	c, err := s.Verify(tok, BlobUpload, blob, now)
	if err != nil || c.Kind != BlobUpload || c.ID != blob || c.ByteLength != 1234 || c.ExpiresAtMs() != exp || exp != now.Add(time.Minute).UnixMilli() {
		t.Fatalf("Verify = %+v, %v", c, err)
	}
	dot := strings.IndexByte(tok, '.')
	payload, _ := base64.RawURLEncoding.DecodeString(tok[:dot])
	if want := `{"v":1,"put":"` + blob + `","len":1234,"aud":"` + s.Audience("p1") + `","exp":1700000060}`; string(payload) != want {
		t.Fatalf("payload %s, want %s", payload, want)
	}
	_, err = s.Verify(tok, Blob, blob, now)
	refusal(t, err, ReasonKind, ssp2.CodeBlobForbidden)
	down, _ := s.Sign(Blob, "p1", blob, "", now)
	_, err = s.Verify(down, BlobUpload, blob, now)
	refusal(t, err, ReasonKind, ssp2.CodeBlobForbidden)
	_, err = s.Verify(tok, BlobUpload, seg, now)
	refusal(t, err, ReasonID, ssp2.CodeBlobForbidden)
	_, err = s.Verify(tok, BlobUpload, blob, now.Add(2*time.Minute+time.Second))
	refusal(t, err, ReasonExpired, ssp2.CodeBlobForbidden)
	for _, p := range []string{`{"v":1,"put":"x","aud":"a","exp":1}`, `{"v":1,"len":3,"aud":"a","exp":1}`, `{"v":1,"put":"x","len":-1,"aud":"a","exp":1}`,
		`{"v":1,"put":"x","len":3,"blob":"x","aud":"a","exp":1}`, `{"v":1,"put":"x","len":3,"sd":"d","aud":"a","exp":1}`, `{"v":1,"blob":"x","sd":"d","aud":"a","exp":1}`} {
		forged := base64.RawURLEncoding.EncodeToString([]byte(p)) + "." + base64.RawURLEncoding.EncodeToString(s.mac([]byte(p)))
		_, err := s.Verify(forged, BlobUpload, "x", now)
		refusal(t, err, ReasonMalformed, ssp2.CodeBlobForbidden)
	}
}

// The audience opens back to its partition under the same key only, and
// does not contain the partition id in the clear.
func TestAudiencePartition(t *testing.T) {
	s := newSigner(t, time.Minute)
	other, _ := New(Config{Key: []byte(strings.Repeat("k", 32))})
	for _, p := range []string{"p1", "", "acme/tenant:7", strings.Repeat("é", 300)} {
		aud := s.Audience(p)
		if got, ok := s.Partition(aud); !ok || got != p {
			t.Fatalf("Partition(Audience(%q)) = %q, %v", p, got, ok)
		}
		if _, ok := other.Partition(aud); ok {
			t.Fatalf("another key opened the audience of %q", p)
		}
		raw, _ := base64.RawURLEncoding.DecodeString(aud)
		if len(p) > 3 && strings.Contains(string(raw), p) {
			t.Fatalf("the audience of %q holds it in the clear", p)
		}
	}
	a := []byte(s.Audience("p1"))
	a[len(a)/2] ^= 1
	for _, bad := range []string{"", "!!", "AAAA", string(a)} {
		if _, ok := s.Partition(bad); ok {
			t.Fatalf("Partition(%q) opened", bad)
		}
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{{Key: key[:31]}, {Key: key, TTL: 16 * time.Minute}, {Key: key, TTL: -time.Second}, {Key: key, TTL: 1500 * time.Millisecond}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
	if s := newSigner(t, 0); s.TTL() != DefaultTTL {
		t.Fatalf("TTL = %v, want the default", s.TTL())
	}
}

// FuzzVerify: no input panics, every refusal is typed, and whatever
// verifies, as any kind, grants exactly the object asked for, unexpired.
func FuzzVerify(f *testing.F) {
	s := newSigner(f, time.Minute)
	now := time.Unix(1_700_000_000, 0)
	tok, _ := s.Sign(Segment, "p1", seg, "d", now)
	up, _ := s.SignUpload("p1", seg, 7, now)
	down, _ := s.Sign(Blob, "p1", seg, "", now)
	for _, t := range []string{tok, up, down} {
		f.Add(t)
		f.Add(t[:10])
	}
	f.Add("e30.AAAA")
	f.Fuzz(func(t *testing.T, token string) {
		for _, kind := range []Kind{Segment, Blob, BlobUpload} {
			c, err := s.Verify(token, kind, seg, now)
			if err != nil {
				var r *Refusal
				if !errors.As(err, &r) || r.Kind != kind {
					t.Fatalf("untyped error %v", err)
				}
				continue
			}
			if c.Kind != kind || c.ID != seg || now.Unix() > c.Exp+int64(Skew/time.Second) || c.ByteLength < 0 {
				t.Fatalf("verified claims %+v for another object or past expiry", c)
			}
		}
	})
}
