package bus

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/embedded/embeddedtest"
)

// objectBucket is a fresh Object Store bucket "objs" and its stream.
func objectBucket(t *testing.T) (jetstream.JetStream, jetstream.ObjectStore, jetstream.Stream) {
	t.Helper()
	js := embeddedtest.Start(t).JetStream()
	obs, err := js.CreateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: "objs"})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(t.Context(), ObjectStream("objs"))
	if err != nil {
		t.Fatal(err)
	}
	return js, obs, stream
}

// PutObject writes objects the Object Store reads back, digest and all,
// and a failed put leaves no chunks.
func TestPutObject(t *testing.T) {
	ctx := t.Context()
	js, obs, stream := objectBucket(t)
	n := 0
	for _, size := range []int{0, 1, 4096, 5*4096 + 7} {
		data := bytes.Repeat([]byte{byte(size)}, size)
		sum := sha256.Sum256(data)
		digest := "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])
		// From a reader, from memory hashed, from memory with its digest.
		mem := append([]byte{}, data...) // not nil, even when empty
		for _, p := range []ObjectPut{{}, {Bytes: mem}, {Bytes: mem, Digest: digest}} {
			n++
			name := fmt.Sprintf("o%d", n)
			p.Bucket, p.Name, p.ChunkSize = "objs", name, 4096
			info, err := PutObject(ctx, js, stream, p, bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if info.Digest != digest || info.Size != uint64(size) {
				t.Fatalf("size %d: put info %+v, want digest %s", size, info, digest)
			}
			checkObject(t, obs, name, data, info)
		}
	}
	before, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	_, err = PutObject(ctx, js, stream, ObjectPut{Bucket: "objs", Name: "broken", ChunkSize: 4096}, io.MultiReader(bytes.NewReader(make([]byte, 3*4096)), errReader{boom}))
	if !errors.Is(err, boom) {
		t.Fatalf("failed put = %v, want the reader's error", err)
	}
	// A refusal of VerifyFunc writes no meta and leaves no chunks.
	refused := errors.New("refused")
	var seen jetstream.ObjectInfo
	_, err = PutObject(ctx, js, stream, ObjectPut{Bucket: "objs", Name: "unverified", ChunkSize: 4096,
		VerifyFunc: func(i jetstream.ObjectInfo) error { seen = i; return refused }}, bytes.NewReader(make([]byte, 2*4096+1)))
	if !errors.Is(err, refused) || seen.Size != 2*4096+1 || seen.Chunks != 3 || seen.Digest == "" {
		t.Fatalf("verified put = %v, VerifyFunc saw %+v", err, seen)
	}
	after, err := stream.Info(ctx)
	if err != nil || after.State.Msgs != before.State.Msgs {
		t.Fatalf("failed puts left %d messages (before %d): %v", after.State.Msgs, before.State.Msgs, err)
	}
	for _, name := range []string{"broken", "unverified"} {
		if _, err := obs.GetInfo(ctx, name); !errors.Is(err, jetstream.ErrObjectNotFound) {
			t.Fatalf("failed put left object %s: %v", name, err)
		}
	}
}

func checkObject(t *testing.T, obs jetstream.ObjectStore, name string, data []byte, info jetstream.ObjectInfo) {
	t.Helper()
	ctx := t.Context()
	size := len(data)
	stored, err := obs.GetInfo(ctx, name)
	if err != nil || stored.Digest != info.Digest || stored.Size != uint64(size) {
		t.Fatalf("size %d: stored %+v (%v), put %+v", size, stored, err, info)
	}
	r, err := obs.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("size %d: read back %d bytes, %v", size, len(got), err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// ReadObject reads back what the Object Store wrote, chunk by chunk, and
// fails with ErrObjectCorrupt — never a clean io.EOF — when a chunk is
// missing or the bytes are not the meta's size or digest.
func TestReadObject(t *testing.T) {
	ctx := t.Context()
	_, obs, stream := objectBucket(t)
	read := func(info *jetstream.ObjectInfo) ([]byte, error) {
		r, err := ReadObject(ctx, stream, info)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		return io.ReadAll(r)
	}
	for i, size := range []int{0, 1, 4096, 5*4096 + 7} {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(j * 31)
		}
		name := fmt.Sprint("r", i)
		if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: 4096}}, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		info, err := obs.GetInfo(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := read(info); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("size %d: read %d bytes, %v", size, len(got), err)
		}
	}
	info, err := obs.GetInfo(ctx, "r3") // 6 chunks
	if err != nil {
		t.Fatal(err)
	}
	wrongDigest := *info
	wrongDigest.Digest = "SHA-256=" + base64.URLEncoding.EncodeToString(make([]byte, 32))
	wrongSize := *info
	wrongSize.Size--
	for what, bad := range map[string]*jetstream.ObjectInfo{"another digest": &wrongDigest, "another size": &wrongSize} {
		if _, err := read(bad); !errors.Is(err, ErrObjectCorrupt) {
			t.Errorf("%s: read = %v, want ErrObjectCorrupt", what, err)
		}
	}
	m, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(ObjectChunkSubject("objs", info.NUID)))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, m.Sequence+2); err != nil { // the third chunk
		t.Fatal(err)
	}
	if _, err := read(info); !errors.Is(err, ErrObjectCorrupt) {
		t.Fatalf("a missing chunk: read = %v, want ErrObjectCorrupt", err)
	}
}
