package segments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/storage"
)

// pruneBatch is how many index rows one SQL statement of Prune handles,
// so SQLite's writer is never held long.
const pruneBatch = 1000

// PruneResult counts what Prune removed.
type PruneResult struct {
	Publications int64 // expired publications deleted
	Objects      int64 // addresses deleted (index row and bytes)
	Busy         int64 // addresses left for later: their claim was held
}

// Prune deletes the publications expired at nowMs, then every address
// left without a publication: first its index row (only if still
// unpublished), then its object. An address whose claim is held (an
// upload of the same bytes in flight) is left for the next run; an object
// whose deletion fails after its row went is collected by GC.
func (s *Store) Prune(ctx context.Context, nowMs int64) (PruneResult, error) {
	var res PruneResult
	for {
		n, err := s.index.SegmentExpire(ctx, nowMs, pruneBatch)
		res.Publications += n
		if err != nil {
			return res, fmt.Errorf("prune segments: %w", err)
		}
		if n < pruneBatch {
			break
		}
	}
	s.keys.removeIf(func(_ storage.SegmentKey, p storage.SegmentPublication) bool { return p.ExpiresAtMs <= nowMs })
	var errs []error
	for {
		segs, err := s.index.SegmentUnpublished(ctx, pruneBatch)
		if err != nil {
			return res, fmt.Errorf("prune segments: %w", err)
		}
		progress := false
		for _, seg := range segs {
			deleted, busy, err := s.deleteAddress(ctx, seg.ID)
			switch {
			case err != nil:
				errs = append(errs, err)
			case busy:
				res.Busy++
			case deleted:
				res.Objects++
				progress = true
			}
		}
		if len(segs) < pruneBatch || !progress {
			break
		}
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("prune segments: %w", errors.Join(errs...))
	}
	return res, nil
}

// deleteAddress deletes an unpublished address under its claim.
func (s *Store) deleteAddress(ctx context.Context, id string) (deleted, busy bool, err error) {
	hexDigest, ok := parseID(id)
	if !ok {
		// Not an address this package writes: drop the row only.
		deleted, err = s.index.SegmentDelete(ctx, id)
		return deleted, false, err
	}
	release, ok, err := s.claim(ctx, hexDigest, false)
	if err != nil || !ok {
		return false, !ok && err == nil, err
	}
	defer release()
	if deleted, err = s.index.SegmentDelete(ctx, id); err != nil || !deleted {
		return false, false, err // republished meanwhile, or gone
	}
	s.data.remove(id)
	s.keys.removeIf(func(_ storage.SegmentKey, p storage.SegmentPublication) bool { return p.SegmentID == id })
	return true, false, s.deleteObject(ctx, hexDigest)
}

// GCResult counts what GC removed.
type GCResult struct {
	// ChunkSubjects is the number of chunk subjects purged: chunks of no
	// live object (a crashed or raced upload, an interrupted delete).
	ChunkSubjects int
	// Objects is the number of objects deleted because the index has no
	// row for their address (a crash between upload and index commit,
	// or between index delete and object delete).
	Objects int
}

// GC removes what the index and the bucket's objects no longer reference,
// if it is older than GCGrace at nowMs: chunk subjects $O.<b>.C.<nuid>
// whose NUID no live object carries, and objects whose address has no
// index row. The grace exceeds UploadTimeout, so the chunks of an upload
// in flight (written before its meta) are never collected, and an object
// is deleted only under its address's claim after re-reading the index.
// GC lists the bucket: it is maintenance, not a request-path call.
func (s *Store) GC(ctx context.Context, nowMs int64) (GCResult, error) {
	var res GCResult
	cutoff := time.UnixMilli(nowMs).Add(-s.cfg.GCGrace)
	// Subjects first, objects second: a chunk subject of an upload that
	// completes in between is seen live.
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(bus.ObjectChunks(s.bucket)))
	if err != nil {
		return res, fmt.Errorf("segment gc: %w", err)
	}
	objs, err := s.obs.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return res, fmt.Errorf("segment gc: %w", err)
	}
	live := make(map[string]bool, len(objs))
	for _, o := range objs {
		live[o.NUID] = true
	}
	for subj := range info.State.Subjects {
		nuid, ok := bus.ParseObjectChunkSubject(s.bucket, subj)
		if !ok || live[nuid] {
			continue
		}
		m, err := s.stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return res, fmt.Errorf("segment gc: %w", err)
		}
		if m.Time.After(cutoff) {
			continue
		}
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return res, fmt.Errorf("segment gc: purge %s: %w", subj, err)
		}
		res.ChunkSubjects++
	}
	for _, o := range objs {
		if o.ModTime.After(cutoff) || len(o.Name) < 64 {
			continue
		}
		hexDigest := o.Name[len(o.Name)-64:]
		id := idPrefix + hexDigest
		if _, ok := parseID(id); !ok || bus.SegmentObject(hexDigest) != o.Name {
			continue // not a segment
		}
		deleted, err := s.deleteUnindexed(ctx, id, hexDigest)
		if err != nil {
			return res, fmt.Errorf("segment gc: %w", err)
		}
		if deleted {
			res.Objects++
		}
	}
	return res, nil
}

// deleteUnindexed deletes an address's object if the index has no row for
// it, under its claim (skipped when held).
func (s *Store) deleteUnindexed(ctx context.Context, id, hexDigest string) (bool, error) {
	if _, ok, err := s.index.SegmentGet(ctx, id); err != nil || ok {
		return false, err
	}
	release, ok, err := s.claim(ctx, hexDigest, false)
	if err != nil || !ok {
		return false, err
	}
	defer release()
	if _, ok, err := s.index.SegmentGet(ctx, id); err != nil || ok {
		return false, err
	}
	s.data.remove(id)
	return true, s.deleteObject(ctx, hexDigest)
}

// maintain runs Prune and GC every MaintenanceInterval until Stop.
func (s *Store) maintain() {
	defer close(s.loopDone)
	t := time.NewTicker(s.cfg.MaintenanceInterval)
	defer t.Stop()
	for {
		select {
		case <-s.life.Done():
			return
		case <-t.C:
		}
		now := s.now()
		if res, err := s.Prune(s.life, now); err != nil {
			s.log.Warn("segment prune failed", "err", err)
		} else if res.Publications > 0 || res.Objects > 0 {
			s.log.Info("segments pruned", "publications", res.Publications, "objects", res.Objects, "busy", res.Busy)
		}
		if res, err := s.GC(s.life, now); err != nil {
			s.log.Warn("segment gc failed", "err", err)
		} else if res.ChunkSubjects > 0 || res.Objects > 0 {
			s.log.Info("segment garbage collected", "chunkSubjects", res.ChunkSubjects, "objects", res.Objects)
		}
	}
}
