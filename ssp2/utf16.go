package ssp2

import (
	"cmp"
	"slices"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// CompareUTF16 compares a and b by UTF-16 code units, the order JavaScript
// string comparison yields and the one SSP2 map keys and canonical JSON use.
// It returns -1, 0 or +1.
//
// UTF-8 byte order equals code point order, which differs from UTF-16 code
// unit order only when a supplementary-plane character (a surrogate pair,
// units 0xD800–0xDBFF first) meets a character in U+E000–U+FFFF. So the
// strings are compared bytewise and only the first differing rune pair is
// looked at in UTF-16 terms.
func CompareUTF16(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return cmp.Compare(len(a), len(b))
	}
	// Back up to the start of the rune holding the first difference; the
	// prefix is shared, so it starts at the same offset in both strings.
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRuneInString(a[i:])
	rb, _ := utf8.DecodeRuneInString(b[i:])
	if ra == rb { // both invalid UTF-8: fall back to bytes for a total order
		return strings.Compare(a[i:], b[i:])
	}
	return compareRunesUTF16(ra, rb)
}

// compareUTF16Bytes is CompareUTF16 over byte slices, viewed as strings
// without a copy (CompareUTF16 keeps neither).
func compareUTF16Bytes(a, b []byte) int {
	return CompareUTF16(unsafe.String(unsafe.SliceData(a), len(a)), unsafe.String(unsafe.SliceData(b), len(b)))
}

// compareRunesUTF16 orders two distinct runes by their UTF-16 encodings.
func compareRunesUTF16(ra, rb rune) int {
	ua, ub := firstUnit(ra), firstUnit(rb)
	if ua != ub {
		return cmp.Compare(int(ua), int(ub))
	}
	// Equal first units: both are supplementary with the same high
	// surrogate, and the low surrogates order like the runes.
	return cmp.Compare(int(ra), int(rb))
}

// firstUnit is the first UTF-16 code unit of r.
func firstUnit(r rune) rune {
	if r >= 0x10000 {
		return 0xD800 + (r-0x10000)>>10
	}
	return r
}

// sortedKeysUTF16 returns the keys of m in UTF-16 code unit order.
func sortedKeysUTF16[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, CompareUTF16)
	return keys
}
