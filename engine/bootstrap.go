package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"slices"

	"github.com/syncnode/syncnode/internal/ids"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// bootstrapToken is the resume token of SPEC.md §4.7. Clients round-trip
// it opaquely; only the server reads it.
type bootstrapToken struct {
	AsOfCommitSeq *int64   `json:"asOfCommitSeq"`
	Tables        []string `json:"tables"`
	TableIndex    *int     `json:"tableIndex"`
	RowCursor     *string  `json:"rowCursor"`
}

// resumePoint reads a resume token. A token that does not parse, names
// other tables, or pins a point outside [horizon, maxSeq] is unusable and
// the bootstrap silently restarts (SPEC.md §4.7).
func resumePoint(raw json.RawMessage, table string, p storage.Partition) (asOf int64, rowCursor string, ok bool) {
	if raw == nil {
		return 0, "", false
	}
	var tok bootstrapToken
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tok); err != nil || dec.More() {
		return 0, "", false
	}
	if tok.AsOfCommitSeq == nil || tok.TableIndex == nil || *tok.TableIndex != 0 ||
		!slices.Equal(tok.Tables, []string{table}) {
		return 0, "", false
	}
	asOf = *tok.AsOfCommitSeq
	if asOf < p.HorizonSeq || asOf > p.MaxCommitSeq || asOf < 0 {
		return 0, "", false
	}
	if tok.RowCursor != nil {
		if rowCursor = *tok.RowCursor; !ids.Storable(rowCursor) {
			return 0, "", false // no row id holds U+0000
		}
	}
	return asOf, rowCursor, true
}

func encodeToken(asOf int64, table, rowCursor string) json.RawMessage {
	zero := 0
	b, _ := json.Marshal(bootstrapToken{AsOfCommitSeq: &asOf, Tables: []string{table}, TableIndex: &zero, RowCursor: &rowCursor})
	return b
}

// bootstrapPin is the pin of a fresh bootstrap of t (SPEC.md §4.7), read
// in snapshot tx: the partition's max seq, or for a bootstrap eligible
// for the sqlite lane its scope pin — the newest commit whose change to
// t carries one of the subscription's values of its first scope variable
// (keys in byte order, the variable CommitWindow's candidates are walked
// by), raised to the horizon and capped at the max seq. No change the
// subscription would receive lies after the scope pin, so the snapshot
// there is the snapshot now; and every segment key (rows pages and
// images alike) carries the pin, so a commit outside the scope leaves
// the stored segments the match for their key.
func bootstrapPin(ctx context.Context, tx storage.ReadTx, part storage.Partition, t *schema.Table, eff map[string][]string, lim pullLimits) (int64, error) {
	if !sqliteEligible(lim, t) || len(eff) == 0 {
		return part.MaxCommitSeq, nil
	}
	first := slices.Min(slices.Collect(maps.Keys(eff)))
	last, err := tx.LastScopeSeq(ctx, part.ID, t.Name, first, eff[first])
	if err != nil {
		return 0, err
	}
	return min(max(last, part.HorizonSeq), part.MaxCommitSeq), nil
}

