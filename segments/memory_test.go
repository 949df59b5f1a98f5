package segments

import (
	"io"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/syncnode/syncnode/ssp2"
)

// heapPeak samples the live heap every millisecond (runtime/metrics: no
// stop-the-world) until stop is called, and returns the peak above the
// heap at start.
func heapPeak() (stop func() uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	runtime.GC()
	base := read()
	done := make(chan struct{})
	var (
		wg   sync.WaitGroup
		peak uint64
	)
	wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			if v := read(); v > peak {
				peak = v
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		if peak < base {
			return 0
		}
		return peak - base
	}
}

// TestLargeSegmentBoundedMemory: a 100k-row segment (tens of MB) is built
// through a spill file, stored, and read back row by row, with the live
// heap (NATS server included, it runs in this process) growing by far
// less than the segment.
func TestLargeSegmentBoundedMemory(t *testing.T) {
	e := newEnv(t, openSQLite)
	s := e.node(Config{CacheBytes: -1})
	// Collect often, so the sampled heap is close to what is live rather
	// than garbage awaiting the next cycle.
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	const rows = 100_000
	const body = 1000 // ~100 MB in all
	key := testKey("pa", "e1", "d1")

	stop := heapPeak()
	pub, built, err := s.GetOrBuild(e.ctx, key, e.nowMs(), rowsBuild(t, rows, body, nil))
	buildPeak := stop()
	if err != nil || !built || pub.RowCount != rows {
		t.Fatalf("GetOrBuild = %+v, %v, %v", pub, built, err)
	}

	stop = heapPeak()
	r, err := s.Open(e.ctx, pub.SegmentID)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := ssp2.NewSegmentReader(r)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for sr.NextBlock() {
		for sr.Next() {
			n++
		}
	}
	if err := sr.Err(); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	readPeak := stop()
	if n != rows {
		t.Fatalf("read back %d rows, want %d", n, rows)
	}
	t.Logf("segment %d bytes; heap growth: build+put %d bytes, read %d bytes", pub.ByteLength, buildPeak, readPeak)
	// The growth does not depend on the segment's size (measured flat at
	// 22–25 MB from 10 to 135 MB segments): the build's spill threshold,
	// one SSG2 block, the upload window and one chunk on our side, the
	// file store's block buffers on the server's.
	const limit = 48 << 20
	if buildPeak > limit || readPeak > limit {
		t.Fatalf("heap grew by %d (build) and %d (read) bytes for a %d-byte segment; want under %d", buildPeak, readPeak, pub.ByteLength, uint64(limit))
	}
}
