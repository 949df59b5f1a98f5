package ssp2

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"
)

// The notes table of the golden vectors (segment/rows-two-blocks).
var notesColumns = []Column{
	{Name: "id", Type: TypeString},
	{Name: "title", Type: TypeString, Nullable: true},
	{Name: "body", Type: TypeString},
	{Name: "count", Type: TypeInteger, Nullable: true},
	{Name: "score", Type: TypeFloat},
	{Name: "done", Type: TypeBoolean},
	{Name: "meta", Type: TypeJSON, Nullable: true},
	{Name: "blob", Type: TypeBytes, Nullable: true},
}

var notesBodies = []string{
	"Discussed the roadmap for the next quarter; follow up with design about the onboarding flow.",
	"Groceries: oat milk, coffee beans, two lemons, basil. Pick up the dry cleaning on the way back.",
	"Réunion d'équipe — points à revoir : la migration, les quotas, et la démo de vendredi.",
	"Retro notes: deploys were smooth, on-call was quiet, flaky test in the sync suite needs a look.",
	"",
}

var notesMeta = []string{
	`{"tags":["work","q3"],"priority":2}`,
	`{"tags":["home"],"pinned":true,"color":"#ffcc00"}`,
	`{"mentions":["ada","grace"],"rev":17,"source":{"app":"web","v":"1.4.2"}}`,
}

// notesValues returns n realistic rows of the notes table: NULLs in every
// nullable column now and then, mixed ASCII and non-ASCII text, small JSON
// documents, short binary blobs. Values and their bytes sit in two
// contiguous arenas, as rows read from a page or a response would.
func notesValues(n int) [][]Value {
	type span struct{ off, end int }
	var arena []byte
	add := func(b []byte) span {
		off := len(arena)
		arena = append(arena, b...)
		return span{off, len(arena)}
	}
	spans := make([][8]span, n)
	vals := make([]Value, n*len(notesColumns))
	rows := make([][]Value, n)
	for i := range rows {
		r := vals[i*len(notesColumns) : (i+1)*len(notesColumns) : (i+1)*len(notesColumns)]
		sp := &spans[i]
		sp[0] = add([]byte("n-" + strconv.Itoa(100000+i)))
		if i%7 == 3 {
			r[1] = Value{Null: true}
		} else {
			sp[1] = add(fmt.Appendf(nil, "Note %d — weekly planning", i))
		}
		sp[2] = add([]byte(notesBodies[i%len(notesBodies)]))
		if i%5 == 0 {
			r[3] = Value{Null: true}
		} else {
			r[3] = Value{Int: int64(i * 37 % 1000)}
		}
		r[4] = Value{Float: float64(i%100) / 8}
		r[5] = Value{Bool: i%2 == 0}
		if i%3 == 0 {
			r[6] = Value{Null: true}
		} else {
			sp[6] = add([]byte(notesMeta[i%len(notesMeta)]))
		}
		if i%4 == 0 {
			sp[7] = add([]byte{byte(i), 1, 2, 3, 0xfe, 0xff, byte(i >> 8), 42, 7, 9, 11, 13, 17, 19, 23, 29})
		} else {
			r[7] = Value{Null: true}
		}
		rows[i] = r
	}
	for i, r := range rows {
		for _, c := range []int{0, 1, 2, 6, 7} {
			if !r[c].Null {
				sp := spans[i][c]
				r[c] = Value{Bytes: arena[sp.off:sp.end:sp.end]}
			}
		}
	}
	return rows
}

// notesRows encodes notesValues(n) into one contiguous buffer and returns
// each row as a slice of it.
func notesRows(tb testing.TB, n int) (*RowCodec, [][]byte) {
	tb.Helper()
	codec, err := NewRowCodec(notesColumns)
	if err != nil {
		tb.Fatal(err)
	}
	var buf []byte
	ends := make([]int, n)
	for i, v := range notesValues(n) {
		if buf, err = codec.AppendRow(buf, v); err != nil {
			tb.Fatal(err)
		}
		ends[i] = len(buf)
	}
	rows := make([][]byte, n)
	start := 0
	for i, end := range ends {
		rows[i] = buf[start:end:end]
		start = end
	}
	return codec, rows
}

