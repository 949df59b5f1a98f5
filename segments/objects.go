package segments

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/ssp2"
)

// The bytes of a segment are one object in the bucket, named
// sha256-<hex> after its address, with no bucket TTL (a TTL expires the
// chunks before the meta, leaving objects that hang readers). The Object
// Store has no conditional put, so every change of an address's object —
// upload, deletion — runs under the address's claim: a per-node lock plus
// a KV key with a TTL in the History=1 lease bucket, which serializes
// nodes. A put checks the stored digest under the claim and uploads only
// when the object is absent, so concurrent puts of one address upload it
// once and leave no orphaned chunks; GC removes what a crash leaves.

// claimPollMax caps the wait between attempts to take a held claim.
const claimPollMax = 50 * time.Millisecond

// keyedLock is a set of per-key mutexes that can be waited on under a
// context.
type keyedLock struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	ch   chan struct{} // holds one token while locked
	refs int
}

func (l *keyedLock) entry(k string) *keyedEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*keyedEntry{}
	}
	e := l.m[k]
	if e == nil {
		e = &keyedEntry{ch: make(chan struct{}, 1)}
		l.m[k] = e
	}
	e.refs++
	return e
}

func (l *keyedLock) drop(k string, e *keyedEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.refs--; e.refs == 0 {
		delete(l.m, k)
	}
}

// lock takes k's lock, waiting under ctx unless wait is false; ok=false
// when it was not taken.
func (l *keyedLock) lock(ctx context.Context, k string, wait bool) (unlock func(), ok bool, err error) {
	e := l.entry(k)
	if wait {
		select {
		case e.ch <- struct{}{}:
		case <-ctx.Done():
			l.drop(k, e)
			return nil, false, ctx.Err()
		}
	} else {
		select {
		case e.ch <- struct{}{}:
		default:
			l.drop(k, e)
			return nil, false, nil
		}
	}
	return func() { <-e.ch; l.drop(k, e) }, true, nil
}

// claim takes the claim on an address (its 64 hex digits): the node-local
// lock, then the KV key. With wait it retries until the holder releases
// it or its TTL ends; without, ok=false when it is held.
func (s *Store) claim(ctx context.Context, hexDigest string, wait bool) (release func(), ok bool, err error) {
	unlock, ok, err := s.locks.lock(ctx, hexDigest, wait)
	if err != nil || !ok {
		return nil, false, err
	}
	key := bus.SegmentUploadKey(s.bucket, hexDigest)
	pause := time.Millisecond
	for {
		rev, err := s.leases.Create(ctx, key, []byte(s.owner), jetstream.KeyTTL(s.cfg.ClaimTTL))
		if err == nil {
			return func() {
				// Best effort: a claim left behind expires with its TTL.
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_ = s.leases.Purge(ctx, key, jetstream.LastRevision(rev), jetstream.PurgeTTL(time.Second))
				unlock()
			}, true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			unlock()
			return nil, false, fmt.Errorf("claim %s: %w", key, err)
		}
		if !wait {
			unlock()
			return nil, false, nil
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			unlock()
			return nil, false, fmt.Errorf("claim %s: %w", key, ctx.Err())
		}
		pause = min(2*pause, claimPollMax)
	}
}

// ensureObject stores sp's bytes under their address unless an object
// with the same size and digest is there already (uploaded=false). An
// object with other bytes under the address is a content collision. The
// caller holds the claim.
func (s *Store) ensureObject(ctx context.Context, hexDigest string, sp *Spool) (uploaded bool, err error) {
	name := bus.SegmentObject(hexDigest)
	want := sp.objectDigest()
	info, err := s.obs.GetInfo(ctx, name)
	switch {
	case err == nil:
		if info.Size == uint64(sp.Size()) && info.Digest == want && info.NUID != "" {
			return false, nil
		}
		return false, ssp2.Errorf(ssp2.CodeStorageContentCollision,
			"segment sha256:%s: the stored object holds %d bytes with digest %s, the new bytes are %d with %s",
			hexDigest, info.Size, info.Digest, sp.Size(), want)
	case errors.Is(err, jetstream.ErrObjectNotFound):
	default:
		return false, fmt.Errorf("object info: %w", err)
	}
	uctx, cancel := context.WithTimeout(ctx, s.cfg.UploadTimeout)
	defer cancel()
	if err := s.upload(uctx, name, sp); err != nil {
		return false, fmt.Errorf("upload: %w", err)
	}
	return true, nil
}

// upload writes sp's bytes as object name through bus.PutObject:
// in-memory bytes are published in slices under the digest the spool
// computed as they were written, a spill file is read back and
// re-hashed, and bytes that changed on disk are never stored under the
// address (the put fails with ErrCorrupt before its meta, leaving
// nothing).
func (s *Store) upload(ctx context.Context, name string, sp *Spool) error {
	p := bus.ObjectPut{Bucket: s.bucket, Name: name, ChunkSize: s.chunkSize, VerifyFunc: func(info jetstream.ObjectInfo) error {
		if int64(info.Size) != sp.Size() || info.Digest != sp.objectDigest() {
			return fmt.Errorf("%w: the spool read back %d bytes with digest %s, it was written with %d and %s",
				ErrCorrupt, info.Size, info.Digest, sp.Size(), sp.objectDigest())
		}
		return nil
	}}
	r, err := sp.Reader() // seals the spool, or reports its write error
	if err != nil {
		return err
	}
	if mem, _ := sp.Bytes(); len(mem) > 0 {
		p.Bytes, p.Digest = mem, sp.objectDigest()
	}
	_, err = bus.PutObject(ctx, s.cfg.JetStream, s.stream, p, r)
	return err
}

