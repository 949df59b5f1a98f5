package segments

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

func TestConfig(t *testing.T) {
	t.Parallel()
	def := Config{}.WithDefaults()
	if def.TTL != DefaultTTL || def.ReuseMargin != 15*time.Minute || def.ChunkSize != DefaultChunkSize ||
		def.CacheMaxSegment != DefaultCacheMaxSegment {
		t.Fatalf("defaults = %+v", def)
	}
	if short := (Config{TTL: time.Minute}).WithDefaults(); short.ReuseMargin != 15*time.Second {
		t.Fatalf("ReuseMargin for a 1-minute TTL = %v", short.ReuseMargin)
	}
	base := Config{JetStream: jetstream.JetStream(nil), Store: nil}
	if err := base.WithDefaults().Validate(); err != nil {
		t.Fatalf("Validate(defaults) = %v", err)
	}
	if _, err := New(base); err == nil || !strings.Contains(err.Error(), "JetStream") || !strings.Contains(err.Error(), "Store") {
		t.Fatalf("New(no wiring) = %v", err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{TTL: time.Hour, ReuseMargin: time.Hour}, "ReuseMargin"},
		{Config{ChunkSize: 100}, "ChunkSize"},
		{Config{ClaimTTL: 1500 * time.Millisecond}, "ClaimTTL"},
		{Config{GCGrace: time.Minute}, "GCGrace"},
		{Config{CacheBytes: 1 << 20, CacheMaxSegment: 2 << 20}, "CacheMaxSegment"},
		{Config{MaintenanceInterval: -2}, "MaintenanceInterval"},
	} {
		err := tc.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
}

func TestSpool(t *testing.T) {
	t.Parallel()
	data := segmentBytes(t, 3000, 50)
	for _, limit := range []int{len(data) * 2, 4096} {
		dir := t.TempDir()
		sp := NewSpool(dir, limit)
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 777)
			if _, err := sp.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if sp.Size() != int64(len(data)) || sp.ID() != ssp2.SegmentID(data) {
			t.Fatalf("limit %d: size %d id %s, want %d %s", limit, sp.Size(), sp.ID(), len(data), ssp2.SegmentID(data))
		}
		if spilled := limit < len(data); sp.Spilled() != spilled {
			t.Fatalf("limit %d: Spilled = %v", limit, sp.Spilled())
		}
		for range 2 { // every Reader starts over
			r, err := sp.Reader()
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("limit %d: read back %d bytes, %v", limit, len(got), err)
			}
		}
		if _, err := sp.Write([]byte("x")); err == nil {
			t.Fatal("write after sealing accepted")
		}
		if err := sp.Close(); err != nil {
			t.Fatal(err)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Fatalf("spill files left after Close: %v", left)
		}
	}
}

func TestWriteRowsDeterministic(t *testing.T) {
	t.Parallel()
	a, b := segmentBytes(t, 2500, 40), segmentBytes(t, 2500, 40)
	if !bytes.Equal(a, b) || ssp2.SegmentID(a) != ssp2.SegmentID(b) {
		t.Fatal("the same rows gave different segments")
	}
	if err := ssp2.ValidateSegment(a); err != nil {
		t.Fatalf("ValidateSegment: %v", err)
	}
	if c := segmentBytes(t, 2501, 40); bytes.Equal(a, c) {
		t.Fatal("different rows gave the same segment")
	}
	bad := func(yield func(Row, error) bool) { yield(Row{}, errors.New("scan failed")) }
	if _, err := WriteRows(io.Discard, testHeader, bad); err == nil || !strings.Contains(err.Error(), "scan failed") {
		t.Fatalf("WriteRows with a failing source = %v", err)
	}
}

