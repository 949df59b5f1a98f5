package ssp2

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"reflect"
	"testing"
	"testing/iotest"

	"github.com/syncnode/syncnode/internal/testvectors"
)

// readAll drains a MessageReader, copying each frame out of the reader's
// buffer by re-encoding and decoding it.
func readAll(r io.Reader) (*Message, error) {
	mr, err := NewMessageReader(r)
	if err != nil {
		return nil, err
	}
	m := &Message{WireVersion: mr.WireVersion(), Kind: mr.Kind()}
	for {
		f, err := mr.Next()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return nil, err
		}
		// Frames alias the reader's buffer: keep a private copy.
		b, eerr := appendFrame(nil, f, m.WireVersion, "copy")
		if eerr != nil {
			return nil, eerr
		}
		cp, derr := decodeFrame(f.FrameType(), b[frameHeaderSize:], 0, m)
		if derr != nil {
			return nil, derr
		}
		m.Frames = append(m.Frames, cp)
	}
}

// TestMessageReaderVectors: the streaming reader agrees with DecodeMessage
// on every vector, valid and invalid, even when the input arrives one
// byte at a time.
func TestMessageReaderVectors(t *testing.T) {
	dir := testvectors.Dir(t)
	for _, kind := range []string{"request", "response"} {
		m := readManifest(t, dir, kind)
		for _, c := range m.Cases {
			t.Run(kind+"/"+c.Name, func(t *testing.T) {
				bin := readFile(t, filepath.Join(dir, kind, c.Bin))
				want, err := DecodeMessage(bin)
				if err != nil {
					t.Fatal(err)
				}
				got, err := readAll(iotest.OneByteReader(bytes.NewReader(bin)))
				if err != nil {
					t.Fatalf("stream: %v", err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("stream decoded\n%#v\nwant\n%#v", got, want)
				}
			})
		}
		for _, c := range m.Invalid {
			t.Run(kind+"/invalid/"+c.Name, func(t *testing.T) {
				bin := readFile(t, filepath.Join(dir, kind, c.Bin))
				_, err := readAll(bytes.NewReader(bin))
				if got := CodeOf(err); got != c.Error {
					t.Fatalf("stream error = %v (code %q), want %q", err, got, c.Error)
				}
			})
		}
	}
}

func TestMessageReaderTruncationAndTrailer(t *testing.T) {
	msg := &Message{WireVersion: 2, Kind: KindResponse, Frames: []Frame{
		&RespHeader{LogEpoch: "e1"},
		&SubStart{ID: "s", Status: SubActive, EffectiveScopes: map[string][]string{"p": {"1"}}},
		&SubEnd{NextCursor: 7},
	}}
	bin, err := msg.AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(bin); n++ {
		_, err := readAll(bytes.NewReader(bin[:n]))
		if CodeOf(err) != CodeInvalidRequest {
			t.Fatalf("prefix of %d bytes: err = %v, want sync.invalid_request", n, err)
		}
	}
	if _, err := readAll(bytes.NewReader(append(bin, 0))); CodeOf(err) != CodeInvalidRequest {
		t.Fatalf("trailing byte: err = %v, want sync.invalid_request", err)
	}

	// A failing transport is reported as itself, without an SSP2 code.
	boom := errors.New("connection reset")
	r := io.MultiReader(bytes.NewReader(bin[:20]), iotest.ErrReader(boom))
	_, err = readAll(r)
	if !errors.Is(err, boom) || CodeOf(err) != "" {
		t.Fatalf("transport failure: err = %v", err)
	}
}

// TestMessageReaderHostileLength: a frame header announcing 4 GiB costs
// only what the stream delivers.
func TestMessageReaderHostileLength(t *testing.T) {
	bin := []byte("SSP2\x02\x00\x02\x00\x10\xff\xff\xff\xff")
	mr, err := NewMessageReader(bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mr.Next(); CodeOf(err) != CodeInvalidRequest {
		t.Fatalf("err = %v", err)
	}
	if cap(mr.buf) > 1<<21 {
		t.Fatalf("buffer grew to %d bytes", cap(mr.buf))
	}
}
