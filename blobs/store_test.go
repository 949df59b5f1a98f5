package blobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.uber.org/goleak"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/internal/poll"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const fileSchema = `{"version":1,"tables":[{"name":"files","columns":[
	{"name":"id","type":"string"},
	{"name":"project_id","type":"string"},
	{"name":"att","type":"blob_ref","nullable":true}],
	"primaryKey":"id","scopes":["project:{project_id}"]}]}`

func openSQLite(tb testing.TB) storage.Store {
	tb.Helper()
	st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(tb.TempDir(), "sync.db")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

func openPostgres(tb testing.TB) storage.Store {
	tb.Helper()
	url, sch := pgtest.Schema(tb)
	st, err := pgstore.Open(context.Background(), pgstore.Config{URL: url, Schema: sch, MaxConns: 8})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

func eachStore(t *testing.T, fn func(t *testing.T, st storage.Store)) {
	for name, open := range map[string]func(testing.TB) storage.Store{"sqlite": openSQLite, "postgres": openPostgres} {
		t.Run(name, func(t *testing.T) { fn(t, open(t)) })
	}
}

type env struct {
	t     *testing.T
	st    storage.Store
	sc    *schema.Schema
	clock *clock.Manual
	srv   *embedded.Server
	s     *Store
}

func newEnv(t *testing.T, st storage.Store, grace time.Duration) *env {
	t.Helper()
	sc, err := schema.Parse([]byte(fileSchema))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureSchema(t.Context(), sc); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PartitionTouch(t.Context(), "p", 1); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, st: st, sc: sc, clock: clock.NewManual(time.UnixMilli(1_700_000_000_000))}
	srv := embeddedtest.Start(t)
	e.srv = srv
	s, err := New(Config{JetStream: srv.JetStream(), Store: st, MaxBytes: 1 << 20, ChunkSize: 64 << 10,
		OrphanGrace: &grace, SweepInterval: -1, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	e.s = s
	return e
}

func idOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func body(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func (e *env) put(data []byte) {
	e.t.Helper()
	if _, err := e.s.Put(e.t.Context(), Upload{Partition: "p", BlobID: idOf(data), MediaType: "application/pdf", Declared: int64(len(data)), Body: bytes.NewReader(data)}); err != nil {
		e.t.Fatalf("Put(%d bytes): %v", len(data), err)
	}
}

func (e *env) read(id string) []byte {
	e.t.Helper()
	b, ok, err := e.s.Held(e.t.Context(), "p", id)
	if err != nil || !ok {
		e.t.Fatalf("Held(%s) = %v, %v", id, ok, err)
	}
	r, err := e.s.Open(e.t.Context(), b)
	if err != nil {
		e.t.Fatal(err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

// reference writes a files row referencing the blob.
func (e *env) reference(rowID, blobID string, n int) {
	e.t.Helper()
	tb, _ := e.sc.Table("files")
	vals := []ssp2.Value{{Bytes: []byte(rowID)}, {Bytes: []byte("p1")}, {Bytes: fmt.Appendf(nil, `{"blobId":"%s","byteLength":%d}`, blobID, n)}}
	payload, err := tb.Codec.AppendRow(nil, vals)
	if err != nil {
		e.t.Fatal(err)
	}
	err = e.st.WriteTx(e.t.Context(), "p", func(tx storage.Tx) error {
		_, err := tx.RowUpsert(e.t.Context(), "files", storage.RowWrite{RowID: rowID, Values: vals,
			Scopes: map[string]string{"project_id": "p1"}, Payload: payload})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func TestPutOpen(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		e := newEnv(t, st, time.Hour)
		data := body(300_000, 1)
		id := idOf(data)
		e.put(data)
		if got := e.read(id); !bytes.Equal(got, data) {
			t.Fatalf("read back %d bytes, not the %d uploaded", len(got), len(data))
		}
		b, _, _ := e.s.Held(t.Context(), "p", id)
		if b.ByteLength != int64(len(data)) || b.MediaType != "application/pdf" {
			t.Fatalf("blob row = %+v", b)
		}
		// A re-upload reads nothing and restarts the grace period.
		e.clock.Advance(time.Minute)
		existed, err := e.s.Put(t.Context(), Upload{Partition: "p", BlobID: id, Declared: -1, Body: iotestErrReader{}})
		if err != nil || !existed {
			t.Fatalf("re-upload = %v, %v; want existed", existed, err)
		}
		again, _, _ := e.s.Held(t.Context(), "p", id)
		if again.Object != b.Object || again.UploadedAtMs != b.UploadedAtMs+time.Minute.Milliseconds() {
			t.Fatalf("re-upload changed the row to %+v from %+v", again, b)
		}
		// Another partition does not hold it.
		if _, ok, _ := e.s.Held(t.Context(), "q", id); ok {
			t.Fatal("the blob is held by another partition")
		}
		// Empty blobs are blobs.
		e.put(nil)
		if got := e.read(idOf(nil)); len(got) != 0 {
			t.Fatalf("empty blob read back %d bytes", len(got))
		}
	})
}

// A download pulls chunks as the reader asks for them: with a reader
// that has taken one byte of a 16-chunk blob, no consumer exists to push
// the rest into memory ahead of it (the Object Store's own Get makes a
// push consumer whose window reaches 32 MiB).
func TestOpenPullsChunks(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		e := newEnv(t, st, time.Hour)
		data := body(16*e.s.cfg.ChunkSize, 16)
		e.put(data)
		b, _, _ := e.s.Held(t.Context(), "p", idOf(data))
		r, err := e.s.Open(t.Context(), b)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		one := make([]byte, 1)
		if _, err := io.ReadFull(r, one); err != nil || one[0] != data[0] {
			t.Fatalf("first byte: %v", err)
		}
		info, err := e.s.stream.Info(t.Context())
		if err != nil || info.State.Consumers != 0 {
			t.Fatalf("an open download has %d consumers on the bucket (%v), want 0", info.State.Consumers, err)
		}
		rest, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(append(one, rest...), data) {
			t.Fatalf("the rest: %d bytes, %v", len(rest), err)
		}
	})
}

type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, fmt.Errorf("the body was read") }

func TestPutRefusals(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		e := newEnv(t, st, time.Hour)
		data := body(100_000, 2)
		big := body(1<<20+1, 3)
		for _, c := range []struct {
			name     string
			id       string
			declared int64
			limit    *int64
			body     []byte
			want     ssp2.Code
		}{
			{"hash mismatch", idOf(data[1:]), int64(len(data)), nil, data, ssp2.CodeBlobHashMismatch},
			{"malformed id", "sha256:abc", int64(len(data)), nil, data, ssp2.CodeBlobHashMismatch},
			{"declared too large", idOf(big), int64(len(big)), nil, big, ssp2.CodeBlobTooLarge},
			{"streamed too large", idOf(big), -1, nil, big, ssp2.CodeBlobTooLarge},
			{"declared past the limit", idOf(data), int64(len(data)), new(int64(len(data) - 1)), data, ssp2.CodeBlobTooLarge},
			{"streamed past the limit", idOf(data), -1, new(int64(len(data) - 1)), data, ssp2.CodeBlobTooLarge},
			{"a zero limit", idOf(data), -1, new(int64(0)), data, ssp2.CodeBlobTooLarge},
		} {
			_, err := e.s.Put(t.Context(), Upload{Partition: "p", BlobID: c.id, Declared: c.declared, Limit: c.limit, Body: bytes.NewReader(c.body)})
			if ssp2.CodeOf(err) != c.want {
				t.Errorf("%s: Put = %v, want %s", c.name, err, c.want)
			}
		}
		stats, err := st.BlobStats(t.Context())
		if err != nil || stats != (storage.BlobStats{}) {
			t.Fatalf("refused uploads recorded %+v, %v", stats, err)
		}
		objs, err := e.s.obs.List(t.Context())
		if err == nil && len(objs) > 0 {
			t.Fatalf("refused uploads left %d objects", len(objs))
		}
		if n := e.s.Metrics().UploadsRefused.Load(); n != 7 {
			t.Fatalf("UploadsRefused = %d, want 7", n)
		}
		// The chunks of refused bodies are gone too.
		info, err := e.s.stream.Info(t.Context())
		if err != nil || info.State.Msgs != 0 {
			t.Fatalf("refused uploads left %d messages in the bucket (%v)", info.State.Msgs, err)
		}
	})
}

// Concurrent uploads of one blob leave one row and one object.
func TestConcurrentPuts(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		e := newEnv(t, st, time.Hour)
		data := body(200_000, 4)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				_, err := e.s.Put(t.Context(), Upload{Partition: "p", BlobID: idOf(data), Declared: int64(len(data)), Body: bytes.NewReader(data)})
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		objs, err := e.s.obs.List(t.Context())
		if err != nil || len(objs) != 1 {
			t.Fatalf("concurrent uploads left %d objects (%v), want 1", len(objs), err)
		}
		if !bytes.Equal(e.read(idOf(data)), data) {
			t.Fatal("bytes differ")
		}
	})
}

// The sweep deletes exactly the blobs no row references whose last upload
// is older than the grace period, rows and objects (SPEC.md §5.9.2).
func TestSweep(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		e := newEnv(t, st, time.Hour)
		old, oldRef, fresh := body(1000, 5), body(1000, 6), body(1000, 7)
		e.put(old)
		e.put(oldRef)
		e.reference("r1", idOf(oldRef), len(oldRef))
		e.clock.Advance(50 * time.Minute)
		e.put(fresh)
		e.clock.Advance(11 * time.Minute) // old: 61 min, fresh: 11 min
		n, err := e.s.Sweep(t.Context())
		if err != nil || n != 1 {
			t.Fatalf("Sweep = %d, %v; want 1", n, err)
		}
		for _, c := range []struct {
			data []byte
			held bool
		}{{old, false}, {oldRef, true}, {fresh, true}} {
			if _, ok, _ := e.s.Held(t.Context(), "p", idOf(c.data)); ok != c.held {
				t.Errorf("blob %s held = %v, want %v", idOf(c.data)[:15], ok, c.held)
			}
		}
		objs, err := e.s.obs.List(t.Context())
		if err != nil || len(objs) != 2 {
			t.Fatalf("objects after sweep = %d (%v), want 2", len(objs), err)
		}
		// Past its grace period the fresh one goes too; the referenced one
		// never does.
		e.clock.Advance(time.Hour)
		if n, err := e.s.Sweep(t.Context()); err != nil || n != 1 {
			t.Fatalf("second Sweep = %d, %v; want 1", n, err)
		}
		if !bytes.Equal(e.read(idOf(oldRef)), oldRef) {
			t.Fatal("the referenced blob's bytes changed")
		}
		if got := e.s.Metrics().Swept.Load(); got != 2 {
			t.Fatalf("Swept = %d, want 2", got)
		}
	})
}

