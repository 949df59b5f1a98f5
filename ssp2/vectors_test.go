package ssp2

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/syncnode/syncnode/internal/testvectors"
)

type vectorManifest struct {
	Kind  string `json:"kind"`
	Cases []struct {
		Name string `json:"name"`
		Bin  string `json:"bin"`
		JSON string `json:"json"`
	} `json:"cases"`
	Invalid []struct {
		Name  string `json:"name"`
		Bin   string `json:"bin"`
		JSON  string `json:"json"`
		Error Code   `json:"error"`
	} `json:"invalid"`
}

func readManifest(t testing.TB, dir, kind string) vectorManifest {
	t.Helper()
	var m vectorManifest
	if err := json.Unmarshal(readFile(t, filepath.Join(dir, kind, "manifest.json")), &m); err != nil {
		t.Fatalf("manifest %s: %v", kind, err)
	}
	if len(m.Cases) == 0 {
		t.Fatalf("manifest %s lists no cases", kind)
	}
	return m
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jsonValue parses JSON with numbers normalized (integers as int64, the
// rest as float64) so renderings compare by value, not by number spelling.
func jsonValue(t testing.TB, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("parse JSON %q: %v", b, err)
	}
	return normalizeNumbers(v)
}

func normalizeNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return i
		}
		f, _ := strconv.ParseFloat(string(v), 64)
		return f
	case []any:
		for i := range v {
			v[i] = normalizeNumbers(v[i])
		}
	case map[string]any:
		for k := range v {
			v[k] = normalizeNumbers(v[k])
		}
	}
	return v
}

func assertSameJSON(t *testing.T, got, want []byte) {
	t.Helper()
	if g, w := jsonValue(t, got), jsonValue(t, want); !reflect.DeepEqual(g, w) {
		t.Errorf("rendering differs\n got: %s\nwant: %s", got, want)
	}
}

func TestVectorsMessages(t *testing.T) {
	dir := testvectors.Dir(t)
	for _, kind := range []string{"request", "response"} {
		m := readManifest(t, dir, kind)
		for _, c := range m.Cases {
			t.Run(kind+"/"+c.Name, func(t *testing.T) {
				bin := readFile(t, filepath.Join(dir, kind, c.Bin))
				checkMessage(t, kind, bin, readFile(t, filepath.Join(dir, kind, c.JSON)))
			})
		}
		for _, c := range m.Invalid {
			t.Run(kind+"/invalid/"+c.Name, func(t *testing.T) {
				checkInvalidMessage(t, readFile(t, filepath.Join(dir, kind, c.Bin)), c.Error)
			})
		}
	}
}

// checkMessage holds bin, a message of the given kind, to the vector rules:
// it renders to want, decodes, and re-encodes byte for byte through Message
// and, for a response, through the streaming encoder (one Write per frame).
func checkMessage(t *testing.T, kind string, bin, want []byte) *Message {
	t.Helper()
	rendered, err := RenderMessage(bin)
	if err != nil {
		t.Fatalf("RenderMessage: %v", err)
	}
	assertSameJSON(t, rendered, want)

	msg, err := DecodeMessage(bin)
	if err != nil {
		t.Fatalf("DecodeMessage: %v", err)
	}
	if msg.Kind.String() != kind {
		t.Fatalf("kind = %s, want %s", msg.Kind, kind)
	}
	out, err := msg.AppendEncode(nil)
	if err != nil {
		t.Fatalf("AppendEncode: %v", err)
	}
	if !bytes.Equal(out, bin) {
		t.Fatalf("re-encoding differs\n got: %x\nwant: %x", out, bin)
	}

	switch kind {
	case "response":
		var rec writeRecorder
		enc := NewResponseEncoder(&rec, msg.WireVersion)
		for _, f := range msg.Frames {
			if err := enc.WriteFrame(f); err != nil {
				t.Fatalf("WriteFrame(%s): %v", f.FrameType(), err)
			}
		}
		if err := enc.End(); err != nil {
			t.Fatalf("End: %v", err)
		}
		if !bytes.Equal(rec.all(), bin) {
			t.Fatalf("streamed bytes differ\n got: %x\nwant: %x", rec.all(), bin)
		}
		if got, want := len(rec.writes), len(msg.Frames)+1; got != want {
			t.Fatalf("%d writes, want one per frame plus END = %d", got, want)
		}
	case "request":
		req, err := DecodeRequestWindow(bin, codecWindow)
		if err != nil {
			t.Fatalf("DecodeRequestWindow: %v", err)
		}
		if req.Header == nil || len(req.Commits)+len(req.Subscriptions) == 0 && req.Pull == nil {
			t.Fatalf("DecodeRequest lost frames: %+v", req)
		}
	}
	return msg
}

// checkInvalidMessage: bin fails to decode and to render with code want.
func checkInvalidMessage(t *testing.T, bin []byte, want Code) {
	t.Helper()
	_, err := DecodeMessage(bin)
	if got := CodeOf(err); got != want {
		t.Fatalf("DecodeMessage error = %v (code %q), want code %q", err, got, want)
	}
	if _, err := RenderMessage(bin); CodeOf(err) != want {
		t.Fatalf("RenderMessage error = %v, want code %q", err, want)
	}
}

