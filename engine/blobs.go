package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// checkBlobs is the push-time existence check (SPEC.md §5.9.6): every
// non-NULL blob_ref value of the row about to be written must name a blob
// the partition holds, checked in the commit's transaction; the first
// absent one rejects the operation with blob.not_found, and with it the
// whole commit. The store's reference index would refuse the write all
// the same; checking first gives the client the spec's code.
func (st *stager) checkBlobs(ctx context.Context, i int, t *schema.Table, vals []ssp2.Value) (*rejection, error) {
	var seen []string
	for c, col := range t.Columns {
		if col.Type != ssp2.TypeBlobRef || c >= len(vals) || vals[c].Null {
			continue
		}
		id, ok := ssp2.BlobRefID(vals[c].Bytes)
		if !ok || slices.Contains(seen, id) {
			continue // the codec refuses a non-canonical BlobRef before this
		}
		seen = append(seen, id)
		held, err := st.tx.BlobHeld(ctx, id)
		if err != nil {
			return nil, internal("check blob", err)
		}
		if !held {
			return opError(i, ssp2.CodeBlobNotFound, fmt.Sprintf("column %s references blob %s, which was not uploaded", col.Name, id)), nil
		}
	}
	return nil, nil
}

// MaxBlobRefsPage is how many referencing rows AuthorizeBlob reads at a
// time.
const MaxBlobRefsPage = 256

// AuthorizeBlob authorizes a blob download (SPEC.md §5.9.5) on every
// call: the actor may download the blob iff at least one row of the
// partition's reference index passes the write-path scope check (§3.4
// steps 1–3) under the actor's allowed scopes, resolved once. It returns
// the blob's row, blob.not_found for a blob the partition does not hold
// (or a malformed id), and blob.forbidden when no referencing row
// authorizes the actor, there is none, or the resolver fails.
func (e *Engine) AuthorizeBlob(ctx context.Context, id Identity, blobID string) (storage.Blob, error) {
	if err := checkIdentity(id); err != nil {
		return storage.Blob{}, err
	}
	if !ssp2.ValidBlobID(blobID) {
		return storage.Blob{}, ssp2.Errorf(ssp2.CodeBlobNotFound, "unknown blob: an id is sha256:<64 lowercase hex>")
	}
	if err := e.verifyGate(ctx, id.Partition); err != nil {
		return storage.Blob{}, err
	}
	b, ok, err := e.cfg.Store.BlobGet(ctx, id.Partition, blobID)
	if err != nil {
		return storage.Blob{}, internal("read blob", err)
	}
	if !ok {
		return storage.Blob{}, ssp2.Errorf(ssp2.CodeBlobNotFound, "unknown blob")
	}
	forbidden := ssp2.Errorf(ssp2.CodeBlobForbidden, "no row referencing this blob is visible to the actor")
	rs, err := resolve(ctx, id.Scopes, e.cfg.Schema, id.Partition, id.ActorID)
	if err != nil {
		if ssp2.CodeOf(err) == ssp2.CodeInvalidSubscription {
			return storage.Blob{}, forbidden
		}
		return storage.Blob{}, internal("resolve scopes", err)
	}
	if rs.err != nil {
		e.log.Warn("scope resolution failed; blob download refused", "partition", id.Partition, "actor", id.ActorID, "err", rs.err)
		return storage.Blob{}, forbidden
	}
	p := storage.BlobRefParams{Partition: id.Partition, BlobID: blobID, Limit: MaxBlobRefsPage}
	for {
		refs, err := e.cfg.Store.BlobReferences(ctx, p)
		if err != nil {
			return storage.Blob{}, internal("read blob references", err)
		}
		for _, r := range refs {
			if t, ok := e.cfg.Schema.Table(r.Table); ok && rs.authorizes(t, r.Scopes) {
				return b, nil
			}
		}
		if len(refs) < p.Limit {
			return storage.Blob{}, forbidden
		}
		last := refs[len(refs)-1]
		p.AfterTable, p.AfterRowID = last.Table, last.RowID
	}
}

// AdmitBlobUpload admits a blob upload or upload grant (SPEC.md §5.9.3):
// uploading is not a scope-bearing act, so an authenticated identity the
// stores can hold, in a partition the serve gate serves, may upload.
func (e *Engine) AdmitBlobUpload(ctx context.Context, id Identity) error {
	if err := checkIdentity(id); err != nil {
		return err
	}
	return e.verifyGate(ctx, id.Partition)
}