// TestGrants: one address published under two scope digests, two
// partitions and two epochs stays downloadable under each grant and not
// under any other; the expiry of one publication leaves the others; the
// bytes go only when the last publication is pruned.
func TestGrants(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		e := newEnv(t, open)
		s := e.node(Config{TTL: time.Hour})
		data := segmentBytes(t, 1000, 30)
		id := ssp2.SegmentID(data)
		var short storage.SegmentPublication
		for _, part := range []string{"pa", "pb"} {
			for _, epoch := range []string{"e1", "e2"} {
				for _, digest := range []string{"d1", "d2"} {
					pub := storage.SegmentPublication{SegmentKey: testKey(part, epoch, digest), RowCount: 1000}
					if part == "pb" && epoch == "e2" && digest == "d2" {
						pub.ExpiresAtMs = e.t0 + time.Minute.Milliseconds() // expires first
					}
					got, err := s.Put(e.ctx, data, pub)
					if err != nil {
						t.Fatalf("Put(%s/%s/%s): %v", part, epoch, digest, err)
					}
					if got.SegmentID != id || got.ByteLength != int64(len(data)) || got.CreatedAtMs != e.t0 || got.SegmentKey != pub.SegmentKey {
						t.Fatalf("Put returned %+v", got)
					}
					if pub.ExpiresAtMs != 0 {
						short = got
					}
				}
			}
		}
		st, err := s.Stats(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Objects != 1 || st.Publications != 8 || st.Uploads != 1 || st.UploadsSkipped != 7 {
			t.Fatalf("Stats after 8 puts = %+v", st)
		}

		grants := func(part, epoch string, now int64) ([]storage.SegmentPublication, error) {
			return s.Grants(e.ctx, id, part, epoch, now)
		}
		for _, part := range []string{"pa", "pb"} {
			for _, epoch := range []string{"e1", "e2"} {
				live, err := grants(part, epoch, e.t0+1)
				if err != nil || len(live) != 2 || live[0].ScopeDigest != "d1" || live[1].ScopeDigest != "d2" {
					t.Fatalf("Grants(%s, %s) = %+v, %v", part, epoch, live, err)
				}
				for _, p := range live {
					if p.Partition != part || p.LogEpoch != epoch {
						t.Fatalf("Grants(%s, %s) holds %+v", part, epoch, p)
					}
				}
			}
		}
		for _, q := range [][2]string{{"pc", "e1"}, {"pa", "e3"}, {"", ""}} {
			_, err := grants(q[0], q[1], e.t0+1)
			wantCode(t, err, ssp2.CodeNotFound)
		}
		_, err = s.Grants(e.ctx, "sha256:"+strings.Repeat("0", 64), "pa", "e1", e.t0)
		wantCode(t, err, ssp2.CodeNotFound)
		if got, err := s.Bytes(e.ctx, id); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Bytes = %d bytes, %v", len(got), err)
		}

		// One publication expires: its grant narrows, the others stay.
		now := e.advance(2 * time.Minute)
		live, err := grants("pb", "e2", now)
		if err != nil || len(live) != 1 || live[0].ScopeDigest != "d1" {
			t.Fatalf("Grants(pb, e2) after one expiry = %+v, %v", live, err)
		}
		res, err := s.Prune(e.ctx, now)
		if err != nil || res.Publications != 1 || res.Objects != 0 {
			t.Fatalf("Prune = %+v, %v", res, err)
		}
		seg, err := s.Get(e.ctx, id)
		if err != nil || len(seg.Publications) != 7 {
			t.Fatalf("Get after prune = %d publications, %v", len(seg.Publications), err)
		}
		for _, p := range seg.Publications {
			if p.SegmentKey == short.SegmentKey {
				t.Fatal("the expired publication survived Prune")
			}
		}
		other := e.node(Config{CacheBytes: -1}) // another node: reads the bucket
		if got, err := other.Bytes(e.ctx, id); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Bytes from another node after a partial prune = %d bytes, %v", len(got), err)
		}

		// Every publication expired but not pruned: segment_expired.
		now = e.advance(time.Hour)
		_, err = grants("pa", "e1", now)
		wantCode(t, err, ssp2.CodeSegmentExpired)
		res, err = s.Prune(e.ctx, now)
		if err != nil || res.Publications != 7 || res.Objects != 1 {
			t.Fatalf("final Prune = %+v, %v", res, err)
		}
		_, err = grants("pa", "e1", now)
		wantCode(t, err, ssp2.CodeNotFound)
		_, err = other.Bytes(e.ctx, id)
		wantCode(t, err, ssp2.CodeNotFound)
		_, err = s.Get(e.ctx, id)
		wantCode(t, err, ssp2.CodeNotFound)
		if subjects, _ := e.chunkSubjects(s); subjects != 0 {
			t.Fatalf("%d chunk subjects left after pruning everything", subjects)
		}
		if st, _ := s.Stats(e.ctx); st.Objects != 0 || st.Publications != 0 {
			t.Fatalf("Stats after pruning everything = %+v", st)
		}
		// The address can be stored again.
		if _, err := s.Put(e.ctx, data, storage.SegmentPublication{SegmentKey: testKey("pa", "e1", "d1")}); err != nil {
			t.Fatalf("Put after prune: %v", err)
		}
		if got, err := other.Bytes(e.ctx, id); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Bytes after re-put = %d bytes, %v", len(got), err)
		}
	})
}

