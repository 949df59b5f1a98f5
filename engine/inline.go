package engine

import (
	"sync"

	"github.com/syncnode/syncnode/ssp2"
)

// Bounds of the inline frame cache: a few hot segments, and never more
// bytes than a fraction of the node's default memory limit. The payloads
// are the segment store's cached slices, so a hit costs no copy.
const (
	inlineCacheEntries = 64
	inlineCacheBytes   = 8 << 20
)

// inlineFrames keeps validated SEGMENT_INLINE frames of stored segments by
// segment id. A segment id is the hash of its bytes, so a frame checked
// once stays valid for every later response inlining that segment: a
// bootstrap storm walks each segment's rows once per node, not once per
// client.
type inlineFrames struct {
	mu    sync.Mutex
	m     map[string]*ssp2.SegmentInline
	order []string // insertion order: the oldest is evicted first
	bytes int
}

// frame returns the checked frame of the stored segment id whose bytes
// are data, validating data when the segment is not cached.
func (c *inlineFrames) frame(id string, data []byte) (*ssp2.SegmentInline, error) {
	c.mu.Lock()
	f, ok := c.m[id]
	c.mu.Unlock()
	if ok {
		return f, nil
	}
	f, err := ssp2.CheckedSegmentInline(data)
	if err != nil {
		return nil, err
	}
	if len(data) > inlineCacheBytes/4 {
		return f, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[id]; ok {
		return f, nil
	}
	if c.m == nil {
		c.m = map[string]*ssp2.SegmentInline{}
	}
	for len(c.order) > 0 && (len(c.order) >= inlineCacheEntries || c.bytes+len(data) > inlineCacheBytes) {
		old := c.order[0]
		c.order = c.order[1:]
		c.bytes -= len(c.m[old].Payload)
		delete(c.m, old)
	}
	c.m[id] = f
	c.order = append(c.order, id)
	c.bytes += len(data)
	return f, nil
}
