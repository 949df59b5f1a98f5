package bus

import (
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/syncnode/syncnode/internal/ids"
)

// Partition id limits.
const (
	// MaxPartitionIDBytes is the hard cap on a partition id: longer ids
	// are refused (ErrPartitionTooLong) rather than hashed, because an id
	// this long is a bug or an attack, not a tenant name.
	MaxPartitionIDBytes = ids.MaxBytes
	// MaxTokenLen is the longest escaped token used as is; a longer one is
	// replaced by its hashed form (HashedTokenLen bytes).
	MaxTokenLen = 64
	// HashedTokenLen is len("h_") + 26 base32 characters (130 bits of
	// SHA-256).
	HashedTokenLen = 2 + 26
)

// hashedPrefix starts every hashed token. The escaper never produces it
// for an id: an id starting with "h_" has its 'h' escaped ("=68_…").
const hashedPrefix = "h_"

var (
	// ErrInvalidPartition matches every *PartitionIDError.
	ErrInvalidPartition = errors.New("invalid partition id")
	// ErrPartitionTooLong is returned for ids longer than
	// MaxPartitionIDBytes.
	ErrPartitionTooLong = errors.New("partition id too long")
	// ErrPartitionNotUTF8 is returned for ids that are not valid UTF-8.
	ErrPartitionNotUTF8 = errors.New("partition id is not valid UTF-8")
	// ErrInvalidToken is returned by ParseToken for a string the escaper
	// cannot have produced.
	ErrInvalidToken = errors.New("invalid partition token")
	// ErrHashedToken is returned by ParseToken for a hashed token: the raw
	// id travels in the Sync-Partition header instead.
	ErrHashedToken = errors.New("hashed partition token is not reversible")
)

// PartitionIDError is a partition id that cannot be used on the bus. It
// matches ErrInvalidPartition and its Kind (ErrPartitionTooLong or
// ErrPartitionNotUTF8) with errors.Is.
type PartitionIDError struct {
	Kind error
	Len  int // the id's length in bytes
}

func (e *PartitionIDError) Error() string {
	switch e.Kind {
	case ErrPartitionTooLong:
		return fmt.Sprintf("invalid partition id: %d bytes, the limit is %d", e.Len, MaxPartitionIDBytes)
	default:
		return fmt.Sprintf("invalid partition id: %v", e.Kind)
	}
}

// Is matches ErrInvalidPartition and the error's Kind.
func (e *PartitionIDError) Is(target error) bool {
	return target == ErrInvalidPartition || target == e.Kind
}

// Partition is a partition id with its subject token. The zero value is
// not valid; build one with NewPartition or PartitionFromToken.
type Partition struct {
	id      string
	token   string
	escaped string // full escaped form; equals token unless hashed
}

// NewPartition validates id and computes its token.
func NewPartition(id string) (Partition, error) {
	if err := validateID(id); err != nil {
		return Partition{}, err
	}
	esc := escape(id)
	p := Partition{id: id, token: esc, escaped: esc}
	if len(esc) > MaxTokenLen {
		p.token = hashToken(id)
	}
	return p, nil
}

// ID is the raw partition id.
func (p Partition) ID() string { return p.id }

// Token is the id escaped into one subject token (and KV key segment):
// at most MaxTokenLen bytes of [A-Za-z0-9_=-].
func (p Partition) Token() string { return p.token }

// Hashed reports whether the token is the hashed form of a long id.
func (p Partition) Hashed() bool { return p.token != p.escaped }

// Escaped is the full reversible escaped form, which the Sync-Partition
// header carries for hashed tokens. It equals Token for short ids.
func (p Partition) Escaped() string { return p.escaped }

// String returns the id.
func (p Partition) String() string { return p.id }

// Token escapes a partition id into its subject token.
func Token(id string) (string, error) {
	p, err := NewPartition(id)
	if err != nil {
		return "", err
	}
	return p.token, nil
}

