package ssp2

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// pushColumns is the nine-column table of the v3 push vectors: one column
// of each type, id the primary key.
var pushColumns = []Column{
	{Name: "id", Type: TypeString},
	{Name: "title", Type: TypeString, Nullable: true},
	{Name: "body", Type: TypeString},
	{Name: "count", Type: TypeInteger, Nullable: true},
	{Name: "score", Type: TypeFloat},
	{Name: "done", Type: TypeBoolean},
	{Name: "meta", Type: TypeJSON, Nullable: true},
	{Name: "blob", Type: TypeBytes, Nullable: true},
	{Name: "doc", Type: TypeCrdt, Nullable: true},
}

func pushCodec(t testing.TB) *SparseCodec {
	t.Helper()
	c, err := NewSparseCodec(pushColumns, 0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sparseOf builds a SparseRow of pushColumns from column → value.
func sparseOf(vals map[int]Value) SparseRow {
	r := SparseRow{Present: NewColumnBitmap(len(pushColumns)), Values: make([]Value, len(pushColumns))}
	for i, v := range vals {
		r.Present.Set(i)
		r.Values[i] = v
	}
	return r
}

// TestSparseRowLayout pins the bytes of push/sparse-row as the §2.4 rules
// spell them: id, a present NULL title and meta over nine columns.
func TestSparseRowLayout(t *testing.T) {
	codec := pushCodec(t)
	meta := `{"tags":["a"]}`
	row := sparseOf(map[int]Value{0: {Bytes: []byte("n-1")}, 1: {Null: true}, 6: {Bytes: []byte(meta)}})
	got, err := codec.AppendSparseRow([]byte("pre"), row)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("pre")
	want = append(want, 0x43, 0x00) // presence: columns 0, 1, 6; bit 8 (doc) clear, bits 9–15 padding
	want = append(want, 0x02)       // null bitmap over 3 present columns: the second (title) is NULL
	want = append(want, 3, 0, 0, 0, 'n', '-', '1')
	want = append(want, byte(len(meta)), 0, 0, 0)
	want = append(want, meta...)
	if !bytes.Equal(got, want) {
		t.Fatalf("sparse row\n got: %x\nwant: %x", got, want)
	}
	back, err := codec.DecodeSparseRow(got[3:], nil)
	if err != nil {
		t.Fatal(err)
	}
	if back.Present.Count() != 3 || !back.Present.Has(6) || back.Present.Has(2) || !back.Values[1].Null || string(back.Values[6].Bytes) != meta {
		t.Fatalf("decoded %+v", back)
	}
	rendered, err := RenderSparseRow(codec, got[3:])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(rendered, []byte(`"values":{"id":"n-1","title":null,"meta":{"tags":["a"]}}`)) {
		t.Fatalf("rendering %s", rendered)
	}

	// Every column present: the presence bitmap, then the full row.
	all := map[int]Value{0: {Bytes: []byte("n-2")}, 1: {Null: true}, 2: {Bytes: []byte("body")}, 3: {Int: -7}, 4: {Float: 0.125},
		5: {}, 6: {Bytes: []byte(`{"k":true}`)}, 7: {Bytes: []byte{0, 1, 0xfe, 0xff}}, 8: {Bytes: []byte{1, 2, 0xfe}}}
	fullSparse, err := codec.AppendSparseRow(nil, sparseOf(all))
	if err != nil {
		t.Fatal(err)
	}
	fullRow, err := codec.row.AppendRow(nil, sparseOf(all).Values)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fullSparse[:2], []byte{0xFF, 0x01}) || !bytes.Equal(fullSparse[2:], fullRow) {
		t.Fatalf("full sparse row %x, want ff01 + %x", fullSparse, fullRow)
	}
}

// TestSparseRowNegatives covers the push/invalid cases of the v3 set (whose
// .bin files are missing) from the §2.4 rules, each with its violation, and
// the order in which the rules are checked.
func TestSparseRowNegatives(t *testing.T) {
	codec := pushCodec(t)
	str := func(s string) []byte { return append(appendU32(nil, uint32(len(s))), s...) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	id := str("n-1")
	cases := []struct {
		name      string
		b         []byte
		violation SparseViolation
		column    int
	}{
		// The four push/invalid vectors.
		{"presence-padding-bit", cat([]byte{0x01, 0x02, 0x00}, id), SparsePresencePadding, -1},
		{"null-bit-for-absent-column", cat([]byte{0x01, 0x00, 0x02}, id), SparseNullPadding, -1},
		{"null-bit-on-non-nullable", []byte{0x01, 0x00, 0x01}, SparseNullNotNullable, 0},
		{"absent-primary-key", cat([]byte{0x02, 0x00, 0x00}, str("t")), SparseKeyAbsent, 0},

		// Check order: each row breaks two rules; the earlier one wins.
		{"padding before key", []byte{0x02, 0x80, 0x00}, SparsePresencePadding, -1},
		{"key before null padding", []byte{0x02, 0x00, 0xfe}, SparseKeyAbsent, 0},
		{"null padding before non-nullable", []byte{0x01, 0x00, 0x03}, SparseNullPadding, -1},
		// id's length runs past the end, and body (present later) is NULL.
		{"non-nullable before a bad length", cat([]byte{0x05, 0x00, 0x02}, appendU32(nil, 99)), SparseNullNotNullable, 2},
		{"non-nullable before bad text", cat([]byte{0x05, 0x00, 0x02}, str("\xff")), SparseNullNotNullable, 2},

		// Value and framing checks.
		{"empty", nil, SparseMalformed, -1},
		{"short presence", []byte{0x01}, SparseMalformed, -1},
		{"no null bitmap", []byte{0x01, 0x00}, SparseMalformed, -1},
		{"truncated value", cat([]byte{0x01, 0x00, 0x00}, id[:5]), SparseMalformed, 0},
		{"length past end", cat([]byte{0x01, 0x00, 0x00}, appendU32(nil, 4), []byte("n-1")), SparseMalformed, 0},
		{"trailing byte", cat([]byte{0x01, 0x00, 0x00}, id, []byte{0}), SparseMalformed, -1},
		{"integer 2^53", cat([]byte{0x09, 0x00, 0x00}, id, []byte{0, 0, 0, 0, 0, 0, 0x20, 0}), SparseMalformed, 3},
		{"bool byte 2", cat([]byte{0x21, 0x00, 0x00}, id, []byte{2}), SparseMalformed, 5},
		{"float truncated", cat([]byte{0x11, 0x00, 0x00}, id, []byte{0, 0}), SparseMalformed, 4},
		{"string not UTF-8", cat([]byte{0x03, 0x00, 0x00}, id, str("\xc3")), SparseBadText, 1},
		{"json not JSON", cat([]byte{0x41, 0x00, 0x00}, id, str(`{"a":}`)), SparseBadText, 6},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			_, err := codec.DecodeSparseRow(tt.b, nil)
			var se *SparseRowError
			if !errors.As(err, &se) {
				t.Fatalf("error %v, want *SparseRowError", err)
			}
			if se.Violation != tt.violation || se.Column != tt.column {
				t.Fatalf("violation %s column %d (%v), want %s column %d", se.Violation, se.Column, err, tt.violation, tt.column)
			}
			if CodeOf(err) != CodeInvalidRequest || !errors.Is(err, &Error{Code: CodeInvalidRequest}) {
				t.Fatalf("error %v does not carry sync.invalid_request", err)
			}
			if verr := codec.ValidateSparseRow(tt.b); !errors.As(verr, &se) || se.Violation != tt.violation {
				t.Fatalf("ValidateSparseRow %v disagrees", verr)
			}
			if _, rerr := RenderSparseRow(codec, tt.b); CodeOf(rerr) != CodeInvalidRequest {
				t.Fatalf("RenderSparseRow %v", rerr)
			}
		})
	}
}

