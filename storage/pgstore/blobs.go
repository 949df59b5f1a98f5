package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncnode/syncnode/storage/internal/blobcore"
)

// The blob index (storage.BlobIndex): its SQL here, the rest in blobcore.
// No method takes a partition lock. The foreign key from references to
// blob rows keeps the sweep from deleting a blob a push references,
// whatever the interleaving: a push's BlobHeld holds the row (FOR KEY
// SHARE) until it commits, and a delete after that fails the key check.

const blobCols = blobcore.BlobCols

var blobSQL = &blobcore.SQL{
	Insert: `INSERT INTO sync_blobs (` + blobCols + `) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (partition, blob_id) DO NOTHING`,
	Touch: `UPDATE sync_blobs SET uploaded_at_ms = greatest(uploaded_at_ms, $3)
		WHERE partition = $1 AND blob_id = $2 RETURNING ` + blobCols,
	Get: `SELECT ` + blobCols + ` FROM sync_blobs WHERE partition = $1 AND blob_id = $2`,
	Refs: `SELECT tbl, row_id, scopes FROM sync_blob_refs
		WHERE partition = $1 AND blob_id = $2 AND (tbl, row_id) > ($3, $4) ORDER BY tbl, row_id LIMIT $5`,
	Orphans: `SELECT ` + blobCols + ` FROM sync_blobs b WHERE uploaded_at_ms < $1
		AND NOT EXISTS (SELECT 1 FROM sync_blob_refs r WHERE r.partition = b.partition AND r.blob_id = b.blob_id)
		ORDER BY uploaded_at_ms, partition, blob_id LIMIT $2`,
	Delete: `DELETE FROM sync_blobs WHERE partition = $1 AND blob_id = $2 AND uploaded_at_ms < $3
		AND NOT EXISTS (SELECT 1 FROM sync_blob_refs WHERE partition = $1 AND blob_id = $2)`,
	Stats: `SELECT (SELECT count(*) FROM sync_blobs), (SELECT coalesce(sum(byte_length), 0)::bigint FROM sync_blobs),
		(SELECT count(*) FROM sync_blob_refs)`,
	ObjectHeld: `SELECT 1 FROM sync_blobs WHERE object = $1`,
	// A reference committed between the NOT EXISTS check and the delete
	// makes the foreign key refuse the delete.
	DeleteRacedFunc: func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "23503" // foreign_key_violation
	},
}

const (
	qBlobHeld       = `SELECT 1 FROM sync_blobs WHERE partition = $1 AND blob_id = $2 FOR KEY SHARE`
	qBlobRefsDelete = `DELETE FROM sync_blob_refs WHERE partition = $1 AND tbl = $2 AND row_id = $3`
	qBlobRefInsert  = `INSERT INTO sync_blob_refs (partition, blob_id, tbl, row_id, scopes) VALUES ($1, $2, $3, $4, $5)`
)

// BlobHeld implements storage.BlobChecker.
func (t *tx) BlobHeld(ctx context.Context, blobID string) (bool, error) {
	if err := t.check(); err != nil {
		return false, err
	}
	var one int32
	ok, err := t.queryRow(ctx, qBlobHeld, []any{t.locked.ID, blobID}, &one)
	if err != nil {
		return false, t.fail("check blob", "", err)
	}
	return ok, nil
}

// queueBlobRefs replaces a written row's references (RowUpsert of a table
// with blob_ref columns), sent with the next statement; scopes is the
// row's stored scopes JSON.
func (t *tx) queueBlobRefs(ts *tableSQL, rowID string, ids []string, scopes string) {
	t.queue(qBlobRefsDelete, t.locked.ID, ts.t.Name, rowID)
	for _, id := range ids {
		t.queue(qBlobRefInsert, t.locked.ID, id, ts.t.Name, rowID, scopes)
	}
}