// TestDownloadErrors: the typed codes of the download path.
func TestDownloadErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, openSQLite)
	s := e.node(Config{TTL: time.Hour})
	data := segmentBytes(t, 10, 10)
	pub, err := s.Put(e.ctx, data, storage.SegmentPublication{SegmentKey: testKey("pa", "e1", "d1")})
	if err != nil {
		t.Fatal(err)
	}
	unknown := "sha256:" + strings.Repeat("ab", 32)
	for _, id := range []string{unknown, "sha256:XYZ", "../../etc/passwd", "", strings.Repeat("x", 5000)} {
		_, err := s.Bytes(e.ctx, id)
		wantCode(t, err, ssp2.CodeNotFound)
		_, err = s.Open(e.ctx, id)
		wantCode(t, err, ssp2.CodeNotFound)
		_, err = s.Get(e.ctx, id)
		wantCode(t, err, ssp2.CodeNotFound)
		_, err = s.Grants(e.ctx, id, "pa", "e1", e.t0)
		wantCode(t, err, ssp2.CodeNotFound)
	}
	_, err = s.Grants(e.ctx, pub.SegmentID, "pb", "e1", e.t0) // foreign partition
	wantCode(t, err, ssp2.CodeNotFound)
	_, err = s.Grants(e.ctx, pub.SegmentID, "pa", "e0", e.t0) // foreign epoch
	wantCode(t, err, ssp2.CodeNotFound)
	_, err = s.Grants(e.ctx, pub.SegmentID, "pa", "e1", pub.ExpiresAtMs)
	wantCode(t, err, ssp2.CodeSegmentExpired)
	if _, err := Live(nil, 0); ssp2.CodeOf(err) != ssp2.CodeNotFound {
		t.Fatalf("Live(nil) = %v", err)
	}
	// A publication naming other bytes is refused before anything is stored.
	if _, err := s.Put(e.ctx, data, storage.SegmentPublication{SegmentID: unknown, SegmentKey: testKey("pa", "e1", "d2")}); err == nil {
		t.Fatal("Put with a foreign segment id accepted")
	}
}

