package ssp2

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"testing/iotest"

	"github.com/syncnode/syncnode/internal/testvectors"
)

// The wire v3 set has every request, response and push case as JSON but no
// .bin for them (ssp2-vectors-v3/README.md). Each JSON case therefore goes
// JSON → encoder → decoder → rendering, which must equal the JSON, and every
// bytes-level rule is checked on the encoded bytes. A .bin that exists is
// held to the full vector rules, byte for byte.

// pushManifest is push/manifest.json: the cases and the table their sparse
// rows decode against.
type pushManifest struct {
	vectorManifest
	Columns []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		Nullable bool   `json:"nullable"`
	} `json:"columns"`
	PrimaryKey string `json:"primaryKey"`
}

// readOptional returns the file's bytes, or nil when it does not exist.
func readOptional(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// notesSparse is the sparse codec of the 8-column notes table the v3
// request payloads are encoded for.
func notesSparse(t testing.TB) *SparseCodec {
	t.Helper()
	c, err := NewSparseCodec(notesColumns, 0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestVectorsV3Messages(t *testing.T) {
	dir := testvectors.DirV3(t)
	for _, kind := range []string{"request", "response"} {
		m := readManifest(t, dir, kind)
		for _, c := range m.Cases {
			t.Run(kind+"/"+c.Name, func(t *testing.T) {
				want := readFile(t, filepath.Join(dir, kind, c.JSON))
				msg := unrender(t, want)
				if msg.WireVersion != 3 {
					t.Fatalf("wireVersion %d, want 3", msg.WireVersion)
				}
				enc, err := msg.AppendEncode(nil)
				if err != nil {
					t.Fatalf("AppendEncode: %v", err)
				}
				if v := enc[4:6]; v[0] != 3 || v[1] != 0 {
					t.Fatalf("envelope version bytes %x, want 03 00", v)
				}
				decoded := checkMessage(t, kind, enc, want)

				streamed, err := readAll(iotest.OneByteReader(bytes.NewReader(enc)))
				if err != nil {
					t.Fatalf("MessageReader: %v", err)
				}
				if !reflect.DeepEqual(streamed, decoded) {
					t.Fatalf("MessageReader decoded\n%#v\nwant\n%#v", streamed, decoded)
				}
				if kind == "request" {
					checkV3Request(t, enc)
				}
				if bin := readOptional(t, filepath.Join(dir, kind, c.Bin)); bin != nil {
					checkMessage(t, kind, bin, want)
					if r, _ := RenderMessage(bin); bytes.Equal(r, mustRender(t, enc)) && !bytes.Equal(bin, enc) {
						t.Fatalf("encoder differs from %s\n got: %x\nwant: %x", c.Bin, enc, bin)
					}
				}
			})
		}
		for _, c := range m.Invalid {
			t.Run(kind+"/invalid/"+c.Name, func(t *testing.T) {
				bin := readOptional(t, filepath.Join(dir, kind, c.Bin))
				if bin == nil {
					t.Skipf("%s is not in the v3 set (see its README); the rule is tested in TestV3EnvelopeNegatives", c.Bin)
				}
				checkInvalidMessage(t, bin, c.Error)
			})
		}
	}
}

func mustRender(t testing.TB, b []byte) []byte {
	t.Helper()
	r, err := RenderMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkV3Request checks what a v3 server does with a request vector: the
// default window accepts it, a v2-only window refuses it before any frame,
// and every upsert payload is a sparse row of the notes table whose
// present-everything form is the presence byte plus a full row.
func checkV3Request(t *testing.T, enc []byte) {
	t.Helper()
	req, err := DecodeRequestWindow(enc, DefaultWireWindow)
	if err != nil {
		t.Fatalf("DecodeRequestWindow(default): %v", err)
	}
	if !SparsePayloads(req.WireVersion) {
		t.Fatal("a v3 request does not carry sparse payloads")
	}
	if _, err := DecodeRequestWindow(enc, WireWindow{Min: 1, Max: 2}); CodeOf(err) != CodeInvalidRequest {
		t.Fatalf("window [1, 2] accepted a v3 request (%v)", err)
	}
	sparse := notesSparse(t)
	full, err := NewRowCodec(notesColumns)
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range req.Commits {
		for _, op := range pc.Operations {
			if op.Op != OpUpsert {
				continue
			}
			row, err := sparse.DecodeSparseRow(op.Payload, nil)
			if err != nil {
				t.Fatalf("operation %s/%s: payload is not a sparse notes row: %v", op.Table, op.RowID, err)
			}
			if row.Present.Count() != len(notesColumns) {
				t.Fatalf("operation %s: presence %x, want every column", op.RowID, row.Present)
			}
			fullRow, err := full.AppendRow(nil, row.Values)
			if err != nil || !bytes.Equal(fullRow, op.Payload[1:]) {
				t.Fatalf("operation %s: payload after the presence byte is not the full row (%v)\n got: %x\nwant: %x", op.RowID, err, op.Payload[1:], fullRow)
			}
			again, err := sparse.AppendSparseRow(nil, row)
			if err != nil || !bytes.Equal(again, op.Payload) {
				t.Fatalf("operation %s: sparse re-encoding differs (%v)", op.RowID, err)
			}
		}
	}
}

// TestVectorsV3AgainstV2Bins pins v3 bytes where the v2 set has them: a
// case whose frames are laid out identically in v2 and v3 must encode, from
// its v3 JSON, to the v2 .bin with only the version bytes changed; and each
// v3 push payload is 0xFF followed by the v2 full-row payload of the same
// operation (SSP2-V3-NOTES §2).
func TestVectorsV3AgainstV2Bins(t *testing.T) {
	v3 := testvectors.DirV3(t)
	v2 := testvectors.Dir(t)
	for _, c := range []string{"request/epoch-bound", "response/epoch-reset"} {
		t.Run(c, func(t *testing.T) {
			bin := readFile(t, filepath.Join(v2, c+".bin"))
			if bin[4] != 2 {
				t.Fatalf("%s is wire version %d, want 2", c, bin[4])
			}
			want := append([]byte(nil), bin...)
			want[4] = 3
			enc, err := unrender(t, readFile(t, filepath.Join(v3, c+".json"))).AppendEncode(nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(enc, want) {
				t.Fatalf("v3 bytes differ from the re-tagged v2 bin\n got: %x\nwant: %x", enc, want)
			}
		})
	}
	for _, c := range []string{"request/push-multi-commit", "request/combined"} {
		t.Run(c+"/payloads", func(t *testing.T) {
			p3 := payloads(t, unrender(t, readFile(t, filepath.Join(v3, c+".json"))))
			p2 := payloads(t, unrender(t, readFile(t, filepath.Join(v2, c+".json"))))
			if len(p3) != len(p2) || len(p3) == 0 {
				t.Fatalf("%d v3 payloads, %d v2", len(p3), len(p2))
			}
			for i := range p3 {
				if !bytes.Equal(p3[i], append([]byte{0xFF}, p2[i]...)) {
					t.Fatalf("payload %d: v3 %x is not 0xFF + v2 %x", i, p3[i], p2[i])
				}
			}
		})
	}
}

func payloads(t testing.TB, m *Message) [][]byte {
	t.Helper()
	var out [][]byte
	for _, f := range m.Frames {
		if pc, ok := f.(*PushCommit); ok {
			for _, op := range pc.Operations {
				if op.Payload != nil {
					out = append(out, op.Payload)
				}
			}
		}
	}
	return out
}

// readPushManifest reads push/manifest.json and compiles its table.
func readPushManifest(t testing.TB, dir string) (pushManifest, *SparseCodec) {
	t.Helper()
	var m pushManifest
	if err := json.Unmarshal(readFile(t, filepath.Join(dir, "push", "manifest.json")), &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Cases) == 0 {
		t.Fatal("push manifest lists no cases")
	}
	cols := make([]Column, len(m.Columns))
	pk := -1
	for i, c := range m.Columns {
		typ, ok := ParseColumnType(c.Type)
		if !ok {
			t.Fatalf("push manifest column %s: type %q", c.Name, c.Type)
		}
		cols[i] = Column{Name: c.Name, Type: typ, Nullable: c.Nullable}
		if c.Name == m.PrimaryKey {
			pk = i
		}
	}
	codec, err := NewSparseCodec(cols, pk)
	if err != nil {
		t.Fatal(err)
	}
	return m, codec
}

func TestVectorsV3Push(t *testing.T) {
	dir := testvectors.DirV3(t)
	m, codec := readPushManifest(t, dir)
	full, err := NewRowCodec(codec.Columns())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Cases {
		t.Run(c.Name, func(t *testing.T) {
			want := readFile(t, filepath.Join(dir, "push", c.JSON))
			row := unrenderSparseRow(t, codec, want)
			enc, err := codec.AppendSparseRow(nil, row)
			if err != nil {
				t.Fatalf("AppendSparseRow: %v", err)
			}
			checkSparseRow(t, codec, enc, want)
			if row.Present.Count() == len(codec.Columns()) {
				// The full-row special case: after the presence bitmap come
				// exactly the full-row codec's bytes.
				fr, err := full.AppendRow(nil, row.Values)
				if err != nil || !bytes.Equal(enc[len(row.Present):], fr) {
					t.Fatalf("full sparse row is not presence + full row (%v)\n got: %x\nwant: %x", err, enc[len(row.Present):], fr)
				}
			}
			if bin := readOptional(t, filepath.Join(dir, "push", c.Bin)); bin != nil {
				checkSparseRow(t, codec, bin, want)
				if !bytes.Equal(bin, enc) {
					t.Fatalf("encoder differs from %s\n got: %x\nwant: %x", c.Bin, enc, bin)
				}
			}
		})
	}
	for _, c := range m.Invalid {
		t.Run("invalid/"+c.Name, func(t *testing.T) {
			bin := readOptional(t, filepath.Join(dir, "push", c.Bin))
			if bin == nil {
				t.Skipf("%s is not in the v3 set (see its README); the rule is tested in TestSparseRowNegatives", c.Bin)
			}
			if _, err := codec.DecodeSparseRow(bin, nil); CodeOf(err) != c.Error {
				t.Fatalf("DecodeSparseRow error = %v, want code %q", err, c.Error)
			}
		})
	}
}

// checkSparseRow: enc decodes, renders to want and re-encodes to itself.
func checkSparseRow(t *testing.T, codec *SparseCodec, enc, want []byte) {
	t.Helper()
	rendered, err := RenderSparseRow(codec, enc)
	if err != nil {
		t.Fatalf("RenderSparseRow: %v", err)
	}
	assertSameJSON(t, rendered, want)
	if err := codec.ValidateSparseRow(enc); err != nil {
		t.Fatalf("ValidateSparseRow: %v", err)
	}
	row, err := codec.DecodeSparseRow(enc, nil)
	if err != nil {
		t.Fatalf("DecodeSparseRow: %v", err)
	}
	again, err := codec.AppendSparseRow(nil, row)
	if err != nil || !bytes.Equal(again, enc) {
		t.Fatalf("re-encoding differs (%v)\n got: %x\nwant: %x", err, again, enc)
	}
}

// The segment and realtime files of the v3 set are the v2 ones (its
// README): they must keep passing as v3's.
func TestVectorsV3Segments(t *testing.T) { checkSegmentVectors(t, testvectors.DirV3(t)) }
func TestVectorsV3Realtime(t *testing.T) { checkRealtimeVectors(t, testvectors.DirV3(t)) }

// v3Messages encodes every v3 request and response JSON case, for fuzz
// seeds and benchmarks; nil without the v3 set.
func v3Messages(tb testing.TB) [][]byte {
	dir, ok := testvectors.Lookup("SSP2_VECTORS_V3", "ssp2-vectors-v3")
	if !ok {
		return nil
	}
	var out [][]byte
	for _, kind := range []string{"request", "response"} {
		files, _ := filepath.Glob(filepath.Join(dir, kind, "*.json"))
		for _, name := range files {
			if filepath.Base(name) == "manifest.json" {
				continue
			}
			b, err := unrender(tb, readFile(tb, name)).AppendEncode(nil)
			if err != nil {
				tb.Fatalf("%s: %v", name, err)
			}
			out = append(out, b)
		}
	}
	return out
}

// TestUnrenderMatchesV2Bins validates the test-side unrender against the
// v1/v2 set, which has .bin files: JSON → Message → bytes must reproduce
// each .bin, except where a json-typed field's whitespace (not in the
// rendering) differs, which shows as a different raw rendering.
func TestUnrenderMatchesV2Bins(t *testing.T) {
	dir := testvectors.Dir(t)
	exact := 0
	for _, kind := range []string{"request", "response"} {
		for _, c := range readManifest(t, dir, kind).Cases {
			bin := readFile(t, filepath.Join(dir, kind, c.Bin))
			enc, err := unrender(t, readFile(t, filepath.Join(dir, kind, c.JSON))).AppendEncode(nil)
			if err != nil {
				t.Fatalf("%s/%s: %v", kind, c.Name, err)
			}
			if bytes.Equal(mustRender(t, bin), mustRender(t, enc)) {
				if !bytes.Equal(enc, bin) {
					t.Fatalf("%s/%s: unrendered bytes differ\n got: %x\nwant: %x", kind, c.Name, enc, bin)
				}
				exact++
			}
		}
	}
	if exact < 17 { // 19 cases, two with spaced json fields
		t.Fatalf("only %d cases compared byte for byte", exact)
	}
}
