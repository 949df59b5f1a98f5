// Package blobs keeps blob bytes (SPEC.md §5.9): content-addressed file
// attachments that rows reference through blob_ref columns. The bytes are
// objects in a JetStream Object Store bucket (named by bus.Names); the
// blob rows and the reference index are in SQL (storage.BlobIndex), where
// the push path checks existence and download authorization reads the
// referencing rows (engine.AuthorizeBlob).
//
// An upload streams the body into a fresh object while the Object Store
// computes its SHA-256, then maps (partition, blob id) to the object in
// SQL: a body whose digest is not the id, or that outgrows the cap, is
// deleted and refused, and of two concurrent uploads of one id the first
// mapped wins and the other's object is deleted. Nothing holds a body in
// memory: one chunk at a time passes through.
//
// The orphan sweep deletes the blobs no row has referenced for longer
// than the grace period: first the SQL row (refused by the store while any
// reference exists or commits concurrently), then the object it named.
// It also collects what a node killed mid-way leaves in the bucket: an
// object no blob row names (killed between the object and its row), the
// chunks of an object that never got its meta (killed mid-upload; safe to
// purge because an upload is bounded by UploadTimeout), and a delete
// marker without its purge.
package blobs

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/internal/lifecycle"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Store stores blob bytes. It is safe for concurrent use.
type Store struct {
	cfg    Config
	log    *slog.Logger
	bucket string
	obs    jetstream.ObjectStore
	stream jetstream.Stream

	life     lifecycle.Once
	cancel   context.CancelFunc
	loopDone chan struct{}

	m Metrics
}

// Metrics are monotonically increasing counters of a Store's work.
type Metrics struct {
	Uploads         atomic.Int64 // bodies stored
	UploadsExisting atomic.Int64 // uploads of a blob already held: nothing read
	UploadBytes     atomic.Int64
	UploadsRefused  atomic.Int64 // hash mismatch or too large
	Downloads       atomic.Int64 // downloads opened
	DownloadBytes   atomic.Int64
	Swept           atomic.Int64 // orphans deleted
	SweptObjects    atomic.Int64 // objects no blob row named, deleted
	SweptChunks     atomic.Int64 // chunk subjects of no object (a killed upload), purged
	SweepErrors     atomic.Int64
}

// New validates cfg and returns a Store; Start opens its bucket.
func New(cfg Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.JetStream == nil || cfg.Store == nil {
		return nil, errors.New("blobs: Config.JetStream and Config.Store are required")
	}
	return &Store{cfg: cfg, log: cfg.Logger, bucket: cfg.Names.BlobsBucket()}, nil
}

// Start opens (creating if absent) the bucket and starts the background
// sweep.
func (s *Store) Start(ctx context.Context) error {
	return s.life.Start(func() error {
		// Members of a cluster starting together may find JetStream
		// without a meta leader for a moment: set up in short attempts,
		// as the segment store does.
		if err := bus.RetrySetup(ctx, s.bind, func(error) bool { return false }); err != nil {
			return err
		}
		if s.cfg.SweepInterval > 0 {
			lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			s.cancel, s.loopDone = cancel, make(chan struct{})
			go s.sweepLoop(lctx)
		}
		return nil
	})
}

// bind opens (creating if absent) the bucket at the node's replication
// factor.
func (s *Store) bind(ctx context.Context) error {
	js := s.cfg.JetStream
	obs, err := bus.OpenObjectStore(ctx, js, s.bucket, "syncnode blob bytes, one object per accepted upload (blob-<hex>-<nuid>)", s.cfg.Replicas)
	if err != nil {
		return fmt.Errorf("open blob bucket %s: %w", s.bucket, err)
	}
	if s.stream, err = js.Stream(ctx, bus.ObjectStream(s.bucket)); err != nil {
		return fmt.Errorf("open blob bucket %s: %w", s.bucket, err)
	}
	s.obs = obs
	return nil
}

// Stop ends the background sweep, waiting for a pass in progress within
// ctx. It is idempotent.
func (s *Store) Stop(ctx context.Context) error {
	return s.life.Stop(func() error {
		if s.cancel == nil {
			return nil
		}
		s.cancel()
		select {
		case <-s.loopDone:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("blobs: stop: %w", ctx.Err())
		}
	})
}

// Metrics returns the store's counters.
func (s *Store) Metrics() *Metrics { return &s.m }