func validateID(id string) error {
	if len(id) > MaxPartitionIDBytes {
		return &PartitionIDError{Kind: ErrPartitionTooLong, Len: len(id)}
	}
	if !utf8.ValidString(id) {
		return &PartitionIDError{Kind: ErrPartitionNotUTF8, Len: len(id)}
	}
	return nil
}

const upperHex = "0123456789ABCDEF"

func keep(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// escape keeps [A-Za-z0-9_-] and writes every other byte (and '=' itself)
// as =XX, uppercase hex. The empty id is "=". A leading "h_" has its 'h'
// escaped so that no escaped id can collide with a hashed token.
func escape(id string) string {
	if id == "" {
		return "="
	}
	n := 0
	for i := 0; i < len(id); i++ {
		if keep(id[i]) {
			n++
		} else {
			n += 3
		}
	}
	leadH := len(id) >= 2 && id[:2] == hashedPrefix
	if leadH {
		n += 2
	}
	if n == len(id) {
		return id
	}
	b := make([]byte, 0, n)
	for i := 0; i < len(id); i++ {
		c := id[i]
		if keep(c) && !(i == 0 && leadH) {
			b = append(b, c)
			continue
		}
		b = append(b, '=', upperHex[c>>4], upperHex[c&0xF])
	}
	return string(b)
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func hashToken(id string) string {
	sum := sha256.Sum256([]byte(id))
	enc := b32.EncodeToString(sum[:])
	return hashedPrefix + enc[:HashedTokenLen-len(hashedPrefix)]
}

// ParseToken reverses Token (and Partition.Escaped). It refuses hashed
// tokens (ErrHashedToken) and anything the escaper cannot have produced
// (ErrInvalidToken), so each token names exactly one id.
func ParseToken(tok string) (string, error) {
	if tok == "=" {
		return "", nil
	}
	if tok == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidToken)
	}
	if len(tok) >= 2 && tok[:2] == hashedPrefix {
		return "", ErrHashedToken
	}
	b := make([]byte, 0, len(tok))
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if keep(c) {
			b = append(b, c)
			continue
		}
		if c != '=' || i+2 >= len(tok) {
			return "", fmt.Errorf("%w: byte %d (%q)", ErrInvalidToken, i, c)
		}
		hi, lo := unhex(tok[i+1]), unhex(tok[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("%w: bad escape at byte %d", ErrInvalidToken, i)
		}
		d := byte(hi<<4 | lo)
		// Canonical form only: a kept byte is never escaped, except the
		// 'h' of a leading "h_".
		if keep(d) && !(i == 0 && d == 'h' && len(tok) > 3 && tok[3] == '_') {
			return "", fmt.Errorf("%w: needless escape at byte %d", ErrInvalidToken, i)
		}
		b = append(b, d)
		i += 2
	}
	id := string(b)
	if err := validateID(id); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	return id, nil
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// PartitionFromToken rebuilds a Partition from a subject token and, for a
// hashed token, the Sync-Partition header value (the full escaped id). It
// checks that the two agree.
func PartitionFromToken(tok, header string) (Partition, error) {
	if len(tok) >= 2 && tok[:2] == hashedPrefix {
		if header == "" {
			return Partition{}, fmt.Errorf("%w: hashed token %s without a %s header", ErrInvalidToken, tok, HeaderSyncPartition)
		}
		id, err := ParseToken(header)
		if err != nil {
			return Partition{}, err
		}
		p, err := NewPartition(id)
		if err != nil {
			return Partition{}, err
		}
		if p.token != tok {
			return Partition{}, fmt.Errorf("%w: %s header does not hash to %s", ErrInvalidToken, HeaderSyncPartition, tok)
		}
		return p, nil
	}
	if len(tok) > MaxTokenLen {
		return Partition{}, fmt.Errorf("%w: %d bytes", ErrInvalidToken, len(tok))
	}
	id, err := ParseToken(tok)
	if err != nil {
		return Partition{}, err
	}
	return Partition{id: id, token: tok, escaped: tok}, nil
}
