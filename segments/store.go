package segments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/storage"
)

// Store is the segment store: bytes in the Object Store, the publication
// index in SQL, and per-node caches in front of both. It is safe for
// concurrent use.
type Store struct {
	cfg       Config
	log       *slog.Logger
	index     Index
	bucket    string
	obs       jetstream.ObjectStore
	stream    jetstream.Stream // OBJ_<bucket>: direct gets, purges, subject info
	leases    jetstream.KeyValue
	chunkSize int
	owner     string // claim value: this Store's random id

	locks  keyedLock
	builds flight[storage.SegmentKey, buildResult]
	reads  flight[string, []byte]
	keys   *lru[storage.SegmentKey, storage.SegmentPublication] // GetOrBuild's reuse cache
	data   *lru[string, []byte]                                 // segment bytes by id

	// life is cancelled by Stop: the builds and reads that requests share
	// run under it, not under the request that started them.
	life     context.Context
	cancel   context.CancelFunc
	loopDone chan struct{}
	started  atomic.Bool
	stopOnce sync.Once
	stopErr  error

	counters counters
}

type counters struct {
	builds, reuses, puts, uploads, uploadsSkipped atomic.Int64
	cacheHits, cacheMisses                        atomic.Int64
}

// Stats describes a Store: the SQL index's totals, the bucket's stored
// bytes, and this node's counters since Open.
type Stats struct {
	Objects      int64  // addresses in the index
	Bytes        int64  // their summed byte length
	Publications int64  // publications in the index, expired ones until pruned
	StoredBytes  uint64 // bytes in the bucket's stream (chunks and metadata)

	Builds         int64 // segments built by GetOrBuild
	Reuses         int64 // GetOrBuild answers without a build
	Puts           int64 // publications stored
	Uploads        int64 // objects uploaded
	UploadsSkipped int64 // puts that found their bytes already stored
	CacheHits      int64 // Bytes answered from memory
	CacheMisses    int64 // Bytes read from the bucket
	CachedBytes    int64 // bytes held by the cache now
}

// New validates cfg and returns a Store; Start binds its buckets.
func New(cfg Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.JetStream == nil || cfg.Store == nil {
		return nil, errors.New("segments config: JetStream and Store are required")
	}
	bucket := cfg.Names.SegmentsBucket()
	s := &Store{
		cfg: cfg, log: cfg.Logger, index: cfg.Store, bucket: bucket, owner: nuid.Next(),
		chunkSize: cfg.ChunkSize,
		keys:      newLRU[storage.SegmentKey, storage.SegmentPublication](int64(cfg.KeyCacheEntries), func(storage.SegmentPublication) int64 { return 1 }),
		data:      newLRU[string, []byte](cfg.CacheBytes, func(b []byte) int64 { return int64(len(b)) }),
	}
	// A chunk is one message: it must fit the server's max payload.
	if mp := cfg.JetStream.Conn().MaxPayload(); mp > 0 && int64(s.chunkSize) > mp {
		s.chunkSize = int(mp)
	}
	s.life, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Start binds the segment bucket (creating it without a TTL if absent)
// and the lease bucket, and starts background maintenance unless
// disabled. A Store starts once.
func (s *Store) Start(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("segments: a store starts once")
	}
	if err := bus.RetrySetup(ctx, s.bind, func(err error) bool { return errors.Is(err, errBadBucket) }); err != nil {
		return err
	}
	if s.cfg.MaintenanceInterval > 0 {
		s.loopDone = make(chan struct{})
		go s.maintain()
	}
	return nil
}

// errBadBucket marks a bucket whose settings the store cannot use: no
// retry fixes it.
var errBadBucket = errors.New("unusable bucket")

