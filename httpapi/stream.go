package httpapi

import (
	"compress/gzip"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

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
	// Cut, not Split, and EqualFold, not ToLower: this runs on every
	// request, and allocates nothing.
	var zstdOK, gzipOK bool
	for rest := accept; rest != ""; {
		var part string
		part, rest, _ = strings.Cut(rest, ",")
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		name = strings.TrimSpace(name)
		q := 1.0
		for params != "" {
			var p string
			p, params, _ = strings.Cut(params, ";")
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
		switch {
		case strings.EqualFold(name, "zstd"):
			zstdOK = true
		case strings.EqualFold(name, "gzip"), strings.EqualFold(name, "x-gzip"):
			gzipOK = true
		case name == "*":
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

// minCompressBytes: a response that flushes or ends before this many
// bytes goes out uncompressed. Compressing a few hundred bytes (a
// push-pull round, an empty pull) costs both ends more CPU than it saves
// on any link; a response that grows past it is compressed as negotiated.
const minCompressBytes = 1 << 10

// streamWriter is the /sync response body: it sends the 200 headers once
// the encoding is decided (at minCompressBytes, the first flush or the
// end), compresses as negotiated, and flushes on demand so a streamed
// response reaches the client section by section.
type streamWriter struct {
	w           *deadlineWriter
	contentType string // default ContentType
	enc         encoding
	started     bool   // something was written (perhaps still held in pending)
	decided     bool   // headers sent, body set
	pending     []byte // bytes held until the encoding is decided
	gz          *gzip.Writer
	zs          *zstd.Encoder
	body        io.Writer
}

func newStreamWriter(w *deadlineWriter, enc encoding) *streamWriter {
	return &streamWriter{w: w, enc: enc}
}

// syncWriter is the response side of one POST /sync in a single recycled
// allocation: the deadline writer, the stream writer, and the buffer the
// stream writer holds a small response in until it ends (a push + pull
// round's response is a few hundred bytes; growing a fresh buffer for it
// cost several allocations per request).
type syncWriter struct {
	dw   deadlineWriter
	sw   streamWriter
	held [minCompressBytes]byte
}

var syncWriterPool = sync.Pool{New: func() any { return new(syncWriter) }}

// getSyncWriter returns the stream writer of a /sync response; putSyncWriter
// recycles it once the response is finished and nothing refers to it.
func getSyncWriter(w http.ResponseWriter, timeout time.Duration, enc encoding) *syncWriter {
	s := syncWriterPool.Get().(*syncWriter)
	s.dw = deadlineWriter{w: w, rc: *http.NewResponseController(w), timeout: timeout}
	// pending never outgrows held: Write appends only while the total
	// stays below minCompressBytes.
	s.sw = streamWriter{w: &s.dw, enc: enc, pending: s.held[:0]}
	return s
}

func putSyncWriter(s *syncWriter) {
	s.dw, s.sw = deadlineWriter{}, streamWriter{}
	syncWriterPool.Put(s)
}

// The /sync response's fixed header values, shared by every response so
// setting them allocates nothing. Nothing in net/http or here modifies a
// header value in place (Set and Add replace or append to the slice,
// whose capacity is its length).
var (
	hdrSyncContentType = []string{ContentType}
	hdrNoStore         = []string{"no-store"}
	hdrSyncVary        = []string{"Authorization, Accept-Encoding"}
	hdrGzip            = []string{"gzip"}
	hdrZstd            = []string{"zstd"}
)

// decide sends the headers for enc and writes what was held back.
func (s *streamWriter) decide(enc encoding) error {
	s.enc = enc
	s.start()
	p := s.pending
	s.pending = nil
	if len(p) == 0 {
		return nil
	}
	_, err := s.body.Write(p)
	return err
}

func (s *streamWriter) start() {
	s.decided = true
	hdr := s.w.w.Header()
	if s.contentType == "" {
		hdr["Content-Type"] = hdrSyncContentType
		hdr["Cache-Control"] = hdrNoStore
		hdr["Vary"] = hdrSyncVary
	}
	switch s.enc {
	case encGzip:
		hdr["Content-Encoding"] = hdrGzip
		s.gz = gzipPool.Get().(*gzip.Writer)
		s.gz.Reset(s.w)
		s.body = s.gz
	case encZstd:
		hdr["Content-Encoding"] = hdrZstd
		s.zs = zstdPool.Get().(*zstd.Encoder)
		s.zs.Reset(s.w)
		s.body = s.zs
	default:
		s.body = s.w
	}
	s.w.w.WriteHeader(http.StatusOK)
}

func (s *streamWriter) Write(p []byte) (int, error) {
	s.started = true
	if !s.decided {
		if s.enc != encIdentity && len(s.pending)+len(p) < minCompressBytes {
			s.pending = append(s.pending, p...)
			return len(p), nil
		}
		if err := s.decide(s.enc); err != nil {
			return 0, err
		}
	}
	return s.body.Write(p)
}

// Flush pushes compressed bytes and the HTTP buffer to the client. A
// response still below minCompressBytes is sent uncompressed.
func (s *streamWriter) Flush() error {
	if !s.started {
		return nil
	}
	if !s.decided {
		if err := s.decide(encIdentity); err != nil {
			return err
		}
	}
	var err error
	switch {
	case s.gz != nil:
		err = s.gz.Flush()
	case s.zs != nil:
		err = s.zs.Flush()
	}
	if ferr := s.w.Flush(); err == nil {
		err = ferr
	}
	return err
}

// Close finishes the response: a small one goes out uncompressed with
// its length; a compressed stream is finished and its encoder pooled.
func (s *streamWriter) Close() error {
	if s.started && !s.decided {
		s.w.w.Header().Set("Content-Length", strconv.Itoa(len(s.pending)))
		if err := s.decide(encIdentity); err != nil {
			return err
		}
	}
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