func TestSparseRowEncodeRefusals(t *testing.T) {
	codec := pushCodec(t)
	ok := func() SparseRow { return sparseOf(map[int]Value{0: {Bytes: []byte("x")}, 3: {Int: 1}}) }
	cases := []struct {
		name string
		row  func() SparseRow
	}{
		{"wrong width", func() SparseRow { r := ok(); r.Values = r.Values[:8]; return r }},
		{"short presence", func() SparseRow { r := ok(); r.Present = r.Present[:1]; return r }},
		{"presence padding", func() SparseRow { r := ok(); r.Present[1] |= 0x80; return r }},
		{"key absent", func() SparseRow { r := ok(); r.Present[0] &^= 1; return r }},
		{"null on non-nullable", func() SparseRow { r := ok(); r.Present.Set(2); r.Values[2] = Value{Null: true}; return r }},
		{"integer 2^53", func() SparseRow { r := ok(); r.Values[3].Int = 1 << 53; return r }},
		{"json not JSON", func() SparseRow { r := ok(); r.Present.Set(6); r.Values[6] = Value{Bytes: []byte("{")}; return r }},
	}
	for _, tt := range cases {
		out, err := codec.AppendSparseRow([]byte("pre"), tt.row())
		if CodeOf(err) != CodeInternalError || string(out) != "pre" {
			t.Errorf("%s: AppendSparseRow = %q, %v; want a refusal with dst unchanged", tt.name, out, err)
		}
	}
	// An absent column's value is ignored, whatever it holds.
	r := ok()
	r.Values[2] = Value{Null: true}
	r.Values[6] = Value{Bytes: []byte("{")}
	if _, err := codec.AppendSparseRow(nil, r); err != nil {
		t.Fatalf("absent garbage refused: %v", err)
	}
}

