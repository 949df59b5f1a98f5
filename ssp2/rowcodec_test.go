package ssp2

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

var (
	edgeInts   = []int64{0, 1, -1, MaxSafeInt, -MaxSafeInt, 1 << 32, -(1 << 31)}
	edgeFloats = []uint64{
		0, 1 << 63, // ±0
		0x7ff8000000000000, 0x7ff8000000000001, 0xfff8000000000000, 0x7ff0000000000001, // NaNs, signalling included
		0x7ff0000000000000, 0xfff0000000000000, // ±Inf
		1, 0x000fffffffffffff, // subnormals
		math.Float64bits(math.MaxFloat64), math.Float64bits(0.1),
	}
	edgeStrings = []string{"", "a", "plain body", "📝 déjà vu 𝄞", "\U0010FFFF\uFFFF\u0000", strings.Repeat("x", 300)}
	edgeJSON    = []string{`null`, `true`, `7`, `-0.5e+10`, `"x"`, `{}`, `[]`, `{"tags": ["a", "b"],  "unicode": "𝔘"}`, ` {"k":true} `, `[[[[]]]]`}
	edgeBlobs   = []string{
		`{"blobId":"sha256:` + strings.Repeat("0a", 32) + `","byteLength":0}`,
		`{"blobId":"sha256:` + strings.Repeat("f", 64) + `","byteLength":9007199254740991,"mediaType":"image/png"}`,
		`{"blobId":"sha256:` + strings.Repeat("1", 64) + `","byteLength":12,"mediaType":"text/plain","name":"a \"b\"\\\n\u001f.txt"}`,
		`{"blobId":"sha256:` + strings.Repeat("2", 64) + `","byteLength":12,"name":"𝄞"}`,
	}
)

var allTypes = []ColumnType{TypeString, TypeInteger, TypeFloat, TypeBoolean, TypeJSON, TypeBytes, TypeBlobRef, TypeCrdt}

// randomColumns returns n columns cycling through every type and both
// nullabilities (16 combinations), shuffled.
func randomColumns(rng *rand.Rand, n int) []Column {
	cols := make([]Column, n)
	for i := range cols {
		combo := i % 16
		if n < 16 {
			combo = rng.IntN(16)
		}
		cols[i] = Column{Name: fmt.Sprintf("c%d", i), Type: allTypes[combo%8], Nullable: combo >= 8}
	}
	rng.Shuffle(n, func(i, j int) { cols[i], cols[j] = cols[j], cols[i] })
	return cols
}

func randomValue(rng *rand.Rand, c Column) Value {
	if c.Nullable && rng.IntN(4) == 0 {
		return Value{Null: true}
	}
	switch c.Type {
	case TypeInteger:
		if rng.IntN(2) == 0 {
			return Value{Int: edgeInts[rng.IntN(len(edgeInts))]}
		}
		return Value{Int: rng.Int64N(2*MaxSafeInt+1) - MaxSafeInt}
	case TypeFloat:
		if rng.IntN(2) == 0 {
			return Value{Float: math.Float64frombits(edgeFloats[rng.IntN(len(edgeFloats))])}
		}
		return Value{Float: math.Float64frombits(rng.Uint64())}
	case TypeBoolean:
		return Value{Bool: rng.IntN(2) == 1}
	case TypeString:
		return Value{Bytes: []byte(edgeStrings[rng.IntN(len(edgeStrings))])}
	case TypeJSON:
		return Value{Bytes: []byte(edgeJSON[rng.IntN(len(edgeJSON))])}
	case TypeBlobRef:
		return Value{Bytes: []byte(edgeBlobs[rng.IntN(len(edgeBlobs))])}
	default: // bytes, crdt
		b := make([]byte, rng.IntN(3)*rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return Value{Bytes: b}
	}
}

func sameValue(c Column, a, b Value) bool {
	if a.Null || b.Null {
		return a.Null == b.Null
	}
	switch c.Type {
	case TypeInteger:
		return a.Int == b.Int
	case TypeFloat:
		return math.Float64bits(a.Float) == math.Float64bits(b.Float)
	case TypeBoolean:
		return a.Bool == b.Bool
	}
	return bytes.Equal(a.Bytes, b.Bytes)
}

func TestRowCodecRoundTrip(t *testing.T) {
	for _, width := range []int{1, 7, 8, 9, 64, 65, 130} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(width), 7))
			schemas := 20
			if width > 64 {
				schemas = 4 // wide rows: fewer, the corruption sweep is quadratic
			}
			for schema := 0; schema < schemas; schema++ {
				cols := randomColumns(rng, width)
				codec, err := NewRowCodec(cols)
				if err != nil {
					t.Fatal(err)
				}
				var dst []Value
				for n := 0; n < 200; n++ {
					row := make([]Value, width)
					for i, c := range cols {
						row[i] = randomValue(rng, c)
					}
					enc, err := codec.AppendRow([]byte("pre"), row)
					if err != nil {
						t.Fatalf("AppendRow: %v", err)
					}
					if string(enc[:3]) != "pre" {
						t.Fatal("AppendRow clobbered dst")
					}
					enc = enc[3:]
					if err := codec.ValidateRow(enc); err != nil {
						t.Fatalf("ValidateRow: %v", err)
					}
					if dst, err = codec.DecodeRow(enc, dst); err != nil {
						t.Fatalf("DecodeRow: %v", err)
					}
					for i, c := range cols {
						if !sameValue(c, row[i], dst[i]) {
							t.Fatalf("column %d (%s, nullable %v): got %+v, want %+v", i, c.Type, c.Nullable, dst[i], row[i])
						}
					}
					again, err := codec.AppendRow(nil, dst)
					if err != nil || !bytes.Equal(again, enc) {
						t.Fatalf("re-encoding differs (%v)\n got: %x\nwant: %x", err, again, enc)
					}
					if n < 10 {
						checkRowCorruptions(t, codec, enc)
					}
				}
			}
		})
	}
}

