package storage

import (
	"errors"
	"slices"
	"testing"
)

func TestColumnVersionsRoundTrip(t *testing.T) {
	cases := []struct {
		name     string
		versions []int64
		sv       int64
		null     bool
	}{
		{"insert", []int64{1, 1, 1}, 1, true},
		{"full write", []int64{1, 4, 4}, 4, true},
		{"patch", []int64{1, 4, 2}, 4, false},
		{"key-only patch", []int64{1, 1, 1}, 2, false},
		{"wide", wide(), 300, false},
	}
	for _, tc := range cases {
		blob := AppendColumnVersions(nil, tc.versions, tc.sv, 0)
		if (blob == nil) != tc.null {
			t.Errorf("%s: blob %x, want NULL %v", tc.name, blob, tc.null)
			continue
		}
		got := make([]int64, len(tc.versions))
		if err := DecodeColumnVersions(blob, tc.sv, got); err != nil {
			t.Errorf("%s: decode %x: %v", tc.name, blob, err)
			continue
		}
		// The primary key's version is not kept; every other column is.
		want := slices.Clone(tc.versions)
		if tc.null {
			for i := range want {
				want[i] = tc.sv
			}
		}
		got[0] = want[0]
		if !slices.Equal(got, want) {
			t.Errorf("%s: decoded %v, want %v", tc.name, got, want)
		}
	}
}

// wide is 131 columns, two of them past the first varint byte.
func wide() []int64 {
	v := make([]int64, 131)
	for i := range v {
		v[i] = 1
	}
	v[1], v[10], v[130] = 300, 299, 300
	return v
}

func TestColumnVersionsMalformed(t *testing.T) {
	for name, blob := range map[string][]byte{
		"truncated ordinal": {0x80},
		"truncated version": {0x01},
		"ordinal beyond":    {0x05, 0x02},
		"descending":        {0x02, 0x02, 0x01, 0x02},
		"repeated":          {0x01, 0x02, 0x01, 0x02},
		"version 1":         {0x01, 0x01},
		"above the row":     {0x01, 0x09},
	} {
		if err := DecodeColumnVersions(blob, 3, make([]int64, 3)); !errors.Is(err, ErrColumnVersions) {
			t.Errorf("%s: %x decoded with %v, want ErrColumnVersions", name, blob, err)
		}
	}
}

func FuzzColumnVersions(f *testing.F) {
	f.Add([]byte{0x01, 0x02}, int64(3))
	f.Add([]byte{}, int64(1))
	f.Fuzz(func(t *testing.T, blob []byte, sv int64) {
		if sv < 1 {
			return
		}
		got := make([]int64, 4)
		if err := DecodeColumnVersions(blob, sv, got); err != nil {
			return
		}
		// What decodes re-encodes to a blob that decodes the same.
		again := make([]int64, 4)
		if err := DecodeColumnVersions(AppendColumnVersions(nil, got, sv, 0), sv, again); err != nil {
			t.Fatalf("re-encoding of %v does not decode: %v", got, err)
		}
		for i := 1; i < len(got); i++ {
			if got[i] != again[i] {
				t.Fatalf("column %d: %d, then %d", i, got[i], again[i])
			}
		}
	})
}
