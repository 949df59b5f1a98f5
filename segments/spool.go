package segments

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
)

// Spool collects one segment's bytes as a build writes them: it hashes
// them on the way in (the content address needs no second pass) and keeps
// them in memory up to a threshold, past which it moves them to a
// temporary file, so building a large page costs bounded memory. A Spool
// is used by one goroutine; Close removes the file.
type Spool struct {
	dir   string
	limit int
	h     hash.Hash
	buf   []byte
	f     *os.File
	n     int64
	sum   []byte // set once the spool is sealed
	err   error
}

// NewSpool returns an empty spool that spills to a file in dir (""
// means os.TempDir()) once it holds more than memLimit bytes.
func NewSpool(dir string, memLimit int) *Spool {
	return &Spool{dir: dir, limit: memLimit, h: sha256.New()}
}

// spoolOf wraps bytes already in memory.
func spoolOf(data []byte) *Spool {
	sum := sha256.Sum256(data)
	return &Spool{buf: data, n: int64(len(data)), sum: sum[:], limit: len(data)}
}

// Write appends p. It fails once the spool is sealed (its address read).
func (s *Spool) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.sum != nil {
		return 0, errors.New("spool: write after the address was taken")
	}
	if s.f == nil && len(s.buf)+len(p) > s.limit {
		if err := s.spill(); err != nil {
			s.err = err
			return 0, err
		}
	}
	if s.f != nil {
		n, err := s.f.Write(p)
		s.h.Write(p[:n])
		s.n += int64(n)
		if err != nil {
			s.err = fmt.Errorf("spool: %w", err)
			return n, s.err
		}
		return n, nil
	}
	s.buf = append(s.buf, p...)
	s.h.Write(p)
	s.n += int64(len(p))
	return len(p), nil
}

func (s *Spool) spill() error {
	f, err := os.CreateTemp(s.dir, "segment-*.ssg2")
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	s.f = f
	if _, err := f.Write(s.buf); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	s.buf = nil
	return nil
}

// seal ends writing and fixes the digest.
func (s *Spool) seal() []byte {
	if s.sum == nil {
		s.sum = s.h.Sum(nil)
	}
	return s.sum
}

// ID is the content address, "sha256:<hex>"; it seals the spool.
func (s *Spool) ID() string { return idPrefix + hex.EncodeToString(s.seal()) }

// hexDigest is the address's 64 hex digits; it seals the spool.
func (s *Spool) hexDigest() string { return hex.EncodeToString(s.seal()) }

// objectDigest is the Object Store's form of the digest; it seals the
// spool.
func (s *Spool) objectDigest() string {
	return objectDigestPrefix + base64.URLEncoding.EncodeToString(s.seal())
}

// Size is the number of bytes written.
func (s *Spool) Size() int64 { return s.n }

// Spilled reports whether the bytes moved to a file.
func (s *Spool) Spilled() bool { return s.f != nil }

// Bytes returns the bytes when they are in memory (ok=false once
// spilled). The slice stays owned by the spool.
func (s *Spool) Bytes() (b []byte, ok bool) {
	if s.f != nil {
		return nil, false
	}
	return s.buf, true
}

// Reader returns a reader over the bytes from the start; each call
// starts over. It seals the spool.
func (s *Spool) Reader() (io.Reader, error) {
	if s.err != nil {
		return nil, s.err
	}
	s.seal()
	if s.f == nil {
		return bytes.NewReader(s.buf), nil
	}
	return io.NewSectionReader(s.f, 0, s.n), nil
}

// Close removes the spill file, if any. It is idempotent.
func (s *Spool) Close() error {
	s.buf = nil
	s.err = errors.New("spool: closed")
	if s.f == nil {
		return nil
	}
	f := s.f
	s.f = nil
	return errors.Join(f.Close(), os.Remove(f.Name()))
}
