package bus

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// PutObject streams r into a new object name of bucket, laid out as the
// Object Store lays objects out — chunks on a fresh $O.<bucket>.C.<nuid>
// subject, then the meta on $O.<bucket>.M.<name> with a rollup — so every
// Object Store reader and tool reads it. It publishes on js with a window
// of ObjectWindow chunks of chunkSize bytes: the Object Store's own Put
// makes a JetStream context per call, whose reconnect-watch goroutine can
// outlive it. stream is the bucket's stream (ObjectStream), used to purge
// the chunks of a failed put. The returned info carries the size and the
// Object Store's SHA-256 digest ("SHA-256=<base64url>").
func PutObject(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, bucket, name string, chunkSize int, r io.Reader) (info jetstream.ObjectInfo, err error) {
	id := nuid.Next()
	subj := ObjectChunkSubject(bucket, id)
	var (
		bufs [ObjectWindow][]byte
		acks [ObjectWindow]jetstream.PubAckFuture
		h    = sha256.New()
	)
	defer func() {
		if err != nil {
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = stream.Purge(pctx, jetstream.WithPurgeSubject(subj))
		}
	}()
	wait := func(f jetstream.PubAckFuture) error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := 0; ; i++ {
		slot := i % ObjectWindow
		if acks[slot] != nil {
			// A slot's buffer is reused only once its chunk is stored.
			if err := wait(acks[slot]); err != nil {
				return info, err
			}
			acks[slot] = nil
		}
		if bufs[slot] == nil {
			bufs[slot] = make([]byte, chunkSize)
		}
		n, rerr := io.ReadFull(r, bufs[slot])
		if n > 0 {
			h.Write(bufs[slot][:n])
			f, err := js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: bufs[slot][:n]})
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
	for _, f := range acks {
		if f != nil {
			if err := wait(f); err != nil {
				return info, err
			}
		}
	}
	info.ObjectMeta = jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(chunkSize)}}
	info.Bucket, info.NUID, info.ModTime = bucket, id, time.Now().UTC()
	info.Digest = "SHA-256=" + base64.URLEncoding.EncodeToString(h.Sum(nil))
	meta, err := json.Marshal(&info)
	if err != nil {
		return info, err
	}
	m := nats.NewMsg(ObjectMetaSubject(bucket, name))
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