// TestCollision: an address whose stored object holds other bytes is
// refused loudly, and nothing is recorded.
func TestCollision(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		e := newEnv(t, open)
		s := e.node(Config{})
		a, b := segmentBytes(t, 10, 10), segmentBytes(t, 11, 10)
		hexA := strings.TrimPrefix(ssp2.SegmentID(a), "sha256:")
		// Another writer put b under a's name. (Objects are written
		// with the store's upload, as nats.go's Put can leak a goroutine.)
		if err := s.upload(e.ctx, bus.SegmentObject(hexA), spoolOf(b)); err != nil {
			t.Fatal(err)
		}
		_, err := s.Put(e.ctx, a, storage.SegmentPublication{SegmentKey: testKey("pa", "e1", "d1")})
		wantCode(t, err, ssp2.CodeStorageContentCollision)
		if st, _ := s.Stats(e.ctx); st.Objects != 0 || st.Publications != 0 {
			t.Fatalf("Stats after a collision = %+v", st)
		}
		// Reading the squatted address fails too: its digest is not the
		// address's.
		if _, err := s.Open(e.ctx, ssp2.SegmentID(a)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open(squatted) = %v, want ErrCorrupt", err)
		}
	})
}

// TestConcurrentPutsLeaveNoOrphans: identical puts racing on two nodes
// upload once; GC then removes crash leftovers (chunks of no object, an
// object with no index row) only once they pass the grace period.
func TestConcurrentPutsLeaveNoOrphans(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		e := newEnv(t, open)
		cfg := Config{ChunkSize: 64 << 10, CacheBytes: -1}
		nodes := []*Store{e.node(cfg), e.node(cfg)}
		data := segmentBytes(t, 20000, 100) // ~2.4 MB, ~38 chunks
		id := ssp2.SegmentID(data)
		const perNode = 8
		var wg sync.WaitGroup
		errs := make(chan error, 2*perNode)
		for n, s := range nodes {
			for i := range perNode {
				wg.Go(func() {
					_, err := s.Put(e.ctx, data, storage.SegmentPublication{SegmentKey: testKey(fmt.Sprint("p", n, "-", i), "e1", "d1")})
					errs <- err
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		var uploads int64
		for _, s := range nodes {
			st, _ := s.Stats(e.ctx)
			uploads += st.Uploads
		}
		wantChunks := uint64((len(data) + cfg.ChunkSize - 1) / cfg.ChunkSize)
		if subjects, msgs := e.chunkSubjects(nodes[0]); uploads != 1 || subjects != 1 || msgs != wantChunks {
			t.Fatalf("after racing puts: %d uploads, %d chunk subjects, %d chunks; want 1, 1, %d", uploads, subjects, msgs, wantChunks)
		}

		// Leftovers of crashes: chunks of an upload that never wrote its
		// meta, and an object whose index row was never committed.
		s := nodes[0]
		for i := range 3 {
			if _, err := e.js.Publish(e.ctx, bus.ObjectChunkSubject(s.Bucket(), "CRASHEDUPLOAD"), []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		stray := segmentBytes(t, 5, 5)
		if err := s.upload(e.ctx, bus.SegmentObject(strings.TrimPrefix(ssp2.SegmentID(stray), "sha256:")), spoolOf(stray)); err != nil {
			t.Fatal(err)
		}
		if subjects, _ := e.chunkSubjects(s); subjects != 3 {
			t.Fatalf("%d chunk subjects with leftovers, want 3", subjects)
		}
		res, err := s.GC(e.ctx, e.nowMs())
		if err != nil || res != (GCResult{}) {
			t.Fatalf("GC within the grace period = %+v, %v; want nothing collected", res, err)
		}
		res, err = s.GC(e.ctx, e.advance(DefaultGCGrace+5*time.Minute))
		if err != nil || res != (GCResult{ChunkSubjects: 1, Objects: 1}) {
			t.Fatalf("GC after the grace period = %+v, %v", res, err)
		}
		if subjects, msgs := e.chunkSubjects(s); subjects != 1 || msgs != wantChunks {
			t.Fatalf("after GC: %d chunk subjects, %d chunks; want 1, %d", subjects, msgs, wantChunks)
		}
		if got, err := nodes[1].Bytes(e.ctx, id); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Bytes after GC = %d bytes, %v", len(got), err)
		}
		if st, _ := s.Stats(e.ctx); st.Objects != 1 || st.Publications != 2*perNode {
			t.Fatalf("Stats = %+v", st)
		}
	})
}

// TestCorruptionDetected: a chunk rewritten, a chunk lost, or a meta
// digest rewritten through the raw stream fails the read with ErrCorrupt
// (never returns bytes, never hangs).
func TestCorruptionDetected(t *testing.T) {
	t.Parallel()
	data := segmentBytes(t, 400, 40) // ~22 KB: 6 chunks of 4 KiB
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, e *env, s *Store, info *jetstream.ObjectInfo)
		atOpen bool
	}{
		{"chunk rewritten", func(t *testing.T, e *env, s *Store, info *jetstream.ObjectInfo) {
			subj := bus.ObjectChunkSubject(s.Bucket(), info.NUID)
			m, err := s.stream.GetMsg(e.ctx, 1, jetstream.WithGetMsgSubject(subj))
			if err != nil {
				t.Fatal(err)
			}
			m, err = s.stream.GetMsg(e.ctx, m.Sequence+1, jetstream.WithGetMsgSubject(subj)) // the second chunk
			if err != nil {
				t.Fatal(err)
			}
			if err := s.stream.DeleteMsg(e.ctx, m.Sequence); err != nil {
				t.Fatal(err)
			}
			bad := bytes.Clone(m.Data)
			bad[0] ^= 0xff
			if _, err := e.js.Publish(e.ctx, subj, bad); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"chunk lost", func(t *testing.T, e *env, s *Store, info *jetstream.ObjectInfo) {
			subj := bus.ObjectChunkSubject(s.Bucket(), info.NUID)
			m, err := s.stream.GetLastMsgForSubject(e.ctx, subj)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.stream.DeleteMsg(e.ctx, m.Sequence); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"meta digest rewritten", func(t *testing.T, e *env, s *Store, info *jetstream.ObjectInfo) {
			forged := *info
			forged.Digest = "SHA-256=" + strings.Repeat("A", 43) + "="
			b, err := json.Marshal(&forged)
			if err != nil {
				t.Fatal(err)
			}
			msg := nats.NewMsg(bus.ObjectMetaSubject(s.Bucket(), info.Name))
			msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
			msg.Data = b
			if _, err := e.js.PublishMsg(e.ctx, msg); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, openSQLite)
			s := e.node(Config{ChunkSize: 4 << 10})
			pub, err := s.Put(e.ctx, data, storage.SegmentPublication{SegmentKey: testKey("pa", "e1", "d1")})
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.obs.GetInfo(e.ctx, bus.SegmentObject(strings.TrimPrefix(pub.SegmentID, "sha256:")))
			if err != nil || info.Chunks < 3 {
				t.Fatalf("GetInfo = %+v, %v", info, err)
			}
			tc.tamper(t, e, s, info)
			reader := e.node(Config{ChunkSize: 4 << 10}) // a node with a cold cache
			r, err := reader.Open(e.ctx, pub.SegmentID)
			if tc.atOpen {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Open = %v, want ErrCorrupt", err)
				}
			} else {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if _, err := io.ReadAll(r); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("reading = %v, want ErrCorrupt", err)
				}
			}
			if b, err := reader.Bytes(e.ctx, pub.SegmentID); !errors.Is(err, ErrCorrupt) || b != nil {
				t.Fatalf("Bytes = %d bytes, %v; want ErrCorrupt", len(b), err)
			}
		})
	}
}