func (s *Store) bind(ctx context.Context) error {
	js := s.cfg.JetStream
	obs, err := bus.OpenObjectStore(ctx, js, s.bucket, "syncnode bootstrap segments, named sha256-<hex> after their content address", s.cfg.Replicas)
	if err != nil {
		return fmt.Errorf("open segment bucket %s: %w", s.bucket, err)
	}
	st, err := obs.Status(ctx)
	if err != nil {
		return fmt.Errorf("open segment bucket %s: %w", s.bucket, err)
	}
	if st.TTL() != 0 {
		// Chunks would expire before their meta and reads would hang.
		return fmt.Errorf("open segment bucket %s: %w: it has a TTL of %v; segment buckets must have none (expiry is per publication)", s.bucket, errBadBucket, st.TTL())
	}
	s.obs = obs
	if s.stream, err = js.Stream(ctx, bus.ObjectStream(s.bucket)); err != nil {
		return fmt.Errorf("open segment bucket %s: %w", s.bucket, err)
	}

	kv, err := js.KeyValue(ctx, s.cfg.Names.LeaseBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:         s.cfg.Names.LeaseBucket(),
			Description:    "syncnode leases (History 1, per-key TTL)",
			History:        1,
			LimitMarkerTTL: time.Minute,
			Storage:        jetstream.FileStorage,
			Replicas:       s.cfg.Replicas,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, s.cfg.Names.LeaseBucket())
		}
	}
	if err == nil {
		err = bus.EnsureReplicas(ctx, js, bus.KVStream(s.cfg.Names.LeaseBucket()), s.cfg.Replicas)
	}
	if err != nil {
		return fmt.Errorf("open lease bucket %s: %w", s.cfg.Names.LeaseBucket(), err)
	}
	ks, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("open lease bucket %s: %w", s.cfg.Names.LeaseBucket(), err)
	}
	if ks.History() != 1 || ks.LimitMarkerTTL() <= 0 {
		// Per-key TTLs need marker TTLs, and with History > 1 they are
		// clamped up to LimitMarkerTTL (NATS-NOTES pitfall 4).
		return fmt.Errorf("open lease bucket %s: %w: History %d and LimitMarkerTTL %v; claims need History 1 and a LimitMarkerTTL",
			s.cfg.Names.LeaseBucket(), errBadBucket, ks.History(), ks.LimitMarkerTTL())
	}
	s.leases = kv
	return nil
}

// Stop stops background maintenance, aborts builds and waits for the
// builds and reads in flight, at most until ctx ends. It does not close
// the NATS connection or the SQL store. It is idempotent.
func (s *Store) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.cancel()
		done := make(chan struct{})
		go func() {
			if s.loopDone != nil {
				<-s.loopDone
			}
			s.builds.wait()
			s.reads.wait()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			s.stopErr = fmt.Errorf("segments stop: %w", ctx.Err())
		}
	})
	return s.stopErr
}

func (s *Store) now() int64 { return s.cfg.Clock.Now().UnixMilli() }

// Bucket is the Object Store bucket's name.
func (s *Store) Bucket() string { return s.bucket }

// Put stores data as a segment and records pub for it (see PutSpool).
func (s *Store) Put(ctx context.Context, data []byte, pub storage.SegmentPublication) (storage.SegmentPublication, error) {
	return s.PutSpool(ctx, spoolOf(data), pub)
}