// MaxBytes is the size cap of one blob.
func (s *Store) MaxBytes() int64 { return s.cfg.MaxBytes }

func (s *Store) nowMs() int64 { return s.cfg.Clock.Now().UnixMilli() }

// Held returns the partition's row of a blob the partition holds.
func (s *Store) Held(ctx context.Context, partition, blobID string) (storage.Blob, bool, error) {
	return s.cfg.Store.BlobGet(ctx, partition, blobID)
}

// Grant answers an upload grant request (SPEC.md §5.9.3) for a blob of
// byteLength bytes: blob.too_large over the cap, present=true when the
// partition holds the blob already. The grant's URL, when blobs are
// presigned, is the engine's (engine.SignBlobUpload).
func (s *Store) Grant(ctx context.Context, partition, blobID string, byteLength int64) (present bool, err error) {
	if !ssp2.ValidBlobID(blobID) {
		return false, ssp2.Errorf(ssp2.CodeBlobHashMismatch, "the blob id must be sha256:<64 lowercase hex>")
	}
	if byteLength < 0 || byteLength > s.cfg.MaxBytes {
		return false, ssp2.Errorf(ssp2.CodeBlobTooLarge, "byteLength %d is outside 0..%d, the blob size cap", byteLength, s.cfg.MaxBytes)
	}
	_, present, err = s.cfg.Store.BlobGet(ctx, partition, blobID)
	if err != nil {
		return false, fmt.Errorf("blob grant: %w", err)
	}
	return present, nil
}

// Upload is one upload of a blob into a partition (its type lives in
// storage so that the HTTP layer shares it without importing this
// package).
type Upload = storage.BlobUpload

// Put stores an upload (SPEC.md §5.9.3). A blob the partition holds
// already is not read again (existed=true) and its grace period
// restarts. It refuses, storing nothing: a declared or actual size above
// the cap or the upload's limit (blob.too_large) and bytes whose SHA-256
// is not the id (blob.hash_mismatch, also for an id that is not
// sha256:<64 hex>). The digest is checked before the object's meta is
// written, so refused bytes never become an object.
func (s *Store) Put(ctx context.Context, u Upload) (existed bool, err error) {
	if !ssp2.ValidBlobID(u.BlobID) {
		return false, s.refused(ssp2.Errorf(ssp2.CodeBlobHashMismatch, "the blob id must be sha256:<64 lowercase hex>"))
	}
	limit := s.cfg.MaxBytes
	if u.Limit != nil && *u.Limit < limit {
		limit = max(*u.Limit, 0)
	}
	if u.Declared > limit {
		return false, s.refused(ssp2.Errorf(ssp2.CodeBlobTooLarge, "the body of %d bytes exceeds the limit of %d", u.Declared, limit))
	}
	partition, blobID := u.Partition, u.BlobID
	// A read first: a new upload costs no write here.
	if _, held, err := s.cfg.Store.BlobGet(ctx, partition, blobID); err != nil {
		return false, err
	} else if held {
		// Held, unless swept since the read: then it is uploaded anew.
		if _, ok, err := s.cfg.Store.BlobTouch(ctx, partition, blobID, s.nowMs()); err != nil || ok {
			if ok {
				s.m.UploadsExisting.Add(1)
			}
			return ok, err
		}
	}
	hexDigest := blobID[len("sha256:"):]
	sum, _ := hex.DecodeString(hexDigest)
	want := "SHA-256=" + base64.URLEncoding.EncodeToString(sum)
	name := bus.BlobObject(hexDigest, nuid.Next())
	cr := &capReader{r: u.Body, max: limit}
	errMismatch := errors.New("digest mismatch")
	// The deadline is the sweep's guarantee: past it this upload writes
	// no meta, so its chunks may be collected (sweepBucket).
	pctx, cancel := context.WithTimeout(ctx, s.cfg.UploadTimeout)
	defer cancel()
	info, err := bus.PutObject(pctx, s.cfg.JetStream, s.stream, bus.ObjectPut{Bucket: s.bucket, Name: name, ChunkSize: s.cfg.ChunkSize,
		VerifyFunc: func(info jetstream.ObjectInfo) error {
			if info.Digest != want {
				return errMismatch
			}
			return nil
		}}, cr)
	switch {
	case err != nil && ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded):
		return false, s.refused(ssp2.Errorf(ssp2.CodeInvalidRequest, "the upload did not complete within %s", s.cfg.UploadTimeout))
	case errors.Is(err, errMismatch):
		return false, s.refused(ssp2.Errorf(ssp2.CodeBlobHashMismatch, "the SHA-256 of the %d bytes received is not %s", info.Size, blobID))
	case err != nil && cr.over:
		return false, s.refused(ssp2.Errorf(ssp2.CodeBlobTooLarge, "the body exceeds the limit of %d bytes", limit))
	case err != nil:
		s.deleteObject(ctx, name) // a failed meta publish may have been stored
		return false, fmt.Errorf("store blob %s: %w", blobID, err)
	}
	stored, created, err := s.cfg.Store.BlobPut(ctx, storage.Blob{
		Partition: partition, ID: blobID, ByteLength: int64(info.Size), MediaType: u.MediaType, Object: name, UploadedAtMs: s.nowMs(),
	})
	if err != nil {
		s.deleteObject(ctx, name)
		return false, fmt.Errorf("record blob %s: %w", blobID, err)
	}
	if !created && stored.Object != name {
		// A concurrent upload of the same bytes was recorded first.
		s.deleteObject(ctx, name)
	}
	s.m.Uploads.Add(1)
	s.m.UploadBytes.Add(int64(info.Size))
	return !created, nil
}