// TestGetOrBuildStorm: 50 concurrent requests for one key build once and
// all get the same publication; a second node racing the same key stores
// the bytes once and merges into one publication.
func TestGetOrBuildStorm(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		e := newEnv(t, open)
		nodes := []*Store{e.node(Config{}), e.node(Config{})}
		key := testKey("pa", "e1", "d1")
		var calls atomic.Int64
		build := rowsBuild(t, 5000, 50, &calls)
		const n = 50
		pubs := make([]storage.SegmentPublication, 2*n)
		builtN := make([]atomic.Int64, 2)
		var wg sync.WaitGroup
		for i := range 2 * n {
			wg.Go(func() {
				node := i % 2
				p, built, err := nodes[node].GetOrBuild(e.ctx, key, e.nowMs(), build)
				if err != nil {
					t.Error(err)
				}
				if built {
					builtN[node].Add(1)
				}
				pubs[i] = p
			})
		}
		wg.Wait()
		for node := range 2 {
			st, _ := nodes[node].Stats(e.ctx)
			if b := builtN[node].Load(); b > 1 || st.Builds != b || st.Builds+st.Reuses != n {
				t.Fatalf("node %d: built %d, stats %+v; want at most one build and %d answers", node, b, st, n)
			}
		}
		if c := calls.Load(); c < 1 || c > 2 {
			t.Fatalf("build ran %d times on two nodes", c)
		}
		for i, p := range pubs {
			if p.SegmentID != pubs[0].SegmentID || p.SegmentKey != key || p.RowCount != 5000 {
				t.Fatalf("answer %d = %+v, answer 0 = %+v", i, p, pubs[0])
			}
		}
		st, _ := nodes[0].Stats(e.ctx)
		if st.Objects != 1 || st.Publications != 1 {
			t.Fatalf("index after the storm = %+v", st)
		}
		if subjects, _ := e.chunkSubjects(nodes[0]); subjects != 1 {
			t.Fatalf("%d chunk subjects after the storm", subjects)
		}
	})
}