// PutSpool stores a spool's bytes under their content address, unless
// they are stored already, and records pub for them in one SQL
// transaction. pub.SegmentID and pub.ByteLength are filled in (if set they
// must match the bytes); CreatedAtMs defaults to now and ExpiresAtMs to
// CreatedAtMs + TTL. The same address with other bytes — in the bucket or
// in the index — is refused with sync.storage.content_collision. An
// identical publication merges: its expiry is raised. It returns the
// stored publication.
func (s *Store) PutSpool(ctx context.Context, sp *Spool, pub storage.SegmentPublication) (storage.SegmentPublication, error) {
	id, hexDigest := sp.ID(), sp.hexDigest()
	if pub.SegmentID != "" && pub.SegmentID != id {
		return storage.SegmentPublication{}, fmt.Errorf("put segment: publication names %s, the bytes hash to %s", pub.SegmentID, id)
	}
	if pub.ByteLength != 0 && pub.ByteLength != sp.Size() {
		return storage.SegmentPublication{}, fmt.Errorf("put segment %s: publication says %d bytes, there are %d", id, pub.ByteLength, sp.Size())
	}
	pub.SegmentID, pub.ByteLength = id, sp.Size()
	if pub.CreatedAtMs == 0 {
		pub.CreatedAtMs = s.now()
	}
	if pub.ExpiresAtMs == 0 {
		pub.ExpiresAtMs = pub.CreatedAtMs + s.cfg.TTL.Milliseconds()
	}
	release, _, err := s.claim(ctx, hexDigest, true)
	if err != nil {
		return storage.SegmentPublication{}, fmt.Errorf("put segment %s: %w", id, err)
	}
	defer release()
	uploaded, err := s.ensureObject(ctx, hexDigest, sp)
	if err != nil {
		return storage.SegmentPublication{}, fmt.Errorf("put segment %s: %w", id, err)
	}
	if uploaded {
		s.counters.uploads.Add(1)
	} else {
		s.counters.uploadsSkipped.Add(1)
	}
	stored, err := s.index.SegmentPublish(ctx, pub)
	if err != nil {
		return storage.SegmentPublication{}, fmt.Errorf("put segment %s: %w", id, err)
	}
	s.counters.puts.Add(1)
	out := stored
	s.keys.put(out.SegmentKey, out)
	if b, ok := sp.Bytes(); ok && int64(len(b)) <= s.cfg.CacheMaxSegment {
		s.data.put(id, b)
	}
	return out, nil
}

// Find returns the live publication for key (ExpiresAtMs > nowMs) that
// expires last: the reuse lookup. It reads the key cache, then SQL.
func (s *Store) Find(ctx context.Context, key storage.SegmentKey, nowMs int64) (storage.SegmentPublication, bool, error) {
	if p, ok := s.keys.get(key); ok && p.ExpiresAtMs > nowMs {
		return p, true, nil
	}
	sp, ok, err := s.index.SegmentFind(ctx, key, nowMs)
	if err != nil || !ok {
		return storage.SegmentPublication{}, false, err
	}
	p := sp
	s.keys.put(key, p)
	return p, true, nil
}

// Get returns a segment with all its publications, expired ones
// included; an unknown id is sync.not_found.
func (s *Store) Get(ctx context.Context, segmentID string) (storage.Segment, error) {
	if _, ok := parseID(segmentID); !ok {
		return storage.Segment{}, notFound()
	}
	seg, ok, err := s.index.SegmentGet(ctx, segmentID)
	if err != nil {
		return storage.Segment{}, err
	}
	if !ok {
		return storage.Segment{}, notFound()
	}
	return seg, nil
}

// Publications lists the segment's publications in one partition and log
// epoch, expired ones included (none for an unknown or malformed id).
func (s *Store) Publications(ctx context.Context, segmentID, partition, logEpoch string) ([]storage.SegmentPublication, error) {
	if _, ok := parseID(segmentID); !ok {
		return nil, nil
	}
	pubs, err := s.index.SegmentPublications(ctx, segmentID, partition, logEpoch)
	if err != nil {
		return nil, err
	}
	return pubs, nil
}

// Grants returns the segment's live publications in one partition and log
// epoch: sync.not_found for an unknown segment or one published only in
// another partition or epoch, sync.segment_expired when every matching
// publication expired (SPEC.md §5.5). The caller still compares scope
// digests.
func (s *Store) Grants(ctx context.Context, segmentID, partition, logEpoch string, nowMs int64) ([]storage.SegmentPublication, error) {
	pubs, err := s.Publications(ctx, segmentID, partition, logEpoch)
	if err != nil {
		return nil, err
	}
	return Live(pubs, nowMs)
}

