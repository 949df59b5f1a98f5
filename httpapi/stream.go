package httpapi

import (
	"compress/gzip"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// encoding is a response Content-Encoding.
type encoding int

const (
	encIdentity encoding = iota
	encGzip
	encZstd
)

func (e encoding) String() string {
	switch e {
	case encGzip:
		return "gzip"
	case encZstd:
		return "zstd"
	}
	return "identity"
}

// negotiate picks zstd over gzip over identity from Accept-Encoding,
// honouring q=0 exclusions (SPEC.md §1.3, §5.5).
func negotiate(accept string) encoding {
	var zstdOK, gzipOK bool
	for _, part := range strings.Split(accept, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		name = strings.ToLower(strings.TrimSpace(name))
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					q = f
				}
			}
		}
		if q <= 0 {
			continue
		}
		switch name {
		case "zstd":
			zstdOK = true
		case "gzip", "x-gzip":
			gzipOK = true
		case "*":
			zstdOK, gzipOK = true, true
		}
	}
	switch {
	case zstdOK:
		return encZstd
	case gzipOK:
		return encGzip
	}
	return encIdentity
}

var (
	gzipPool = sync.Pool{New: func() any { w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed); return w }}
	zstdPool = sync.Pool{New: func() any {
		w, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
		return w
	}}
)

// streamWriter is the /sync response body: it sends the 200 headers on
// the first write, compresses as negotiated, and flushes on demand so a
// streamed response reaches the client section by section.
type streamWriter struct {
	w       http.ResponseWriter
	enc     encoding
	started bool
	gz      *gzip.Writer
	zs      *zstd.Encoder
	body    io.Writer
}

func newStreamWriter(w http.ResponseWriter, enc encoding) *streamWriter {
	return &streamWriter{w: w, enc: enc}
}

func (s *streamWriter) start() {
	s.started = true
	hdr := s.w.Header()
	hdr.Set("Content-Type", ContentType)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Vary", "Authorization, Accept-Encoding")
	switch s.enc {
	case encGzip:
		hdr.Set("Content-Encoding", "gzip")
		s.gz = gzipPool.Get().(*gzip.Writer)
		s.gz.Reset(s.w)
		s.body = s.gz
	case encZstd:
		hdr.Set("Content-Encoding", "zstd")
		s.zs = zstdPool.Get().(*zstd.Encoder)
		s.zs.Reset(s.w)
		s.body = s.zs
	default:
		s.body = s.w
	}
	s.w.WriteHeader(http.StatusOK)
}

func (s *streamWriter) Write(p []byte) (int, error) {
	if !s.started {
		s.start()
	}
	return s.body.Write(p)
}

// Flush pushes compressed bytes and the HTTP buffer to the client.
func (s *streamWriter) Flush() error {
	if !s.started {
		return nil
	}
	var err error
	switch {
	case s.gz != nil:
		err = s.gz.Flush()
	case s.zs != nil:
		err = s.zs.Flush()
	}
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
	return err
}

// Close finishes the compressed stream and returns encoders to their pools.
func (s *streamWriter) Close() error {
	var err error
	if s.gz != nil {
		err = s.gz.Close()
		s.gz.Reset(io.Discard)
		gzipPool.Put(s.gz)
		s.gz = nil
	}
	if s.zs != nil {
		err = s.zs.Close()
		s.zs.Reset(nil)
		zstdPool.Put(s.zs)
		s.zs = nil
	}
	return err
}