// countingIndex counts the writes reaching the real store.
type countingIndex struct {
	storage.SegmentIndex
	writes atomic.Int64
}

func (c *countingIndex) SegmentPublish(ctx context.Context, p storage.SegmentPublication) (storage.SegmentPublication, error) {
	c.writes.Add(1)
	return c.SegmentIndex.SegmentPublish(ctx, p)
}

func (c *countingIndex) SegmentExpire(ctx context.Context, nowMs int64, limit int) (int64, error) {
	c.writes.Add(1)
	return c.SegmentIndex.SegmentExpire(ctx, nowMs, limit)
}

func (c *countingIndex) SegmentDelete(ctx context.Context, id string) (bool, error) {
	c.writes.Add(1)
	return c.SegmentIndex.SegmentDelete(ctx, id)
}

// TestReuse: a reuse reads the cache or SQL and writes nothing; a
// publication near its expiry is rebuilt, and the identical bytes merge
// into the same publication with a later expiry.
func TestReuse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, openSQLite)
	ix := &countingIndex{SegmentIndex: e.index}
	s := e.node(Config{Store: ix, TTL: time.Hour, ReuseMargin: 10 * time.Minute})
	key := testKey("pa", "e1", "d1")
	var calls atomic.Int64
	build := rowsBuild(t, 100, 10, &calls)
	first, built, err := s.GetOrBuild(e.ctx, key, e.nowMs(), build)
	if err != nil || !built {
		t.Fatalf("first GetOrBuild = %v, %v", built, err)
	}
	writes := ix.writes.Load()
	// From the cache, and from SQL on a node with a cold cache.
	cold := e.node(Config{Store: ix, TTL: time.Hour, ReuseMargin: 10 * time.Minute})
	for _, node := range []*Store{s, cold, cold} {
		p, built, err := node.GetOrBuild(e.ctx, key, e.advance(time.Minute), build)
		if err != nil || built || p != first {
			t.Fatalf("reuse = %+v, %v, %v; want %+v", p, built, err, first)
		}
	}
	if w := ix.writes.Load(); w != writes || calls.Load() != 1 {
		t.Fatalf("reuses wrote %d times and built %d times", w-writes, calls.Load()-1)
	}
	if p, ok, err := cold.Find(e.ctx, key, e.nowMs()); err != nil || !ok || p != first {
		t.Fatalf("Find = %+v, %v, %v", p, ok, err)
	}
	// Within the margin of its expiry the page is rebuilt; the same
	// bytes merge: same address, later expiry.
	now := e.advance(55 * time.Minute)
	again, built, err := s.GetOrBuild(e.ctx, key, now, build)
	if err != nil || !built || again.SegmentID != first.SegmentID || again.ExpiresAtMs != now+time.Hour.Milliseconds() || again.CreatedAtMs != first.CreatedAtMs {
		t.Fatalf("rebuild near expiry = %+v, %v, %v", again, built, err)
	}
	if st, _ := s.Stats(e.ctx); st.Publications != 1 || st.Objects != 1 {
		t.Fatalf("Stats after the rebuild = %+v", st)
	}
}

