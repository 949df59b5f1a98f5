package engine

import (
	"context"

	"github.com/syncnode/syncnode/signedurl"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Presigned blob transfer (SPEC.md §5.9.3, §5.9.5): with signed URLs on,
// an upload grant is a presigned PUT and an authorized download is a
// presigned GET, both under the node's own routes, so a CDN or any HTTP
// client can carry the bytes without host authentication. The tokens are
// package signedurl's; authorization happens at issuance (host
// authentication for an upload, the reference index for a download), and
// the token then grants exactly one blob of one partition until it
// expires.

// BlobPresign reports whether blobs are served by signed URL.
func (e *Engine) BlobPresign() bool { return e.blobPresign.Load() }

// SetBlobPresign switches presigned blob transfer; turning it on needs
// Config.SignedURLs.
func (e *Engine) SetBlobPresign(on bool) error {
	if on && e.cfg.SignedURLs == nil {
		return ssp2.Errorf(ssp2.CodeInvalidRequest, "presigned blobs need signed urls")
	}
	e.blobPresign.Store(on)
	return nil
}

// blobURLBase is the base blob URLs go under: Config.SignedURLBase, else
// the request's mount.
func (e *Engine) blobURLBase(mount string) string {
	if e.cfg.SignedURLBase != "" {
		return e.cfg.SignedURLBase
	}
	return mount
}

// SignBlobDownload mints the presigned GET of a blob the identity was
// just authorized for (AuthorizeBlob), under mount (the request's) or
// SignedURLBase: <base>blobs/{id}?st=…, with its expiry in milliseconds.
func (e *Engine) SignBlobDownload(id Identity, blobID, mount string) (string, int64) {
	tok, exp := e.cfg.SignedURLs.Sign(signedurl.Blob, id.Partition, blobID, "", e.cfg.Clock.Now())
	e.metrics.SignedBlobURLs.Add(1)
	return e.blobURLBase(mount) + "blobs/" + blobID + "?" + signedurl.Param + "=" + tok, exp
}

// SignBlobUpload mints the presigned PUT of an upload grant: one upload
// of at most byteLength bytes of blobID into the identity's partition.
func (e *Engine) SignBlobUpload(id Identity, blobID string, byteLength int64, mount string) (string, int64) {
	tok, exp := e.cfg.SignedURLs.SignUpload(id.Partition, blobID, byteLength, e.cfg.Clock.Now())
	e.metrics.SignedBlobURLs.Add(1)
	return e.blobURLBase(mount) + "blobs/" + blobID + "?" + signedurl.Param + "=" + tok, exp
}

// BlobUploadGrant is what a verified presigned PUT admits.
type BlobUploadGrant struct {
	Partition  string
	BlobID     string
	ByteLength int64 // the most bytes the PUT may carry
}

// AuthorizeSignedBlob authorizes a download by presigned URL, without
// host authentication: the token must verify (MAC, kind, blob id, expiry
// with the 60 s skew) and the partition its audience names must still
// hold the blob. Every refused token is blob.forbidden (§10.2 has no
// other blob code for it); a blob the partition no longer holds is
// blob.not_found.
func (e *Engine) AuthorizeSignedBlob(ctx context.Context, blobID, token string) (storage.Blob, error) {
	partition, err := e.verifyBlobToken(ctx, signedurl.Blob, blobID, token, nil)
	if err != nil {
		return storage.Blob{}, err
	}
	b, ok, err := e.cfg.Store.BlobGet(ctx, partition, blobID)
	if err != nil {
		return storage.Blob{}, internal("read blob", err)
	}
	if !ok {
		e.metrics.SignedBlobRefusals.Add(1)
		return storage.Blob{}, ssp2.Errorf(ssp2.CodeBlobNotFound, "unknown blob")
	}
	return b, nil
}

// AuthorizeSignedBlobUpload authorizes a presigned PUT, without host
// authentication: the token must verify as an upload grant of blobID.
// Refusals are blob.forbidden.
func (e *Engine) AuthorizeSignedBlobUpload(ctx context.Context, blobID, token string) (BlobUploadGrant, error) {
	var n int64
	partition, err := e.verifyBlobToken(ctx, signedurl.BlobUpload, blobID, token, &n)
	if err != nil {
		return BlobUploadGrant{}, err
	}
	return BlobUploadGrant{Partition: partition, BlobID: blobID, ByteLength: n}, nil
}

// verifyBlobToken checks a blob token of kind for blobID and returns the
// partition it was minted in (and, for an upload, the granted length),
// after the partition's serve gate.
func (e *Engine) verifyBlobToken(ctx context.Context, kind signedurl.Kind, blobID, token string, byteLength *int64) (string, error) {
	refuse := func(err error) (string, error) {
		e.metrics.SignedBlobRefusals.Add(1)
		return "", err
	}
	if e.cfg.SignedURLs == nil || !e.BlobPresign() {
		return refuse(ssp2.Errorf(ssp2.CodeBlobForbidden, "presigned blobs are not enabled"))
	}
	claims, err := e.cfg.SignedURLs.Verify(token, kind, blobID, e.cfg.Clock.Now())
	if err != nil {
		var r *signedurl.Refusal
		if asRefusal(err, &r) {
			return refuse(r.SSP2())
		}
		return refuse(ssp2.Errorf(ssp2.CodeBlobForbidden, "forbidden"))
	}
	partition, ok := e.cfg.SignedURLs.Partition(claims.Audience)
	if !ok {
		return refuse(ssp2.Errorf(ssp2.CodeBlobForbidden, "forbidden"))
	}
	if err := e.verifyGate(ctx, partition); err != nil {
		return "", err
	}
	if byteLength != nil {
		*byteLength = claims.ByteLength
	}
	return partition, nil
}