// An object no blob row names — its node died between storing it and
// writing the row, built here with the store's own object write — is
// swept once it is older than the grace period and MinObjectAge, by the
// Object Store's clock; named objects never are.
func TestSweepUnnamedObjects(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		e := newEnv(t, st, time.Hour)
		wall := clock.NewManual(time.Now().Add(-time.Second))
		e.s.cfg.Wall = wall
		kept := body(3000, 8)
		e.put(kept)
		e.reference("r1", idOf(kept), len(kept))
		unreferenced := body(2000, 9) // has a row: the row pass decides
		e.put(unreferenced)
		crashed := body(70_000, 10) // two chunks
		sum := sha256.Sum256(crashed)
		name := bus.BlobObject(hex.EncodeToString(sum[:]), nuid.Next())
		if _, err := bus.PutObject(t.Context(), e.s.cfg.JetStream, e.s.stream, bus.ObjectPut{Bucket: e.s.bucket, Name: name, ChunkSize: e.s.cfg.ChunkSize}, bytes.NewReader(crashed)); err != nil {
			t.Fatal(err)
		}
		// An object of another shape in the bucket is not the sweep's.
		if _, err := bus.PutObject(t.Context(), e.s.cfg.JetStream, e.s.stream, bus.ObjectPut{Bucket: e.s.bucket, Name: "not-a-blob", ChunkSize: 1024}, bytes.NewReader([]byte("x"))); err != nil {
			t.Fatal(err)
		}
		names := func() map[string]bool {
			objs, err := e.s.obs.List(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]bool{}
			for _, o := range objs {
				m[o.Name] = true
			}
			return m
		}
		if n, err := e.s.Sweep(t.Context()); err != nil || n != 0 || e.s.Metrics().SweptObjects.Load() != 0 || !names()[name] {
			t.Fatalf("Sweep within the grace = %d, %v; swept objects %d", n, err, e.s.Metrics().SweptObjects.Load())
		}
		// Past the grace period on the store's clock only: the object is
		// still young by the Object Store's.
		e.clock.Advance(2 * time.Hour)
		if n, err := e.s.Sweep(t.Context()); err != nil || n != 1 || !names()[name] {
			t.Fatalf("Sweep past the row grace = %d, %v; the unnamed object must wait for its own age", n, err)
		}
		wall.Advance(time.Hour + MinObjectAge)
		if n, err := e.s.Sweep(t.Context()); err != nil || n != 0 {
			t.Fatalf("Sweep past the object grace = %d, %v", n, err)
		}
		got := names()
		if got[name] || !got["not-a-blob"] || len(got) != 2 || e.s.Metrics().SweptObjects.Load() != 1 {
			t.Fatalf("objects after the sweep: %v (swept %d)", got, e.s.Metrics().SweptObjects.Load())
		}
		if !bytes.Equal(e.read(idOf(kept)), kept) {
			t.Fatal("the referenced blob's bytes changed")
		}
		// Its chunks went with it: what is left is the kept blob's and the
		// foreign object's.
		info, err := e.s.stream.Info(t.Context(), jetstream.WithSubjectFilter(bus.ObjectChunks(e.s.bucket)))
		if err != nil || len(info.State.Subjects) != 2 {
			t.Fatalf("chunk subjects after the sweep: %v (%v)", info.State.Subjects, err)
		}
	})
}

