package bus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// ObjectWindow is how many chunks PutObject has in flight (and so in
// memory) at once.
const ObjectWindow = 4

// The chunk sizes of the node's object stores (blobs, segments): at least
// 1 KiB, so that an object is not mostly message headers, and at most
// 8 MiB, the largest max_payload the NATS server accepts without a
// warning (a chunk is one message).
const (
	MinChunkSize = 1 << 10
	MaxChunkSize = 8 << 20
)

// CheckChunkSize refuses an object chunk size outside
// MinChunkSize..MaxChunkSize (the error names the value; callers prefix
// the field).
func CheckChunkSize(n int) error {
	if n < MinChunkSize || n > MaxChunkSize {
		return fmt.Errorf("%d outside 1 KiB..8 MiB", n)
	}
	return nil
}

// chunkBufs pools PutObject's chunk buffers per chunk size: a put of a
// 1 MiB chunk otherwise allocates (and clears) a 1 MiB buffer per window
// slot, and, for a body of a whole number of chunks, one more to read
// its end.
var chunkBufs sync.Map // chunk size → *sync.Pool of *[]byte

func getChunkBuf(size int) []byte {
	if p, ok := chunkBufs.Load(size); ok {
		if b, ok := p.(*sync.Pool).Get().(*[]byte); ok {
			return *b
		}
	}
	return make([]byte, size)
}

func putChunkBuf(b []byte) {
	if b == nil {
		return
	}
	p, _ := chunkBufs.LoadOrStore(cap(b), &sync.Pool{})
	b = b[:cap(b)]
	p.(*sync.Pool).Put(&b)
}

// ObjectPut describes the object PutObject writes.
type ObjectPut struct {
	Bucket    string
	Name      string
	ChunkSize int
	// Bytes, when not nil, are the whole object: published in slices of
	// ChunkSize without a copy, and the reader is not read.
	Bytes []byte
	// Digest is the Object Store digest of Bytes ("SHA-256=<base64url>")
	// when the caller knows it: then Bytes are not hashed again. It is
	// ignored for a reader, whose bytes are always hashed.
	Digest string
	// VerifyFunc, when set, checks the object's info (size, chunks and
	// the digest of what was published) before its meta is written; an
	// error fails the put, which then leaves nothing behind, and is
	// returned as is.
	VerifyFunc func(jetstream.ObjectInfo) error
}

// PutObject writes a new object of p.Bucket named p.Name, laid out as
// the Object Store lays objects out — chunks on a fresh $O.<bucket>.C.<nuid>
// subject, then the meta on $O.<bucket>.M.<name> with a rollup — so every
// Object Store reader and tool reads it. Its bytes are p.Bytes or, when
// p.Bytes is nil, what r yields. It publishes on js with a window of
// ObjectWindow chunks: the Object Store's own Put makes a JetStream
// context per call, whose reconnect-watch goroutine can outlive it.
// stream is the bucket's stream (ObjectStream), used to purge the chunks
// of a failed put. The returned info carries the size, the chunk count
// and the Object Store's SHA-256 digest ("SHA-256=<base64url>"). Once
// ctx has ended it publishes no meta. The segment and blob stores write
// every object through it.
func PutObject(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, p ObjectPut, r io.Reader) (info jetstream.ObjectInfo, err error) {
	if p.ChunkSize < 1 {
		return info, fmt.Errorf("put object %s: chunk size %d", p.Name, p.ChunkSize)
	}
	id := nuid.Next()
	subj := ObjectChunkSubject(p.Bucket, id)
	var (
		bufs [ObjectWindow][]byte
		acks [ObjectWindow]jetstream.PubAckFuture
		h    hash.Hash
		mem  = p.Bytes
	)
	if mem == nil || p.Digest == "" {
		h = sha256.New()
	}
	defer func() {
		if err != nil {
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			// Chunks still in flight land after a purge sent now: let
			// them land first.
			for _, f := range acks {
				if f != nil {
					select {
					case <-f.Ok():
					case <-f.Err():
					case <-pctx.Done():
					}
				}
			}
			_ = stream.Purge(pctx, jetstream.WithPurgeSubject(subj))
		}
	}()
	// wait waits for the chunk of a slot to be stored and frees the slot.
	// A future answers once: one answered here leaves acks, and one the
	// context gave up on stays there, so that a failed put's purge waits
	// for its chunk to land.
	wait := func(slot int) error {
		select {
		case <-acks[slot].Ok():
			acks[slot] = nil
			return nil
		case err := <-acks[slot].Err():
			acks[slot] = nil
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := 0; ; i++ {
		slot := i % ObjectWindow
		if acks[slot] != nil {
			// A slot (and its buffer) is reused only once its chunk is
			// stored.
			if err := wait(slot); err != nil {
				return info, err
			}
		}
		var (
			chunk []byte
			rerr  error
		)
		if p.Bytes != nil {
			chunk, mem = mem[:min(len(mem), p.ChunkSize)], mem[min(len(mem), p.ChunkSize):]
			if len(mem) == 0 {
				rerr = io.EOF
			}
		} else {
			if bufs[slot] == nil {
				bufs[slot] = getChunkBuf(p.ChunkSize)
			}
			n, err := io.ReadFull(r, bufs[slot])
			chunk, rerr = bufs[slot][:n], err
		}
		if n := len(chunk); n > 0 {
			if h != nil {
				h.Write(chunk)
			}
			f, err := js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: chunk})
			if err != nil {
				return info, err
			}
			acks[slot] = f
			info.Chunks++
			info.Size += uint64(n)
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return info, rerr
		}
	}
	for i := range acks {
		if acks[i] != nil {
			if err := wait(i); err != nil {
				return info, err
			}
		}
	}
	// Every chunk is stored, so the client holds no buffer any more
	// (only then: a publish may keep a reference to the bytes until its
	// write). A failed put drops its buffers instead.
	for _, b := range bufs {
		putChunkBuf(b)
	}
	info.ObjectMeta = jetstream.ObjectMeta{Name: p.Name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(p.ChunkSize)}}
	info.Bucket, info.NUID, info.ModTime = p.Bucket, id, time.Now().UTC()
	if h != nil {
		info.Digest = "SHA-256=" + base64.URLEncoding.EncodeToString(h.Sum(nil))
	} else {
		info.Digest = p.Digest
	}
	if p.VerifyFunc != nil {
		if err := p.VerifyFunc(info); err != nil {
			return info, err
		}
	}
	meta, err := json.Marshal(&info)
	if err != nil {
		return info, err
	}
	// A put whose context has ended writes no meta, however complete its
	// chunks: a sweep may collect the chunks of a put past its deadline.
	if err := ctx.Err(); err != nil {
		return info, err
	}
	m := nats.NewMsg(ObjectMetaSubject(p.Bucket, p.Name))
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Data = meta
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return info, fmt.Errorf("publish object meta: %w", err)
	}
	return info, nil
}