func TestVectorsSegments(t *testing.T) { checkSegmentVectors(t, testvectors.Dir(t)) }

func checkSegmentVectors(t *testing.T, dir string) {
	m := readManifest(t, dir, "segment")
	for _, c := range m.Cases {
		t.Run(c.Name, func(t *testing.T) {
			bin := readFile(t, filepath.Join(dir, "segment", c.Bin))
			rendered, err := RenderSegment(bin)
			if err != nil {
				t.Fatalf("RenderSegment: %v", err)
			}
			assertSameJSON(t, rendered, readFile(t, filepath.Join(dir, "segment", c.JSON)))
			if err := ValidateSegment(bin); err != nil {
				t.Fatalf("ValidateSegment: %v", err)
			}
			if out := reencodeSegment(t, bin); !bytes.Equal(out, bin) {
				t.Fatalf("re-encoding differs\n got: %x\nwant: %x", out, bin)
			}
		})
	}
	for _, c := range m.Invalid {
		t.Run("invalid/"+c.Name, func(t *testing.T) {
			bin := readFile(t, filepath.Join(dir, "segment", c.Bin))
			if got := CodeOf(ValidateSegment(bin)); got != c.Error {
				t.Fatalf("ValidateSegment code %q, want %q", got, c.Error)
			}
			if _, err := RenderSegment(bin); CodeOf(err) != c.Error {
				t.Fatalf("RenderSegment error = %v, want code %q", err, c.Error)
			}
			if got := CodeOf(readSegmentStream(bin)); got != c.Error {
				t.Fatalf("SegmentReader code %q, want %q", got, c.Error)
			}
		})
	}
}

// reencodeSegment reads bin with a SegmentReader and writes it back with a
// SegmentWriter, keeping its block boundaries and checking both decode
// paths (raw row bytes and values) agree.
func reencodeSegment(t testing.TB, bin []byte) []byte {
	t.Helper()
	r, err := NewSegmentReader(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("NewSegmentReader: %v", err)
	}
	var out bytes.Buffer
	w, err := NewSegmentWriter(&out, r.Header())
	if err != nil {
		t.Fatalf("NewSegmentWriter: %v", err)
	}
	var vals []Value
	toggle := false
	for r.NextBlock() {
		for r.Next() {
			// Alternate the two write paths; both must give the same bytes.
			if toggle {
				if vals, err = r.Values(vals); err != nil {
					t.Fatalf("Values: %v", err)
				}
				err = w.WriteValues(r.ServerVersion(), vals)
			} else {
				err = w.WriteRow(r.ServerVersion(), r.Row())
			}
			if err != nil {
				t.Fatalf("write row: %v", err)
			}
			toggle = !toggle
		}
		if err := w.FlushBlock(); err != nil {
			t.Fatalf("FlushBlock: %v", err)
		}
	}
	if err := r.Err(); err != nil {
		t.Fatalf("SegmentReader: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if w.BytesWritten() != int64(out.Len()) {
		t.Fatalf("BytesWritten %d, wrote %d", w.BytesWritten(), out.Len())
	}
	return out.Bytes()
}

// readSegmentStream reads a whole segment through SegmentReader, returning
// the first error.
func readSegmentStream(bin []byte) error {
	r, err := NewSegmentReader(bytes.NewReader(bin))
	if err != nil {
		return err
	}
	var vals []Value
	for r.NextBlock() {
		for r.Next() {
			if vals, err = r.Values(vals); err != nil {
				return err
			}
		}
	}
	return r.Err()
}

func TestVectorsRealtime(t *testing.T) { checkRealtimeVectors(t, testvectors.Dir(t)) }

func checkRealtimeVectors(t *testing.T, dir string) {
	m := readManifest(t, dir, "realtime")
	for _, c := range m.Cases {
		t.Run(c.Name, func(t *testing.T) {
			in := readFile(t, filepath.Join(dir, "realtime", c.JSON))
			msg, err := ParseControlMessage(in)
			if err != nil {
				t.Fatalf("ParseControlMessage: %v", err)
			}
			if _, ok := msg.(*UnknownControl); ok {
				t.Fatalf("%s parsed as an unknown event", c.Name)
			}
			out, err := MarshalControl(msg)
			if err != nil {
				t.Fatalf("MarshalControl: %v", err)
			}
			assertSameJSON(t, out, in)
		})
	}
	for _, c := range m.Invalid {
		t.Run("invalid/"+c.Name, func(t *testing.T) {
			_, err := ParseControlMessage(readFile(t, filepath.Join(dir, "realtime", c.JSON)))
			if got := CodeOf(err); got != c.Error {
				t.Fatalf("ParseControlMessage error = %v, want code %q", err, c.Error)
			}
		})
	}
}

// writeRecorder keeps every Write separately.
type writeRecorder struct{ writes [][]byte }

func (w *writeRecorder) Write(p []byte) (int, error) {
	w.writes = append(w.writes, append([]byte(nil), p...))
	return len(p), nil
}

func (w *writeRecorder) all() []byte { return bytes.Join(w.writes, nil) }