// checkRowCorruptions: every strict prefix, a trailing byte and every set
// padding bit must be rejected with sync.invalid_request (and never panic).
func checkRowCorruptions(t *testing.T, codec *RowCodec, enc []byte) {
	t.Helper()
	for n := 0; n < len(enc); n++ {
		if err := codec.ValidateRow(enc[:n]); CodeOf(err) != CodeInvalidRequest {
			t.Fatalf("prefix %d/%d: %v", n, len(enc), err)
		}
	}
	if err := codec.ValidateRow(append(enc[:len(enc):len(enc)], 0)); CodeOf(err) != CodeInvalidRequest {
		t.Fatalf("trailing byte accepted: %v", err)
	}
	if n := len(codec.cols); n%8 != 0 {
		bad := append([]byte(nil), enc...)
		bad[codec.bitmapLen-1] |= 1 << 7
		if err := codec.ValidateRow(bad); CodeOf(err) != CodeInvalidRequest || !strings.Contains(err.Error(), "padding") {
			t.Fatalf("padding bit accepted: %v", err)
		}
	}
}

func TestRowCodecRejects(t *testing.T) {
	cols := []Column{
		{Name: "id", Type: TypeString},
		{Name: "n", Type: TypeInteger, Nullable: true},
		{Name: "ok", Type: TypeBoolean},
		{Name: "meta", Type: TypeJSON, Nullable: true},
		{Name: "ref", Type: TypeBlobRef, Nullable: true},
	}
	codec, err := NewRowCodec(cols)
	if err != nil {
		t.Fatal(err)
	}
	valid := func(mut func(r []Value)) []Value {
		r := []Value{{Bytes: []byte("x")}, {Int: 1}, {Bool: true}, {Bytes: []byte(`{}`)}, {Null: true}}
		if mut != nil {
			mut(r)
		}
		return r
	}
	encodeCases := []struct {
		name string
		row  []Value
		msg  string
	}{
		{"null on non-nullable", valid(func(r []Value) { r[0] = Value{Null: true} }), "not nullable"},
		{"integer 2^53", valid(func(r []Value) { r[1].Int = 1 << 53 }), "outside"},
		{"integer −2^53", valid(func(r []Value) { r[1].Int = -(1 << 53) }), "outside"},
		{"invalid UTF-8", valid(func(r []Value) { r[0].Bytes = []byte{0xc3} }), "UTF-8"},
		{"json not JSON", valid(func(r []Value) { r[3].Bytes = []byte(`{"a":}`) }), "not a JSON document"},
		{"json empty", valid(func(r []Value) { r[3].Bytes = nil }), "not a JSON document"},
		{"wrong width", valid(nil)[:4], "4 values for 5 columns"},
	}
	for _, tt := range encodeCases {
		if _, err := codec.AppendRow(nil, tt.row); err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: AppendRow error %v, want %q", tt.name, err, tt.msg)
		}
	}
	hex := strings.Repeat("ab", 32)
	badRefs := []string{
		`{"byteLength":1,"blobId":"sha256:` + hex + `"}`,                            // key order
		`{"blobId":"sha256:` + strings.ToUpper(hex) + `","byteLength":1}`,           // uppercase
		`{"blobId":"sha256:` + hex[:62] + `","byteLength":1}`,                       // short
		`{"blobId":"sha256:` + hex + `","byteLength":-1}`,                           // negative
		`{"blobId":"sha256:` + hex + `","byteLength":1.0}`,                          // not an integer form
		`{"blobId":"sha256:` + hex + `","byteLength":01}`,                           // leading zero
		`{"blobId":"sha256:` + hex + `","byteLength":9007199254740992}`,             // > 2^53−1
		`{"blobId":"sha256:` + hex + `", "byteLength":1}`,                           // whitespace
		`{"blobId":"sha256:` + hex + `","byteLength":1,"name":"a","mediaType":"b"}`, // order
		`{"blobId":"sha256:` + hex + `","byteLength":1,"other":"x"}`,                // unknown key
		`{"blobId":"sha256:` + hex + `","byteLength":1,"name":7}`,                   // non-string
		`{"blobId":"sha256:` + hex + `","byteLength":1,"name":"\u0041"}`,            // non-canonical escape
		`{"blobId":"sha256:` + hex + `","byteLength":1,"name":"\/"}`,                // non-canonical escape
		`{"blobId":"sha256:` + hex + `","byteLength":1,"name":"\u001F"}`,            // uppercase hex escape
		`{"blobId":"sha256:` + hex + `","byteLength":1,"name":"\u000a"}`,            // \n has a short form
		`{"blobId":"sha256:` + hex + `","byteLength":1}` + " ",                      // trailing space
		`{"blobId":"md5:` + hex + `","byteLength":1}`,                               // algorithm
	}
	for _, ref := range badRefs {
		row := valid(func(r []Value) { r[4] = Value{Bytes: []byte(ref)} })
		if _, err := codec.AppendRow(nil, row); err == nil || !strings.Contains(err.Error(), "canonical BlobRef") {
			t.Errorf("AppendRow accepted blob_ref %s (%v)", ref, err)
		}
	}
	for _, ref := range edgeBlobs {
		if !validBlobRef([]byte(ref)) {
			t.Errorf("canonical BlobRef rejected: %s", ref)
		}
	}

	enc, err := codec.AppendRow(nil, valid(nil))
	if err != nil {
		t.Fatal(err)
	}
	decodeCases := []struct {
		name string
		mut  func(b []byte) []byte
		msg  string
	}{
		{"null bit on id", func(b []byte) []byte { b[0] |= 1; return b }, `non-nullable column "id"`},
		{"null bit on ok", func(b []byte) []byte { b[0] |= 4; return b }, `non-nullable column "ok"`},
		{"padding bit", func(b []byte) []byte { b[0] |= 0x20; return b }, "padding"},
		{"bool byte 2", func(b []byte) []byte { b[1+5+8] = 2; return b }, "bool byte 0x02"},
		{"integer 2^53", func(b []byte) []byte { b[1+5+6] = 0x20; return b }, "outside"},
		{"string length past end", func(b []byte) []byte { b[1] = 200; return b }, "exceeds the remaining"},
		{"invalid UTF-8", func(b []byte) []byte { b[5] = 0xff; return b }, "UTF-8"},
		{"json not JSON", func(b []byte) []byte { b[len(b)-1] = '{'; return b }, "not a JSON document"},
	}
	for _, tt := range decodeCases {
		b := tt.mut(append([]byte(nil), enc...))
		if _, err := codec.DecodeRow(b, nil); CodeOf(err) != CodeInvalidRequest || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: DecodeRow error %v, want %q", tt.name, err, tt.msg)
		}
	}
	if _, err := NewRowCodec([]Column{{Name: "x", Type: 9}}); err == nil {
		t.Error("NewRowCodec accepted type tag 9")
	}
}

func TestDecodeRowDoesNotAllocate(t *testing.T) {
	codec, rows := notesRows(t, 64)
	dst := make([]Value, len(notesColumns))
	allocs := testing.AllocsPerRun(100, func() {
		for _, r := range rows {
			var err error
			if dst, err = codec.DecodeRow(r, dst); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("DecodeRow allocates %.1f times per %d rows", allocs, len(rows))
	}
	var buf []byte
	vals := notesValues(64)
	allocs = testing.AllocsPerRun(100, func() {
		buf = buf[:0]
		for _, v := range vals {
			var err error
			if buf, err = codec.AppendRow(buf, v); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("AppendRow allocates %.1f times per %d rows", allocs, len(vals))
	}
}