func notesSegment(tb testing.TB, n int) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w, err := NewSegmentWriter(&buf, SegmentHeader{Table: "notes", SchemaVersion: 1, Columns: notesColumns})
	if err != nil {
		tb.Fatal(err)
	}
	for i, v := range notesValues(n) {
		if err := w.WriteValues(int64(i+1), v); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

var benchSizes = []int{1000, 100000}

// startRows resets the timer and notes the process CPU time, for reportRows.
func startRows(b *testing.B) time.Duration {
	b.ReportAllocs()
	b.ResetTimer()
	return processCPU()
}

// reportRows reports rows per wall-clock second and, where the platform
// tells, per CPU second of the process (robust to other processes
// sharing the machine; it includes this process's GC, which is idle here).
func reportRows(b *testing.B, n int, cpu0 time.Duration) {
	rows := float64(n) * float64(b.N)
	b.ReportMetric(rows/b.Elapsed().Seconds(), "rows/s")
	if cpu := processCPU() - cpu0; cpu0 > 0 && cpu > 0 {
		b.ReportMetric(rows/cpu.Seconds(), "rows/cpu-s")
	}
}

func BenchmarkRowEncode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			codec, _ := notesRows(b, 1)
			vals := notesValues(n)
			buf := make([]byte, 0, 256*n)
			cpu0 := startRows(b)
			for range b.N {
				buf = buf[:0]
				for _, v := range vals {
					var err error
					if buf, err = codec.AppendRow(buf, v); err != nil {
						b.Fatal(err)
					}
				}
			}
			reportRows(b, n, cpu0)
			b.SetBytes(int64(len(buf)))
		})
	}
}

func BenchmarkRowDecode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			codec, rows := notesRows(b, n)
			dst := make([]Value, len(notesColumns))
			size := 0
			for _, r := range rows {
				size += len(r)
			}
			b.SetBytes(int64(size))
			cpu0 := startRows(b)
			for range b.N {
				for _, r := range rows {
					var err error
					if dst, err = codec.DecodeRow(r, dst); err != nil {
						b.Fatal(err)
					}
				}
			}
			reportRows(b, n, cpu0)
		})
	}
}

func BenchmarkSegmentEncode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			vals := notesValues(n)
			h := SegmentHeader{Table: "notes", SchemaVersion: 1, Columns: notesColumns}
			b.SetBytes(int64(len(notesSegment(b, n))))
			cpu0 := startRows(b)
			w, err := NewSegmentWriter(io.Discard, h)
			if err != nil {
				b.Fatal(err)
			}
			for range b.N {
				if err := w.Reset(io.Discard, h); err != nil {
					b.Fatal(err)
				}
				for i, v := range vals {
					if err := w.WriteValues(int64(i+1), v); err != nil {
						b.Fatal(err)
					}
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
			reportRows(b, n, cpu0)
		})
	}
}

func BenchmarkSegmentDecode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			seg := notesSegment(b, n)
			var rd bytes.Reader
			var vals []Value // what a consumer would read from
			b.SetBytes(int64(len(seg)))
			cpu0 := startRows(b)
			r := &SegmentReader{}
			for range b.N {
				rd.Reset(seg)
				if err := r.Reset(&rd); err != nil {
					b.Fatal(err)
				}
				rows := 0
				for r.NextBlock() {
					for r.Next() {
						vals = r.RowValues()
						rows++
					}
				}
				if r.Err() != nil || rows != n || len(vals) != len(notesColumns) {
					b.Fatalf("read %d rows: %v", rows, r.Err())
				}
			}
			reportRows(b, n, cpu0)
		})
	}
}

// BenchmarkSparseRowDecode decodes v3 push payloads of the notes table:
// "full" presents every column (a v2-style write, comparable with
// BenchmarkRowDecode), "patch" the key and every third column.
func BenchmarkSparseRowDecode(b *testing.B) {
	for _, shape := range []struct {
		name string
		k    int
	}{{"full", 1}, {"patch", 3}} {
		for _, n := range benchSizes {
			b.Run(shape.name+"/"+strconv.Itoa(n), func(b *testing.B) {
				codec, rows := notesSparseRows(b, n, shape.k)
				dst := make([]Value, len(notesColumns))
				size := 0
				for _, r := range rows {
					size += len(r)
				}
				b.SetBytes(int64(size))
				cpu0 := startRows(b)
				for range b.N {
					for _, r := range rows {
						got, err := codec.DecodeSparseRow(r, dst)
						if err != nil {
							b.Fatal(err)
						}
						dst = got.Values
					}
				}
				reportRows(b, n, cpu0)
			})
		}
	}
}