// bootstrap streams a pinned, paged snapshot of one table (SPEC.md §4.7,
// §5) from pin (bootstrapPin), or from the point a resume token names:
// up to lim.pages pages of lim.rows rows, each one rows segment
// delivered inline or by reference, built once per key and reused — or,
// at the start of a table on the image lane, one SQLite image.
func (e *Engine) bootstrap(ctx context.Context, r *request, sub *ssp2.Subscription, t *schema.Table, eff map[string][]string, part storage.Partition, pin int64, lim pullLimits) (int64, bool, error) {
	e.metrics.Bootstraps.Add(1)
	asOf, cursor, resumed := resumePoint(sub.BootstrapState, t.Name, part)
	if !resumed {
		asOf, cursor = pin, ""
	}
	inlineOK := lim.accept&ssp2.AcceptInlineRows != 0
	refOK := lim.accept&ssp2.AcceptExternalRows != 0 && e.cfg.Segments != nil
	if !inlineOK && !refOK {
		return 0, false, internal("bootstrap", errNoSegmentStore)
	}
	if err := r.enc.WriteFrame(&ssp2.SubStart{ID: sub.ID, Status: ssp2.SubActive, EffectiveScopes: eff, Bootstrap: true}); err != nil {
		return 0, false, err
	}
	digest := ssp2.ScopeDigest(eff)
	if cursor == "" && e.imageEligible(lim, t) {
		// Only at the start of a table: a resumed bootstrap stays on the
		// rows lane at its pin (SPEC.md §5.3).
		pub, ok, err := e.image(ctx, r, t, eff, part, digest, asOf, lim)
		if err != nil {
			return 0, false, err
		}
		if ok {
			e.metrics.RowsBootstrapped.Add(pub.RowCount)
			e.metrics.ImageRefs.Add(1)
			if err := r.enc.WriteFrame(e.segmentRef(r, pub, ssp2.MediaSQLite, t.Name, asOf, digest, lim)); err != nil {
				return 0, false, err
			}
			return asOf, true, r.enc.WriteFrame(&ssp2.SubEnd{NextCursor: asOf})
		}
	}
	for page := 0; page < lim.pages; page++ {
		key := storage.SegmentKey{
			Partition: r.id.Partition, LogEpoch: part.LogEpoch, Table: t.Name,
			SchemaVersion: e.cfg.Schema.Version, MediaType: ssp2.MediaRows,
			ScopeDigest: digest, AsOfCommitSeq: asOf, RowCursor: cursor, PageRows: lim.rows,
		}
		build := e.pageBuilder(r.id.Partition, t, eff, cursor, lim.rows)
		pub, data, err := e.page(ctx, key, r.now, build, inlineOK)
		if err != nil {
			return 0, false, err
		}
		e.metrics.RowsBootstrapped.Add(pub.RowCount)
		// Bytes at hand from the store-less or fallback build exist
		// nowhere else: they go inline.
		unstored := data != nil && e.cfg.Segments != nil
		if inlineOK && (!refOK || unstored || pub.ByteLength < e.inlineMax) {
			frame := &ssp2.SegmentInline{Payload: data}
			if data == nil {
				data, err = e.cfg.Segments.Bytes(ctx, pub.SegmentID)
				if err != nil {
					if pub, data, err = e.fallback(ctx, key, build, err); err != nil {
						return 0, false, err
					}
					frame.Payload = data
				} else if frame, err = e.inline.frame(pub.SegmentID, data); err != nil {
					return 0, false, internal("stored segment", err)
				}
			}
			e.metrics.SegmentsInline.Add(1)
			if err := r.enc.WriteFrame(frame); err != nil {
				return 0, false, err
			}
		} else {
			e.metrics.SegmentRefs.Add(1)
			ref := e.segmentRef(r, pub, ssp2.MediaRows, t.Name, asOf, digest, lim)
			if cursor != "" {
				c := cursor
				ref.RowCursor = &c
			}
			if pub.NextRowCursor != "" {
				n := pub.NextRowCursor
				ref.NextRowCursor = &n
			}
			if err := r.enc.WriteFrame(ref); err != nil {
				return 0, false, err
			}
		}
		cursor = pub.NextRowCursor
		if cursor == "" {
			return asOf, true, r.enc.WriteFrame(&ssp2.SubEnd{NextCursor: asOf})
		}
	}
	return asOf, true, r.enc.WriteFrame(&ssp2.SubEnd{NextCursor: asOf, BootstrapState: encodeToken(asOf, t.Name, cursor)})
}

// segmentRef is the descriptor of a stored segment, with a signed url
// when the client accepts them (accept bit 3) and the node mints them
// (SPEC.md §5.4): minted here, inside the pull, right after the scopes
// were resolved, for exactly the digest they produced.
func (e *Engine) segmentRef(r *request, pub storage.SegmentPublication, mt ssp2.MediaType, table string, asOf int64, digest string, lim pullLimits) *ssp2.SegmentRef {
	ref := &ssp2.SegmentRef{
		SegmentID: pub.SegmentID, MediaType: mt, Table: table,
		ByteLength: pub.ByteLength, RowCount: pub.RowCount,
		AsOfCommitSeq: asOf, ScopeDigest: digest,
	}
	if lim.accept&ssp2.AcceptSignedURLs != 0 && e.cfg.SignedURLs != nil {
		url, exp := e.signedURL(r.id, pub.SegmentID, digest)
		ref.URL, ref.URLExpiresAtMs = &url, &exp
		e.metrics.SignedURLs.Add(1)
	}
	return ref
}