// deleteObject removes an address's object and its meta message (the
// Object Store would keep a "deleted" meta forever). The caller holds the
// claim.
func (s *Store) deleteObject(ctx context.Context, hexDigest string) error {
	name := bus.SegmentObject(hexDigest)
	if err := s.obs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("delete object %s: %w", name, err)
	}
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(bus.ObjectMetaSubject(s.bucket, name))); err != nil {
		return fmt.Errorf("purge object meta %s: %w", name, err)
	}
	return nil
}

// reader streams one stored segment chunk by chunk (one direct get per
// chunk: bounded memory, no consumer, no deadline on the whole read),
// and verifies it as it goes: the recorded digest must be the address's,
// the chunks must add up to the recorded size and count, and the SHA-256
// of what was read must equal the address. Any mismatch fails the read
// with ErrCorrupt, at the latest instead of io.EOF.
type reader struct {
	ctx     context.Context
	stream  jetstream.Stream
	subject string
	id      string
	size    int64
	chunks  uint32
	want    []byte // the address's SHA-256
	h       hash.Hash
	next    uint64 // stream sequence to read from
	buf     []byte // unread part of the current chunk
	read    int64
	got     uint32
	err     error
}

// Close releases nothing today; Open returns an io.ReadCloser so that a
// reader may hold resources later.
func (r *reader) Close() error { return nil }

func (r *reader) corrupt(format string, args ...any) error {
	r.err = fmt.Errorf("read segment %s: %w: "+format, append([]any{r.id, ErrCorrupt}, args...)...)
	return r.err
}

// chunk fetches the next chunk. Past the recorded size it checks the
// totals and returns io.EOF.
func (r *reader) chunk() ([]byte, error) {
	if r.read == r.size {
		if r.got != r.chunks {
			return nil, r.corrupt("%d chunks read, %d recorded", r.got, r.chunks)
		}
		if !bytes.Equal(r.h.Sum(nil), r.want) {
			return nil, r.corrupt("content does not hash to its address")
		}
		r.err = io.EOF
		return nil, io.EOF
	}
	m, err := r.stream.GetMsg(r.ctx, r.next, jetstream.WithGetMsgSubject(r.subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, r.corrupt("chunks end after %d of %d bytes", r.read, r.size)
	}
	if err != nil {
		r.err = fmt.Errorf("read segment %s: %w", r.id, err)
		return nil, r.err
	}
	r.next = m.Sequence + 1
	r.got++
	r.read += int64(len(m.Data))
	if r.read > r.size {
		return nil, r.corrupt("chunks exceed the recorded %d bytes", r.size)
	}
	r.h.Write(m.Data)
	return m.Data, nil
}

// Read implements io.Reader.
func (r *reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	for len(r.buf) == 0 {
		b, err := r.chunk()
		if err != nil {
			return 0, err
		}
		r.buf = b
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// readAll reads the whole segment, verified. A single-chunk segment is
// returned without a copy.
func (r *reader) readAll() ([]byte, error) {
	var out []byte
	for {
		b, err := r.chunk()
		if err == io.EOF {
			if out == nil {
				out = []byte{}
			}
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if out == nil && int64(len(b)) == r.size {
			out = b
			continue
		}
		if out == nil {
			out = make([]byte, 0, r.size)
		}
		out = append(out, b...)
	}
}

// Open streams a segment's bytes, one chunk at a time, verified against
// its address as they are read: a mismatch fails a Read with ErrCorrupt,
// at the latest instead of io.EOF. An unknown or malformed id is
// sync.not_found; a recorded digest that is not the address's fails here
// with ErrCorrupt. Open does not authorize: callers check a publication
// first.
func (s *Store) Open(ctx context.Context, segmentID string) (io.ReadCloser, error) {
	return s.open(ctx, segmentID)
}

func (s *Store) open(ctx context.Context, segmentID string) (*reader, error) {
	hexDigest, ok := parseID(segmentID)
	if !ok {
		return nil, notFound()
	}
	info, err := s.obs.GetInfo(ctx, bus.SegmentObject(hexDigest))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, notFound()
	}
	if err != nil {
		return nil, fmt.Errorf("open segment %s: %w", segmentID, err)
	}
	want, _ := hex.DecodeString(hexDigest)
	r := &reader{
		ctx: ctx, stream: s.stream, subject: bus.ObjectChunkSubject(s.bucket, info.NUID), id: segmentID,
		size: int64(info.Size), chunks: info.Chunks, want: want, h: sha256.New(), next: 1,
	}
	recorded, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil || !bytes.Equal(recorded, want) {
		return nil, r.corrupt("recorded digest %q is not the address's", info.Digest)
	}
	if info.NUID == "" || info.Opts != nil && info.Opts.Link != nil {
		return nil, r.corrupt("the object is a link or has no chunks")
	}
	return r, nil
}
