package bus

import (
	"encoding/base64"
)

// Names of the segment store (package segments): the Object Store bucket
// (Names.SegmentsBucket) and its backing stream, the object of one content
// address, and the upload claims in the lease bucket.
//
//	bucket         sync_segments | <prefix>_sync_segments
//	stream         OBJ_<bucket>
//	object         sha256-<64 hex>                       (content address sha256:<hex>)
//	chunks         $O.<bucket>.C.<nuid>                  (one subject per uploaded object)
//	meta           $O.<bucket>.M.<base64url(object)>
//	upload claim   upload.<bucket>.<64 hex>              (in the lease bucket, per-key TTL)

// ObjectStream is the stream backing an Object Store bucket: OBJ_<bucket>.
func ObjectStream(bucket string) string { return "OBJ_" + bucket }

// ObjectChunks matches every chunk subject of a bucket: $O.<bucket>.C.>.
func ObjectChunks(bucket string) string { return "$O." + bucket + ".C.>" }

// ObjectChunkSubject is the chunk subject of one stored object:
// $O.<bucket>.C.<nuid>.
func ObjectChunkSubject(bucket, nuid string) string { return "$O." + bucket + ".C." + nuid }

// ParseObjectChunkSubject returns the NUID of a chunk subject of bucket.
func ParseObjectChunkSubject(bucket, subject string) (nuid string, ok bool) {
	prefix := "$O." + bucket + ".C."
	if len(subject) <= len(prefix) || subject[:len(prefix)] != prefix {
		return "", false
	}
	return subject[len(prefix):], true
}

// ObjectMetaSubject is the meta subject of a named object:
// $O.<bucket>.M.<base64url(name)> (the Object Store's own encoding).
func ObjectMetaSubject(bucket, name string) string {
	return "$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

// SegmentObject is the object name of a content address given as its 64
// lowercase hex digits: sha256-<hex>. The caller validates the digits.
func SegmentObject(hexDigest string) string { return "sha256-" + hexDigest }

// SegmentUploadKey is the KV key claiming the upload (or deletion) of one
// content address in one segments bucket: upload.<bucket>.<hex>.
func SegmentUploadKey(bucket, hexDigest string) string {
	return "upload." + bucket + "." + hexDigest
}
