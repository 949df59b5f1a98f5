package engine

import (
	"context"
	"io"
	"iter"
	"time"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/sqliteimage"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// The image lane (SPEC.md §5.3): a table whose snapshot exceeds one rows
// page bootstraps from one SQLite database image when the client accepts
// images (accept bit 2). The image covers the whole table for the
// effective scopes at the pin (the scope pin of §4.7, which only a
// change in those scopes moves), is delivered by SEGMENT_REF only, and
// is built once per (partition, epoch, table, schema version, scope
// digest, pin) through the segment store — single-flight on a node,
// content-addressed in the Object Store, reused by every client with
// the key.

// imageScanBatch is how many rows one scan of an image build reads.
const imageScanBatch = 5000

// sqliteEligible reports whether a bootstrap of table t is eligible for
// the sqlite lane (SPEC.md §5.3, §4.7): the client accepts images and the
// table holds no client-side encrypted column (§5.11: the server never
// images ciphertext it cannot type). Eligibility decides the pin
// (bootstrapPin), whether or not this node builds images.
func sqliteEligible(lim pullLimits, t *schema.Table) bool {
	if lim.accept&ssp2.AcceptSQLite == 0 {
		return false
	}
	for _, c := range t.Columns {
		if c.Encrypted {
			return false
		}
	}
	return true
}

// imageEligible reports whether a bootstrap at the start of table t may
// take the image lane: it is eligible and the node can build and
// reference images.
func (e *Engine) imageEligible(lim pullLimits, t *schema.Table) bool {
	return e.cfg.ImageWriter != nil && e.cfg.Segments != nil && sqliteEligible(lim, t)
}

// imageKey is the reuse key of a table's image.
func (e *Engine) imageKey(r *request, t *schema.Table, part storage.Partition, digest string, asOf int64) storage.SegmentKey {
	return storage.SegmentKey{
		Partition: r.id.Partition, LogEpoch: part.LogEpoch, Table: t.Name,
		SchemaVersion: e.cfg.Schema.Version, MediaType: ssp2.MediaSQLite,
		ScopeDigest: digest, AsOfCommitSeq: asOf,
	}
}

// image returns the table's image publication, building it when none is
// stored. A stored one is taken as is; otherwise the first rows page
// (built or reused, as the rows lane would) decides: a table that fits
// one page is served that page instead (ok=false), since an inline page
// already avoids the second round-trip.
func (e *Engine) image(ctx context.Context, r *request, t *schema.Table, eff map[string][]string, part storage.Partition, digest string, asOf int64, lim pullLimits) (pub storage.SegmentPublication, ok bool, err error) {
	key := e.imageKey(r, t, part, digest, asOf)
	if _, found, err := e.cfg.Segments.Find(ctx, key, r.now); err != nil {
		return pub, false, internal("find image", err)
	} else if !found {
		first := storage.SegmentKey{
			Partition: r.id.Partition, LogEpoch: part.LogEpoch, Table: t.Name,
			SchemaVersion: e.cfg.Schema.Version, MediaType: ssp2.MediaRows,
			ScopeDigest: digest, AsOfCommitSeq: asOf, PageRows: lim.rows,
		}
		inlineOK := lim.accept&ssp2.AcceptInlineRows != 0
		p, data, err := e.page(ctx, first, r.now, e.pageBuilder(r.id.Partition, t, eff, "", lim.rows), inlineOK)
		if err != nil {
			return pub, false, err
		}
		// A page built in memory: the segment store failed, and the
		// rows lane serves the table inline.
		if p.NextRowCursor == "" || data != nil {
			return pub, false, nil
		}
	}
	pub, built, err := e.cfg.Segments.GetOrBuild(ctx, key, r.now, e.imageBuilder(r.id.Partition, t, eff, digest, asOf))
	if err != nil {
		return pub, false, internal("build image", err)
	}
	if built {
		e.metrics.ImagesBuilt.Add(1)
	} else {
		e.metrics.ImagesReused.Add(1)
	}
	return pub, true, nil
}

// imageBuilder returns the BuildFunc of a table's image: every row in the
// effective scopes, read in one snapshot in keyset batches, decoded from
// the row codec and written by the ImageWriter. It reports no
// continuation: an image is the table's first and last page.
func (e *Engine) imageBuilder(partition string, t *schema.Table, eff map[string][]string, digest string, asOf int64) BuildFunc {
	return func(ctx context.Context, w io.Writer) (int64, string, error) {
		l := sqliteimage.Layout{Table: t.Name, Columns: t.WireColumns(), PK: t.PKIndex}
		m := sqliteimage.Meta{Table: t.Name, SchemaVersion: e.cfg.Schema.Version, AsOfCommitSeq: asOf, ScopeDigest: digest}
		var n int64
		start := time.Now()
		err := e.cfg.Store.ReadTx(ctx, func(tx storage.ReadTx) error {
			var err error
			n, err = e.cfg.ImageWriter(ctx, w, l, m, scanRows(ctx, tx, partition, t, eff))
			return err
		})
		e.metrics.ImageBuildNanos.Add(int64(time.Since(start)))
		return n, "", err
	}
}

// scanRows yields a table's rows in the effective scopes, decoded, in row
// id order, one batch in memory at a time. Values alias the batch.
func scanRows(ctx context.Context, tx storage.ReadTx, partition string, t *schema.Table, eff map[string][]string) iter.Seq2[sqliteimage.Row, error] {
	return func(yield func(sqliteimage.Row, error) bool) {
		vals := make([]ssp2.Value, len(t.Columns))
		after := ""
		for {
			rows, err := tx.RowScan(ctx, storage.ScanParams{Partition: partition, Table: t.Name, Scopes: eff, AfterRowID: after, Limit: imageScanBatch})
			if err != nil {
				yield(sqliteimage.Row{}, err)
				return
			}
			for i := range rows {
				if vals, err = t.Codec.DecodeRow(rows[i].Payload, vals[:0]); err != nil {
					yield(sqliteimage.Row{}, err)
					return
				}
				if !yield(sqliteimage.Row{Version: rows[i].ServerVersion, Values: vals}, nil) {
					return
				}
			}
			if len(rows) < imageScanBatch {
				return
			}
			after = rows[len(rows)-1].RowID
		}
	}
}