var errNoSegmentStore = ssp2.Errorf(ssp2.CodeInternalError, "the client accepts only referenced segments and no segment store is configured")

// page returns one page's publication, through the segment store when
// there is one (build once, reuse by key), else built in memory. data is
// the segment's bytes when they are at hand. A segment store that fails
// — right after a cluster member died its Object Store or KV may have no
// stream leader for a moment — does not fail a bootstrap the client
// takes inline: the page is built in memory (fallback) and data is set,
// the bytes that then exist nowhere else.
func (e *Engine) page(ctx context.Context, key storage.SegmentKey, now int64, build BuildFunc, inlineOK bool) (storage.SegmentPublication, []byte, error) {
	if e.cfg.Segments == nil {
		return e.memoryPage(ctx, key, build)
	}
	pub, built, err := e.cfg.Segments.GetOrBuild(ctx, key, now, build)
	if err != nil {
		if !inlineOK {
			return storage.SegmentPublication{}, nil, internal("build segment", err)
		}
		return e.fallback(ctx, key, build, err)
	}
	if built {
		e.metrics.SegmentsBuilt.Add(1)
	} else {
		e.metrics.SegmentsReused.Add(1)
	}
	return pub, nil, nil
}

// fallback builds a page in memory after the segment store failed with
// cause (logged and counted): the bytes go inline.
func (e *Engine) fallback(ctx context.Context, key storage.SegmentKey, build BuildFunc, cause error) (storage.SegmentPublication, []byte, error) {
	if ctx.Err() != nil {
		return storage.SegmentPublication{}, nil, internal("build segment", cause)
	}
	e.metrics.SegmentFallbacks.Add(1)
	e.log.Warn("segment store failed; the bootstrap page is built in memory and sent inline", "partition", key.Partition, "table", key.Table, "err", cause)
	return e.memoryPage(ctx, key, build)
}

// memoryPage builds a page in memory, stored nowhere.
func (e *Engine) memoryPage(ctx context.Context, key storage.SegmentKey, build BuildFunc) (storage.SegmentPublication, []byte, error) {
	var buf bytes.Buffer
	n, next, err := build(ctx, &buf)
	if err != nil {
		return storage.SegmentPublication{}, nil, internal("build segment", err)
	}
	e.metrics.SegmentsBuilt.Add(1)
	return storage.SegmentPublication{
		SegmentID: ssp2.SegmentID(buf.Bytes()), SegmentKey: key, NextRowCursor: next,
		RowCount: n, ByteLength: int64(buf.Len()),
	}, buf.Bytes(), nil
}

// pageBuilder returns the BuildFunc of one page: a keyset scan of the
// table's rows matching the effective scopes after cursor, written as an
// SSG2 rows segment of the stored row payloads.
func (e *Engine) pageBuilder(partition string, t *schema.Table, eff map[string][]string, cursor string, limit int) BuildFunc {
	return func(ctx context.Context, w io.Writer) (int64, string, error) {
		var rows []storage.Row
		err := e.cfg.Store.ReadTx(ctx, func(tx storage.ReadTx) error {
			var err error
			rows, err = tx.RowScan(ctx, storage.ScanParams{Partition: partition, Table: t.Name, Scopes: eff, AfterRowID: cursor, Limit: limit + 1})
			return err
		})
		if err != nil {
			return 0, "", err
		}
		next := ""
		if len(rows) > limit {
			rows = rows[:limit]
			next = rows[limit-1].RowID
		}
		sw, err := ssp2.NewSegmentWriter(w, ssp2.SegmentHeader{Table: t.Name, SchemaVersion: e.cfg.Schema.Version, Columns: t.WireColumns()})
		if err != nil {
			return 0, "", err
		}
		for _, row := range rows {
			if err := sw.WriteRow(row.ServerVersion, row.Payload); err != nil {
				return 0, "", err
			}
		}
		if err := sw.Close(); err != nil {
			return 0, "", err
		}
		return int64(len(rows)), next, nil
	}
}
