package engine

import (
	"context"
	"errors"

	"github.com/syncnode/syncnode/signedurl"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// signedURL mints a segment's signed URL for the identity's partition and
// the scope digest just authorized, under SignedURLBase or the request's
// mount, with its expiry in milliseconds.
func (e *Engine) signedURL(id Identity, segmentID, digest string) (string, int64) {
	tok, exp := e.cfg.SignedURLs.Sign(signedurl.Segment, id.Partition, segmentID, digest, e.cfg.Clock.Now())
	base := e.cfg.SignedURLBase
	if base == "" {
		base = id.MountURL
	}
	return base + "segments/" + segmentID + "?" + signedurl.Param + "=" + tok, exp
}

// AuthorizeSignedSegment authorizes a download by signed URL (SPEC.md
// §5.4), without host authentication: the token must verify (MAC, kind,
// segment id, expiry with the 60 s skew), and a publication of the
// segment must exist in the partition the token's audience names, in that
// partition's live log epoch, under the token's scope digest, and still
// be live.
//
// A tampered or foreign token is sync.forbidden, an expired one
// sync.segment_expired; no publication in the audience's partition and
// epoch is sync.not_found (the segment may exist elsewhere: no leak), a
// digest never published there sync.forbidden, and matching publications
// that all expired sync.segment_expired.
func (e *Engine) AuthorizeSignedSegment(ctx context.Context, segmentID, token string) (storage.SegmentPublication, error) {
	pub, err := e.authorizeSigned(ctx, segmentID, token)
	if err != nil {
		e.metrics.SignedRefusals.Add(1)
	}
	return pub, err
}

func (e *Engine) authorizeSigned(ctx context.Context, segmentID, token string) (storage.SegmentPublication, error) {
	if e.cfg.SignedURLs == nil || e.cfg.Segments == nil {
		return storage.SegmentPublication{}, ssp2.Errorf(ssp2.CodeForbidden, "signed urls are not enabled")
	}
	claims, err := e.cfg.SignedURLs.Verify(token, signedurl.Segment, segmentID, e.cfg.Clock.Now())
	if err != nil {
		var r *signedurl.Refusal
		if asRefusal(err, &r) {
			return storage.SegmentPublication{}, r.SSP2()
		}
		return storage.SegmentPublication{}, ssp2.Errorf(ssp2.CodeForbidden, "forbidden")
	}
	seg, err := e.cfg.Segments.Get(ctx, segmentID)
	if err != nil {
		if ssp2.CodeOf(err) == ssp2.CodeNotFound {
			return storage.SegmentPublication{}, err
		}
		return storage.SegmentPublication{}, internal("read segment", err)
	}
	partition := ""
	for _, p := range seg.Publications {
		if e.cfg.SignedURLs.Audience(p.Partition) == claims.Audience {
			partition = p.Partition
			break
		}
	}
	if partition == "" {
		return storage.SegmentPublication{}, ssp2.Errorf(ssp2.CodeNotFound, "unknown segment")
	}
	if err := e.verifyGate(ctx, partition); err != nil {
		return storage.SegmentPublication{}, err
	}
	var part storage.Partition
	if err := e.cfg.Store.ReadTx(ctx, func(tx storage.ReadTx) error {
		var err error
		part, err = tx.Partition(ctx, partition)
		return err
	}); err != nil {
		return storage.SegmentPublication{}, internal("read partition", err)
	}
	var inEpoch, matching bool
	now := e.nowMs()
	for _, p := range seg.Publications {
		if p.Partition != partition || p.LogEpoch != part.LogEpoch {
			continue
		}
		inEpoch = true
		if p.ScopeDigest != claims.ScopeDigest {
			continue
		}
		matching = true
		if p.ExpiresAtMs > now {
			return p, nil
		}
	}
	switch {
	case !inEpoch:
		return storage.SegmentPublication{}, ssp2.Errorf(ssp2.CodeNotFound, "unknown segment")
	case !matching:
		return storage.SegmentPublication{}, ssp2.Errorf(ssp2.CodeForbidden, "forbidden")
	}
	return storage.SegmentPublication{}, ssp2.Errorf(ssp2.CodeSegmentExpired, "segment expired")
}

func asRefusal(err error, r **signedurl.Refusal) bool { return errors.As(err, r) }