// stallReader yields its first n bytes, then blocks until release is
// closed, then fails with err or, when err is nil, yields the rest: an
// upload whose client (or node) stops mid-body.
type stallReader struct {
	data    []byte
	n, off  int
	release chan struct{}
	err     error
}

func (r *stallReader) Read(p []byte) (int, error) {
	if r.off == r.n {
		<-r.release
		if r.err != nil {
			return 0, r.err
		}
	}
	end := len(r.data)
	if r.off < r.n {
		end = r.n
	}
	if r.off == len(r.data) {
		return 0, io.EOF
	}
	k := copy(p, r.data[r.off:end])
	r.off += k
	return k, nil
}

// chunkSubjects are the bucket's chunk subjects and their message counts.
func (e *env) chunkSubjects() map[string]uint64 {
	e.t.Helper()
	info, err := e.s.stream.Info(e.t.Context(), jetstream.WithSubjectFilter(bus.ObjectChunks(e.s.bucket)))
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Subjects
}

// waitChunks waits for a chunk subject not in before holding n chunks and
// returns it with the time of its first chunk.
func (e *env) waitChunks(before map[string]uint64, n uint64) (string, time.Time) {
	e.t.Helper()
	var subj string
	poll.Until(e.t, 10*time.Second, fmt.Sprintf("a new chunk subject with %d chunks", n), func() bool {
		for s, c := range e.chunkSubjects() {
			if _, old := before[s]; !old && c == n {
				subj = s
				return true
			}
		}
		return false
	})
	m, err := e.s.stream.GetMsg(e.t.Context(), 1, jetstream.WithGetMsgSubject(subj))
	if err != nil {
		e.t.Fatal(err)
	}
	return subj, m.Time
}

