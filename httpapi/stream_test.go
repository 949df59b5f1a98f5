package httpapi

import (
	"bytes"
	"io"
	"net/http/httptest"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestStreamWriterSmallResponsesUncompressed: a response that ends or
// flushes below minCompressBytes goes out as identity; one that grows
// past it is compressed as negotiated.
func TestStreamWriterSmallResponsesUncompressed(t *testing.T) {
	small := bytes.Repeat([]byte("s"), 300)
	large := bytes.Repeat([]byte("L"), 3*minCompressBytes)

	for _, tc := range []struct {
		name     string
		writes   func(s *streamWriter)
		encoding string
		body     []byte
	}{
		{"small then end", func(s *streamWriter) { s.Write(small); s.Write(small) }, "", append(append([]byte{}, small...), small...)},
		{"small then flush then large", func(s *streamWriter) { s.Write(small); s.Flush(); s.Write(large) }, "", append(append([]byte{}, small...), large...)},
		{"small then large", func(s *streamWriter) { s.Write(small); s.Write(large); s.Flush() }, "zstd", append(append([]byte{}, small...), large...)},
		{"nothing", func(s *streamWriter) { s.Flush() }, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			s := newStreamWriter(newDeadlineWriter(rec, 0), encZstd)
			tc.writes(s)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if got := rec.Header().Get("Content-Encoding"); got != tc.encoding {
				t.Fatalf("Content-Encoding = %q, want %q", got, tc.encoding)
			}
			body := rec.Body.Bytes()
			if tc.encoding == "zstd" {
				d, err := zstd.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				if body, err = io.ReadAll(d); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(body, tc.body) {
				t.Fatalf("body of %d bytes, want %d", len(body), len(tc.body))
			}
			if tc.name == "small then end" && rec.Header().Get("Content-Length") != "600" {
				t.Fatalf("Content-Length = %q", rec.Header().Get("Content-Length"))
			}
		})
	}
}

// negotiate picks zstd over gzip over identity and honours q=0, with any
// case and spacing.
func TestNegotiate(t *testing.T) {
	for accept, want := range map[string]encoding{
		"":                      encIdentity,
		"identity":              encIdentity,
		"zstd, gzip":            encZstd,
		"gzip":                  encGzip,
		"br, x-gzip":            encGzip,
		"zstd;q=0, gzip":        encGzip,
		"gzip;q=0, zstd;q=0":    encIdentity,
		" ZStd ; Q=0.5 ,gzip":   encZstd,
		"gzip; foo=bar; q=0":    encIdentity,
		"*":                     encZstd,
		"*;q=0":                 encIdentity,
		"deflate, GZIP;q=1.0,,": encGzip,
	} {
		if got := negotiate(accept); got != want {
			t.Errorf("negotiate(%q) = %v, want %v", accept, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { negotiate("zstd, gzip;q=0.9, *;q=0") }); n != 0 {
		t.Errorf("negotiate allocates %v times", n)
	}
}
