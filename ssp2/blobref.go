package ssp2

// validBlobRef reports whether b is a canonical BlobRef document (§5.9.1):
//
//	{"blobId":"sha256:<64 lowercase hex>","byteLength":<int ≥ 0>[,"mediaType":<str>][,"name":<str>]}
//
// in exactly that key order, without whitespace, with byteLength a plain
// non-negative decimal within ±(2^53−1) and the optional strings escaped
// as JSON.stringify escapes them, so the text is the one serialization of
// its value and codec and rendering can never disagree about it.
func validBlobRef(b []byte) bool {
	const head = `{"blobId":"sha256:`
	if len(b) < len(head) || string(b[:len(head)]) != head {
		return false
	}
	i := len(head)
	if len(b)-i < 64 {
		return false
	}
	for _, c := range b[i : i+64] {
		if !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
			return false
		}
	}
	i += 64
	const length = `","byteLength":`
	if len(b)-i < len(length) || string(b[i:i+len(length)]) != length {
		return false
	}
	i += len(length)
	// 0 | [1-9][0-9]*, at most 16 digits and ≤ 2^53−1.
	start := i
	var n int64
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if i-start >= 16 {
			return false
		}
		n = n*10 + int64(b[i]-'0')
		i++
	}
	if i == start || (b[start] == '0' && i-start > 1) || n > MaxSafeInt {
		return false
	}
	for _, key := range [...]string{`,"mediaType":`, `,"name":`} {
		if len(b)-i >= len(key) && string(b[i:i+len(key)]) == key {
			if i = scanCanonicalString(b, i+len(key)); i < 0 {
				return false
			}
		}
	}
	return i == len(b)-1 && b[i] == '}'
}

// scanCanonicalString scans a string token at b[i] that is byte-for-byte
// what JSON.stringify writes for its value, returning the index past it or
// -1.
func scanCanonicalString(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				// Only controls without a short form are written \u00XX.
				if i+5 >= len(b) || b[i+2] != '0' || b[i+3] != '0' || (b[i+4] != '0' && b[i+4] != '1') {
					return -1
				}
				x, ok := hex4(b, i+2)
				if !ok || x >= 0x20 || b[i+5] != hexDigits[x&0xf] ||
					x == '\b' || x == '\f' || x == '\n' || x == '\r' || x == '\t' {
					return -1
				}
				i += 5
			default:
				return -1
			}
		}
	}
	return -1
}

// blobRefIDStart is where the blobId value starts in a canonical BlobRef.
const blobRefIDStart = len(`{"blobId":"`)

// BlobRefID returns the blobId ("sha256:<64 hex>") of a canonical BlobRef
// (§5.9.1), ok=false for anything else. The key order is pinned, so the
// id sits at a fixed offset of a value the row codec has accepted.
func BlobRefID(b []byte) (id string, ok bool) {
	if !validBlobRef(b) {
		return "", false
	}
	return string(b[blobRefIDStart : blobRefIDStart+len("sha256:")+64]), true
}

// ValidBlobID reports whether id is a blob content address,
// "sha256:" + 64 lowercase hex (§5.9.1).
func ValidBlobID(id string) bool {
	const prefix = "sha256:"
	if len(id) != len(prefix)+64 || id[:len(prefix)] != prefix {
		return false
	}
	for _, c := range []byte(id[len(prefix):]) {
		if !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
			return false
		}
	}
	return true
}