// A node killed mid-upload leaves chunks on $O.<bucket>.C.<nuid> and no
// meta. Built here for real: a second node's store uploads through its
// own NATS connection, which is closed (the node dies) while the body is
// half sent, so neither its meta nor its cleanup purge reaches the
// server. The sweep purges those chunks once their first chunk is older
// than UploadTimeout + MinObjectAge, by the Object Store's clock, and
// keeps the chunks of an upload in progress on this node — which then
// completes intact — and the chunks of every live object.
func TestSweepChunksOfKilledUploads(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		e := newEnv(t, st, time.Hour)
		wall := clock.NewManual(time.Now())
		e.s.cfg.Wall = wall
		kept := body(100_000, 11)
		e.put(kept)
		e.reference("r1", idOf(kept), len(kept))
		chunk := e.s.cfg.ChunkSize

		// Node B, killed mid-upload.
		nc, err := e.srv.Connect()
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		nodeB, err := New(Config{JetStream: js, Store: st, MaxBytes: 1 << 20, ChunkSize: chunk, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := nodeB.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		lost := body(5*chunk, 12)
		stalled := &stallReader{data: lost, n: 3 * chunk, release: make(chan struct{}), err: errors.New("node killed")}
		done := make(chan error, 1)
		before := e.chunkSubjects()
		go func() {
			_, err := nodeB.Put(context.Background(), Upload{Partition: "p", BlobID: idOf(lost), Declared: int64(len(lost)), Body: stalled})
			done <- err
		}()
		killed, killedAt := e.waitChunks(before, 3)
		nc.Close()
		close(stalled.release)
		if err := <-done; err == nil {
			t.Fatal("the killed node's upload succeeded")
		}
		if err := nodeB.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := e.chunkSubjects()[killed]; got != 3 {
			t.Fatalf("the killed upload left %d chunks, want 3 (the leftover this test is about)", got)
		}
		if _, held, _ := e.s.Held(t.Context(), "p", idOf(lost)); held {
			t.Fatal("the killed upload was recorded")
		}

		// An upload in progress on this node, started after the kill.
		fresh := body(3*chunk+500, 13)
		inFlight := &stallReader{data: fresh, n: 2 * chunk, release: make(chan struct{})}
		before = e.chunkSubjects()
		go func() {
			_, err := e.s.Put(context.Background(), Upload{Partition: "p", BlobID: idOf(fresh), Declared: int64(len(fresh)), Body: inFlight})
			done <- err
		}()
		live, liveAt := e.waitChunks(before, 2)
		if !liveAt.After(killedAt) {
			t.Fatalf("the in-progress upload's first chunk (%v) is not after the killed one's (%v)", liveAt, killedAt)
		}

		// Both are young: nothing is collected.
		if _, err := e.s.Sweep(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := e.chunkSubjects(); got[killed] != 3 || got[live] != 2 || e.s.Metrics().SweptChunks.Load() != 0 {
			t.Fatalf("a sweep within UploadTimeout collected chunks: %v", got)
		}
		// Now the killed upload's first chunk is past UploadTimeout +
		// MinObjectAge and the in-progress one's is not.
		wall.Set(killedAt.Add(e.s.cfg.UploadTimeout + MinObjectAge + liveAt.Sub(killedAt)/2))
		if _, err := e.s.Sweep(t.Context()); err != nil {
			t.Fatal(err)
		}
		got := e.chunkSubjects()
		if _, ok := got[killed]; ok || got[live] != 2 || e.s.Metrics().SweptChunks.Load() != 1 {
			t.Fatalf("chunk subjects after the sweep: %v (swept %d); want %s gone and %s kept", got, e.s.Metrics().SweptChunks.Load(), killed, live)
		}
		close(inFlight.release)
		if err := <-done; err != nil {
			t.Fatalf("the in-progress upload after the sweep: %v", err)
		}
		if !bytes.Equal(e.read(idOf(fresh)), fresh) {
			t.Fatal("the in-progress upload's bytes changed")
		}
		// Much later, live objects' chunks are never collected.
		wall.Advance(24 * time.Hour)
		if _, err := e.s.Sweep(t.Context()); err != nil {
			t.Fatal(err)
		}
		if e.s.Metrics().SweptChunks.Load() != 1 || !bytes.Equal(e.read(idOf(kept)), kept) || !bytes.Equal(e.read(idOf(fresh)), fresh) {
			t.Fatalf("a later sweep touched live objects (swept chunks %d)", e.s.Metrics().SweptChunks.Load())
		}
	})
}

// A delete marker (the Object Store's own Delete, as older nodes deleted,
// killed before purging the marker) is purged by the sweep, chunks and
// meta: the bucket ends empty.
func TestSweepDeleteMarkers(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		e := newEnv(t, st, time.Hour)
		wall := clock.NewManual(time.Now())
		e.s.cfg.Wall = wall
		data := body(2000, 14)
		sum := sha256.Sum256(data)
		name := bus.BlobObject(hex.EncodeToString(sum[:]), nuid.Next())
		if _, err := bus.PutObject(t.Context(), e.s.cfg.JetStream, e.s.stream, bus.ObjectPut{Bucket: e.s.bucket, Name: name, ChunkSize: e.s.cfg.ChunkSize}, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if err := e.s.obs.Delete(t.Context(), name); err != nil {
			t.Fatal(err)
		}
		if info, err := e.s.stream.Info(t.Context()); err != nil || info.State.Msgs != 1 {
			t.Fatalf("after Delete the bucket holds %d messages (%v), want the marker", info.State.Msgs, err)
		}
		wall.Advance(time.Hour + MinObjectAge + time.Second)
		if _, err := e.s.Sweep(t.Context()); err != nil {
			t.Fatal(err)
		}
		if info, err := e.s.stream.Info(t.Context()); err != nil || info.State.Msgs != 0 {
			t.Fatalf("after the sweep the bucket holds %d messages (%v)", info.State.Msgs, err)
		}
	})
}

// An upload that outlives UploadTimeout is refused and leaves nothing,
// however complete its body: past its deadline it writes no meta, which
// is what lets the sweep collect a dead upload's chunks.
func TestUploadTimeout(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		e := newEnv(t, st, time.Hour)
		e.s.cfg.UploadTimeout = time.Nanosecond
		data := body(200_000, 15)
		_, err := e.s.Put(t.Context(), Upload{Partition: "p", BlobID: idOf(data), Declared: int64(len(data)), Body: bytes.NewReader(data)})
		if ssp2.CodeOf(err) != ssp2.CodeInvalidRequest {
			t.Fatalf("Put past UploadTimeout = %v, want %s", err, ssp2.CodeInvalidRequest)
		}
		if _, held, _ := e.s.Held(t.Context(), "p", idOf(data)); held {
			t.Fatal("a timed-out upload was recorded")
		}
		if info, err := e.s.stream.Info(t.Context()); err != nil || info.State.Msgs != 0 {
			t.Fatalf("a timed-out upload left %d messages (%v)", info.State.Msgs, err)
		}
	})
}
