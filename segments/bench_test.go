package segments

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncnode/syncnode/storage"
)

// Benchmarks run on a real embedded NATS server and a real SQLite store.
// Run them with, e.g.:
//
//	go test ./segments -run '^$' -bench . -count 5

// BenchmarkBuild: SSG2 rows segments written from rows already encoded
// (the cost of the segment itself), into a Spool as GetOrBuild does.
func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			var rows []Row
			for r, err := range testRows(b, n, 100) {
				if err != nil {
					b.Fatal(err)
				}
				rows = append(rows, Row{ServerVersion: r.ServerVersion, Payload: append([]byte(nil), r.Payload...)})
			}
			seq := func(yield func(Row, error) bool) {
				for _, r := range rows {
					if !yield(r, nil) {
						return
					}
				}
			}
			dir := b.TempDir()
			var size int64
			b.ResetTimer()
			for b.Loop() {
				sp := NewSpool(dir, DefaultSpillBytes)
				if _, err := WriteRows(sp, testHeader, seq); err != nil {
					b.Fatal(err)
				}
				_ = sp.ID()
				size = sp.Size()
				if err := sp.Close(); err != nil {
					b.Fatal(err)
				}
			}
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(n)*float64(b.N)/sec, "rows/s")
			b.ReportMetric(float64(size)*float64(b.N)/sec/1e6, "MB/s")
		})
	}
}

// uniqueData returns a copy of base whose first 8 bytes are i, so every
// iteration stores a new address.
func uniqueData(b *testing.B, base []byte, i int) []byte {
	d := append([]byte(nil), base...)
	binary.LittleEndian.PutUint64(d, uint64(i))
	return d
}

func randomBytes(b *testing.B, size int) []byte {
	d := make([]byte, size)
	if _, err := rand.Read(d); err != nil {
		b.Fatal(err)
	}
	return d
}

var benchSizes = []struct {
	name string
	size int
}{{"1MB", 1 << 20}, {"50MB", 50 << 20}}

// BenchmarkPut: a new address uploaded and published (claim, digest
// check, upload, SQL transaction, release).
func BenchmarkPut(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			e := newEnv(b, openSQLite)
			s := e.node(Config{CacheBytes: -1})
			base := randomBytes(b, sz.size)
			i := 0
			b.SetBytes(int64(sz.size))
			for b.Loop() {
				i++
				if _, err := s.Put(e.ctx, uniqueData(b, base, i), storage.SegmentPublication{SegmentKey: testKey(fmt.Sprint("p", i), "e1", "d1")}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(sz.size)*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/put")
		})
	}
}

// BenchmarkRead: a stored segment streamed and verified (Open and read to
// the end), with no cache in front.
func BenchmarkRead(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			e := newEnv(b, openSQLite)
			s := e.node(Config{CacheBytes: -1})
			pub, err := s.Put(e.ctx, randomBytes(b, sz.size), storage.SegmentPublication{SegmentKey: testKey("pa", "e1", "d1")})
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 256<<10)
			b.SetBytes(int64(sz.size))
			for b.Loop() {
				r, err := s.Open(e.ctx, pub.SegmentID)
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.CopyBuffer(io.Discard, r, buf); err != nil || n != int64(sz.size) {
					b.Fatalf("read %d bytes, %v", n, err)
				}
			}
			b.ReportMetric(float64(sz.size)*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/read")
		})
	}
}

// BenchmarkFind: the reuse lookup, from the key cache and from SQL.
func BenchmarkFind(b *testing.B) {
	for _, cached := range []bool{true, false} {
		name := "cache"
		keys := 0
		if !cached {
			name, keys = "sql", -1
		}
		b.Run(name, func(b *testing.B) {
			e := newEnv(b, openSQLite)
			s := e.node(Config{KeyCacheEntries: keys})
			data := segmentBytes(b, 100, 10)
			for i := range 1000 { // an index with some rows
				if _, err := s.Put(e.ctx, data, storage.SegmentPublication{SegmentKey: testKey(fmt.Sprint("p", i), "e1", "d1")}); err != nil {
					b.Fatal(err)
				}
			}
			key, now := testKey("p500", "e1", "d1"), e.nowMs()
			for b.Loop() {
				if _, ok, err := s.Find(e.ctx, key, now); err != nil || !ok {
					b.Fatalf("Find = %v, %v", ok, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "µs/find")
		})
	}
}

// BenchmarkStorm: 50 concurrent GetOrBuild calls for one new key (a
// 20k-row page): builds/op must be 1.
func BenchmarkStorm(b *testing.B) {
	e := newEnv(b, openSQLite)
	s := e.node(Config{})
	var builds atomic.Int64
	build := rowsBuild(b, 20_000, 50, &builds)
	const clients = 50
	i := 0
	for b.Loop() {
		i++
		key := testKey(fmt.Sprint("storm", i), "e1", "d1")
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				if _, _, err := s.GetOrBuild(context.Background(), key, e.nowMs(), build); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
	b.ReportMetric(float64(builds.Load())/float64(b.N), "builds/op")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/storm")
	if builds.Load() != int64(b.N) {
		b.Fatalf("%d builds for %d storms", builds.Load(), b.N)
	}
}