func TestNewSparseCodec(t *testing.T) {
	if _, err := NewSparseCodec(pushColumns, 9); err == nil {
		t.Error("primary key position 9 of 9 columns accepted")
	}
	if _, err := NewSparseCodec(pushColumns, 1); err == nil {
		t.Error("nullable primary key accepted")
	}
	if _, err := NewSparseCodec([]Column{{Name: "x", Type: 0}}, 0); err == nil {
		t.Error("type tag 0 accepted")
	}
}

// TestSparseRowRoundTrip: random tables, presences and values round-trip,
// and every prefix, a trailing byte and every padding bit are refused.
func TestSparseRowRoundTrip(t *testing.T) {
	for _, width := range []int{1, 7, 8, 9, 16, 64, 65, 130} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(width), 3))
			for schema := range 8 {
				cols := randomColumns(rng, width)
				pk := rng.IntN(width)
				cols[pk].Nullable = false
				codec, err := NewSparseCodec(cols, pk)
				if err != nil {
					t.Fatal(err)
				}
				var dst []Value
				for n := range 100 {
					row := SparseRow{Present: NewColumnBitmap(width), Values: make([]Value, width)}
					for i, c := range cols {
						if i == pk || rng.IntN(3) > 0 {
							row.Present.Set(i)
							row.Values[i] = randomValue(rng, c)
						}
					}
					enc, err := codec.AppendSparseRow(nil, row)
					if err != nil {
						t.Fatalf("schema %d row %d: %v", schema, n, err)
					}
					got, err := codec.DecodeSparseRow(enc, dst)
					if err != nil {
						t.Fatalf("DecodeSparseRow: %v", err)
					}
					dst = got.Values
					if !bytes.Equal(got.Present, row.Present) {
						t.Fatalf("presence %x, want %x", got.Present, row.Present)
					}
					for i, c := range cols {
						if row.Present.Has(i) && !sameValue(c, row.Values[i], got.Values[i]) {
							t.Fatalf("column %d (%s): got %+v, want %+v", i, c.Type, got.Values[i], row.Values[i])
						}
					}
					again, err := codec.AppendSparseRow(nil, got)
					if err != nil || !bytes.Equal(again, enc) {
						t.Fatalf("re-encoding differs (%v)", err)
					}
					if n < 5 {
						checkSparseCorruptions(t, codec, enc, row.Present.Count())
					}
				}
			}
		})
	}
}

