package pgstore

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncnode/syncnode/storage/internal/segcore"
)

// The segment index (storage.SegmentIndex): its SQL here, the rest in
// segcore. No method takes a partition lock: the address row is the only
// shared row, and the foreign key from publications to it keeps a
// publication from outliving its address whatever the interleaving.

const segPubCols = segcore.PublicationCols

// segPubKeyCols is the primary key of a publication row.
const segPubKeyCols = `segment_id, partition, log_epoch, tbl, schema_version, media_type, scope_digest,
	as_of_commit_seq, row_cursor, page_rows`

const segPubKeyOrder = `ORDER BY partition, log_epoch, tbl, schema_version, media_type, scope_digest,
	as_of_commit_seq, row_cursor, page_rows, expires_at_ms`

var segmentSQL = &segcore.SQL{
	AddressInsert: `INSERT INTO sync_segments (segment_id, byte_length, created_at_ms) VALUES ($1, $2, $3)
		ON CONFLICT (segment_id) DO NOTHING`,
	// FOR KEY SHARE holds the address row until commit, so a concurrent
	// SegmentDelete waits for this publication and then finds it.
	AddressLength: `SELECT byte_length FROM sync_segments WHERE segment_id = $1 FOR KEY SHARE`,
	PublicationUpsert: `INSERT INTO sync_segment_publications (` + segPubCols + `)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
		ON CONFLICT (` + segPubKeyCols + `) DO UPDATE
		SET expires_at_ms = greatest(sync_segment_publications.expires_at_ms, EXCLUDED.expires_at_ms)
		RETURNING ` + segPubCols,
	Find: `SELECT ` + segPubCols + ` FROM sync_segment_publications
		WHERE partition = $1 AND log_epoch = $2 AND tbl = $3 AND schema_version = $4 AND media_type = $5
		AND scope_digest = $6 AND as_of_commit_seq = $7 AND row_cursor = $8 AND page_rows = $9 AND expires_at_ms > $10
		ORDER BY expires_at_ms DESC LIMIT 1`,
	Address:        `SELECT segment_id, byte_length, created_at_ms FROM sync_segments WHERE segment_id = $1`,
	PublicationsOf: `SELECT ` + segPubCols + ` FROM sync_segment_publications WHERE segment_id = $1 ` + segPubKeyOrder,
	PublicationsIn: `SELECT ` + segPubCols + ` FROM sync_segment_publications
		WHERE segment_id = $1 AND partition = $2 AND log_epoch = $3 ` + segPubKeyOrder,
	Expire: `DELETE FROM sync_segment_publications WHERE (` + segPubKeyCols + `) IN (
		SELECT ` + segPubKeyCols + ` FROM sync_segment_publications WHERE expires_at_ms <= $1 LIMIT $2)`,
	Unpublished: `SELECT segment_id, byte_length, created_at_ms FROM sync_segments s
		WHERE NOT EXISTS (SELECT 1 FROM sync_segment_publications p WHERE p.segment_id = s.segment_id)
		ORDER BY created_at_ms, segment_id LIMIT $1`,
	AddressDelete: `DELETE FROM sync_segments WHERE segment_id = $1
		AND NOT EXISTS (SELECT 1 FROM sync_segment_publications WHERE segment_id = $1)`,
	Stats: `SELECT (SELECT count(*) FROM sync_segments), (SELECT coalesce(sum(byte_length), 0)::bigint FROM sync_segments),
		(SELECT count(*) FROM sync_segment_publications)`,
	// A publication committed between the NOT EXISTS check and the delete
	// makes the foreign key refuse the delete.
	DeleteRacedFunc: func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "23503" // foreign_key_violation
	},
}
