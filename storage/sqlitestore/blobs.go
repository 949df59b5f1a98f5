package sqlitestore

import (
	"context"

	"github.com/syncnode/syncnode/storage/internal/blobcore"
)

// The blob index (storage.BlobIndex): its SQL here, the rest in blobcore.
// Writes are members of the writer's group transactions: the sweep's
// delete and a push's reference never interleave.

const blobCols = blobcore.BlobCols

var blobSQL = &blobcore.SQL{
	Insert: `INSERT INTO sync_blobs (` + blobCols + `) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (partition, blob_id) DO NOTHING`,
	Touch: `UPDATE sync_blobs SET uploaded_at_ms = max(uploaded_at_ms, ?3)
		WHERE partition = ?1 AND blob_id = ?2 RETURNING ` + blobCols,
	Get: `SELECT ` + blobCols + ` FROM sync_blobs WHERE partition = ? AND blob_id = ?`,
	Refs: `SELECT tbl, row_id, scopes FROM sync_blob_refs
		WHERE partition = ?1 AND blob_id = ?2 AND (tbl, row_id) > (?3, ?4) ORDER BY tbl, row_id LIMIT +?5`,
	Orphans: `SELECT ` + blobCols + ` FROM sync_blobs b WHERE uploaded_at_ms < ?1
		AND NOT EXISTS (SELECT 1 FROM sync_blob_refs r WHERE r.partition = b.partition AND r.blob_id = b.blob_id)
		ORDER BY uploaded_at_ms, partition, blob_id LIMIT +?2`,
	Delete: `DELETE FROM sync_blobs WHERE partition = ?1 AND blob_id = ?2 AND uploaded_at_ms < ?3
		AND NOT EXISTS (SELECT 1 FROM sync_blob_refs WHERE partition = ?1 AND blob_id = ?2)`,
	Stats: `SELECT (SELECT count(*) FROM sync_blobs), (SELECT coalesce(sum(byte_length), 0) FROM sync_blobs),
		(SELECT count(*) FROM sync_blob_refs)`,
	ObjectHeld: `SELECT 1 FROM sync_blobs WHERE object = ?`,
}

const (
	qBlobHeld       = `SELECT 1 FROM sync_blobs WHERE partition = ? AND blob_id = ?`
	qBlobRefsDelete = `DELETE FROM sync_blob_refs WHERE partition = ? AND tbl = ? AND row_id = ?`
	qBlobRefInsert  = `INSERT INTO sync_blob_refs (partition, blob_id, tbl, row_id, scopes) VALUES (?, ?, ?, ?, ?)`
)

// BlobHeld implements storage.BlobChecker.
func (t *tx) BlobHeld(ctx context.Context, blobID string) (bool, error) {
	if err := t.check(); err != nil {
		return false, err
	}
	var one int64
	ok, err := t.c.queryRow(ctx, qBlobHeld, []any{t.locked.ID, blobID}, &one)
	if err != nil {
		return false, t.fail("check blob", "", err)
	}
	return ok, nil
}

// writeBlobRefs replaces a written row's references (RowUpsert of a table
// with blob_ref columns); scopes is the row's stored scopes JSON.
func (t *tx) writeBlobRefs(ctx context.Context, ts *tableSQL, rowID string, ids []string, scopes []byte) error {
	if _, err := t.c.exec(ctx, qBlobRefsDelete, t.locked.ID, ts.t.Name, rowID); err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := t.c.exec(ctx, qBlobRefInsert, t.locked.ID, id, ts.t.Name, rowID, string(scopes)); err != nil {
			return err
		}
	}
	return nil
}