func (s *Store) refused(err error) error {
	s.m.UploadsRefused.Add(1)
	return err
}

// Open streams a held blob's bytes a chunk at a time (bus.ReadObject: at
// most one chunk in memory per download, however slow the client),
// verified against the stored digest: a corrupted object fails the read
// at its end instead of io.EOF.
func (s *Store) Open(ctx context.Context, b storage.Blob) (io.ReadCloser, error) {
	info, err := s.obs.GetInfo(ctx, b.Object)
	if err != nil {
		return nil, fmt.Errorf("open blob %s: %w", b.ID, err)
	}
	r, err := bus.ReadObject(ctx, s.stream, info)
	if err != nil {
		return nil, fmt.Errorf("open blob %s: %w", b.ID, err)
	}
	s.m.Downloads.Add(1)
	return &countingReader{ReadCloser: r, n: &s.m.DownloadBytes}, nil
}

// deleteObject removes an object: its meta first, so that readers see it
// gone at once, then its chunks. Purging the meta writes no delete marker
// (the Object Store's Delete would keep one forever). Best effort: what
// it leaves — an unmapped object, or chunks without a meta — no request
// can reach, and the sweep collects it.
func (s *Store) deleteObject(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	info, err := s.obs.GetInfo(ctx, name, jetstream.GetObjectInfoShowDeleted())
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return
	}
	if err != nil {
		// Without the meta the chunk subject is unknown: the meta goes
		// anyway, and its chunks become the sweep's.
		s.log.Warn("read blob object meta", "object", name, "err", err)
	}
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(bus.ObjectMetaSubject(s.bucket, name))); err != nil {
		s.log.Warn("purge blob object meta", "object", name, "err", err)
		return
	}
	if info != nil && info.NUID != "" {
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(bus.ObjectChunkSubject(s.bucket, info.NUID))); err != nil {
			s.log.Warn("purge blob object chunks", "object", name, "err", err)
		}
	}
}

// Sweep deletes every blob that no row references and that was last
// uploaded more than the grace period ago (SPEC.md §5.9.2), a batch at a
// time, then what killed nodes left in the bucket (sweepBucket). It
// reports how many blob rows it deleted; the rest is counted in
// Metrics().SweptObjects and SweptChunks.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	n, err := s.sweepRows(ctx)
	if err != nil {
		return n, err
	}
	return n, s.sweepBucket(ctx)
}

// MinObjectAge is the youngest an unnamed object may be to be swept,
// whatever the grace period: an upload writes its object a moment before
// its row, and that moment must never look like a crash. It is also the
// margin past UploadTimeout after which meta-less chunks are collected
// (for the meta published in the instant of the deadline, and for clock
// skew between the node and a clustered stream leader).
const MinObjectAge = 10 * time.Minute

