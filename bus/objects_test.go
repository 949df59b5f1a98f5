package bus

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/embedded/embeddedtest"
)

// PutObject writes objects the Object Store reads back, digest and all,
// and a failed put leaves no chunks.
func TestPutObject(t *testing.T) {
	ctx := t.Context()
	js := embeddedtest.Start(t).JetStream()
	obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "objs"})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, ObjectStream("objs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{0, 1, 4096, 5*4096 + 7} {
		data := bytes.Repeat([]byte{byte(size)}, size)
		name := "o" + string(rune('a'+size%26))
		info, err := PutObject(ctx, js, stream, "objs", name, 4096, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
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
	before, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	_, err = PutObject(ctx, js, stream, "objs", "broken", 4096, io.MultiReader(bytes.NewReader(make([]byte, 3*4096)), errReader{boom}))
	if !errors.Is(err, boom) {
		t.Fatalf("failed put = %v, want the reader's error", err)
	}
	after, err := stream.Info(ctx)
	if err != nil || after.State.Msgs != before.State.Msgs {
		t.Fatalf("a failed put left %d messages (before %d): %v", after.State.Msgs, before.State.Msgs, err)
	}
	if _, err := obs.GetInfo(ctx, "broken"); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("failed put left an object: %v", err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
