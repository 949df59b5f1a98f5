package sqlitestore

import "github.com/syncnode/syncnode/storage/internal/segcore"

// The segment index (storage.SegmentIndex): its SQL here, the rest in
// segcore. Reads run on the reader connections; writes are members of the
// writer's group transactions and take no partition lock.

const segPubCols = segcore.PublicationCols

// segPubKeyCols is the primary key of a publication row.
const segPubKeyCols = `segment_id, partition, log_epoch, tbl, schema_version, media_type, scope_digest,
	as_of_commit_seq, row_cursor, page_rows`

const segPubKeyOrder = `ORDER BY partition, log_epoch, tbl, schema_version, media_type, scope_digest,
	as_of_commit_seq, row_cursor, page_rows, expires_at_ms`

var segmentSQL = &segcore.SQL{
	AddressInsert: `INSERT INTO sync_segments (segment_id, byte_length, created_at_ms) VALUES (?, ?, ?)
		ON CONFLICT (segment_id) DO NOTHING`,
	AddressLength: `SELECT byte_length FROM sync_segments WHERE segment_id = ?`,
	PublicationUpsert: `INSERT INTO sync_segment_publications (` + segPubCols + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (` + segPubKeyCols + `) DO UPDATE SET expires_at_ms = max(expires_at_ms, excluded.expires_at_ms)
		RETURNING ` + segPubCols,
	Find: `SELECT ` + segPubCols + ` FROM sync_segment_publications
		WHERE partition = ? AND log_epoch = ? AND tbl = ? AND schema_version = ? AND media_type = ?
		AND scope_digest = ? AND as_of_commit_seq = ? AND row_cursor = ? AND page_rows = ? AND expires_at_ms > ?
		ORDER BY expires_at_ms DESC LIMIT 1`,
	Address:        `SELECT segment_id, byte_length, created_at_ms FROM sync_segments WHERE segment_id = ?`,
	PublicationsOf: `SELECT ` + segPubCols + ` FROM sync_segment_publications WHERE segment_id = ? ` + segPubKeyOrder,
	PublicationsIn: `SELECT ` + segPubCols + ` FROM sync_segment_publications
		WHERE segment_id = ? AND partition = ? AND log_epoch = ? ` + segPubKeyOrder,
	Expire: `DELETE FROM sync_segment_publications WHERE (` + segPubKeyCols + `) IN (
		SELECT ` + segPubKeyCols + ` FROM sync_segment_publications WHERE expires_at_ms <= ? LIMIT +?)`,
	Unpublished: `SELECT segment_id, byte_length, created_at_ms FROM sync_segments s
		WHERE NOT EXISTS (SELECT 1 FROM sync_segment_publications p WHERE p.segment_id = s.segment_id)
		ORDER BY created_at_ms, segment_id LIMIT +?`,
	AddressDelete: `DELETE FROM sync_segments WHERE segment_id = ?1
		AND NOT EXISTS (SELECT 1 FROM sync_segment_publications WHERE segment_id = ?1)`,
	Stats: `SELECT (SELECT count(*) FROM sync_segments), (SELECT coalesce(sum(byte_length), 0) FROM sync_segments),
		(SELECT count(*) FROM sync_segment_publications)`,
}
