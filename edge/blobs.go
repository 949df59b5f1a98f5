package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Blobs of edge partitions. A replicated row's blob_ref values must name
// blobs the hub's partition holds — the reference index requires its
// blob row, as at the push (SPEC.md §5.9.6) — so before the hub applies a
// page (commits, snapshot rows) it fetches each referenced blob it does
// not hold: it asks the edge for the blob's row
// (syncnode.edge.<edge>.blob), reads the object from the edge's
// sync_blobs across the leaf link (an Object Store read in the edge's
// JetStream domain: reads across domains work, writes do not, NATS-NOTES
// §0.2) and stores it in its own Object Store with its own blob row
// (BlobPutter, the digest verified again). The bytes are at the hub
// before any row references them, so a hub client downloads an edge
// partition's blob whether the link is up or not.

// BlobPutter stores a blob upload (blobs.Store).
type BlobPutter interface {
	Put(ctx context.Context, u storage.BlobUpload) (existed bool, err error)
}

func (h *Home) blob(ctx context.Context, body []byte) any {
	var req blobRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return blobReply{Error: errorToWire(ssp2.Errorf(ssp2.CodeInvalidRequest, "blob request: %v", err))}
	}
	if h.homes.Of(req.Partition) != h.cfg.Name {
		return blobReply{Error: errorToWire(ssp2.Errorf(ssp2.CodeForbidden, "partition is not homed at edge %s", h.cfg.Name))}
	}
	b, ok, err := h.cfg.Store.BlobGet(ctx, req.Partition, req.BlobID)
	if err != nil {
		return blobReply{Error: errorToWire(err)}
	}
	return blobReply{Found: ok, ByteLength: b.ByteLength, MediaType: b.MediaType, Object: b.Object}
}

// rowBlobs appends to dst the distinct blob ids the encoded row of table
// references.
func (h *Hub) rowBlobs(s *replicaState, table string, row []byte, dst []string) ([]string, error) {
	t, ok := h.cfg.Schema.Table(table)
	if !ok || !t.HasBlobRefs() {
		return dst, nil
	}
	vals, err := t.Codec.DecodeRow(row, s.buf[:0])
	if err != nil {
		return dst, fmt.Errorf("row of %s: %w", table, err)
	}
	s.buf = vals
	return t.BlobRefIDs(vals, dst), nil
}

// commitBlobs lists the blobs the upserts of commits reference.
func (h *Hub) commitBlobs(s *replicaState, commits []wireCommit) ([]string, error) {
	var ids []string
	var err error
	for _, c := range commits {
		for _, ch := range c.Changes {
			if ch.Op == storage.OpDelete {
				continue
			}
			if ids, err = h.rowBlobs(s, ch.Table, ch.Row, ids); err != nil {
				return nil, fmt.Errorf("commit %d: %w", c.Seq, err)
			}
		}
	}
	return ids, nil
}

// fetchBlobs makes the hub's partition hold every blob of ids, reading
// the ones it lacks from the edge.
func (h *Hub) fetchBlobs(l *link, partition string, ids []string) error {
	for _, id := range ids {
		if _, held, err := h.cfg.Store.BlobGet(h.ctx, partition, id); err != nil {
			return fmt.Errorf("blob %s: %w", id, err)
		} else if held {
			continue
		}
		if h.cfg.Blobs == nil {
			return fmt.Errorf("blob %s: the hub has no blob store", id)
		}
		if err := h.fetchBlob(l, partition, id); err != nil {
			return fmt.Errorf("blob %s: %w", id, err)
		}
		h.metrics.BlobsFetched.Add(1)
	}
	return nil
}

func (h *Hub) fetchBlob(l *link, partition, id string) error {
	var b blobReply
	if err := h.request(bus.EdgeBlobSubject(l.edge), blobRequest{Partition: partition, BlobID: id}, &b); err != nil {
		return err
	}
	if b.Error != nil {
		return b.Error.err()
	}
	if !b.Found {
		// A row of the edge references it: the edge holds it unless the
		// row changed since (a later page no longer references it).
		return ssp2.Errorf(ssp2.CodeBlobNotFound, "the edge does not hold blob %s", id)
	}
	ctx, cancel := context.WithTimeout(h.ctx, h.blobTimeout(b.ByteLength))
	defer cancel()
	js, err := jetstream.NewWithDomain(h.cfg.Conn, l.edge)
	if err != nil {
		return err
	}
	obs, err := js.ObjectStore(ctx, h.cfg.Names.BlobsBucket())
	if err != nil {
		return fmt.Errorf("the edge's blob bucket: %w", err)
	}
	r, err := obs.Get(ctx, b.Object)
	if err != nil {
		return fmt.Errorf("read the edge's object %s: %w", b.Object, err)
	}
	defer r.Close()
	_, err = h.cfg.Blobs.Put(ctx, storage.BlobUpload{Partition: partition, BlobID: id, MediaType: b.MediaType, Declared: b.ByteLength, Body: r})
	return err
}

// blobTimeout bounds one blob's transfer: RequestTimeout per 8 MiB, at
// least one.
func (h *Hub) blobTimeout(n int64) time.Duration {
	return h.cfg.RequestTimeout * time.Duration(1+n/(8<<20))
}
