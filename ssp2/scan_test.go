package ssp2

import (
	"bytes"
	"errors"
	"testing"
)

// scanAll pushes b to a fresh scanner in chunks of size n and returns the
// first message it completes.
func scanAll(t *testing.T, kind MsgKind, b []byte, n int) (msg []byte, excess int, err error) {
	t.Helper()
	s := NewStreamScanner(kind, 1<<20)
	for len(b) > 0 {
		k := min(n, len(b))
		m, ex, done, err := s.Push(b[:k])
		if err != nil || done {
			return m, ex, err
		}
		b = b[k:]
	}
	return nil, 0, nil
}

func TestStreamScannerFindsEndAtAnyChunking(t *testing.T) {
	msg := req(fReq, fPush, fPull, fSub)
	for n := 1; n <= len(msg); n++ {
		got, excess, err := scanAll(t, KindRequest, msg, n)
		if err != nil || excess != 0 || !bytes.Equal(got, msg) {
			t.Fatalf("chunks of %d: got %x (excess %d, err %v), want %x", n, got, excess, err, msg)
		}
	}
}

func TestStreamScannerReportsExcessAndRestarts(t *testing.T) {
	msg := req(fReq, fPull)
	s := NewStreamScanner(KindRequest, 1<<20)
	got, excess, done, err := s.Push(append(append([]byte(nil), msg...), 'x', 'y'))
	if err != nil || !done || excess != 2 || !bytes.Equal(got, msg) {
		t.Fatalf("got %x excess %d done %v err %v", got, excess, done, err)
	}
	if s.Started() {
		t.Fatal("scanner still holds bytes after a complete message")
	}
	got, _, done, err = s.Push(msg)
	if err != nil || !done || !bytes.Equal(got, msg) {
		t.Fatalf("second message: %x %v %v", got, done, err)
	}
}

func TestStreamScannerRefusesBadEnvelopes(t *testing.T) {
	good := req(fReq, fPull)
	cases := map[string][]byte{
		"magic":    append([]byte("SSP3"), good[4:]...),
		"version":  append(append([]byte("SSP2"), 9, 0), good[6:]...),
		"kind":     resp(fResp),
		"flags":    append(append(append([]byte(nil), good[:7]...), 1), good[8:]...),
		"too long": env(KindRequest, 1, fReq, fr(&PullHeader{Accept: 3}), bytes.Repeat([]byte{0x17, 0, 0, 1, 0}, 1)),
	}
	for name, b := range cases {
		s := NewStreamScanner(KindRequest, 64<<10)
		_, _, done, err := s.Push(b)
		switch {
		case name == "too long":
			if !errors.Is(err, ErrStreamTooLarge) {
				t.Errorf("%s: err %v, want ErrStreamTooLarge", name, err)
			}
		case CodeOf(err) != CodeInvalidRequest || done:
			t.Errorf("%s: done %v err %v, want sync.invalid_request", name, done, err)
		}
	}
}

// FuzzStreamScanner: the scanner never panics; what it completes is
// exactly the prefix of the stream through an END frame, whatever the
// chunking.
func FuzzStreamScanner(f *testing.F) {
	seedFromVectors(f, "bin", "request")
	f.Add(req(fReq, fPush, fPull, fSub))
	f.Fuzz(func(t *testing.T, b []byte) {
		whole, wex, werr := scanAll(t, KindRequest, b, len(b)+1)
		for _, n := range []int{1, 3, 7} {
			got, ex, err := scanAll(t, KindRequest, b, n)
			if (err == nil) != (werr == nil) || !bytes.Equal(got, whole) {
				t.Fatalf("chunks of %d: %x %v; whole: %x %v", n, got, err, whole, werr)
			}
			if got != nil && len(got)+ex > len(b) {
				t.Fatalf("message and excess exceed the input")
			}
		}
		if whole != nil && (!bytes.Equal(whole, b[:len(whole)]) || wex != len(b)-len(whole)) {
			t.Fatalf("message is not a prefix of the stream")
		}
	})
}