// OpenObjectStore opens the file-backed object store bucket, creating it
// when absent, at replicas: an existing bucket is raised (or lowered) to
// replicas, so a bucket a single node created follows the node into a
// cluster. The segment and blob stores open their buckets through it.
func OpenObjectStore(ctx context.Context, js jetstream.JetStream, bucket, description string, replicas int) (jetstream.ObjectStore, error) {
	obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: bucket, Description: description, Storage: jetstream.FileStorage, Replicas: replicas,
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		obs, err = js.ObjectStore(ctx, bucket)
	}
	if err == nil {
		err = EnsureReplicas(ctx, js, ObjectStream(bucket), replicas)
	}
	if err != nil {
		return nil, err
	}
	return obs, nil
}

// ErrObjectCorrupt fails the read of an object whose chunks are missing
// or whose bytes are not its size or SHA-256 digest.
var ErrObjectCorrupt = errors.New("object bytes do not match their meta")

// ReadObject streams the bytes of the object info describes (from the
// Object Store's GetInfo) out of stream, its bucket's stream: a direct
// get per chunk on the object's chunk subject, the next chunk asked for
// when the last is used up. At most one chunk is held whatever the
// reader's pace, and no consumer is made. (The Object Store's own Get
// delivers through a push consumer whose flow-control window grows to
// 32 MiB: behind a slow reader, such as a download to a phone, that much
// piles up in the client per read.) The bytes are checked against the
// meta's size, chunk count and digest: a mismatch or a missing chunk
// fails the read with ErrObjectCorrupt instead of io.EOF.
func ReadObject(ctx context.Context, stream jetstream.Stream, info *jetstream.ObjectInfo) (io.ReadCloser, error) {
	want, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil {
		return nil, fmt.Errorf("read object %s: %w", info.Name, err)
	}
	return &objectReader{ctx: ctx, stream: stream, info: info, subj: ObjectChunkSubject(info.Bucket, info.NUID), want: want, h: sha256.New(), seq: 1}, nil
}

type objectReader struct {
	ctx    context.Context
	stream jetstream.Stream
	info   *jetstream.ObjectInfo
	subj   string
	want   []byte
	h      hash.Hash
	seq    uint64 // the next chunk is the first on subj at or after seq
	chunks uint32 // read so far
	size   uint64
	cur    []byte
	err    error
}

func (o *objectReader) Read(p []byte) (int, error) {
	for len(o.cur) == 0 {
		if o.err != nil {
			return 0, o.err
		}
		if o.chunks == o.info.Chunks {
			o.err = o.finish()
			return 0, o.err
		}
		m, err := o.stream.GetMsg(o.ctx, o.seq, jetstream.WithGetMsgSubject(o.subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			err = fmt.Errorf("%w: %s has %d of its %d chunks", ErrObjectCorrupt, o.info.Name, o.chunks, o.info.Chunks)
		}
		if err != nil {
			o.err = err
			return 0, err
		}
		o.seq, o.cur = m.Sequence+1, m.Data
		o.chunks++
		o.size += uint64(len(m.Data))
		o.h.Write(m.Data)
	}
	n := copy(p, o.cur)
	o.cur = o.cur[n:]
	return n, nil
}

// finish checks what was read against the meta: io.EOF when it matches.
func (o *objectReader) finish() error {
	if o.size != o.info.Size {
		return fmt.Errorf("%w: %s has %d bytes, its meta says %d", ErrObjectCorrupt, o.info.Name, o.size, o.info.Size)
	}
	if sum := o.h.Sum(nil); !bytes.Equal(sum, o.want) {
		return fmt.Errorf("%w: the SHA-256 of %s is not its meta's", ErrObjectCorrupt, o.info.Name)
	}
	return io.EOF
}

// Close ends the read; chunks not yet asked for are never fetched.
func (o *objectReader) Close() error {
	if o.err == nil {
		o.err = errors.New("read object: closed")
	}
	o.cur = nil
	return nil
}