// sweepBucket collects the bucket's leftovers, each the trace of a node
// killed mid-way:
//
//   - chunk subjects $O.<bucket>.C.<nuid> that no object's meta names:
//     an upload killed before its meta (or a delete killed between its
//     meta and chunk purges). An upload writes no meta once UploadTimeout
//     has passed since it began, and its first chunk comes after that
//     start, so a subject whose first chunk is older than UploadTimeout +
//     MinObjectAge belongs to no live upload; a younger one may, and is
//     kept.
//   - blob objects no blob row names, older than the grace period and
//     MinObjectAge: killed between the object and its row, or a sweep
//     killed between the row and the object.
//   - delete markers of blob objects (what the Object Store's Delete
//     writes, left by an older node or a delete killed before its purge).
//
// Chunk subjects are listed before the metas, so an upload completing in
// between is seen live. Ages are the Object Store's timestamps, compared
// with Config.Wall, not the store's clock. Foreign objects in the bucket
// (names that are not BlobObject names) are left alone, and so are their
// chunks while they are live.
func (s *Store) sweepBucket(ctx context.Context) error {
	now := s.cfg.Wall.Now()
	objectCutoff := now.Add(-max(*s.cfg.OrphanGrace, MinObjectAge))
	chunkCutoff := now.Add(-(s.cfg.UploadTimeout + MinObjectAge))
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(bus.ObjectChunks(s.bucket)))
	if err != nil {
		return fmt.Errorf("sweep blob chunks: %w", err)
	}
	objs, err := s.obs.List(ctx, jetstream.ListObjectsShowDeleted())
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return fmt.Errorf("sweep blob objects: %w", err)
	}
	live := make(map[string]bool, len(objs))
	for _, o := range objs {
		if !o.Deleted {
			live[o.NUID] = true
		}
	}
	for subj := range info.State.Subjects {
		id, ok := bus.ParseObjectChunkSubject(s.bucket, subj)
		if !ok || live[id] {
			continue
		}
		first, err := s.stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // purged since the listing
		}
		if err != nil {
			return fmt.Errorf("sweep blob chunks: %w", err)
		}
		if !first.Time.Before(chunkCutoff) {
			continue
		}
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return fmt.Errorf("sweep blob chunks: purge %s: %w", subj, err)
		}
		s.m.SweptChunks.Add(1)
	}
	for _, o := range objs {
		if o.ModTime.After(objectCutoff) || !bus.IsBlobObject(o.Name) {
			continue
		}
		if o.Deleted {
			if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(bus.ObjectMetaSubject(s.bucket, o.Name))); err != nil {
				return fmt.Errorf("sweep blob delete markers: %w", err)
			}
			continue
		}
		held, err := s.cfg.Store.BlobObjectHeld(ctx, o.Name)
		if err != nil {
			return fmt.Errorf("sweep blob objects: %w", err)
		}
		if held {
			continue
		}
		s.deleteObject(ctx, o.Name)
		s.m.SweptObjects.Add(1)
	}
	return nil
}

func (s *Store) sweepRows(ctx context.Context) (int, error) {
	before := s.nowMs() - s.cfg.OrphanGrace.Milliseconds()
	deleted := 0
	for {
		orphans, err := s.cfg.Store.BlobOrphans(ctx, before, s.cfg.SweepBatch)
		if err != nil {
			return deleted, fmt.Errorf("sweep blobs: %w", err)
		}
		n := 0
		for _, b := range orphans {
			ok, err := s.cfg.Store.BlobDelete(ctx, b.Partition, b.ID, before)
			if err != nil {
				return deleted, fmt.Errorf("sweep blobs: %w", err)
			}
			if ok { // referenced or re-uploaded since the listing: kept
				s.deleteObject(ctx, b.Object)
				n++
			}
		}
		deleted += n
		s.m.Swept.Add(int64(n))
		if len(orphans) < s.cfg.SweepBatch || n == 0 {
			return deleted, nil
		}
	}
}

func (s *Store) sweepLoop(ctx context.Context) {
	defer close(s.loopDone)
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := s.Sweep(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.m.SweepErrors.Add(1)
			s.log.Warn("blob sweep failed", "err", err)
		} else if n > 0 {
			s.log.Info("swept orphan blobs", "deleted", n)
		}
	}
}

// capReader fails a body once it passes max bytes.
type capReader struct {
	r    io.Reader
	n    int64
	max  int64
	over bool
}

var errTooLarge = errors.New("blob exceeds the size cap")

func (c *capReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		c.over = true
		return 0, errTooLarge
	}
	return n, err
}

// countingReader counts the bytes read into n.
type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}