// Bytes returns a segment's bytes, verified against its address. Segments
// up to CacheMaxSegment are kept in a bounded in-memory cache, and
// concurrent reads of one segment share one fetch, so a bootstrap storm
// reads each segment once per node. The returned slice is shared: do not
// modify it. Bytes does not authorize.
func (s *Store) Bytes(ctx context.Context, segmentID string) ([]byte, error) {
	if b, ok := s.data.get(segmentID); ok {
		s.counters.cacheHits.Add(1)
		return b, nil
	}
	if _, ok := parseID(segmentID); !ok {
		return nil, notFound()
	}
	b, _, err := s.reads.do(ctx, segmentID, func() ([]byte, error) {
		if b, ok := s.data.get(segmentID); ok {
			s.counters.cacheHits.Add(1)
			return b, nil
		}
		s.counters.cacheMisses.Add(1)
		rctx, cancel := context.WithTimeout(s.life, s.cfg.UploadTimeout)
		defer cancel()
		r, err := s.open(rctx, segmentID)
		if err != nil {
			return nil, err
		}
		b, err := r.readAll()
		if err != nil {
			return nil, err
		}
		if int64(len(b)) <= s.cfg.CacheMaxSegment {
			s.data.put(segmentID, b)
		}
		return b, nil
	})
	return b, err
}

// GetOrBuild returns the live publication for key, building and storing
// the segment when there is none; built reports whether this call built
// it. Concurrent calls for one key on this node share one build and get
// the same publication; across nodes, the content address makes a
// duplicate build harmless (the bytes are stored once, the publications
// merge). A reuse reads the key cache or SQL, never writes. A publication
// is reused only while it has more than ReuseMargin left.
func (s *Store) GetOrBuild(ctx context.Context, key storage.SegmentKey, nowMs int64, build BuildFunc) (storage.SegmentPublication, bool, error) {
	horizon := nowMs + s.cfg.ReuseMargin.Milliseconds()
	if p, ok := s.keys.get(key); ok && p.ExpiresAtMs > horizon {
		s.counters.reuses.Add(1)
		return p, false, nil
	}
	r, leader, err := s.builds.do(ctx, key, func() (buildResult, error) {
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.BuildTimeout)
		defer cancel()
		stop := context.AfterFunc(s.life, cancel) // Stop aborts builds
		defer stop()
		if sp, ok, err := s.index.SegmentFind(bctx, key, horizon); err != nil {
			return buildResult{}, err
		} else if ok {
			p := sp
			s.keys.put(key, p)
			return buildResult{pub: p}, nil
		}
		p, err := s.build(bctx, key, nowMs, build)
		return buildResult{pub: p, built: true}, err
	})
	if err != nil {
		return storage.SegmentPublication{}, false, fmt.Errorf("get or build segment: %w", err)
	}
	built := leader && r.built
	if !built {
		s.counters.reuses.Add(1)
	}
	return r.pub, built, nil
}

// buildResult is what concurrent GetOrBuild calls share.
type buildResult struct {
	pub   storage.SegmentPublication
	built bool
}

func (s *Store) build(ctx context.Context, key storage.SegmentKey, nowMs int64, build BuildFunc) (storage.SegmentPublication, error) {
	sp := NewSpool(s.cfg.TempDir, s.cfg.SpillBytes)
	defer sp.Close()
	rows, next, err := build(ctx, sp)
	if err != nil {
		return storage.SegmentPublication{}, fmt.Errorf("build: %w", err)
	}
	s.counters.builds.Add(1)
	return s.PutSpool(ctx, sp, storage.SegmentPublication{
		SegmentKey: key, NextRowCursor: next, RowCount: rows,
		CreatedAtMs: nowMs, ExpiresAtMs: nowMs + s.cfg.TTL.Milliseconds(),
	})
}

// Stats returns the index totals, the bucket size and this node's
// counters.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	ix, err := s.index.SegmentStats(ctx)
	if err != nil {
		return Stats{}, err
	}
	st, err := s.obs.Status(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("segment stats: %w", err)
	}
	_, cached := s.data.usage()
	c := &s.counters
	return Stats{
		Objects: ix.Segments, Bytes: ix.Bytes, Publications: ix.Publications, StoredBytes: st.Size(),
		Builds: c.builds.Load(), Reuses: c.reuses.Load(), Puts: c.puts.Load(),
		Uploads: c.uploads.Load(), UploadsSkipped: c.uploadsSkipped.Load(),
		CacheHits: c.cacheHits.Load(), CacheMisses: c.cacheMisses.Load(), CachedBytes: cached,
	}, nil
}
