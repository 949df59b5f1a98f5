package engine

import (
	"context"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// AuthorizeSegment re-authorizes a direct segment download (SPEC.md §5.5):
// on every call it resolves the actor's scopes, computes the effective
// scopes of the requested map (the X-Syncular-Scopes header) for the
// segment's table, and compares their digest with a live publication of
// the segment in the caller's partition and current log epoch.
//
// It returns sync.not_found for an unknown segment or one published only
// in another partition or epoch, sync.segment_expired when every matching
// publication expired, and sync.forbidden when the scopes do not match or
// the resolver fails.
func (e *Engine) AuthorizeSegment(ctx context.Context, id Identity, segmentID string, requested map[string][]string) (storage.SegmentPublication, error) {
	if e.cfg.Segments == nil {
		return storage.SegmentPublication{}, ssp2.Errorf(ssp2.CodeNotFound, "unknown segment")
	}
	if err := e.guardRemote(ctx, id.Partition, false); err != nil {
		return storage.SegmentPublication{}, err
	}
	part, err := e.cfg.Store.PartitionTouch(ctx, id.Partition, e.nowMs())
	if err != nil {
		return storage.SegmentPublication{}, internal("touch partition", err)
	}
	if err := e.verifyGate(ctx, id.Partition); err != nil {
		return storage.SegmentPublication{}, err
	}
	live, err := e.cfg.Segments.Grants(ctx, segmentID, id.Partition, part.LogEpoch, e.nowMs())
	if err != nil {
		return storage.SegmentPublication{}, internal("read publications", err)
	}
	rs, err := resolve(ctx, id.Scopes, e.cfg.Schema, id.Partition, id.ActorID)
	if err != nil {
		if ssp2.CodeOf(err) == ssp2.CodeInvalidSubscription {
			return storage.SegmentPublication{}, ssp2.Errorf(ssp2.CodeForbidden, "forbidden")
		}
		return storage.SegmentPublication{}, internal("resolve scopes", err)
	}
	for _, p := range live {
		t, ok := e.cfg.Schema.Table(p.Table)
		if !ok || validateRequested(t, requested) != nil {
			continue
		}
		eff, ok := rs.effectiveScopes(requested)
		if ok && ssp2.ScopeDigest(eff) == p.ScopeDigest {
			return p, nil
		}
	}
	return storage.SegmentPublication{}, ssp2.Errorf(ssp2.CodeForbidden, "forbidden")
}
