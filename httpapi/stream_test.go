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