// TestBuildFailures: a failing or panicking build fails every caller and
// stores nothing.
func TestBuildFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, openSQLite)
	s := e.node(Config{})
	key := testKey("pa", "e1", "d1")
	_, _, err := s.GetOrBuild(e.ctx, key, e.t0, func(ctx context.Context, w io.Writer) (int64, string, error) {
		return 0, "", errors.New("scan failed")
	})
	if err == nil || !strings.Contains(err.Error(), "scan failed") {
		t.Fatalf("failing build = %v", err)
	}
	_, _, err = s.GetOrBuild(e.ctx, key, e.t0, func(ctx context.Context, w io.Writer) (int64, string, error) {
		panic("boom")
	})
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("panicking build = %v", err)
	}
	if st, _ := s.Stats(e.ctx); st.Objects != 0 || st.Builds != 0 {
		t.Fatalf("Stats after failed builds = %+v", st)
	}
	// A caller that gives up does not stop the shared build.
	ctx, cancel := context.WithCancel(e.ctx)
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := s.GetOrBuild(ctx, key, e.t0, func(ctx context.Context, w io.Writer) (int64, string, error) {
			<-release
			return rowsBuild(t, 10, 10, nil)(ctx, w)
		})
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller = %v", err)
	}
	close(release)
	eventually(t, 10*time.Second, "the abandoned build stores its page", func() bool {
		_, ok, _ := s.Find(e.ctx, key, e.t0)
		return ok
	})
}

// TestMaintenanceLoop: the background loop prunes on its own.
func TestMaintenanceLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, openSQLite)
	s := e.node(Config{MaintenanceInterval: time.Second, TTL: time.Minute})
	if _, err := s.Put(e.ctx, segmentBytes(t, 10, 10), storage.SegmentPublication{SegmentKey: testKey("pa", "e1", "d1")}); err != nil {
		t.Fatal(err)
	}
	e.advance(2 * time.Minute)
	eventually(t, 20*time.Second, "the loop prunes", func() bool {
		st, err := s.Stats(e.ctx)
		return err == nil && st.Objects == 0 && st.Publications == 0
	})
	if err := s.Stop(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(e.ctx); err != nil {
		t.Fatalf("second Stop = %v", err)
	}
}

// TestStartRefusesBucketWithTTL: a segment bucket with a TTL would expire
// chunks under live objects.
func TestStartRefusesBucketWithTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, openSQLite)
	ttl := names(t, "ttl")
	if _, err := e.js.CreateObjectStore(e.ctx, jetstream.ObjectStoreConfig{Bucket: ttl.SegmentsBucket(), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{JetStream: e.js, Store: e.index, Names: ttl, MaintenanceInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(e.ctx); err == nil || !strings.Contains(err.Error(), "TTL") {
		t.Fatalf("Start on a bucket with a TTL = %v", err)
	}
	// Isolated namespaces use their own buckets.
	a, b := e.node(Config{Names: names(t, "a")}), e.node(Config{Names: names(t, "b")})
	if a.Bucket() == b.Bucket() || a.Bucket() != "a_sync_segments" {
		t.Fatalf("buckets %s, %s", a.Bucket(), b.Bucket())
	}
}