func checkSparseCorruptions(t *testing.T, codec *SparseCodec, enc []byte, present int) {
	t.Helper()
	for n := range len(enc) {
		if err := codec.ValidateSparseRow(enc[:n]); CodeOf(err) != CodeInvalidRequest {
			t.Fatalf("prefix %d/%d: %v", n, len(enc), err)
		}
	}
	if err := codec.ValidateSparseRow(append(enc[:len(enc):len(enc)], 0)); CodeOf(err) != CodeInvalidRequest {
		t.Fatalf("trailing byte accepted: %v", err)
	}
	width := len(codec.Columns())
	presLen := (width + 7) / 8
	var se *SparseRowError
	if width%8 != 0 {
		bad := append([]byte(nil), enc...)
		bad[presLen-1] |= 0x80
		if err := codec.ValidateSparseRow(bad); !errors.As(err, &se) || se.Violation != SparsePresencePadding {
			t.Fatalf("presence padding accepted: %v", err)
		}
	}
	if present%8 != 0 {
		bad := append([]byte(nil), enc...)
		bad[presLen+(present+7)/8-1] |= 0x80
		if err := codec.ValidateSparseRow(bad); !errors.As(err, &se) || se.Violation != SparseNullPadding {
			t.Fatalf("null padding accepted: %v", err)
		}
	}
}

func TestSparseRowDoesNotAllocate(t *testing.T) {
	codec, rows := notesSparseRows(t, 64, 3)
	dst := make([]Value, len(notesColumns))
	allocs := testing.AllocsPerRun(100, func() {
		for _, r := range rows {
			got, err := codec.DecodeSparseRow(r, dst)
			if err != nil {
				t.Fatal(err)
			}
			dst = got.Values
		}
	})
	if allocs != 0 {
		t.Fatalf("DecodeSparseRow allocates %.1f times per %d rows", allocs, len(rows))
	}
	decoded := make([]SparseRow, len(rows))
	for i, r := range rows {
		var err error
		if decoded[i], err = codec.DecodeSparseRow(r, nil); err != nil {
			t.Fatal(err)
		}
	}
	var buf []byte
	allocs = testing.AllocsPerRun(100, func() {
		buf = buf[:0]
		for _, r := range decoded {
			var err error
			if buf, err = codec.AppendSparseRow(buf, r); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("AppendSparseRow allocates %.1f times per %d rows", allocs, len(rows))
	}
}

func TestColumnBitmap(t *testing.T) {
	b := NewColumnBitmap(9)
	if len(b) != 2 || b.Count() != 0 || !b.Fits(9) || b.Fits(8) || b.Fits(17) {
		t.Fatalf("empty bitmap %x", b)
	}
	b.Set(0)
	b.Set(8)
	if !b.Has(0) || !b.Has(8) || b.Has(1) || b.Has(9) || b.Has(-1) || b.Has(100) || b.Count() != 2 {
		t.Fatalf("bitmap %x", b)
	}
	b[1] |= 0x02 // column 9 of 9: padding
	if b.Fits(9) || !b.Fits(10) {
		t.Fatal("Fits ignores padding bits")
	}
	for _, n := range []int{0, 1, 7, 8, 9, 16, 17} {
		f := FullColumnBitmap(n)
		if f.Count() != n || !f.Fits(n) {
			t.Fatalf("FullColumnBitmap(%d) = %x", n, f)
		}
	}
}

// notesSparseRows encodes n notes rows as sparse rows, each presenting the
// primary key and every k-th other column (k = 1: full rows).
func notesSparseRows(tb testing.TB, n, k int) (*SparseCodec, [][]byte) {
	tb.Helper()
	codec := notesSparse(tb)
	rows := make([][]byte, n)
	for i, v := range notesValues(n) {
		r := SparseRow{Present: NewColumnBitmap(len(notesColumns)), Values: v}
		for c := range notesColumns {
			if c == 0 || (c+i)%k == 0 {
				r.Present.Set(c)
			}
		}
		b, err := codec.AppendSparseRow(nil, r)
		if err != nil {
			tb.Fatal(err)
		}
		rows[i] = b
	}
	return codec, rows
}
