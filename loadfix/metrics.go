package loadfix

import (
	"bufio"
	"bytes"
	"math"
	"math/bits"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// histogram is a lock-free log-linear histogram of durations in
// microseconds: each power of two is split into subBuckets linear
// buckets, so a percentile is exact to within 1/subBuckets (about 6%)
// however long a load run lasts, in fixed memory. observe and percentiles
// may run concurrently; a percentile read during writes sees some of them.
type histogram struct {
	buckets [nBuckets]atomic.Int64
}

const (
	subBits    = 4
	subBuckets = 1 << subBits
	// Up to 2^40 µs (about 12 days) before the last bucket saturates.
	nBuckets = (40 - subBits + 1) * subBuckets
)

// bucketOf maps a value in µs to its bucket: values below subBuckets get
// one bucket each; above, the bucket is (exponent, top subBits mantissa
// bits).
func bucketOf(us uint64) int {
	if us < subBuckets {
		return int(us)
	}
	exp := bits.Len64(us) - 1 // ≥ subBits
	mant := (us >> (exp - subBits)) & (subBuckets - 1)
	i := (exp-subBits+1)*subBuckets + int(mant)
	return min(i, nBuckets-1)
}

// bucketMid is the middle of bucket i's range, in µs.
func bucketMid(i int) float64 {
	if i < subBuckets {
		return float64(i)
	}
	exp := i/subBuckets + subBits - 1
	mant := uint64(i % subBuckets)
	lo := (uint64(subBuckets) | mant) << (exp - subBits)
	width := uint64(1) << (exp - subBits)
	return float64(lo) + float64(width)/2
}

func (h *histogram) observe(d time.Duration) {
	h.buckets[bucketOf(uint64(max(d.Microseconds(), 0)))].Add(1)
}

func (h *histogram) reset() {
	for i := range h.buckets {
		h.buckets[i].Store(0)
	}
}

// percentiles returns the requested quantiles (0..1) in milliseconds; 0
// when nothing was observed.
func (h *histogram) percentiles(qs ...float64) []float64 {
	var counts [nBuckets]int64
	var total int64
	for i := range h.buckets {
		counts[i] = h.buckets[i].Load()
		total += counts[i]
	}
	out := make([]float64, len(qs))
	if total == 0 {
		return out
	}
	for j, q := range qs {
		rank := int64(math.Ceil(q * float64(total)))
		rank = min(max(rank, 1), total)
		var seen int64
		for i, c := range counts {
			seen += c
			if seen >= rank {
				out[j] = math.Round(bucketMid(i)) / 1000
				break
			}
		}
	}
	return out
}

// readRSS returns this process's resident set size and its peak, from
// /proc/self/status (VmRSS, VmHWM); zeros where that file does not exist.
func readRSS() (rss, peak int64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		var dst *int64
		switch {
		case bytes.HasPrefix(line, []byte("VmRSS:")):
			dst = &rss
		case bytes.HasPrefix(line, []byte("VmHWM:")):
			dst = &peak
		default:
			continue
		}
		// "VmRSS:	  123456 kB"
		fields := bytes.Fields(line[bytes.IndexByte(line, ':')+1:])
		if len(fields) == 0 {
			continue
		}
		if kb, err := strconv.ParseInt(string(fields[0]), 10, 64); err == nil {
			*dst = kb << 10
		}
	}
	return rss, peak
}
