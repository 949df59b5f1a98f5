package bus

// Blob names (SPEC.md §5.9). A blob's bytes are one object per accepted
// upload in the blobs bucket; SQL maps (partition, blob id) to the object,
// so two uploads of one address never write the same object and the
// orphan sweep deletes exactly the object it unmapped.
//
//	bucket   sync_blobs                      (<prefix>_sync_blobs in a namespace)
//	object   blob-<64 hex>-<upload id>

// BlobsBucket is the Object Store bucket of blob bytes: sync_blobs.
func (n Names) BlobsBucket() string { return n.name(bucketBlobs) }

const bucketBlobs = "sync_blobs"

// BlobObject is the object name of one upload of a blob, given its 64
// lowercase hex digits and a unique upload id (a NUID): blob-<hex>-<id>.
// The caller validates both.
func BlobObject(hexDigest, upload string) string { return "blob-" + hexDigest + "-" + upload }

// IsBlobObject reports whether name is a BlobObject name: blob-<64
// lowercase hex>-<upload id>.
func IsBlobObject(name string) bool {
	const prefix = "blob-"
	if len(name) < len(prefix)+64+2 || name[:len(prefix)] != prefix || name[len(prefix)+64] != '-' {
		return false
	}
	for _, c := range name[len(prefix) : len(prefix)+64] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
